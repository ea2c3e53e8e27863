"""Measurements a kernel engineer can trust: the baseline re-timed in every generation, elites re-timed.

A machine that other work shares does not run at one speed: numpy's GEMM measured anywhere from
184 µs to 17,993 µs on a busy box, and a kernel's best single showing is 0.75-0.79x its median.
So, in every generation:

* **the baseline is timed ``baseline_checks`` times, interleaved with the candidates**: once
  before them, once after, and (the default, 3) once between the halves -- the generation's
  candidates are split into ``baseline_checks - 1`` chunks with a baseline timing around each.
  The generation's baseline is the *median* of those timings of the primary (the baseline that
  verified in the most timings and is the fastest by median, re-chosen each generation; its name is
  kept). Three timings are the default because the median of three outvotes one burst of load (the
  median of two is their mean), for one more baseline timing per generation -- about as long as one
  candidate's timing, 0.05-0.5 s on the CPU.
* **noise**: the generation's baseline spread is the larger of the drift between the interleaved
  timings (max - min of the primary's medians) and the jitter within one timing (the median of
  their interquartile ranges); its relative spread is that over the baseline's median time. A
  generation whose relative spread exceeds :data:`NOISY_REL_SPREAD` (5 %) is flagged ``noisy``:
  its time ratios are not to be trusted to better than that.
* **elites are re-timed**: every elite carried into the generation is measured again (the same
  evaluator path, so it is re-verified too; a re-measurement is not a new evaluation). Each
  genome's times accumulate in ``time_samples_us``; its ``time_us`` -- what fitness, the Pareto
  ranking and the champion use -- is the median of them. An elite whose re-measurement fails (wrong
  result, crash, timeout...) is lethal from then on, with the cause prefixed "re-measurement:".
* **the run-level reference**: the time term is normalised by the median of every generation's
  baseline so far (this one's included), not by this generation's alone (:func:`with_reference`,
  the baseline record's ``reference``, the ``baseline_reference_us`` column). A baseline can be
  noisier than the kernels it judges -- on an H200, torch.compile RMSNorm + int4mm swung between 45
  and 104 µs from one generation to the next -- and fitness is compared across generations (the
  champion is the fittest kernel of the whole run): normalised by its own generation's baseline, a
  kernel first measured in a slow-baseline generation got twice the fitness for the same time, and
  a 24.0 µs kernel was reported champion over an 18.9 µs one. The median of the run's generation
  baselines outvotes such generations, and a kernel's time term moves only with its own time. The
  generation's own measurement (``time_us``, ``samples_us``, ``noisy``) is kept as measured: it is
  what the dashboard's noise view shows. With one generation the reference is that generation's.
  The price: a generation in which the whole machine slows down, library and kernels alike, is no
  longer cancelled in its own ratios (its new kernels look slower); the elites' medians absorb it
  as they are re-timed.
"""
from __future__ import annotations

import json
import statistics
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

NOISY_REL_SPREAD = 0.05  # a generation whose baseline moved or jittered by more than this is flagged noisy
_DROP = ("source", "compile_log")  # kept in the store's kernels table, not in memory for every re-timing


def time_samples(measure: Mapping) -> list[float]:
    """Every time (µs) measured for this genome so far in the run, oldest first.

    ``time_samples_us`` is a list, or its JSON text when the measure was read back from the store;
    a measure without it (a new evaluation, a run from before re-timing) has its one ``time_us``.
    """
    return _samples(measure, "time_samples_us", "time_us")


def speedup_samples(measure: Mapping) -> list[float]:
    """Every paired speed-up measured for this genome so far, oldest first (``speedup_samples``, as
    ``time_samples_us`` is kept; a measure without it has its one ``speedup``, or none)."""
    return _samples(measure, "speedup_samples", "speedup")


def _samples(measure: Mapping, samples_key: str, value_key: str) -> list[float]:
    raw = measure.get(samples_key)
    if isinstance(raw, str) and raw:
        raw = json.loads(raw)
    if isinstance(raw, (list, tuple)) and raw:
        return [float(t) for t in raw]
    value = measure.get(value_key)
    return [float(value)] if measure.get("status") == "ok" and value is not None and value == value else []


def first_measure(measure: Mapping) -> dict:
    """A new evaluation with its time and speed-up as the first samples."""
    return {**measure, "time_samples_us": time_samples(measure), "speedup_samples": speedup_samples(measure)}


