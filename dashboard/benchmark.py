"""The Benchmark page's table: the champion against the baselines timed side by side at run start."""
from __future__ import annotations

import math

import pandas as pd

COLUMNS = ["name", "kind", "time_us", "spread_us", "memory_bytes", "speedup_vs_primary", "champion_speedup",
           "gflops", "gbps", "independent_us", "host_overhead_us", "noisy"]
_EXTRA = ("independent_us", "host_overhead_us", "noisy")  # from core bench: the second method, host time, the mark


def table(baseline: dict | None, champion: dict | None) -> pd.DataFrame:
    """One row per implementation: the champion, each baseline and the roofline.

    ``speedup_vs_primary`` is primary baseline time / this time (above 1 is faster than the
    library); ``champion_speedup`` is this time / champion time (how many times faster the champion
    is): the paired speed-up where the record has one (timed beside the champion, ``core bench``).
    GFLOP/s and GB/s use the run's FLOPs and input+output bytes of the timed shape; ``independent_us``
    (the second method), ``host_overhead_us`` and ``noisy`` come from ``core bench``.
    """
    if not baseline:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    if champion and champion.get("time_us"):
        rows.append({"name": "evolved champion", "kind": "champion", "time_us": champion["time_us"],
                     "spread_us": champion.get("time_spread_us"), "memory_bytes": champion.get("memory_bytes"),
                     **{k: champion.get(k) for k in _EXTRA}})
    primary = baseline.get("primary")
    for name, rec in (baseline.get("baselines") or {}).items():
        label = f"{name} (primary)" if name == primary else name
        rows.append({"name": label, "kind": "baseline", "time_us": rec.get("time_us"), "spread_us": rec.get("spread_us"),
                     "memory_bytes": rec.get("memory_bytes"), "paired": rec.get("speedup"),
                     **{k: rec.get(k) for k in _EXTRA}})
    if not any(r["kind"] == "baseline" for r in rows) and baseline.get("time_us"):
        rows.append({"name": f"{primary or 'baseline'} (primary)", "kind": "baseline", "time_us": baseline["time_us"],
                     "spread_us": None, "memory_bytes": baseline.get("memory_bytes")})
    if baseline.get("roofline_us"):
        rows.append({"name": "roofline", "kind": "roofline", "time_us": baseline["roofline_us"], "spread_us": None,
                     "memory_bytes": baseline.get("io_bytes")})
    df = pd.DataFrame(rows)
    for col in ("time_us", "spread_us", "memory_bytes"):  # None would show as the text "None"
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    primary_time = float(baseline.get("time_us") or math.nan)
    champ_time = float(champion["time_us"]) if champion and champion.get("time_us") else math.nan
    t = df["time_us"].astype(float)
    df["speedup_vs_primary"] = primary_time / t
    df["champion_speedup"] = t / champ_time
    # Text, so that the champion's own row (and every row before there is a champion) is blank
    # rather than "1.00×" or "None".
    paired = df["paired"] if "paired" in df else pd.Series([None] * len(df))
    df["champion_speedup"] = [f"{p:.2f}× (pairs)" if k == "baseline" and p is not None and p == p
                              else (f"{v:.2f}×" if k == "baseline" and v == v else "")
                              for k, v, p in zip(df["kind"], df["champion_speedup"], paired)]
    for col in _EXTRA:
        if col not in df:
            df[col] = None
    df["noisy"] = ["NOISY" if v is True else "" for v in df["noisy"]]
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
                "time_spread_us": champ.get("spread_us"), "memory_bytes": champ.get("memory_bytes"),
                "speedup": champ.get("speedup"), **{k: champ.get(k) for k in _EXTRA}}
    return baseline, champion


DISAGREE_REL = 0.10  # re-measured speed-up vs the run's: beyond this the two are not the same machine state


def bench_warnings(bench: dict | None, run_baseline: dict | None, run_champion: dict | None) -> list[str]:
    """What to distrust in a re-measurement (``bench.json``): rounds that disagree with each other
    (spread over the median above the noisy threshold) and a speed-up that disagrees with the run's."""
    from core.search.retiming import NOISY_REL_SPREAD

    if not bench:
        return []
    out = []
    items = [("the champion", bench.get("champion") or {})] + list((bench.get("baselines") or {}).items())
    for name, rec in items:
        rounds = [float(x) for x in rec.get("rounds_us") or [] if x]
        if len(rounds) > 1:
            mid = sorted(rounds)[len(rounds) // 2]
            rel = (max(rounds) - min(rounds)) / mid
            if rel > NOISY_REL_SPREAD:
                out.append(f"The re-measurement's rounds disagree for {name}: {min(rounds):.2f}–{max(rounds):.2f} µs "
                           f"({100 * rel:.0f} % apart); the machine was busy or its clock moved.")
    base, champ = from_bench(bench)
    if run_baseline and run_champion and run_champion.get("genome_hash") == bench.get("genome_hash"):
        try:
            then = float(run_baseline["time_us"]) / float(run_champion["time_us"])
            now = float(base["time_us"]) / float(champ["time_us"])
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return out
        if abs(now / then - 1) > DISAGREE_REL:
            out.append(f"The re-measured speed-up ({now:.2f}×) disagrees with the run's own figures ({then:.2f}×) "
                       f"by {100 * abs(now / then - 1):.0f} %: trust neither until the machine is quiet.")
    return out


def bound(baseline: dict | None) -> str:
    """``compute`` or ``memory``: which throughput to read first for this workload's timed shape."""
    if not baseline or not baseline.get("flops") or not baseline.get("io_bytes"):
        return "memory"
    return "compute" if baseline["flops"] / baseline["io_bytes"] > 20 else "memory"


def roofline_reason(baseline: dict | None) -> str:
    """Why a run has no roofline figure (shown instead of a bare "—")."""
    if not baseline:
        return "no baseline measured yet"
    if not baseline.get("flops") and not baseline.get("io_bytes"):
        return "the workload declares no FLOPs or bytes for this shape"
    return ("the device's copy bandwidth and matmul rate were not measured for this run "
            "(runs from before the roofline was recorded)")


def memory_unit(table: pd.DataFrame) -> tuple[str, float]:
    """The unit the Benchmark table shows memory in, the one its metrics use (largest value's)."""
    from dashboard.charts import byte_unit

    return byte_unit(table["memory_bytes"].max() if "memory_bytes" in table and not table.empty else 0)
