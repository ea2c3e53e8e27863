"""The Benchmark page's table: the champion against the baselines timed side by side at run start."""
from __future__ import annotations

import math

import pandas as pd

COLUMNS = ["name", "kind", "time_us", "spread_us", "memory_bytes", "speedup_vs_primary", "champion_speedup",
           "gflops", "gbps"]


def table(baseline: dict | None, champion: dict | None) -> pd.DataFrame:
    """One row per implementation: the champion, each baseline and the roofline.

    ``speedup_vs_primary`` is primary baseline time / this time (above 1 is faster than the
    library); ``champion_speedup`` is this time / champion time (how many times faster the champion
    is). GFLOP/s and GB/s use the run's FLOPs and input+output bytes of the timed shape.
    """
    if not baseline:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    if champion and champion.get("time_us"):
        rows.append({"name": "evolved champion", "kind": "champion", "time_us": champion["time_us"],
                     "spread_us": champion.get("time_spread_us"), "memory_bytes": champion.get("memory_bytes")})
    primary = baseline.get("primary")
    for name, rec in (baseline.get("baselines") or {}).items():
        label = f"{name} (primary)" if name == primary else name
        rows.append({"name": label, "kind": "baseline", "time_us": rec.get("time_us"), "spread_us": rec.get("spread_us"),
                     "memory_bytes": rec.get("memory_bytes")})
    if not any(r["kind"] == "baseline" for r in rows) and baseline.get("time_us"):
        rows.append({"name": f"{primary or 'baseline'} (primary)", "kind": "baseline", "time_us": baseline["time_us"],
                     "spread_us": None, "memory_bytes": baseline.get("memory_bytes")})
    if baseline.get("roofline_us"):
        rows.append({"name": "roofline", "kind": "roofline", "time_us": baseline["roofline_us"], "spread_us": None,
                     "memory_bytes": baseline.get("io_bytes")})
    df = pd.DataFrame(rows)
    primary_time = float(baseline.get("time_us") or math.nan)
    champ_time = float(champion["time_us"]) if champion and champion.get("time_us") else math.nan
    t = df["time_us"].astype(float)
    df["speedup_vs_primary"] = primary_time / t
    df["champion_speedup"] = t / champ_time
    flops, io = baseline.get("flops"), baseline.get("io_bytes")
    df["gflops"] = float(flops) / t / 1e3 if flops else math.nan
    df["gbps"] = float(io) / t / 1e3 if io else math.nan
    return df[COLUMNS]


def from_bench(bench: dict) -> tuple[dict, dict]:
    """``(baseline record, champion row)`` from ``python -m core bench``'s ``bench.json``, in the shapes
    :func:`table` takes (the primary baseline's re-measured time normalises the speed-ups)."""
    primary = bench.get("primary")
    prim = (bench.get("baselines") or {}).get(primary, {})
    baseline = {**bench, "time_us": prim.get("time_us"), "memory_bytes": prim.get("memory_bytes")}
    champ = bench.get("champion") or {}
    champion = {"genome_hash": bench.get("genome_hash"), "time_us": champ.get("time_us"),
                "time_spread_us": champ.get("spread_us"), "memory_bytes": champ.get("memory_bytes")}
    return baseline, champion


def bound(baseline: dict | None) -> str:
    """``compute`` or ``memory``: which throughput to read first for this workload's timed shape."""
    if not baseline or not baseline.get("flops") or not baseline.get("io_bytes"):
        return "memory"
    return "compute" if baseline["flops"] / baseline["io_bytes"] > 20 else "memory"
