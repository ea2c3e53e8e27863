"""GEMM: C = A @ B, row-major, A (M, K), B (K, N), C (M, N), accumulation in float32.

On the CPU the data is float32 and the baseline is numpy (OpenBLAS) in the same process; on a GPU
bf16/fp16/fp32 against cuBLAS. Templates: ``c.py``, ``cuda.py``, ``triton.py``.
"""
from __future__ import annotations

import numpy as np

from core.workloads.base import Workload
from core.workloads.problem import merge_problem, one_of, positive_int

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Odd shapes, not a multiple of any tile, vector width or unroll factor a template may pick.
ODD_SHAPES = ({"m": 67, "n": 53, "k": 41}, {"m": 131, "n": 97, "k": 263})


class GemmWorkload(Workload):
    name = "gemm"
    description = "matrix product C = A @ B (the FFN and QKV projections of an LLM)"
    templates = {
        "c": "core.workloads.gemm.c",
        "cuda": "core.workloads.gemm.cuda",
        "triton": "core.workloads.gemm.triton",
    }

    def default_problem(self, backend: str) -> dict:
        if backend == "c":
            return {"m": 256, "n": 256, "k": 256, "dtype": "float32"}
        return {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16"}

    def validate_problem(self, problem: dict, backend: str) -> dict:
        p = merge_problem(self.default_problem(backend), problem, backend, self.name)
        upper = 8192 if backend == "c" else 65536
        for key in ("m", "n", "k"):
            positive_int(p, key, upper)
        one_of(p, "dtype", ("float32",) if backend == "c" else tuple(DTYPE_BYTES))
        return p

    def shapes(self, problem: dict) -> list[dict]:
        main = {k: problem[k] for k in ("m", "n", "k")}
        return [main] + [dict(s) for s in ODD_SHAPES if s != main]

    def flops(self, shape: dict) -> float:
        return 2.0 * shape["m"] * shape["n"] * shape["k"]

    def min_bytes(self, shape: dict, dtype: str = "float32") -> float:
        m, n, k = shape["m"], shape["n"], shape["k"]
        return float(DTYPE_BYTES[dtype] * (m * k + k * n + m * n))

    def io_bytes(self, shape: dict, dtype: str = "float32") -> int:
        return int(self.min_bytes(shape, dtype))

    @staticmethod
    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """float64 reference product."""
        return a.astype(np.float64) @ b.astype(np.float64)
