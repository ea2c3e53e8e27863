"""The native path of every library op: the workload's own PyTorch implementation.

What a call runs when no library entry serves it (a miss, a refused entry, a layout the kernels do
not take). Each is the function the workload times as its baseline or states as its reference --
vLLM's ``forward_native`` for RMSNorm and RoPE, ``F.silu(gate) * up``, dequantise-then-matmul --
called with the op's arguments and semantics (the same in-place updates as the kernels).
"""
from __future__ import annotations

from typing import Any

from core.workloads import rmsnorm as _rmsnorm
from core.workloads import rope as _rope
from core.workloads import silu_mul as _silu_mul
from core.workloads import w4a16 as _w4a16


def rmsnorm(x: Any, weight: Any, residual: Any, eps: float) -> Any:
    """``x / rms(x) * weight`` per row; with ``residual``, ``x + residual`` is normalised and written
    back into ``residual`` (vLLM's ``fused_add_rms_norm``). ``x`` is (rows, cols)."""
    if residual is None:
        return _rmsnorm.forward_native(x, weight, eps)
    out, new_residual = _rmsnorm.forward_native(x, weight, eps, residual)
    residual.copy_(new_residual)
    return out


def rope(positions: Any, q: Any, k: Any, cos_sin_cache: Any) -> None:
    """NeoX rotary embedding of ``q`` (tokens, q_heads, 2, half) and ``k`` in place, from the
    (max_positions, 2, half) cache."""
    tokens, half = q.shape[0], q.shape[-1]
    cache = cos_sin_cache.reshape(cos_sin_cache.shape[0], -1)
    new_q, new_k = _rope.forward_native(positions.long(), q.reshape(tokens, -1), k.reshape(tokens, -1), cache, 2 * half)
    q.copy_(new_q.view(q.shape))
    k.copy_(new_k.view(k.shape))


def silu_mul(gate: Any, up: Any) -> Any:
    """``F.silu(gate) * up``."""
    return _silu_mul.silu_mul_native(gate, up)


def w4a16(x: Any, qweight: Any, scales: Any, zeros: Any) -> Any:
    """``x (m, K) . dequant(qweight (k_groups, 16, n), scales, zeros)`` in ``x``'s dtype."""
    return _w4a16.dequant_matmul(x, qweight, scales, zeros)
