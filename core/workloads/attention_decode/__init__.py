"""Decode attention over a KV cache, with GQA and K+1 query tokens for speculative verification.

For every sequence b, KV head h and query head g of its group, query token j of ``queries``
(``queries = K + 1``: the token being decoded and the K drafted ones, which are verified in one
pass) attends to the first ``context - queries + j + 1`` keys of the cache: the drafted tokens'
keys are the last ``queries`` positions of the cache, and each drafted token sees the context and
the drafted tokens up to itself (causal among the drafted tokens, aligned to the bottom right):

    out[b, j, h, g] = softmax(q[b, j, h, g] . k[b, h, :n_j]^T * scale) @ v[b, h, :n_j],
    n_j = context - queries + j + 1,  scale = 1 / sqrt(head_dim)

Settings. ``context`` counts every key in the cache, the drafted tokens' included (with K = 0 it is
the cache length, 1024 by default on a GPU; so the issue's "context + j + 1 keys for query j" is
``context - queries + j + 1`` here): a tensor dimension cannot be derived from two settings. The
issue's 64 query heads over 8 KV heads are ``kv_heads`` 8 x ``group`` 8 (query heads per KV head),
so that q's head axis splits as (kv_heads, group) and the timed launches can permute the inputs
along ``kv_heads`` (below). Defaults: Llama-3.1-70B (8 KV heads, 64 query heads, head dim 128),
batch 1, one query token, bf16; on a CPU 2 KV heads of 4 query heads, head dim 64, 256 keys.

Layout. ``q`` and ``out`` (batch, queries, kv_heads, group, head_dim) are the (batch, queries,
heads, head_dim) tensors of a model, query head ``h * group + g`` reading KV head h (as
``repeat_interleave`` and SDPA's ``enable_gqa`` pair them). ``k_cache`` and ``v_cache`` are
(batch, kv_heads, context, head_dim): FlashInfer's "HND" layout (its paged cache with one page per
sequence; vLLM's FlashAttention backend and FlashInfer's default "NHD" put the token before the
head), and SDPA's own (batch, heads, keys, head_dim). HND keeps each KV head's keys contiguous, so
the block (or thread) of a KV head streams one contiguous region, and all ``group`` query heads
of that KV head share it: each KV byte is read once.

Inputs N(0, 1) for k and v; q is N(0, 2^2), so the scores (std 2) make a peaked softmax in which a
misplaced or dropped key shows. The float64 reference computes the softmax in float64.

Perturbation: ``kv_heads``. Permuting the KV heads of q, k_cache and v_cache permutes out's the
same way, and the timed shape has 8 of them at batch 1 (a batch permutation would be none).

Tolerances (atol, rtol): the outputs are weighted means of v, mostly |out| < 2, whose error is
dominated by the rounding of the probabilities (FlashAttention rounds P to bf16 before the PV
product: 2^-9 of a sum of |p v| below 1) and of the output itself. bf16 (8e-3, 1.6e-2), fp16
(2e-3, 4e-3) -- torch's rtol for the dtype, atol a few ulps of 1 --; float32 (2e-5, 1e-4), for sums
of up to 32k terms. SDPA's math path on torch CPU tensors of each dtype uses at most 16 % (bf16),
8 % (fp16) and 2 % (float32) of them at 1024 and 8192 keys with 1 and 5 query tokens
(``tests/test_attention_decode.py`` checks the 1024-key cases).

Bytes: the defaults of :class:`~core.workloads.spec.Workload`: q, the KV cache and out, each
once -- the KV cache read once is the copy roofline. FLOPs: per visible (query head, key), 2 x
head_dim for q.k, 2 x head_dim for p.v and 5 for the softmax (scale, max, exp, sum, rescale).

Baselines: ``numpy`` (float32, per (sequence, KV head) matmuls) and torch's
``scaled_dot_product_attention`` on torch CPU tensors on a CPU; on a GPU SDPA under each of its
backends (math, flash, efficient, cudnn; GQA by ``enable_gqa=True``, else by repeating the KV heads
where that backend refuses it; the drafted tokens' causal mask by ``causal_lower_right``), and
FlashInfer's ``single_decode_with_kv_cache`` / ``single_prefill_with_kv_cache`` (per sequence, HND),
which is skipped with one line where ``import flashinfer`` fails. Templates: ``c.py``, ``cuda.py``, ``triton.py``.
"""
from __future__ import annotations

import math
from typing import Any

from core.workloads.attention_decode.baselines import (flashinfer_baseline, numpy_attention, sdpa_baseline,
                                                       torch_cpu_sdpa)
