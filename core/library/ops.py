"""The library's PyTorch ops: ``abebot::rmsnorm``, ``abebot::rope``, ``abebot::silu_mul``, ``abebot::w4a16``,
``abebot::rmsnorm_w4a16`` (RMSNorm fused into the 4-bit product, which decode-bench's ``--fuse norm-qkv`` uses).

Each op is a ``torch.library.custom_op`` with a ``register_fake``, so ``torch.compile`` sees one
opaque node of known output shape (no graph break into the dispatcher's Python) and CUDA graph
capture records the kernel launch. Each dispatches through the active
:class:`~core.library.dispatcher.Dispatcher` (:func:`activate`; ``patch(model, library)`` activates
its own) and falls back to the native path (:mod:`core.library.native`) when no entry serves the
call, when no dispatcher is active, or when a tensor is not laid out as the kernels read it
(not contiguous, mixed dtypes).

The public functions :func:`rmsnorm`, :func:`rope`, :func:`silu_mul`, :func:`w4a16` and :func:`rmsnorm_w4a16` are what a
model calls. Under ``torch.compile`` they emit the custom op; in eager mode they call its
implementation directly: calling a custom op whose body does nothing took 7-10 us of host time
per call on our development CPU (torch 2.13), more than the 5 us budget of a whole call, and the
custom op adds nothing outside a trace. An eager call takes the fast path
(:mod:`core.library.fast_launch_plan`): after the first call of a key -- the activations' shape,
dtype and device, the weights' addresses -- has gone through the dispatcher, the next ones
allocate the output and make one call of the compiled launcher; a call whose layout or dtypes the
plan does not fit takes the dispatcher path. The custom ops' bodies call the same functions. A
capture or a compiled graph must be preceded by one eager call of each shape: an entry is loaded
and verified at its first call, which must not happen inside a capture.

The ops are for inference: they register no autograd formula, and a library kernel's outputs
carry no gradient (run a model under ``torch.no_grad()`` or ``torch.inference_mode()``).

Argument conventions (the workloads' layouts, docs/library.md):

* ``rmsnorm(x (..., hidden), weight (hidden,), residual=None, eps)`` -> out; with ``residual``,
  ``x + residual`` is what is normalised and it is written back into ``residual``;
* ``rope(positions (tokens,), q (tokens, q_heads * head), k (tokens, kv_heads * head),
  cos_sin_cache (max_positions, 2, head // 2))`` rotates q and k in place (NeoX style);
* ``silu_mul(gate (..., hidden), up (..., hidden))`` -> ``silu(gate) * up``;
* ``w4a16(x (..., K), qweight (K // 8, N) int32, scales (K // 128, N), zeros (K // 128, N) uint8 or
  None)`` -> (..., N): GPTQ's layout (:mod:`core.library.quant_linear`);
* ``rmsnorm_w4a16(x (..., K), gamma (K,), qweight, scales, eps)`` -> ``w4a16(rmsnorm(x, gamma))``, symmetric weights.
"""
from __future__ import annotations

from typing import Optional

import torch

from core.library import native
from core.library.dispatcher import Dispatcher
from core.library.fast_launch import LaunchArgumentError
from core.library.fast_launch_plan import make_plan, remember

_state: dict = {"dispatcher": None}
_plans: dict = {}  # fast-path key -> Plan, or None (the key's calls take the dispatcher path)


def activate(dispatcher: Dispatcher | None) -> Dispatcher | None:
    """Make ``dispatcher`` the one every op call goes through (None: native paths only); returns
    the one it replaces. The fast path's plans are dropped."""
    previous, _state["dispatcher"] = _state["dispatcher"], dispatcher
    _plans.clear()
    return previous


def active() -> Dispatcher | None:
    """The dispatcher op calls go through now."""
    return _state["dispatcher"]


_CPU = ("cpu", 0)
_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float64: "float64"}


def _where(t: torch.Tensor) -> tuple[str, int]:
    return ("gpu", t.device.index or 0) if t.is_cuda else _CPU


def _dtype(t: torch.Tensor) -> str:
    name = _DTYPES.get(t.dtype)
    return name if name is not None else str(t.dtype).rpartition(".")[2]


def _rows(t: torch.Tensor, cols: int) -> torch.Tensor:
    """``t`` as (rows, cols), a view (no view call when it already is 2-D: a call's cost counts)."""
    return t if t.dim() == 2 else t.view(-1, cols)


def _dense(*tensors: Optional[torch.Tensor]) -> bool:
    return all(t is None or t.is_contiguous() for t in tensors)


