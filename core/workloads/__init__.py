"""Workload registry: kernel families AbeBot can evolve."""
from __future__ import annotations

import importlib

from core.workloads.spec import Workload

WORKLOADS: dict[str, str] = {
    "gemm": "core.workloads.gemm:GemmWorkload",
    "rmsnorm": "core.workloads.rmsnorm:RmsNormWorkload",
    "silu_mul": "core.workloads.silu_mul:SiluMulWorkload",
    "rope": "core.workloads.rope:RopeWorkload",
    "gather_gemv": "core.workloads.gather_gemv:GatherGemvWorkload",
    "w4a16": "core.workloads.w4a16:W4A16Workload",
    "rmsnorm_w4a16": "core.workloads.rmsnorm_w4a16:RmsNormW4A16Workload",
}


def get_workload(name: str) -> Workload:
    """The workload ``name``; ValueError naming the choices for an unknown one."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r} (choose from: {', '.join(WORKLOADS)})")
    module, cls = WORKLOADS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["WORKLOADS", "Workload", "get_workload"]
