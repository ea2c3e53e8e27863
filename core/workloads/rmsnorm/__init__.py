"""RMSNorm: out = x / sqrt(mean(x^2) + eps) * w, per row, accumulation in float32.

With ``residual`` it is vLLM's ``fused_add_rms_norm``: x = x + residual first, the sum is written
back to ``residual`` and normalised into the output. On the CPU float32 against the numpy
reference; on a GPU bf16 against vLLM's ``forward_native`` (eager and torch.compile) and
``torch.nn.functional.rms_norm``.
"""
from __future__ import annotations

import numpy as np

from core.workloads.base import Workload
from core.workloads.problem import merge_problem, one_of, positive_int

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class RmsNormWorkload(Workload):
    name = "rmsnorm"
    description = "RMSNorm over the hidden size (every transformer layer, twice), optionally fused with the residual add"
    templates = {
        "c": "core.workloads.rmsnorm.c",
        "cuda": "core.workloads.rmsnorm.cuda",
        "triton": "core.workloads.rmsnorm.triton",
    }

    def default_problem(self, backend: str) -> dict:
        if backend == "c":
            return {"rows": 256, "cols": 4096, "dtype": "float32", "residual": False, "eps": 1e-6}
        return {"rows": 4096, "cols": 8192, "dtype": "bfloat16", "residual": False, "eps": 1e-6}

    def validate_problem(self, problem: dict, backend: str) -> dict:
        p = merge_problem(self.default_problem(backend), problem, backend, self.name)
        positive_int(p, "rows", 1 << 20)
        positive_int(p, "cols", 1 << 17)
        one_of(p, "dtype", ("float32",) if backend == "c" else tuple(DTYPE_BYTES))
        if not isinstance(p["residual"], bool):
            raise ValueError(f"residual must be true or false (got {p['residual']!r})")
        if not isinstance(p["eps"], float) or not 0 < p["eps"] < 1:
            raise ValueError(f"eps must be a float in (0, 1) (got {p['eps']!r})")
        return p

    def shapes(self, problem: dict) -> list[dict]:
        main = {"rows": problem["rows"], "cols": problem["cols"]}
        # vLLM's tests use odd token counts (7, 83); an odd hidden size exercises the tail code.
        odd = [{"rows": 83, "cols": 1031}, {"rows": 7, "cols": problem["cols"]}]
        return [main] + [s for s in odd if s != main]

    def flops(self, shape: dict) -> float:
        return 4.0 * shape["rows"] * shape["cols"]

    def min_bytes(self, shape: dict, dtype: str = "float32", residual: bool = False) -> float:
        r, c, b = shape["rows"], shape["cols"], DTYPE_BYTES[dtype]
        # x read, out written, w read once; with residual: residual read and written back too.
        return float(b * (2 * r * c + c + (2 * r * c if residual else 0)))

    def io_bytes(self, shape: dict, dtype: str = "float32", residual: bool = False) -> int:
        r, c, b = shape["rows"], shape["cols"], DTYPE_BYTES[dtype]
        return int(b * (2 * r * c + c + (r * c if residual else 0)))

    @staticmethod
    def reference(x: np.ndarray, w: np.ndarray, eps: float, residual: np.ndarray | None = None):
        """float64 reference: returns (out, new_residual or None)."""
        x64 = x.astype(np.float64)
        if residual is not None:
            x64 = x64 + residual.astype(np.float64)
        rms = np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
        out = x64 / rms * w.astype(np.float64)
        return out, (x64 if residual is not None else None)
