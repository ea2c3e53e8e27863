"""Benchmark a run's champion against every baseline of its workload, side by side.

``python -m core bench <run_id>`` starts one sandboxed evaluator for the run's workload and device,
then alternates rounds of (all baselines, champion) in that one process, so every ratio compares
figures taken minutes apart on the same machine state. The median of the rounds is reported and
written to ``<run>/bench.json`` (the dashboard's Benchmark page shows it).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable

from core.backends.base import KernelSource
from core.config import RunConfig


def bench_champion(run_dir: Path, runs_dir: Path, rounds: int = 3, log: Callable[[str], None] = print) -> dict:
    """Measure the champion and all baselines ``rounds`` times, interleaved; return the record."""
    from core.evaluation.cluster import make_evaluator
    from store.reader import RunReader
    from store.runs import atomic_write_json

    reader = RunReader(run_dir)
    cfg = RunConfig.from_dict(reader.config())
    champ = reader.champion()
    if champ is None or not champ.get("kernel"):
        raise ValueError(f"run {run_dir.name} has no verified champion yet")
    kernel = KernelSource.from_row(champ["kernel"], cfg.backend)
    evaluator = make_evaluator(cfg, runs_dir / ".cache", log=lambda line: None, log_path=run_dir / "bench.log")
    baselines: dict[str, list[dict]] = {}
    champion_rounds: list[dict] = []
    per_device: dict[str, list[dict]] = {}
    try:
        first = evaluator.start()
        for r in range(rounds):
            record = first if r == 0 else evaluator.remeasure_baselines(every=True)
            for name, b in record["baselines"].items():
                if b.get("time_us") is not None:  # a baseline that failed (its cause is in the record) has no time
                    baselines.setdefault(name, []).append(b)
            everywhere = evaluator.evaluate_everywhere(kernel)
            for slot, ev in everywhere.items():
                if not ev.ok:
                    raise RuntimeError(f"the champion failed re-verification on {slot}: {ev.status}: {ev.cause}")
                per_device.setdefault(slot, []).append({"champion_us": ev.device_time_us,
                                                        "baseline_us": record["slots"][slot]["time_us"]})
            ev = next(iter(everywhere.values()))
            champion_rounds.append({"time_us": ev.time_us, "spread_us": ev.time_spread_us, "memory_bytes": ev.memory_bytes})
            log(f"round {r + 1}/{rounds}: champion {ev.time_us:.2f} us, " +
                ", ".join(f"{n} {b['time_us']:.2f} us" for n, b in record["baselines"].items() if b.get("time_us") is not None))
    finally:
        evaluator.close()
    result = {
        "run_id": run_dir.name, "measured_at": time.time(), "rounds": rounds, "genome_hash": champ["genome_hash"],
        "device": first["device"], "shape": first.get("shape"), "flops": first.get("flops"),
        "io_bytes": first.get("io_bytes"), "roofline_us": first.get("roofline_us"), "primary": first["primary"],
        "champion": _median(champion_rounds),
        "baselines": {name: _median(rows) for name, rows in baselines.items()},
        # every device of the run: the champion and the primary baseline timed there (medians of the rounds)
        "devices": {slot: {k: statistics.median(r[k] for r in rows) for k in ("champion_us", "baseline_us")}
                    for slot, rows in per_device.items()},
    }
    atomic_write_json(run_dir / "bench.json", result)
    return result


def _median(rows: list[dict]) -> dict:
    out = {"time_us": statistics.median(r["time_us"] for r in rows), "rounds_us": [r["time_us"] for r in rows]}
    spreads = [r.get("spread_us") for r in rows if r.get("spread_us") is not None]
    out["spread_us"] = statistics.median(spreads) if spreads else None
    mems = [r.get("memory_bytes") for r in rows if r.get("memory_bytes") is not None]
    out["memory_bytes"] = max(mems) if mems else None
    for key in ("verified", "cause"):
        if key in rows[-1]:
            out[key] = rows[-1][key]
    return out


def format_table(result: dict) -> str:
    """A plain-text table: time, spread, speed-up of the champion over each, memory."""
    champ = result["champion"]["time_us"]
    rows = [("champion", result["champion"])] + sorted(result["baselines"].items(), key=lambda kv: kv[1]["time_us"])
    lines = [f"{'kernel':22s} {'median us':>12s} {'spread us':>10s} {'champion speed-up':>18s} {'memory bytes':>14s}"]
    for name, r in rows:
        spread = f"{r['spread_us']:.2f}" if r.get("spread_us") is not None else "-"
        lines.append(f"{name:22s} {r['time_us']:12.2f} {spread:>10s} {r['time_us'] / champ:17.3f}x "
                     f"{r.get('memory_bytes') or 0:14d}")
    if result.get("roofline_us"):
        lines.append(f"{'roofline':22s} {result['roofline_us']:12.2f}")
    if len(result.get("devices") or {}) > 1:
        for slot, d in result["devices"].items():
            lines.append(f"on {slot}: champion {d['champion_us']:.2f} us, {result['primary']} {d['baseline_us']:.2f} us "
                         f"({d['baseline_us'] / d['champion_us']:.3f}x)")
    return "\n".join(lines)
