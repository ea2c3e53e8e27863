"""Workload registry: kernel families AbeBot can evolve."""
from __future__ import annotations

import importlib

from core.backends import load_entry_points
from core.workloads.spec import Workload

WORKLOADS: dict[str, str] = {
    "gemm": "core.workloads.gemm:GemmWorkload",
    "rmsnorm": "core.workloads.rmsnorm:RmsNormWorkload",
    "silu_mul": "core.workloads.silu_mul:SiluMulWorkload",
    "rope": "core.workloads.rope:RopeWorkload",
    "gather_gemv": "core.workloads.gather_gemv:GatherGemvWorkload",
    "w4a16": "core.workloads.w4a16:W4A16Workload",
    "rmsnorm_w4a16": "core.workloads.rmsnorm_w4a16:RmsNormW4A16Workload",
    "attention_decode": "core.workloads.attention_decode:AttentionDecodeWorkload",
}


ENTRY_POINT_GROUP = "abebot.workloads"


load_entry_points(WORKLOADS, ENTRY_POINT_GROUP)


def get_workload(name: str) -> Workload:
    """The workload ``name``; ValueError naming the choices for an unknown one, or saying which
    entry point failed to load."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r} (choose from: {', '.join(WORKLOADS)})")
    module, cls = WORKLOADS[name].split(":")
    try:
        return getattr(importlib.import_module(module), cls)()
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"workload {name!r} ({WORKLOADS[name]}) cannot be loaded: {type(exc).__name__}: {exc}") from exc


__all__ = ["ENTRY_POINT_GROUP", "WORKLOADS", "Workload", "get_workload", "load_entry_points"]