def _plan(key: tuple | None, d: Dispatcher, op: str, problem: dict, t: dict, where: tuple, order: tuple,
          sources: tuple, checked: tuple, keep: tuple = (), like: torch.Tensor | None = None) -> None:
    """After ``d.run`` served a call: the fast path's plan for ``key`` (none when already decided)."""
    if key is None or key in _plans:
        return
    plan = make_plan(d, op, problem, t, *where, order, sources, checked, like)
    if plan is not None:
        plan.keep = keep  # the weights whose addresses the key holds stay alive with it
    remember(_plans, key, plan)


def _native_call(key: tuple | None) -> None:
    """The dispatcher ran ``key``'s call natively: its next calls skip the fast path."""
    if key is not None and key not in _plans:
        remember(_plans, key, None)


# -- implementations (eager: called directly; compiled: inside the custom op) -----------------------

def rmsnorm_impl(x: torch.Tensor, weight: torch.Tensor, residual: Optional[torch.Tensor], eps: float,
                 key: tuple | None = None) -> torch.Tensor:
    cols = x.shape[-1]
    d = _state["dispatcher"]
    if d is not None and x.is_contiguous() and weight.is_contiguous() and weight.dtype == x.dtype and (
            residual is None or residual.is_contiguous()):
        x2, out = _rows(x, cols), torch.empty_like(x)
        problem = {"rows": x2.shape[0], "cols": cols, "dtype": _dtype(x), "residual": residual is not None,
                   "eps": float(eps)}
        t = {"x": x2, "w": weight, "out": _rows(out, cols)}
        if residual is not None:
            t["residual"] = _rows(residual, cols)
        kind, index = _where(x)
        if d.run("rmsnorm", problem, t, kind, index):
            order = ("x", "w", "out") if residual is None else ("x", "w", "out", "residual")
            _plan(key, d, "rmsnorm", problem, t, (kind, index), order, (x, weight, out, residual)[:len(order)],
                  ("w", "residual"))
            return out
        _native_call(key)
    res = None if residual is None else residual.view(-1, cols)
    return native.rmsnorm(x.reshape(-1, cols), weight, res, eps).view(x.shape)


def rope_impl(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor,
              key: tuple | None = None) -> None:
    tokens, half = positions.numel(), cos_sin_cache.shape[-1]
    d = _state["dispatcher"]
    if d is not None and q.is_contiguous() and k.is_contiguous() and cos_sin_cache.is_contiguous() and \
            q.dtype == k.dtype == cos_sin_cache.dtype and positions.is_contiguous():
        pos = positions if positions.dtype == torch.int32 else positions.to(torch.int32)
        width = 2 * half
        problem = {"tokens": tokens, "q_heads": q.numel() // (tokens * width), "kv_heads": k.numel() // (tokens * width),
                   "half_dim": half, "max_positions": cos_sin_cache.shape[0], "dtype": _dtype(q)}
        t = {"positions": pos, "cos_sin_cache": cos_sin_cache, "q": q, "k": k}  # addresses; shapes below
        kind, index = _where(q)
        if d.run("rope", problem, t, kind, index, lambda: {"positions": pos.view(-1), "cos_sin_cache": cos_sin_cache,
                                                             "q": q.view(tokens, -1, 2, half),
                                                             "k": k.view(tokens, -1, 2, half)}):
            if pos is positions:  # a plan passes the caller's positions: only where they are int32
                _plan(key, d, "rope", problem, t, (kind, index), ("positions", "cos_sin_cache", "q", "k"),
                      (positions, cos_sin_cache, q, k), ("positions", "cos_sin_cache", "k"))
            return
        _native_call(key)
    native.rope(positions.view(-1), q.view(tokens, -1, 2, half), k.view(tokens, -1, 2, half), cos_sin_cache)


def silu_mul_impl(gate: torch.Tensor, up: torch.Tensor, key: tuple | None = None) -> torch.Tensor:
    hidden = gate.shape[-1]
    d = _state["dispatcher"]
    if d is not None and gate.is_contiguous() and up.is_contiguous() and gate.dtype == up.dtype and \
            gate.shape == up.shape:
        out = torch.empty_like(gate)
        g = _rows(gate, hidden)
        problem = {"tokens": g.shape[0], "hidden": hidden, "dtype": _dtype(gate)}
        t = {"gate": g, "up": _rows(up, hidden), "out": _rows(out, hidden)}
        kind, index = _where(gate)
        if d.run("silu_mul", problem, t, kind, index):
            _plan(key, d, "silu_mul", problem, t, (kind, index), ("gate", "up", "out"), (gate, up, out), ("up",))
            return out
        _native_call(key)
    return native.silu_mul(gate, up)


