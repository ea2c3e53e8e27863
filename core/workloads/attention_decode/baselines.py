"""The library paths :class:`~core.workloads.attention_decode.AttentionDecodeWorkload` is timed
against: numpy and torch SDPA on a CPU; SDPA under each of its backends and FlashInfer on a GPU.

Every path takes the spec's tensors: q and out (batch, queries, kv_heads, group, head_dim), the
caches (batch, kv_heads, context, head_dim). Libraries are imported at the first call.
"""
from __future__ import annotations

import math
from typing import Any, Callable

_BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}


def numpy_attention(t: dict, problem: dict) -> None:
    """float32 numpy, written into ``out``: one (queries x group) x context score matrix per
    (sequence, KV head), masked for the drafted tokens, softmax, then the product with V."""
    import numpy as np

    q, k, v, out = t["q"], t["k_cache"], t["v_cache"], t["out"]
    b, nq, kvh, g, d = q.shape
    n = k.shape[2]
    limit = (n - nq + 1 + np.arange(nq * g) // g)[:, None]
    hidden = np.arange(n)[None, :] >= limit
    scale = np.float32(1.0 / math.sqrt(d))
    for i in range(b):
        for h in range(kvh):
            s = (q[i, :, h].reshape(nq * g, d) @ k[i, h].T) * scale
            s[hidden] = -np.inf
            p = np.exp(s - s.max(-1, keepdims=True))
            out[i, :, h] = ((p @ v[i, h]) / p.sum(-1, keepdims=True)).reshape(nq, g, d)


def _sdpa(torch: Any, q: Any, k: Any, v: Any, gqa: bool) -> Any:
    """SDPA on the spec's tensors; the output in the spec's layout (a new tensor)."""
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    b, nq, kvh, g, d = q.shape
    qh = q.reshape(b, nq, kvh * g, d).transpose(1, 2)
    if not gqa:  # every query head gets its own copy of its KV head
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    mask = causal_lower_right(nq, k.shape[2]) if nq > 1 else None
    o = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, enable_gqa=gqa)
    return o.transpose(1, 2).reshape(b, nq, kvh, g, d)


def torch_cpu_sdpa(t: dict, problem: dict) -> Any:
    """torch's scaled_dot_product_attention on CPU tensors sharing the numpy arrays' memory."""
    import torch

    out = _sdpa(torch, *(torch.from_numpy(t[n]) for n in ("q", "k_cache", "v_cache")), gqa=True)
    return out.numpy()


def sdpa_baseline(backend: str) -> Callable[[dict, dict], Any]:
    """SDPA forced onto one of its GPU backends (``sdpa_kernel``): GQA through ``enable_gqa``, or,
    where that backend refuses it, through KV heads repeated for every query head (decided at the
    first call of a dtype and head dim, which is an untimed verification call, and kept)."""
    mode: dict[tuple, bool] = {}

    def run(t: dict, problem: dict) -> Any:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = t["q"], t["k_cache"], t["v_cache"]
        key = (q.dtype, q.shape[-1])
        with sdpa_kernel([getattr(SDPBackend, _BACKENDS[backend])]):
            if key not in mode:
                try:
                    out = _sdpa(torch, q, k, v, gqa=True)
                    mode[key] = True
                    return out
                except RuntimeError:
                    mode[key] = False
            return _sdpa(torch, q, k, v, gqa=mode[key])
    return run


def flashinfer_baseline(t: dict, problem: dict) -> Any:
    """FlashInfer per sequence, HND layout: ``single_decode_with_kv_cache`` for one query token,
    ``single_prefill_with_kv_cache(causal=True)`` (causal aligned to the bottom right, as here) for
    K + 1 of them."""
    import flashinfer
    import torch

    q, k, v = t["q"], t["k_cache"], t["v_cache"]
    b, nq, kvh, g, d = q.shape
    outs = []
    for i in range(b):
        if nq == 1:
            o = flashinfer.single_decode_with_kv_cache(q[i, 0].reshape(kvh * g, d), k[i], v[i], kv_layout="HND")
        else:
            o = flashinfer.single_prefill_with_kv_cache(q[i].reshape(nq, kvh * g, d), k[i], v[i], causal=True,
                                                        kv_layout="HND")
        outs.append(o.reshape(nq, kvh, g, d))
    return torch.stack(outs)