def remeasured(previous: Mapping, fresh: Mapping) -> dict:
    """``previous`` (the genome's measure so far) after the re-measurement ``fresh``.

    Its times accumulate and ``time_us`` becomes their median; the other measurements (memory,
    stability, errors, the launch IQR ``time_spread_us``) are the fresh ones. A failed
    re-measurement makes the genome lethal.
    """
    samples, ratios = time_samples(previous), speedup_samples(previous)
    out = {k: v for k, v in fresh.items() if k not in _DROP}
    if fresh.get("status") == "ok" and fresh.get("time_us") is not None:
        samples = samples + [float(fresh["time_us"])]
        out["time_us"] = statistics.median(samples)
    elif fresh.get("status") != "ok":
        out["cause"] = f"re-measurement: {fresh.get('cause') or fresh.get('status')}"
    if fresh.get("status") == "ok" and fresh.get("speedup") is not None:
        ratios = ratios + [float(fresh["speedup"])]
        out["speedup"] = statistics.median(ratios)
        out["speedup_spread"] = iqr(ratios) if len(ratios) > 1 else fresh.get("speedup_spread")
        out["noisy"] = bool(fresh.get("noisy")) or _spread_noisy(ratios)
    out["time_samples_us"] = samples
    out["speedup_samples"] = ratios
    return out


def _spread_noisy(values: Sequence[float]) -> bool:
    """Re-measurements whose interquartile range exceeds NOISY_PAIR_SPREAD of their median."""
    from core.evaluation.timing import NOISY_PAIR_SPREAD

    return len(values) > 1 and iqr(values) > NOISY_PAIR_SPREAD * statistics.median(values)


def iqr(values: Sequence[float]) -> float:
    """Interquartile range (linear interpolation, as the timing protocol's)."""
    if len(values) < 2:
        return 0.0
    q25, q75 = np.percentile(np.asarray(values, dtype=float), [25, 75])
    return float(q75 - q25)


def champion_figures(measure: Mapping) -> dict:
    """The champion's median time, its spread and how many timings it rests on.

    The spread is the interquartile range of its re-measurements; with one measurement only, the
    interquartile range of that measurement's launches (``time_spread_us``).
    """
    samples, ratios = time_samples(measure), speedup_samples(measure)
    if not samples:
        return {"champion_time_us": None, "champion_spread_us": None, "champion_samples": 0,
                "champion_speedup": None, "champion_speedup_spread": None, "champion_noisy": None}
    spread = iqr(samples) if len(samples) > 1 else measure.get("time_spread_us")
    speedup = statistics.median(ratios) if ratios else None
    ratio_spread = (iqr(ratios) if len(ratios) > 1 else measure.get("speedup_spread")) if ratios else None
    noisy = (bool(measure.get("noisy")) or _spread_noisy(ratios)) if ratios else None
    return {"champion_time_us": statistics.median(samples), "champion_spread_us": spread,
            "champion_samples": len(samples), "champion_speedup": speedup, "champion_speedup_spread": ratio_spread,
            "champion_noisy": noisy}


# -- the generation's baseline -----------------------------------------------------------------------
def _timed(record: Mapping) -> dict[str, Mapping]:
    """Baseline name -> its entry, for the baselines of one record that verified and were timed."""
    entries = record.get("baselines")
    if not isinstance(entries, Mapping) or not entries:  # a record without the per-baseline detail
        entries = {record.get("primary", "baseline"): {**record, "verified": True}}
    return {name: e for name, e in entries.items()
            if e.get("time_us") is not None and e.get("verified", True)}


def combine(records: Sequence[Mapping]) -> dict:
    """One generation's baseline record from its interleaved timings (see the module docstring).

    The record has the evaluator's keys (``primary``, ``time_us``, ``spread_us``, ``memory_bytes``,
    ``baselines``, ``device``...) with ``time_us`` the median of the primary's timings, plus
    ``samples_us`` (those timings, in order), ``rel_spread`` and ``noisy``.
    """
    if not records:
        raise ValueError("no baseline timing to combine")
    timed = [_timed(r) for r in records]
    names = {name for t in timed for name in t}
    if not names:
        raise RuntimeError("no baseline verified in this generation's timings")
    times = {name: [t[name]["time_us"] for t in timed if name in t] for name in names}
    most = max(len(v) for v in times.values())
    primary = min((n for n in names if len(times[n]) == most), key=lambda n: (statistics.median(times[n]), n))
    samples = [float(t) for t in times[primary]]
    median = statistics.median(samples)
    jitters = [float(t[primary]["spread_us"]) for t in timed if primary in t and t[primary].get("spread_us") is not None]
    jitter = statistics.median(jitters) if jitters else 0.0
    spread = max(max(samples) - min(samples), jitter)
    rel = spread / median if median > 0 else float("inf")
    last = next(t[primary] for t in reversed(timed) if primary in t)
    baselines = {}
    for name in sorted(names):
        entry = next(t[name] for t in reversed(timed) if name in t)
        baselines[name] = {**entry, "time_us": statistics.median(times[name]), "samples_us": times[name]}
    slots: dict[str, list[float]] = {}
    for r in records:
        for slot, v in (r.get("slots") or {}).items():
            if v.get("time_us") is not None:
                slots.setdefault(slot, []).append(float(v["time_us"]))
    per_slot = {s: {"time_us": statistics.median(v), "samples_us": v} for s, v in slots.items()}
    return {**records[-1], "slots": per_slot or records[-1].get("slots"), "primary": primary, "time_us": median,
            "spread_us": spread,
            "memory_bytes": last.get("memory_bytes", records[-1].get("memory_bytes")), "baselines": baselines,
            "samples_us": samples, "rel_spread": rel, "noisy": bool(rel > NOISY_REL_SPREAD)}