def w4a16_impl(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
               zeros: Optional[torch.Tensor], key: tuple | None = None) -> torch.Tensor:
    k, n = x.shape[-1], qweight.shape[-1]
    groups, m = k // 128, x.numel() // k
    d = _state["dispatcher"]
    if d is not None and x.is_contiguous() and qweight.is_contiguous() and scales.is_contiguous() and \
            scales.dtype == x.dtype and (zeros is None or zeros.is_contiguous()):
        y = x.new_empty((*x.shape[:-1], n))
        problem = {"m": m, "n": n, "k_groups": groups, "dtype": _dtype(x), "zero_points": zeros is not None}
        t = {"x": x, "qweight": qweight, "scales": scales, "y": y}  # addresses; the workload's shapes below
        if zeros is not None:
            t["zeros"] = zeros
        kind, index = _where(x)

        def shaped() -> dict:
            out = {"x": x.view(m, groups, 128), "qweight": qweight.view(groups, 16, n), "scales": scales,
                   "y": y.view(m, n)}
            return out if zeros is None else {**out, "zeros": zeros}

        if d.run("w4a16", problem, t, kind, index, shaped):
            _plan(key, d, "w4a16", problem, t, (kind, index), ("x", "y"), (x, y), (), (qweight, scales, zeros),
                  torch.empty_like(y))
            return y
        _native_call(key)
    return native.w4a16(x.reshape(m, k), qweight.view(groups, 16, n), scales, zeros).view(*x.shape[:-1], n)


def rmsnorm_w4a16_impl(x: torch.Tensor, gamma: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                       eps: float) -> torch.Tensor:
    k, n = x.shape[-1], qweight.shape[-1]
    groups, m = k // 128, x.numel() // k
    d = _state["dispatcher"]
    if d is not None and _dense(x, gamma, qweight, scales) and x.dtype == gamma.dtype == scales.dtype:
        y = x.new_empty((*x.shape[:-1], n))
        problem = {"m": m, "n": n, "k_groups": groups, "dtype": _dtype(x), "eps": float(eps)}
        t = {"x": x, "gamma": gamma, "qweight": qweight, "scales": scales, "y": y}  # addresses; shapes below
        kind, index = _where(x)

        def shaped() -> dict:
            return {"x": x.view(m, groups, 128), "gamma": gamma.view(groups, 128),
                    "qweight": qweight.view(groups, 16, n), "scales": scales, "y": y.view(m, n)}

        if d.run("rmsnorm_w4a16", problem, t, kind, index, shaped):
            return y
    xn = native.rmsnorm(x.reshape(m, k), gamma, None, eps)
    return native.w4a16(xn, qweight.view(groups, 16, n), scales, None).view(*x.shape[:-1], n)


# -- the custom ops -----------------------------------------------------------------------------

