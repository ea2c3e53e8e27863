"""RMSNorm: out = x / sqrt(mean(x^2) + eps) * w, per row, accumulation in float32.

With ``residual`` it is vLLM's ``fused_add_rms_norm``: x = x + residual first, the sum is written
back to ``residual`` (in place) and normalised into ``out``. Tolerances are vLLM's for half types
(atol = rtol = 1e-2). Baselines: a numpy expression and torch's ``F.rms_norm`` on the CPU; vLLM's
``forward_native`` under torch.compile (what vLLM runs by default) and eager, and
``F.rms_norm``, on a GPU. Templates: ``c.py``, ``cuda.py``, ``triton.py``.
"""
from __future__ import annotations

from typing import Any

from core.workloads.spec import (Baseline, compiled_once, family_templates, Normal, Param, Tensor,
                                 verification_shapes, Workload)

TOLERANCE = {"bfloat16": (1e-2, 1e-2), "float16": (1e-2, 1e-2), "float32": (1e-5, 1e-5)}


class RmsNormWorkload(Workload):
    name = "rmsnorm"
    description = "RMSNorm over the hidden size (every transformer layer, twice), optionally fused with the residual add"
    params = (
        Param("rows", 4096, cpu_default=256, upper=1 << 20),
        Param("cols", 8192, cpu_default=4096, upper=1 << 17),
        Param("dtype", "bfloat16", cpu_default="float32", kind="dtype"),
        Param("residual", False, kind="flag"),
        Param("eps", 1e-6, kind="real", low=0.0, high=1.0),
    )
    templates = family_templates(__name__, "c", "cuda", "triton")
    tolerances = TOLERANCE
    permuted_along = "rows"

    def tensors(self, problem: dict) -> list[Tensor]:
        out = [Tensor("x", ("rows", "cols")), Tensor("w", ("cols",), init=Normal(mean=1.0, std=0.5))]
        if problem["residual"]:
            out.append(Tensor("residual", ("rows", "cols"), "inout"))
        return out + [Tensor("out", ("rows", "cols"), "output")]

    def shapes(self, problem: dict) -> list[dict]:
        # vLLM's tests use odd token counts (7, 83); an odd hidden size exercises the tail code.
        return verification_shapes(problem, ("rows", "cols"), {"rows": 83, "cols": 1031}, {"rows": 7})

    def reference(self, xp: Any, t: dict, problem: dict) -> dict:
        x = t["x"] + t["residual"] if problem["residual"] else t["x"]
        out = {"out": x / xp.sqrt((x * x).mean(-1, keepdims=True) + problem["eps"]) * t["w"]}
        if problem["residual"]:
            out["residual"] = x
        return out

    def flops(self, shape: dict, problem: dict) -> float:
        return 4.0 * shape["rows"] * shape["cols"]

    def baselines(self, arrays: str) -> list[Baseline]:
        if arrays == "numpy":
            return [Baseline("numpy", "numpy", _numpy_rms, "the float32 formula in numpy, into out"),
                    Baseline("torch_rms_norm", "numpy", _torch_cpu_rms, "torch.nn.functional.rms_norm on the CPU",
                             returns_outputs=True)]
        out = [Baseline("vllm_native_compile", "torch", _compiled_native, "vLLM forward_native under torch.compile",
                        returns_outputs=True),
               Baseline("vllm_native_eager", "torch", _eager_native, "vLLM forward_native, eager", returns_outputs=True)]
        return out + [Baseline("torch_rms_norm", "torch", _torch_rms, "torch.nn.functional.rms_norm", returns_outputs=True)]


def forward_native(x, weight, eps: float, residual=None):
    """vLLM's ``RMSNorm.forward_native`` (eager PyTorch), with its fused residual variant."""
    import torch

    orig = x.dtype
    x = x.to(torch.float32)
    if residual is not None:
        x = x + residual.to(torch.float32)
        residual = x.to(orig)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    x = x.to(orig) * weight
    return x if residual is None else (x, residual)


def _native_outputs(result: Any) -> dict:
    return {"out": result[0], "residual": result[1]} if isinstance(result, tuple) else {"out": result}


def _eager_native(t: dict, problem: dict) -> dict:
    return _native_outputs(forward_native(t["x"], t["w"], problem["eps"], t.get("residual")))


_compiled_forward_native = compiled_once(forward_native)


def _compiled_native(t: dict, problem: dict) -> dict:
    return _native_outputs(_compiled_forward_native(t["x"], t["w"], problem["eps"], t.get("residual")))


def _torch_rms(t: dict, problem: dict) -> dict:
    """F.rms_norm has no fused residual: the add is a separate in-place op, as a user would write it."""
    import torch

    x = t["x"]
    if problem["residual"]:
        x = t["residual"].add_(x)
    return {"out": torch.nn.functional.rms_norm(x, (x.shape[-1],), t["w"], problem["eps"])}


def _torch_cpu_rms(t: dict, problem: dict) -> dict:
    import torch

    out = _torch_rms({k: torch.from_numpy(v) for k, v in t.items() if k in ("x", "w", "residual")}, problem)
    return {"out": out["out"].numpy()}


def _numpy_rms(t: dict, problem: dict) -> None:
    import numpy as np

    x = t["x"]
    if problem["residual"]:
        x = np.add(x, t["residual"], out=t["residual"])
    ms = np.mean(x * x, axis=-1, keepdims=True)
    np.multiply(x / np.sqrt(ms + np.float32(problem["eps"])), t["w"], out=t["out"])
