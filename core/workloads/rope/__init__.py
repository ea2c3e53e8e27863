"""RoPE: NeoX-style rotary position embedding, applied in place to the query and the key.

For every token t, with ``p = positions[t]`` and ``c = cos_sin_cache[p, 0]``, ``s = cos_sin_cache[p, 1]``
(each ``half_dim`` long), every query and key head ``x = [x1 | x2]`` becomes

    x1' = x1 * c - x2 * s,    x2' = x2 * c + x1 * s

which is vLLM's ``RotaryEmbedding`` with ``is_neox_style=True`` and ``rotary_dim == head_size``.

Layout (memory identical to vLLM's):

* ``q`` (tokens, q_heads, 2, half_dim) is vLLM's query (tokens, q_heads * head_size) with
  ``head_size = 2 * half_dim``: axis 2 picks the half of the head (x1, x2); ``k`` likewise with
  ``kv_heads``. Both are ``inout``: updated in place, as vLLM's ``rotary_embedding`` op does.
* ``positions`` (tokens,) int32 (vLLM passes int64; the indices are below 2^31 either way).
* ``cos_sin_cache`` (max_positions, 2, half_dim) is vLLM's (max_position, rotary_dim) cache, cos in
  the first half of a row and sin in the second, in the model's dtype (vLLM rounds it to the dtype).

The head dimension is split in two named dimensions because a spec dimension cannot be derived
(no ``2 * half_dim``) and so that a verification shape can make the innermost size odd
(``half_dim = 33``), which no vector width divides. Defaults: Llama-3.1-70B (64 query heads, 8 KV
heads, head size 128); tokens 4096 on a GPU (prefill; 1 and 16 are the decode problems), 1024 on a CPU.

The cache is drawn uniformly in [-1, 1) rather than as real cosines and sines: the kernel cannot
tell, and independent cos and sin values catch a swapped or misplaced half that cos^2 + sin^2 = 1
might hide. Positions are drawn uniformly over the cache's rows.

Tolerances (atol, rtol): rtol is torch's default for the dtype, which vLLM's rotary-embedding test
uses (bf16 1.6e-2, fp16 1e-3); fp32 (1e-5, 1e-5). vLLM compares against ``forward_native`` in the
same dtype; here the reference is float64, and the eager ``forward_native`` itself rounds
``x1 * c`` and ``x2 * s`` to the dtype before subtracting, an absolute error up to
2^-8 * max|x| where they cancel (|x| reaches about 5.5 over 30 M N(0, 1) draws). So atol is
2e-2 for bf16 and 4e-3 for fp16: at the GPU default the eager path (torch on the CPU, which rounds
the same way) uses at most 73 % (bf16) and 47 % (fp16) of these tolerances.

FLOPs: 3 per element of q and k (four multiplies and two adds per pair).

Baselines: vLLM's ``forward_native`` in PyTorch, eager and under torch.compile, on a GPU; numpy in
place and ``forward_native`` on torch CPU tensors on a CPU. Templates: ``c.py``, ``cuda.py``, ``triton.py``.
"""
from __future__ import annotations

from typing import Any

from core.backends.arrays import dtype_bytes
from core.workloads.spec import (Baseline, compiled_once, family_templates, Indices, Param, Tensor, Uniform,
                                 verification_shapes, Workload)

TOLERANCE = {"bfloat16": (2e-2, 1.6e-2), "float16": (4e-3, 1e-3), "float32": (1e-5, 1e-5)}


