"""The library's decode attention op, ``abebot::attention_decode``: a step's queries over a model's KV
cache of fixed capacity, filled up to a length held on the device.

A decode step replayed as a CUDA graph cannot pass its context length as a host integer: the graph
is captured once and replayed at every position. So the op takes ``lengths``, an int32 tensor of
one element on the device, the keys filled in the cache (the last query's position + 1); query j
of the M sees the first ``lengths - M + j + 1`` keys (causal among the drafted tokens). The
workload's Triton template reads it (:mod:`core.workloads.attention_decode.triton`, its
``launch(..., lengths=)``); the C and CUDA C templates do not, so a library entry of theirs is
refused for this op at bind time and the call falls back.

Layouts (one sequence; :class:`~core.library.decode_model.DecodeLlama`'s): ``q`` and the output
(M, heads * head_dim) with query head ``h * group + g`` reading KV head ``h``; ``k_cache`` and
``v_cache`` (kv_heads, capacity, head_dim). The workload's views of them are batch 1:
q (1, M, kv_heads, group, head_dim), caches (1, kv_heads, capacity, head_dim).

The native path is torch's ``scaled_dot_product_attention`` under the mask the lengths give.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from core.library import ops


def native_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """SDPA of ``q`` over the first ``lengths`` keys of the caches, causal among the M queries."""
    m = q.shape[0]
    kvh, cap, d = k_cache.shape
    group = q.shape[1] // (kvh * d)
    seen = lengths.long().view(1) - m + 1 + torch.arange(m, device=q.device)  # keys query j sees
    mask = (torch.arange(cap, device=q.device)[None, :] < seen[:, None]).repeat(group, 1)
    rows = q.reshape(m, kvh, group, d).permute(1, 2, 0, 3).reshape(1, kvh, group * m, d)
    out = F.scaled_dot_product_attention(rows, k_cache[None], v_cache[None], attn_mask=mask[None, None])
    return out.reshape(kvh, group, m, d).permute(2, 0, 1, 3).reshape(m, kvh * group * d)


def attention_decode_impl(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          lengths: torch.Tensor) -> torch.Tensor:
    d = ops.active()
    m = q.shape[0]
    kvh, cap, hd = k_cache.shape
    group = q.shape[1] // (kvh * hd)
    if d is not None and q.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous() and \
            q.dtype == k_cache.dtype == v_cache.dtype and lengths.dtype == torch.int32 and lengths.numel() == 1:
        out = torch.empty_like(q)
        problem = {"batch": 1, "queries": m, "kv_heads": kvh, "group": group, "head_dim": hd, "context": cap,
                   "dtype": ops._dtype(q)}
        t = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "out": out, "lengths": lengths}
        kind, index = ops._where(q)

        def shaped() -> dict:
            return {"q": q.view(1, m, kvh, group, hd), "k_cache": k_cache.view(1, kvh, cap, hd),
                    "v_cache": v_cache.view(1, kvh, cap, hd), "out": out.view(1, m, kvh, group, hd),
                    "lengths": lengths}

        try:
            if d.run("attention_decode", problem, t, kind, index, shaped):
                return out
        except NotImplementedError:  # an entry of a template that cannot count the keys (C, CUDA C)
            pass
    return native_attention(q, k_cache, v_cache, lengths)


@torch.library.custom_op("abebot::attention_decode", mutates_args=())
def attention_decode_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        lengths: torch.Tensor) -> torch.Tensor:
    """Decode attention of ``q`` over the caches' first ``lengths`` keys (module docstring)."""
    return attention_decode_impl(q, k_cache, v_cache, lengths)


@attention_decode_op.register_fake
def _attention_decode_fake(q, k_cache, v_cache, lengths):
    return torch.empty_like(q)


def attention_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     lengths: torch.Tensor) -> torch.Tensor:
    """What a model calls: the custom op under ``torch.compile``, its implementation otherwise."""
    if torch.compiler.is_compiling():
        return torch.ops.abebot.attention_decode(q, k_cache, v_cache, lengths)
    return attention_decode_impl(q, k_cache, v_cache, lengths)
