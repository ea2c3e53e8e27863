"""GEMM: c = a @ b, row-major, a (M, K), b (K, N), c (M, N), accumulation in float32.

Inputs are N(0, K^-1/2) so every output is near N(0, 1) whatever K is, and one tolerance per
dtype fits every shape (vLLM's for half types, KernelBench's for float32). Baselines: numpy
(OpenBLAS) on the CPU; cuBLAS through torch.matmul and through cupy.matmul on a GPU -- CuPy's path
was the faster of the two on the H200 (184.5 vs 196.6 us at 4096^3 bf16), and the fastest that
verifies normalises fitness. Templates: ``c.py``, ``cuda.py``, ``triton.py``; and, chosen by the
problem setting ``"template": "wgmma"`` on ``cuda``, ``wgmma.py`` (Hopper: TMA, wgmma, warp
specialisation). The setting is left out of the problem when not given, so existing runs, their
problems and timing-cache keys stay as they were.
"""
from __future__ import annotations

import importlib
from typing import Any

from core.workloads.spec import (Baseline, family_templates, Normal, Param, Tensor, verification_shapes, Workload,
                                 scaled_by_sqrt_sqrt)

# Odd shapes, not a multiple of any tile, vector width or unroll factor a template may pick.
ODD_SHAPES = ({"m": 67, "n": 53, "k": 41}, {"m": 131, "n": 97, "k": 263})
TOLERANCE = {"bfloat16": (1e-3, 1.6e-2), "float16": (1e-3, 1e-3), "float32": (1e-4, 1e-4)}
# Other templates of one backend, chosen by the problem's "template" setting: name -> {backend: module}
VARIANTS = {"wgmma": {"cuda": "core.workloads.gemm.wgmma"}}
VARIANT_DTYPES = {"wgmma": ("bfloat16", "float16")}


class GemmWorkload(Workload):
    name = "gemm"
    description = "matrix product c = a @ b (the FFN and QKV projections of an LLM)"
    params = (
        Param("m", 4096, cpu_default=256, cpu_upper=8192),
        Param("n", 4096, cpu_default=256, cpu_upper=8192),
        Param("k", 4096, cpu_default=256, cpu_upper=8192),
        Param("dtype", "bfloat16", cpu_default="float32", kind="dtype"),
    )
    templates = family_templates(__name__, "c", "cuda", "triton")
    tolerances = TOLERANCE
    permuted_along = "m"

    def validate_problem(self, problem: dict, backend: Any) -> dict:
        """The spec's checks, plus the optional ``template`` setting (:data:`VARIANTS`), kept in
        the problem only when given."""
        problem = dict(problem)
        variant = problem.pop("template", None)
        merged = super().validate_problem(problem, backend)
        if variant is None:
            return merged
        name = backend if isinstance(backend, str) else backend.name
        if variant not in VARIANTS:
            raise ValueError(f"template must be one of {', '.join(VARIANTS)} (got {variant!r}); leave it out for the default")
        if name not in VARIANTS[variant]:
            raise ValueError(f"template {variant!r} exists for the {', '.join(VARIANTS[variant])} backend only (not {name!r})")
        if merged["dtype"] not in VARIANT_DTYPES[variant]:
            raise ValueError(f"template {variant!r} multiplies {' or '.join(VARIANT_DTYPES[variant])} (got {merged['dtype']!r})")
        return {**merged, "template": variant}

    def template(self, backend: str, problem: dict, device: Any):
        """The problem's ``template`` variant when it names one, else the backend's own template."""
        variant = problem.get("template")
        if variant is None:
            return super().template(backend, problem, device)
        module = VARIANTS.get(variant, {}).get(backend)
        if module is None:
            raise ValueError(f"workload gemm has no {variant!r} template for {backend!r} (has: {', '.join(VARIANTS)} on "
                             f"{', '.join(b for v in VARIANTS.values() for b in v)})")
        return importlib.import_module(module).TEMPLATE(self, problem, device)

    def tensors(self, problem: dict) -> list[Tensor]:
        init = Normal(scale=scaled_by_sqrt_sqrt("k"))
        return [Tensor("a", ("m", "k"), init=init), Tensor("b", ("k", "n"), init=init), Tensor("c", ("m", "n"), "output")]

    def shapes(self, problem: dict) -> list[dict]:
        return verification_shapes(problem, ("m", "n", "k"), *ODD_SHAPES)

    def reference(self, xp: Any, t: dict, problem: dict) -> dict:
        return {"c": t["a"] @ t["b"]}

    def flops(self, shape: dict, problem: dict) -> float:
        return 2.0 * shape["m"] * shape["n"] * shape["k"]

    def baselines(self, arrays: str) -> list[Baseline]:
        if arrays == "numpy":
            return [Baseline("numpy", "numpy", _numpy_matmul, "numpy.matmul (OpenBLAS) into c")]
        return [Baseline("cublas_torch", "torch", _torch_matmul, "torch.matmul into c (cuBLAS)"),
                Baseline("cublas_cupy", "torch", _cupy_matmul, "cupy.matmul into c (cuBLAS through CuPy)")]


def _numpy_matmul(t: dict, problem: dict) -> None:
    import numpy as np

    np.matmul(t["a"], t["b"], out=t["c"])


def _torch_matmul(t: dict, problem: dict) -> None:
    import torch

    torch.matmul(t["a"], t["b"], out=t["c"])


def _cupy_matmul(t: dict, problem: dict) -> None:
    import cupy

    from core.backends.torch_runtime import current_stream_ptr

    views = t.get("_cupy")
    if views is None:  # bf16 needs a recent cupy; if it cannot hold the dtype this baseline fails alone
        views = t["_cupy"] = tuple(cupy.from_dlpack(t[n]) for n in ("a", "b", "c"))
    with cupy.cuda.ExternalStream(current_stream_ptr()):
        cupy.matmul(views[0], views[1], out=views[2])
