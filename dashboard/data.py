"""Shaping run data for the charts: downsampling, lethal causes, progress and ETA.

Everything here takes DataFrames from :class:`store.reader.RunReader` and returns small frames,
so a 5,000-generation run draws as fast as a 5-generation one.
"""
from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from core.objectives import OBJECTIVES

MAX_POINTS = 1000  # per curve; beyond that, generations are bucketed


def _bucket(gens: pd.DataFrame, max_points: int) -> pd.Series | None:
    n = len(gens)
    if n <= max_points:
        return None
    size = math.ceil(n / max_points)
    return pd.Series(range(n), index=gens.index) // size


def fitness_curves(gens: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """best / mean / worst fitness per generation, bucketed to at most ``max_points`` rows.

    A bucket keeps the best of its best, the mean of its means and the worst of its worst, so the
    envelope stays honest when it is downsampled; ``generation`` (and ``finished_at``, the
    wall-clock time of its commit, when stored) is the bucket's last generation's.
    """
    cols = ["generation", "best_fitness", "mean_fitness", "worst_fitness"]
    if gens.empty:
        return pd.DataFrame(columns=cols + ["finished_at"])
    df = gens[cols + [c for c in ("finished_at",) if c in gens.columns]].sort_values("generation")
    bucket = _bucket(df, max_points)
    if bucket is None:
        return df.reset_index(drop=True)
    extra = {"finished_at": ("finished_at", "last")} if "finished_at" in df else {}
    return df.groupby(bucket.values).agg(generation=("generation", "last"), best_fitness=("best_fitness", "max"),
                                         mean_fitness=("mean_fitness", "mean"),
                                         worst_fitness=("worst_fitness", "min"), **extra).reset_index(drop=True)


def best_so_far(gens: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """The fastest time and the smallest memory of any candidate up to each generation.

    A generation's own best rises and falls (the population changes, elites are re-timed); the
    chart says "best", so it shows the running minimum, which never rises.
    """
    cols = [c for c in ("best_time_us", "best_memory_bytes") if c in gens.columns]
    out = series(gens, cols + [c for c in ("finished_at",) if c in gens.columns], "last", max_points=len(gens) or 1)
    for c in cols:
        out[c] = pd.to_numeric(out[c], errors="coerce").cummin()
    bucket = _bucket(out, max_points)
    return out if bucket is None else out.groupby(bucket.values).last().reset_index(drop=True)


def champion_changes(gens: pd.DataFrame) -> pd.DataFrame:
    """One row per generation in which the champion changed: generation, finished_at, the new
    champion's hash, the previous one's and the best fitness then."""
    cols = ["generation", "finished_at", "champion_hash", "previous_hash", "best_fitness"]
    if gens.empty or "champion_hash" not in gens.columns:
        return pd.DataFrame(columns=cols)
    df = gens.sort_values("generation").reset_index(drop=True)
    df = df.assign(previous_hash=df["champion_hash"].shift(1))
    if "finished_at" not in df:
        df["finished_at"] = float("nan")
    changed = df[df["champion_hash"].notna() & (df["champion_hash"] != df["previous_hash"])]
    return changed[cols].reset_index(drop=True)


def series(gens: pd.DataFrame, columns: list[str], how: str = "last", max_points: int = MAX_POINTS) -> pd.DataFrame:
    """``generation`` plus ``columns``, bucketed with ``how`` (last, min, max, mean, sum)."""
    present = [c for c in columns if c in gens.columns]
    if gens.empty or not present:
        return pd.DataFrame(columns=["generation", *present])
    df = gens[["generation", *present]].sort_values("generation")
    bucket = _bucket(df, max_points)
    if bucket is None:
        return df.reset_index(drop=True)
    agg = {"generation": "last", **{c: how for c in present}}
    return df.groupby(bucket.values).agg(agg).reset_index(drop=True)


NOISE_COLS = ["generation", "baseline_time_us", "baseline_spread_us", "baseline_rel_spread", "noisy", "finished_at"]


def baseline_noise(gens: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """Each generation's baseline time, its spread and the noisy flag (generations timed before
    the baseline was re-timed per generation are left out), bucketed to ``max_points`` rows.

    A bucket keeps the mean time, the largest spread and is noisy if any of its generations is.
    """
    if gens.empty or "baseline_time_us" not in gens.columns:
        return pd.DataFrame(columns=NOISE_COLS)
    df = gens[[c for c in NOISE_COLS if c in gens.columns]].copy()
    df = df[pd.to_numeric(df["baseline_time_us"], errors="coerce").notna()].sort_values("generation")
    if df.empty:
        return pd.DataFrame(columns=NOISE_COLS)
    for col in NOISE_COLS[1:4] + ["finished_at"]:
        df[col] = pd.to_numeric(df[col], errors="coerce") if col in df else float("nan")
    df["noisy"] = df["noisy"].fillna(False).astype(bool) if "noisy" in df else False
    df = df.reset_index(drop=True)
    bucket = _bucket(df, max_points)
    if bucket is None:
        return df[NOISE_COLS]
    return df.groupby(bucket.values).agg(generation=("generation", "last"), baseline_time_us=("baseline_time_us", "mean"),
                                         baseline_spread_us=("baseline_spread_us", "max"),
                                         baseline_rel_spread=("baseline_rel_spread", "max"),
                                         noisy=("noisy", "any"),
                                         finished_at=("finished_at", "last")).reset_index(drop=True)


def noise_summary(gens: pd.DataFrame) -> dict[str, Any] | None:
    """The machine's noise for the Monitor's metric: the last generation's baseline relative
    spread and primary, and how many of the re-timed generations were noisy (None before any)."""
    df = baseline_noise(gens, max_points=len(gens) or 1)
    if df.empty:
        return None
    last = gens.sort_values("generation").iloc[-1]
    primary = last.get("baseline_primary")
    return {"rel_spread": _num(df["baseline_rel_spread"].iloc[-1]), "noisy": int(df["noisy"].sum()),
            "measured": len(df), "last_noisy": bool(df["noisy"].iloc[-1]),
            "primary": primary if isinstance(primary, str) else None,
            "time_us": _num(df["baseline_time_us"].iloc[-1])}


def timing_caption(last: Any, noise: dict[str, Any] | None) -> str:
    """`` · champion 6.13 µs, median of 4 timings (IQR 0.02 µs) · baseline numpy 3.94 µs ±2.4 %`` for
    the last generation's row ``last`` (empty for a run from before re-timing)."""
    text = ""
    n = _num(last.get("champion_samples"))
    if n:
        spread = _num(last.get("champion_spread_us"))
        text += (f" · champion {fmt_time_us(_num(last.get('champion_time_us')))}, median of {int(n)} "
                 f"timing{'s' if n > 1 else ''}" + (f" (IQR {fmt_time_us(spread)})" if spread is not None and n > 1 else ""))
    if noise and noise["time_us"] is not None:
        text += (f" · baseline {noise['primary'] or ''} {fmt_time_us(noise['time_us'])}"
                 f" ±{100 * (noise['rel_spread'] or 0):.1f} %" + (" (noisy)" if noise["last_noisy"] else ""))
    return text


def _causes(value: Any) -> dict[str, int]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        try:
            parsed = json.loads(value)
            return parsed if isinstance(parsed, dict) else {}
        except ValueError:
            return {}
    return {}


def lethal_causes(gens: pd.DataFrame, max_points: int = 200) -> pd.DataFrame:
    """Long frame (generation, cause, count) of lethal candidates, bucketed to ``max_points`` bars."""
    if gens.empty or "lethal_causes" not in gens.columns:
        return pd.DataFrame(columns=["generation", "cause", "count"])
    df = gens[["generation", "lethal_causes"]].sort_values("generation").reset_index(drop=True)
    bucket = _bucket(df, max_points)
    gen_of = df["generation"] if bucket is None else df.groupby(bucket.values)["generation"].transform("last")
    rows = [(g, cause, int(n)) for g, raw in zip(gen_of, df["lethal_causes"]) for cause, n in _causes(raw).items() if n]
    out = pd.DataFrame(rows, columns=["generation", "cause", "count"])
    return out.groupby(["generation", "cause"], as_index=False)["count"].sum()


def cause_totals(gens: pd.DataFrame) -> dict[str, int]:
    """Lethal causes summed over the whole run."""
    total: dict[str, int] = {}
    for raw in gens.get("lethal_causes", pd.Series(dtype=object)):
        for cause, n in _causes(raw).items():
            total[cause] = total.get(cause, 0) + int(n)
    return dict(sorted(total.items(), key=lambda kv: -kv[1]))


def progress(config: dict, gens: pd.DataFrame, heartbeat: dict | None) -> dict[str, Any]:
    """Progress of a run: fraction done, a label, elapsed seconds, ETA seconds, evaluations per second."""
    hb = heartbeat or {}
    done = int(gens["generation"].max()) + 1 if not gens.empty else 0
    if isinstance(hb.get("generation"), (int, float)):
        done = max(done, int(hb["generation"]) + 1)
    target = int(config.get("generations") or 0)
    hours = float(config.get("hours") or 0.0)
    elapsed = _num(hb.get("elapsed_s"))
    if elapsed is None and not gens.empty and "elapsed_s" in gens.columns:
        elapsed = _num(gens["elapsed_s"].iloc[-1])
    rate = _num(hb.get("evals_per_s"))
    if rate is None and not gens.empty and "evals_per_s" in gens.columns:
        rate = _num(gens["evals_per_s"].iloc[-1])
    frac_gen = min(1.0, done / target) if target else None
    frac_time = min(1.0, (elapsed or 0.0) / (hours * 3600)) if hours else None
    fractions = [f for f in (frac_gen, frac_time) if f is not None]
    fraction = max(fractions) if fractions else 0.0
    # One convention everywhere: generations are numbered from 0, and progress counts those done.
    label = f"{done} of {target} generations done" if target else f"{done} generations done"
    if done:
        label += f" (last: generation {done - 1})"
    if hours:
        label += f" · {(elapsed or 0) / 3600:.2f} of {hours:g} h"
    eta = None
    if elapsed and 0 < fraction < 1:
        eta = elapsed * (1 - fraction) / fraction
    return {"done": done, "target": target, "fraction": fraction, "label": label, "elapsed_s": elapsed,
            "eta_s": eta, "evals_per_s": rate}


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def duration(seconds: float | None) -> str:
    """``3725`` -> ``"1 h 02 min"``; short forms for short times; an em dash for None."""
    if seconds is None:
        return "—"
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {(s % 3600) // 60:02d} min"
    return f"{s // 86400} d {(s % 86400) // 3600:02d} h"


def fmt_bytes(n: float | None) -> str:
    """Bytes in KiB/MiB/GiB."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_time_us(us: float | None) -> str:
    """Microseconds in µs/ms/s."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "—"
    if us < 1000:
        return f"{us:.1f} µs"
    if us < 1e6:
        return f"{us / 1000:.2f} ms"
    return f"{us / 1e6:.2f} s"


def run_weights(cfg: dict) -> dict[str, Any]:
    """A run configuration's fitness weights, objective name -> weight: its ``weights``, or for a
    configuration written before objectives were data, its ``weight_<name>`` keys."""
    weights = cfg.get("weights")
    if not isinstance(weights, dict):
        weights = {key.removeprefix("weight_"): value for key, value in cfg.items() if key.startswith("weight_")}
    order = [o.name for o in OBJECTIVES if o.name in weights]  # config.json sorts its keys
    return {name: weights[name] for name in order + sorted(set(weights) - set(order))}


def fmt_weights(cfg: dict) -> str:
    """``time 0.6, memory 0.3, stability 0.1`` for a run configuration ("?" when it has none)."""
    return ", ".join(f"{name} {value:g}" if isinstance(value, (int, float)) else f"{name} {value}"
                      for name, value in run_weights(cfg).items()) or "?"


def pareto_points(inds: pd.DataFrame) -> pd.DataFrame:
    """Individuals that produced a measurement (status ok), with the columns the scatter needs."""
    cols = ["genome_hash", "time_us", "memory_bytes", "stability", "fitness", "pareto_rank", "status", "origin"]
    if inds.empty:
        return pd.DataFrame(columns=cols)
    df = inds[[c for c in cols if c in inds.columns]]
    df = df[df["status"] == "ok"] if "status" in df.columns else df
    df = df.dropna(subset=[c for c in ("time_us", "memory_bytes") if c in df.columns])
    return df.drop_duplicates("genome_hash").reset_index(drop=True)


def fmt_problem(problem: Any) -> str:
    """``m=64, n=64, k=64, float32`` for a problem dict (its text for anything else)."""
    if not isinstance(problem, dict) or not problem:
        return "workload defaults" if not problem else str(problem)
    return ", ".join(str(v) if k == "dtype" else f"{k}={v}" for k, v in problem.items())


def to_datetime(values: pd.Series) -> pd.Series:
    """Epoch seconds (or ISO text) to local-naive timestamps for display."""
    numeric = pd.to_numeric(values, errors="coerce")
    if numeric.notna().any():
        return pd.to_datetime(numeric, unit="s", utc=True).dt.tz_convert(None)
    return pd.to_datetime(values, errors="coerce")
