"""Timing a callable the same way for kernels and baselines: inputs rotated, adaptive repetitions,
median and interquartile range."""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from core.backends.base import DeviceInfo, Runtime

TIMING_TARGET_S = 0.2  # wall time the timed repetitions of one candidate should take
MIN_REPS, MAX_REPS = 5, 200
TIMING_CHUNK = 25  # timed calls between wall-clock and confidence checks
CONFIDENCE = 0.01  # stop once the median's 95% confidence interval is within +-1% of it
MAX_CASES = {"cpu": 4, "gpu": 256}  # rotating more costs more than it tells (GPU: beyond the L2)


def timing_case_count(case_bytes: int, device: DeviceInfo, device_kind: str) -> int:
    """Cases to rotate so their bytes exceed the device's last-level cache (at least 2)."""
    cap = MAX_CASES.get(device_kind, 4)
    if device.memory_bytes:
        # A case holds its tensors, pristine copies and a float64 reference (up to ~6x its io bytes in
        # bf16), and the launch checks keep a few output copies: leave half the memory free.
        cap = max(2, min(cap, device.memory_bytes // max(1, 12 * case_bytes)))
    want = math.ceil(device.l2_bytes / max(1, case_bytes)) + 1 if device.l2_bytes else 2
    return int(min(cap, max(2, want)))


def graph_block(case_bytes: int, device: DeviceInfo, cases: int) -> int:
    """How many cases a graph timing prepares before a chain of launches on them (``replay_chain`` in
    the torch runtime; 1: one preparation before each launch): as many as fit in a quarter of the
    last-level cache, so each launch still finds its inputs there, and at most the cases in rotation."""
    if not device.l2_bytes:
        return 1
    return int(max(1, min(cases, device.l2_bytes // (4 * max(1, case_bytes)))))


def rotation(launch: Callable[[Any], None], cases: list) -> Callable[[int], None]:
    """``fn(i)`` launching on case ``i`` in rotation: the runtime's ``before(i)``/``after(i)`` prepare
    and check the same case, however the runtime numbers its calls."""
    return lambda i: launch(cases[i % len(cases)])


def adaptive_times(runtime: Runtime, fn: Callable[[int], None], target_s: float, reserve: int = 0,
                   before: Callable[[int], None] | None = None, after: Callable[[int], None] | None = None) -> list[float]:
    """Seconds per call of ``fn``: a pilot sets the repetitions to fill about ``target_s``.

    Taken in chunks, so a machine that turns busy mid-run (other processes preempting OpenMP
    threads) costs at most a few times the target instead of reps x the stalled time.
    """
    pilot = runtime.time(fn, reps=3, warmup=1, before=before, after=after)
    method = getattr(runtime, "last_timing", None)  # the pilot chose how to time; every chunk keeps it
    per_call = max(float(np.median(pilot)), 1e-9)
    reps = max(1, min(MAX_REPS, max(MIN_REPS, int(target_s / per_call))) - reserve)
    warmup = min(10, max(1, reps // 10))
    deadline = time.perf_counter() + 3 * target_s
    times: list[float] = []
    while len(times) < reps:
        times += runtime.time(fn, reps=min(TIMING_CHUNK, reps - len(times)), warmup=warmup, before=before, after=after,
                              method=method)
        warmup = 0
        if len(times) >= MIN_REPS and (time.perf_counter() > deadline or median_confident(times)):
            break
    runtime.forget()
    return times


def median_confident(times: list[float], within: float = CONFIDENCE) -> bool:
    """Whether the distribution-free 95% confidence interval of the median (order statistics at
    n/2 -+ 1.96 sqrt(n)/2) lies within ``within`` of the median."""
    n = len(times)
    if n < 2 * MIN_REPS:
        return False
    t = sorted(times)
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = max(0, int(math.floor(n / 2 - half))), min(n - 1, int(math.ceil(n / 2 + half)))
    mid = t[n // 2]
    return mid > 0 and (t[hi] - t[lo]) / 2 <= within * mid


def median_iqr_us(times: list[float]) -> tuple[float, float]:
    """(median, interquartile range) in microseconds of times in seconds."""
    t = np.asarray(times, dtype=np.float64) * 1e6
    q25, q50, q75 = np.percentile(t, [25, 50, 75])
    return float(q50), float(q75 - q25)