class RopeWorkload(Workload):
    name = "rope"
    description = "NeoX rotary position embedding of query and key, in place, from a cos/sin cache"
    params = (
        Param("tokens", 4096, cpu_default=1024, upper=1 << 20, cpu_upper=1 << 16),  # CPU: q and k (38 MB) exceed the L3
        Param("q_heads", 64, upper=1024),
        Param("kv_heads", 8, upper=1024),
        Param("half_dim", 64, upper=512),  # head size / 2
        Param("max_positions", 8192, cpu_default=4096, upper=1 << 20),
        Param("dtype", "bfloat16", cpu_default="float32", kind="dtype"),
    )
    templates = family_templates(__name__, "c", "cuda", "triton")
    tolerances = TOLERANCE
    permuted_along = "tokens"

    def tensors(self, problem: dict) -> list[Tensor]:
        # token positions: integers drawn uniformly over the cache's rows
        return [Tensor("positions", ("tokens",), init=Indices("max_positions"), dtype="int32"),
                Tensor("cos_sin_cache", ("max_positions", 2, "half_dim"), init=Uniform(-1.0, 1.0)),
                Tensor("q", ("tokens", "q_heads", 2, "half_dim"), "inout"),
                Tensor("k", ("tokens", "kv_heads", 2, "half_dim"), "inout")]

    def shapes(self, problem: dict) -> list[dict]:
        # an odd token count and half width (no vector width divides 33); then few, odd heads
        return verification_shapes(problem, ("tokens", "q_heads", "kv_heads", "half_dim", "max_positions"),
                                   {"tokens": 7, "half_dim": 33}, {"tokens": 3, "q_heads": 5, "kv_heads": 1})

    def reference(self, xp: Any, t: dict, problem: dict) -> dict:
        pos = t["positions"]
        idx = pos.long() if hasattr(pos, "long") else pos.astype(xp.int64)  # torch, numpy
        cs = t["cos_sin_cache"][idx]
        c, s = cs[:, None, 0, :], cs[:, None, 1, :]
        out = {}
        for name in ("q", "k"):
            x = t[name]
            x1, x2 = x[:, :, 0, :], x[:, :, 1, :]
            r = x * 1.0
            r[:, :, 0, :] = x1 * c - x2 * s
            r[:, :, 1, :] = x2 * c + x1 * s
            out[name] = r
        return out

    def flops(self, shape: dict, problem: dict) -> float:
        return 6.0 * shape["tokens"] * (shape["q_heads"] + shape["kv_heads"]) * shape["half_dim"]

    def min_bytes(self, shape: dict, problem: dict) -> float:
        """q and k read and written, positions read, and only the cache rows the tokens use."""
        elt = dtype_bytes(problem["dtype"])
        heads = shape["q_heads"] + shape["kv_heads"]
        rows = min(shape["tokens"], shape["max_positions"])
        return float(4 * shape["tokens"] + elt * 2 * shape["half_dim"] * (2 * shape["tokens"] * heads + rows))

    def baselines(self, arrays: str) -> list[Baseline]:
        if arrays == "numpy":
            return [Baseline("numpy", "numpy", _numpy_rope, "the rotation in numpy float32, in place"),
                    Baseline("torch_native", "numpy", _torch_cpu_native, "vLLM forward_native on torch CPU tensors",
                             returns_outputs=True)]
        return [Baseline("vllm_native_compile", "torch", _compiled_native, "vLLM forward_native under torch.compile",
                         returns_outputs=True),
                Baseline("vllm_native_eager", "torch", _eager_native, "vLLM forward_native, eager", returns_outputs=True)]


def forward_native(positions, query, key, cos_sin_cache, head_size: int):
    """vLLM's ``RotaryEmbedding.forward_native`` (NeoX style, rotary_dim == head_size), in PyTorch.
    ``query`` (tokens, heads * head_size) and ``key`` likewise; returns new tensors."""
    import torch

    positions = positions.flatten()
    num_tokens = positions.shape[0]
    cos_sin = cos_sin_cache.index_select(0, positions)
    cos, sin = cos_sin.chunk(2, dim=-1)

    def rotate(x):
        shape = x.shape
        x = x.view(num_tokens, -1, head_size)
        c, s = cos.unsqueeze(-2).to(x.dtype), sin.unsqueeze(-2).to(x.dtype)
        x1, x2 = torch.chunk(x, 2, dim=-1)
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).reshape(shape)

    return rotate(query), rotate(key)


def _native(fn: Any, t: dict) -> dict:
    q, k, cache = t["q"], t["k"], t["cos_sin_cache"]
    tokens, half = q.shape[0], q.shape[-1]
    oq, ok = fn(t["positions"], q.view(tokens, -1), k.view(tokens, -1), cache.view(cache.shape[0], -1), 2 * half)
    return {"q": oq.view(q.shape), "k": ok.view(k.shape)}


def _eager_native(t: dict, problem: dict) -> dict:
    return _native(forward_native, t)


_compiled_forward_native = compiled_once(forward_native)


def _compiled_native(t: dict, problem: dict) -> dict:
    return _native(_compiled_forward_native, t)


def _torch_cpu_native(t: dict, problem: dict) -> dict:
    import torch

    out = _native(forward_native, {k: torch.from_numpy(v) for k, v in t.items()})
    return {k: v.numpy() for k, v in out.items()}


def _numpy_rope(t: dict, problem: dict) -> None:
    cs = t["cos_sin_cache"][t["positions"]]
    c, s = cs[:, None, 0, :], cs[:, None, 1, :]
    for name in ("q", "k"):
        x = t[name]
        x1, x2 = x[:, :, 0, :], x[:, :, 1, :]
        a = x1 * c - x2 * s
        x2[...] = x2 * c + x1 * s
        x1[...] = a