@torch.library.custom_op("abebot::rmsnorm", mutates_args=("residual",))
def rmsnorm_op(x: torch.Tensor, weight: torch.Tensor, residual: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    """RMSNorm, with the residual add fused (and written back) when ``residual`` is given."""
    return _rmsnorm(x, weight, residual, eps)


@rmsnorm_op.register_fake
def _rmsnorm_fake(x, weight, residual, eps):
    return torch.empty_like(x)


@torch.library.custom_op("abebot::rope", mutates_args=("q", "k"))
def rope_op(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
    """NeoX rotary embedding of ``q`` and ``k`` in place."""
    _rope(positions, q, k, cos_sin_cache)


@rope_op.register_fake
def _rope_fake(positions, q, k, cos_sin_cache):
    return None


@torch.library.custom_op("abebot::silu_mul", mutates_args=())
def silu_mul_op(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``."""
    return _silu_mul(gate, up)


@silu_mul_op.register_fake
def _silu_mul_fake(gate, up):
    return torch.empty_like(gate)


@torch.library.custom_op("abebot::w4a16", mutates_args=())
def w4a16_op(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: Optional[torch.Tensor]) -> torch.Tensor:
    """``x . dequant(W)`` with GPTQ 4-bit weights, groups of 128 along K."""
    return _w4a16(x, qweight, scales, zeros)


@w4a16_op.register_fake
def _w4a16_fake(x, qweight, scales, zeros):
    return x.new_empty((*x.shape[:-1], qweight.shape[-1]))


@torch.library.custom_op("abebot::rmsnorm_w4a16", mutates_args=())
def rmsnorm_w4a16_op(x: torch.Tensor, gamma: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                     eps: float) -> torch.Tensor:
    """``rmsnorm(x) * gamma . dequant(W)``: RMSNorm fused into the 4-bit product (symmetric weights)."""
    return rmsnorm_w4a16_impl(x, gamma, qweight, scales, eps)


@rmsnorm_w4a16_op.register_fake
def _rmsnorm_w4a16_fake(x, gamma, qweight, scales, eps):
    return x.new_empty((*x.shape[:-1], qweight.shape[-1]))


# -- what a model calls: the custom op under torch.compile, else the fast path (module docstring); --
# -- the custom ops' bodies call the fast path directly (never the op again, whatever is tracing)  --

def rmsnorm(x: torch.Tensor, weight: torch.Tensor, residual: Optional[torch.Tensor] = None,
            eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of ``x`` (see the module docstring); the custom op under ``torch.compile``."""
    if torch.compiler.is_compiling():
        return torch.ops.abebot.rmsnorm(x, weight, residual, eps)
    return _rmsnorm(x, weight, residual, eps)


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, residual: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    key = ("rmsnorm", x.shape, x.dtype, x.device, residual is None, eps)
    plan = _plans.get(key)
    if plan is not None and x.is_contiguous() and weight.is_contiguous():
        out = torch.empty_like(x)
        try:
            if residual is None:
                plan.call(x, weight, out)
            elif residual.is_contiguous() and residual.shape == x.shape:
                plan.call(x, weight, out, residual)
            else:
                return rmsnorm_impl(x, weight, residual, eps)
        except LaunchArgumentError:  # a weight or residual of another dtype or device
            return rmsnorm_impl(x, weight, residual, eps)
        plan.count[0] += 1
        return out
    return rmsnorm_impl(x, weight, residual, eps, key)


def rope(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
    """Rotate ``q`` and ``k`` in place; the custom op under ``torch.compile``."""
    if torch.compiler.is_compiling():
        torch.ops.abebot.rope(positions, q, k, cos_sin_cache)
        return
    _rope(positions, q, k, cos_sin_cache)


def _rope(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor) -> None:
    key = ("rope", q.shape, k.shape, q.dtype, q.device, positions.shape, positions.dtype, cos_sin_cache.shape)
    plan = _plans.get(key)
    if plan is not None and q.is_contiguous() and k.is_contiguous() and positions.is_contiguous() and \
            cos_sin_cache.is_contiguous():
        try:
            plan.call(positions, cos_sin_cache, q, k)
        except LaunchArgumentError:
            rope_impl(positions, q, k, cos_sin_cache)
            return
        plan.count[0] += 1
        return
    rope_impl(positions, q, k, cos_sin_cache, key)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up``; the custom op under ``torch.compile``."""
    if torch.compiler.is_compiling():
        return torch.ops.abebot.silu_mul(gate, up)
    return _silu_mul(gate, up)


def _silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    key = ("silu_mul", gate.shape, gate.dtype, gate.device)
    plan = _plans.get(key)
    if plan is not None and gate.is_contiguous() and up.is_contiguous() and up.shape == gate.shape:
        out = torch.empty_like(gate)
        try:
            plan.call(gate, up, out)
        except LaunchArgumentError:
            return silu_mul_impl(gate, up)
        plan.count[0] += 1
        return out
    return silu_mul_impl(gate, up, key)


def w4a16(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
          zeros: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The 4-bit linear's product; the custom op under ``torch.compile``."""
    if torch.compiler.is_compiling():
        return torch.ops.abebot.w4a16(x, qweight, scales, zeros)
    return _w4a16(x, qweight, scales, zeros)


def _w4a16(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, zeros: Optional[torch.Tensor]) -> torch.Tensor:
    key = ("w4a16", x.shape, x.dtype, x.device, qweight.data_ptr(), scales.data_ptr(),
           None if zeros is None else zeros.data_ptr())
    plan = _plans.get(key)
    if plan is not None and x.is_contiguous():
        y = torch.empty_like(plan.like)
        plan.call(x, y)
        plan.count[0] += 1
        return y
    return w4a16_impl(x, qweight, scales, zeros, key)


def rmsnorm_w4a16(x: torch.Tensor, gamma: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor,
                  eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm then the 4-bit product in one kernel; the custom op under ``torch.compile``."""
    if torch.compiler.is_compiling():
        return torch.ops.abebot.rmsnorm_w4a16(x, gamma, qweight, scales, eps)
    return rmsnorm_w4a16_impl(x, gamma, qweight, scales, eps)