def with_reference(baseline: Mapping, history: Sequence[float]) -> dict:
    """``baseline`` plus ``reference``: ``{"time_us": median of history, "generations": len(history)}``.

    ``history`` is the primary's median time of every generation of the run so far, this one's
    included (see the module docstring); the time term divides by the reference's ``time_us``
    (:meth:`core.objectives.Objective.term`). The rest of ``baseline`` is left as measured. An empty
    history gives ``baseline`` unchanged (without a reference the term uses the generation's own).
    """
    out = dict(baseline)
    if history:
        out["reference"] = {"time_us": float(statistics.median(history)), "generations": len(history)}
    return out


def reference_of(baseline: Mapping) -> Mapping | None:
    """The baseline record's run-level reference, or None (a record from before references)."""
    ref = baseline.get("reference")
    return ref if isinstance(ref, Mapping) and ref.get("time_us") is not None else None


def baseline_summary(baseline: Mapping) -> dict:
    """The generation's baseline as ``generations`` columns."""
    samples = baseline.get("samples_us")
    slots = baseline.get("slots")
    ref = reference_of(baseline)
    return {"baseline_primary": baseline.get("primary"), "baseline_time_us": baseline.get("time_us"),
            "baseline_spread_us": baseline.get("spread_us"), "baseline_rel_spread": baseline.get("rel_spread"),
            "baseline_samples_us": json.dumps(list(samples)) if samples is not None else None,
            "noisy": baseline.get("noisy"),
            "baseline_devices": json.dumps({s: v.get("time_us") for s, v in slots.items()}) if slots else None,
            "baseline_reference_us": ref["time_us"] if ref else None}


def describe(baseline: Mapping) -> str:
    """``numpy 183.20us ±2.1% (3 timings)`` (plus ``NOISY`` when flagged) for the log, then the run-level
    reference when there is one: ``reference 61.20us (median of 12 generations)``."""
    rel = baseline.get("rel_spread")
    text = f"{baseline.get('primary')} {float(baseline['time_us']):.2f}us"
    if rel is not None:
        text += f" ±{100 * rel:.1f}% ({len(baseline.get('samples_us') or [])} timings)"
    text += " NOISY" if baseline.get("noisy") else ""
    ref = reference_of(baseline)
    if ref:
        n = ref.get("generations")
        text += f" reference {float(ref['time_us']):.2f}us (median of {n} generation{'' if n == 1 else 's'})"
    return text


# -- one generation's measurements, interleaved -------------------------------------------------------
def measure_generation(fresh: Sequence[Any], retime: Sequence[Any], evaluate: Callable[[list], list[dict]],
                       retimer: Callable[[list], list[dict]] | None, remeasure: Callable[[], Mapping] | None,
                       checks: int, log: Callable[[str], None] | None = None,
                       compile_ahead: Callable[[list], None] | None = None
                       ) -> tuple[list[dict], list[dict], dict | None]:
    """Evaluate ``fresh`` genomes and re-measure ``retime`` ones between baseline timings.

    Returns (the fresh measures, the re-measurements, the generation's baseline record or None
    when ``remeasure`` is None). The genomes are split into ``checks - 1`` chunks, the fresh ones in
    order and the re-timed ones dealt round-robin, with a baseline timing before each chunk and after
    the last. A baseline timing that fails is logged and skipped; RuntimeError when all fail.
    ``compile_ahead`` (the evaluator's) starts compiling every fresh genome first, so that neither
    the baseline timings nor a chunk's start wait on a compiler: the devices measure from the first
    moment of each chunk. (A chunk's first compile is a fixed cost per chunk; with two devices
    sharing the chunk it is twice the share of the chunk's time.)
    """
    if compile_ahead is not None and fresh:
        compile_ahead(list(fresh))
    n_chunks = max(1, checks - 1) if remeasure else 1
    retime = list(retime) if retimer else []
    size = -(-len(fresh) // n_chunks) if fresh else 0
    chunks = [(list(fresh[i * size:(i + 1) * size]), retime[i::n_chunks]) for i in range(n_chunks)]
    records: list[Mapping] = []

    def check() -> None:
        if remeasure is None:
            return
        try:
            records.append(remeasure())
        except RuntimeError as exc:
            if log:
                log(f"baseline timing failed, skipped: {exc}")

    new: list[dict] = []
    again: list[dict] = []
    check()
    for part, old in chunks:
        if part:
            new += evaluate(part)
        if old:
            again += retimer(old)  # type: ignore[misc]
        check()
    if remeasure is None:
        return new, again, None
    if not records:
        raise RuntimeError("every baseline timing of this generation failed")
    return new, again, combine(records)


def unique(genomes: Iterable[Any]) -> list:
    """Distinct genomes by hash, first occurrence kept."""
    return list({g.hash: g for g in genomes}.values())