from core.workloads.spec import Baseline, family_templates, Normal, Param, Tensor, verification_shapes, Workload

TOLERANCE = {"bfloat16": (8e-3, 1.6e-2), "float16": (2e-3, 4e-3), "float32": (2e-5, 1e-4)}
KEYS = ("batch", "queries", "kv_heads", "group", "head_dim", "context")
SDPA_BACKENDS = ("math", "flash", "efficient", "cudnn")


class AttentionDecodeWorkload(Workload):
    name = "attention_decode"
    description = "decode attention over a KV cache: GQA, K+1 causal query tokens (speculative verify)"
    params = (
        Param("batch", 1, upper=64),
        Param("queries", 1, upper=16),  # K + 1: the decoded token and K drafted ones
        Param("kv_heads", 8, cpu_default=2, upper=128),
        Param("group", 8, cpu_default=4, upper=64),  # query heads per KV head
        Param("head_dim", 128, cpu_default=64, upper=256),
        Param("context", 1024, cpu_default=256, upper=65536, cpu_upper=65536),  # keys in the cache (a capacity), drafted included
        Param("dtype", "bfloat16", cpu_default="float32", kind="dtype"),
    )
    templates = family_templates(__name__, "c", "cuda", "triton")
    tolerances = TOLERANCE
    permuted_along = "kv_heads"

    def validate_problem(self, problem: dict, backend: str) -> dict:
        merged = super().validate_problem(problem, backend)
        if merged["context"] < merged["queries"]:
            raise ValueError(f"context must be at least queries: the cache holds the {merged['queries']} query "
                             f"tokens' own keys (got context {merged['context']})")
        return merged

    def tensors(self, problem: dict) -> list[Tensor]:
        return [Tensor("q", ("batch", "queries", "kv_heads", "group", "head_dim"), init=Normal(0.0, 2.0)),
                Tensor("k_cache", ("batch", "kv_heads", "context", "head_dim")),
                Tensor("v_cache", ("batch", "kv_heads", "context", "head_dim")),
                Tensor("out", ("batch", "queries", "kv_heads", "group", "head_dim"), "output")]

    def shapes(self, problem: dict) -> list[dict]:
        # an odd head dim, context and group with three query tokens; then an odd context past the
        # problem's (several splits and tiles, a short last one) with five query tokens (K = 4)
        return verification_shapes(problem, KEYS,
                                   {"batch": 2, "queries": 3, "group": 3, "head_dim": 33, "context": 37},
                                   {"queries": 5, "context": 2 * (problem["context"] // 2) + 67})

    def reference(self, xp: Any, t: dict, problem: dict) -> dict:
        q, k, v = t["q"], t["k_cache"], t["v_cache"]
        b, nq, kvh, g, d = q.shape
        n = k.shape[2]
        rows = xp.moveaxis(q, 1, 2).reshape(b, kvh, nq * g, d)  # row j * g + i: query j, head i
        s = (rows @ xp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(d))
        query = xp.arange(nq * g, device=s.device) // g
        visible = xp.arange(n, device=s.device)[None, :] < (n - nq + 1 + query)[:, None]
        s = xp.where(visible, s, -math.inf)
        p = xp.exp(s - xp.amax(s, axis=-1, keepdims=True))
        o = (p @ v) / p.sum(-1, keepdims=True)
        return {"out": xp.moveaxis(o.reshape(b, kvh, nq, g, d), 2, 1)}

    def flops(self, shape: dict, problem: dict) -> float:
        visible = sum(shape["context"] - shape["queries"] + j + 1 for j in range(shape["queries"]))
        return float(shape["batch"] * shape["kv_heads"] * shape["group"] * visible * (4 * shape["head_dim"] + 5))

    def baselines(self, arrays: str) -> list[Baseline]:
        if arrays == "numpy":
            return [Baseline("numpy", "numpy", numpy_attention, "float32 numpy: a matmul per (sequence, KV head)"),
                    Baseline("torch_sdpa", "numpy", torch_cpu_sdpa, "torch scaled_dot_product_attention on CPU tensors",
                             returns_outputs=True)]
        out = [Baseline(f"sdpa_{b}", "torch", sdpa_baseline(b), f"torch scaled_dot_product_attention, {b} backend",
                        returns_outputs=True) for b in SDPA_BACKENDS]
        # listed everywhere (the table of baselines does not depend on the host); where flashinfer
        # does not import, its first call raises ModuleNotFoundError and it is skipped with that line
        return out + [Baseline("flashinfer", "torch", flashinfer_baseline,
                               "FlashInfer single_decode / single_prefill (causal) per sequence, HND",
                               returns_outputs=True)]
