"""Benchmark a run's champion against every baseline of its workload, side by side.

``python -m core bench <run_id>`` starts one sandboxed evaluator for the run's workload and device,
then alternates rounds of (all baselines, champion) in that one process; within each round the
champion is also timed in interleaved pairs with the primary baseline (its ``speedup``). After the
rounds, the champion and every baseline are timed by a second, independent method on rotated copies
(:mod:`core.evaluation.crosscheck`), with each one's host overhead per eager call. Every figure
carries the cache policy it was timed under and a ``noisy`` mark: the champion's when its pair
ratios or its rounds spread more than 10%, a baseline's when its rounds do; ``methods_ratio`` and
``disagree`` say whether the two methods' speed-ups over the primary differ by more than 5%. The
record is written to ``<run>/bench.json`` (the dashboard's Benchmark page shows it).
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
    paired: dict[str, list[dict]] = {}  # baseline -> its pair measurements beside the champion
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
            for name, b in record["baselines"].items():  # every other baseline: timed beside the champion too
                if name != record["primary"] and b.get("verified") and b.get("time_us") is not None:
                    reply = evaluator.pair(kernel, name)
                    if reply.get("status") == "ok":
                        paired.setdefault(name, []).append(reply)
            ev = next(iter(everywhere.values()))
            champion_rounds.append({"time_us": ev.time_us, "spread_us": ev.time_spread_us, "memory_bytes": ev.memory_bytes,
                                    "speedup": ev.speedup, "noisy": ev.noisy})
            log(f"round {r + 1}/{rounds}: champion {ev.time_us:.2f} us"
                + (f" ({ev.speedup:.3f}x {ev.pair_baseline} in pairs{', NOISY' if ev.noisy else ''})" if ev.speedup else "")
                + ", " + ", ".join(f"{n} {b['time_us']:.2f} us" for n, b in record["baselines"].items()
                                   if b.get("time_us") is not None))
        independent = evaluator.crosscheck(kernel)
    finally:
        evaluator.close()
    result = {
        "run_id": run_dir.name, "measured_at": time.time(), "rounds": rounds, "genome_hash": champ["genome_hash"],
        "device": first["device"], "shape": first.get("shape"), "flops": first.get("flops"),
        "io_bytes": first.get("io_bytes"), "roofline_us": first.get("roofline_us"), "primary": first["primary"],
        "cache": first.get("cache", "cold"), "evict": first.get("evict"),
        "champion": _median(champion_rounds),
        "baselines": {name: _median(rows) for name, rows in baselines.items()},
        # every device of the run: the champion and the primary baseline timed there (medians of the rounds)
        "devices": {slot: {k: statistics.median(r[k] for r in rows) for k in ("champion_us", "baseline_us")}
                    for slot, rows in per_device.items()},
    }
    for name, replies in paired.items():
        entry = result["baselines"].get(name)
        if entry is not None:
            ratios = [r["speedup"] for r in replies if r.get("speedup")]
            entry["speedup"] = statistics.median(ratios) if ratios else None
            entry["noisy"] = bool(entry.get("noisy")) or any(r.get("noisy") for r in replies)
    primary = result["baselines"].get(result["primary"])
    if primary is not None and result["champion"].get("speedup") is not None:
        primary["speedup"] = result["champion"]["speedup"]
    _add_independent(result, independent)
    atomic_write_json(run_dir / "bench.json", result)
    return result


def _add_independent(result: dict, reply: dict) -> None:
    """Put the second method's figures beside the protocol's: per kernel ``independent_us``,
    ``host_overhead_us``, ``cache``; for the champion its speed-up by each method and whether they
    disagree (:func:`core.evaluation.crosscheck.agreement`)."""
    from core.evaluation.crosscheck import agreement

    ok = reply.get("status") == "ok"
    times, host = (reply.get("times_us") or {}), (reply.get("host_overhead_us") or {})
    result["independent"] = {k: v for k, v in reply.items() if k not in ("times_us", "spread_us", "host_overhead_us")}
    for name, entry in [("kernel", result["champion"]), *result["baselines"].items()]:
        entry["cache"] = result["cache"]
        entry["independent_us"] = times.get(name) if ok else None
        entry["host_overhead_us"] = host.get(name) if ok else None
    champ, primary = result["champion"], result["baselines"].get(result["primary"], {})
    independent = (primary.get("independent_us") / champ["independent_us"]
                   if champ.get("independent_us") and primary.get("independent_us") else None)
    champ["independent_speedup"] = independent
    champ.update(agreement(champ.get("speedup"), independent))


def _median(rows: list[dict]) -> dict:
    out = {"time_us": statistics.median(r["time_us"] for r in rows), "rounds_us": [r["time_us"] for r in rows]}
    speedups = [r["speedup"] for r in rows if r.get("speedup") is not None]
    if speedups:
        out["speedup"], out["speedup_rounds"] = statistics.median(speedups), speedups
    # noisy: any round's pairs were, or the rounds disagree by more than 10% of their median
    out["noisy"] = any(bool(r.get("noisy")) for r in rows) or _rounds_disagree(out["rounds_us"])
    spreads = [r.get("spread_us") for r in rows if r.get("spread_us") is not None]
    out["spread_us"] = statistics.median(spreads) if spreads else None
    mems = [r.get("memory_bytes") for r in rows if r.get("memory_bytes") is not None]
    out["memory_bytes"] = max(mems) if mems else None
    for key in ("verified", "cause"):
        if key in rows[-1]:
            out[key] = rows[-1][key]
    return out


def _rounds_disagree(values: list[float], share: float = 0.10) -> bool:
    return len(values) > 1 and (max(values) - min(values)) > share * statistics.median(values)


def _num(value, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def format_table(result: dict) -> str:
    """A plain-text table: time, spread, speed-up of the champion over each, the second method's
    time, host overhead, memory; then the champion's paired speed-up and the warnings."""
    champ = result["champion"]["time_us"]
    rows = [("champion", result["champion"])] + sorted(result["baselines"].items(), key=lambda kv: kv[1]["time_us"])
    lines = [f"cache: {result.get('cache', 'cold')}" + (f" ({result['evict']})" if result.get("evict") else ""),
             f"{'kernel':30s} {'median us':>10s} {'spread us':>9s} {'speed-up':>9s} {'2nd method us':>13s} "
             f"{'host us':>8s} {'memory bytes':>13s}"]
    for name, r in rows:
        mark = " NOISY" if r.get("noisy") else ""
        ratio = 1.0 if name == "champion" else (r.get("speedup") or r["time_us"] / champ)
        lines.append(f"{name:30s} {r['time_us']:10.2f} {_num(r.get('spread_us')):>9s} {ratio:8.3f}x "
                     f"{_num(r.get('independent_us')):>13s} {_num(r.get('host_overhead_us'), '.1f'):>8s} "
                     f"{r.get('memory_bytes') or 0:13d}{mark}")
    if result.get("roofline_us"):
        lines.append(f"{'roofline':30s} {result['roofline_us']:10.2f}")
    c = result["champion"]
    if c.get("speedup") is not None:
        lines.append(f"champion vs {result['primary']}: {c['speedup']:.3f}x in interleaved pairs"
                     + (f", {c['independent_speedup']:.3f}x by the second method" if c.get("independent_speedup") else ""))
    lines.append("speed-up: the champion over each baseline, the median of interleaved (baseline, champion) pairs "
                 "timed beside it")
    if c.get("disagree"):
        lines.append(f"WARNING: the two methods disagree by {100 * abs(c['methods_ratio'] - 1):.1f}% (over 5%)")
    noisy = [name for name, r in rows if r.get("noisy")]
    if noisy:
        lines.append(f"WARNING: noisy (pairs or rounds spread over 10%): {', '.join(noisy)}; re-run on a quieter machine")
    if len(result.get("devices") or {}) > 1:
        for slot, d in result["devices"].items():
            lines.append(f"on {slot}: champion {d['champion_us']:.2f} us, {result['primary']} {d['baseline_us']:.2f} us "
                         f"({d['baseline_us'] / d['champion_us']:.3f}x)")
    return "\n".join(lines)
