"""Gathered GEMV: the LM head scored on chosen vocabulary rows only.

``logits[t, j] = h[t] . W[ids[t, j]]`` for tokens t and candidates j, accumulation in float32: the
verification of drafted tokens (speculative decoding) and top-k rescoring need a few logits per
token, not the whole vocabulary.

* ``h`` (tokens, hidden): the final hidden states;
* ``W`` (vocab, hidden): the LM head, Llama-3's 128256 x 8192 in bf16 on a GPU by default (2 GiB);
  8192 x 1024 float32 on a CPU;
* ``ids`` (tokens, cands) int32: the candidate rows, drawn uniformly over the vocabulary (repeats
  allowed, as in real drafts);
* ``logits`` (tokens, cands), in the problem's dtype.

Inputs are N(0, hidden^-1/2) so every logit is near N(0, 1) whatever the hidden size, and one
tolerance per dtype fits every shape: the GEMM workload's (vLLM's for half types).

Bytes: a kernel needs to read each *distinct* gathered row once (a row two tokens share can be
read once for both), so the floor counts the expected number of distinct rows among T x J uniform
draws, ``vocab (1 - (1 - 1/vocab)^(T J))``, not T x J rows, nor the whole of W.

Baselines: on a GPU, torch's ``W[ids]`` then a batched matmul into ``logits`` (the gathered rows
are a T x J x hidden temporary: 256 MiB at T = 16, J = 1024; that is the memory objective's
point), the same under torch.compile, and the dense LM head (``h @ W.T`` over the whole vocabulary,
then ``gather``); on a CPU, numpy's and torch's gather + matmul. Templates: ``c.py``, ``cuda.py``,
``triton.py``.
"""
from __future__ import annotations

from typing import Any

from core.backends.arrays import dtype_bytes
from core.workloads.spec import (Baseline, compiled_once, family_templates, Indices, Normal, Param, Tensor,
                                 verification_shapes, Workload, scaled_by_sqrt_sqrt)

TOLERANCE = {"bfloat16": (1e-3, 1.6e-2), "float16": (1e-3, 1e-3), "float32": (1e-4, 1e-4)}
ODD_HIDDEN = 1031  # prime: no vector width, unroll or block divides it


class GatherGemvWorkload(Workload):
    name = "gather_gemv"
    description = "LM head on chosen rows: logits[t, j] = h[t] . W[ids[t, j]] (draft verification, rescoring)"
    params = (
        Param("tokens", 16, cpu_default=4, upper=4096),
        Param("cands", 64, upper=1 << 15),  # a grid axis of the Triton template: at most 65535 blocks
        Param("vocab", 128256, cpu_default=8192, upper=1 << 20, cpu_upper=1 << 18),
        Param("hidden", 8192, cpu_default=1024, upper=1 << 16),
        Param("dtype", "bfloat16", cpu_default="float32", kind="dtype"),
    )
    templates = family_templates(__name__, "c", "cuda", "triton")
    tolerances = TOLERANCE
    permuted_along = "tokens"

    def tensors(self, problem: dict) -> list[Tensor]:
        init = Normal(scale=scaled_by_sqrt_sqrt("hidden"))
        return [Tensor("h", ("tokens", "hidden"), init=init),
                Tensor("W", ("vocab", "hidden"), init=init),
                Tensor("ids", ("tokens", "cands"), init=Indices("vocab"), dtype="int32"),
                Tensor("logits", ("tokens", "cands"), "output")]

    def shapes(self, problem: dict) -> list[dict]:
        # odd hidden and candidate counts; then the full W (offsets past 2^31 bytes on the GPU default)
        return verification_shapes(problem, ("tokens", "cands", "vocab", "hidden"),
                                   {"tokens": 3, "cands": 5, "hidden": ODD_HIDDEN}, {"tokens": 7, "cands": 67})

    def reference(self, xp: Any, t: dict, problem: dict) -> dict:
        ids = t["ids"]
        idx = ids.long() if hasattr(ids, "long") else ids.astype(xp.int64)  # torch, numpy
        rows = t["W"][idx]  # (tokens, cands, hidden)
        return {"logits": (rows @ t["h"][:, :, None])[:, :, 0]}

    def flops(self, shape: dict, problem: dict) -> float:
        return 2.0 * shape["tokens"] * shape["cands"] * shape["hidden"]

    def min_bytes(self, shape: dict, problem: dict) -> float:
        """h and ids read, logits written, and the expected distinct rows of W read once each."""
        elt = dtype_bytes(problem["dtype"])
        n, v = shape["tokens"] * shape["cands"], shape["vocab"]
        distinct = v * -expm1_n(n, v)
        return float(elt * shape["hidden"] * (shape["tokens"] + distinct) + 4 * n + elt * n)

    def baselines(self, arrays: str) -> list[Baseline]:
        if arrays == "numpy":
            return [Baseline("numpy_gather_matmul", "numpy", _numpy_gather, "numpy W[ids] then matmul into logits"),
                    Baseline("torch_gather_bmm", "numpy", _torch_cpu_gather, "torch W[ids] then bmm on the CPU",
                             returns_outputs=True)]
        return [Baseline("torch_gather_bmm", "torch", _torch_gather, "torch W[ids] (a T x J x hidden temporary) then bmm"),
                Baseline("torch_compile", "torch", _compiled, "the gather and dot products under torch.compile",
                         returns_outputs=True),
                Baseline("dense_lm_head", "torch", _dense, "h @ W.T over the whole vocabulary, then gather",
                         returns_outputs=True)]


def expm1_n(n: int, v: int) -> float:
    """(1 - 1/v)^n - 1, computed without cancellation: minus the expected share of distinct rows."""
    import math

    return math.expm1(n * math.log1p(-1.0 / v)) if v > 1 else -1.0


def gather_bmm(h, W, ids):
    """torch: the gathered rows (a temporary), then one batched matrix-vector product."""
    import torch

    return torch.bmm(W[ids.long()], h.unsqueeze(-1)).squeeze(-1)


def _torch_gather(t: dict, problem: dict) -> None:
    import torch

    torch.bmm(t["W"][t["ids"].long()], t["h"].unsqueeze(-1), out=t["logits"].unsqueeze(-1))


_compiled_gather_bmm = compiled_once(gather_bmm)


def _compiled(t: dict, problem: dict) -> Any:
    return _compiled_gather_bmm(t["h"], t["W"], t["ids"])


def _dense(t: dict, problem: dict) -> Any:
    import torch

    return torch.gather(t["h"] @ t["W"].T, 1, t["ids"].long())


def _torch_cpu_gather(t: dict, problem: dict) -> Any:
    import torch

    return gather_bmm(torch.from_numpy(t["h"]), torch.from_numpy(t["W"]), torch.from_numpy(t["ids"])).numpy()


def _numpy_gather(t: dict, problem: dict) -> None:
    import numpy as np

    np.matmul(t["W"][t["ids"]], t["h"][:, :, None], out=t["logits"][:, :, None])
