"""What a ``decode-bench`` run holds in GPU memory, estimated before anything is built.

The engine builds ``layers`` layers times ``copies`` (the rotation that keeps the weights out of the
L2), and (a)'s twin repacks every 4-bit weight for torch's int4 kernel (a second copy of the 4-bit
words). Per context it holds two bf16 KV caches ((a) and (b)), and the logits check a float32 copy
of one, while the float32 reference dequantises one projection at a time and copies the LM head to
float32. A 32k-token bf16 KV cache is 2 * 8 * 128 * 32768 * 2 bytes = 128 MiB per layer for Llama-3.1.
"""
from __future__ import annotations

import torch

from core.library.models import ModelShape

GIB = 1 << 30
MARGIN = 3 * GIB  # CUDA graphs' pools, SDPA and GEMV workspaces, torch.compile, the CUDA context


def projections(s: ModelShape) -> list[tuple[int, int]]:
    """(n, k) of a layer's 4-bit projections: qkv, o, gate, up, down."""
    qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
    return [(qkv, s.hidden), (s.hidden, s.heads * s.head_dim), (s.intermediate, s.hidden),
            (s.intermediate, s.hidden), (s.hidden, s.intermediate)]


def estimate(s: ModelShape, layers: int, copies: int, capacity: int, elt: int = 2,
             library: bool = False) -> dict[str, int]:
    """Bytes by part of a run of ``layers`` x ``copies`` layers with KV caches of ``capacity`` tokens
    (``elt`` bytes per activation element: 2 for bf16); with ``library``, (b)'s kernels may repack
    every 4-bit weight once more (a template's repack, e.g. the tensor-core GEMV's)."""
    int4 = sum(n * k // 2 + (k // 128) * n * elt for n, k in projections(s))  # words + group scales
    kv = 2 * s.kv_heads * capacity * s.head_dim * layers  # K and V elements of one cache
    biggest = max(n * k for n, k in projections(s))
    parts = {"4-bit weights ((b) and the reference)": int4 * layers * copies,
             "(a)'s repacked int4 weights": int4 * layers * copies,
             "(b)'s repacked weights (where its kernels repack)": int4 * layers * copies if library else 0,
             "embedding and LM head": 2 * s.vocab * s.hidden * elt,
             "two KV caches ((a), (b))": 2 * kv * elt,
             "float32 reference: KV cache, one dequantised projection, LM head": kv * 4 + biggest * 4 * 2
             + s.vocab * s.hidden * 4,
             "margin (graphs, workspaces, compile, context)": MARGIN}
    parts["total"] = sum(parts.values())
    return parts


def check_fits(s: ModelShape, layers: int, copies: int, capacity: int, device: torch.device,
               library: bool = False) -> dict[str, int]:
    """:func:`estimate`, or ValueError (one line) when its total exceeds the device's free memory."""
    need = estimate(s, layers, copies, capacity, library=library)
    free, _ = torch.cuda.mem_get_info(device)
    if need["total"] > free:
        raise ValueError(f"{s.name} with {layers} layers x {copies} copies and a KV cache of {capacity} tokens needs "
                         f"about {need['total'] / GIB:.1f} GiB of GPU memory, {free / GIB:.1f} GiB are free: "
                         "give fewer --layers or --copies, or a shorter --context")
    return need
