"""Timing a callable the same way for kernels and baselines: inputs rotated, adaptive repetitions,
median and interquartile range; and a kernel timed in interleaved pairs with its baseline
(:func:`paired_times`), so that load which comes and goes cancels in their ratio."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
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
    wall = time.perf_counter()
    pilot = runtime.time(fn, reps=3, warmup=1, before=before, after=after)
    method = getattr(runtime, "last_timing", None)  # the pilot chose how to time; every chunk keeps it
    # What one timed call costs in wall time, its preparation and cache eviction included: the
    # repetitions fill ``target_s`` of the machine's time, not of the kernel's alone.
    per_call = max(float(np.median(pilot)), (time.perf_counter() - wall) / 4, 1e-9)
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


# -- a kernel and its baseline, in interleaved pairs ------------------------------------------------
PAIRS = 8  # (baseline, kernel) pairs of chunks in one paired measurement, at least (8 x 25 = the 200
# checked launches a kernel got when it was timed alone: the launch checks need that many to catch a memo)
NOISY_PAIR_SPREAD = 0.10  # pair ratios whose IQR exceeds this share of their median: the figure is noisy


@dataclass
class Side:
    """One side of a paired measurement: ``fn(i)`` with its ``before(i)``/``after(i)``."""

    fn: Callable[[int], None]
    before: Callable[[int], None] | None = None
    after: Callable[[int], None] | None = None


@dataclass
class Paired:
    """A paired measurement: every sample of both sides (seconds) and each pair's ratio (baseline
    chunk median / kernel chunk median; > 1 means the kernel is faster)."""

    kernel: list[float]
    baseline: list[float]
    ratios: list[float]
    method: str
    statistic: str = "median"
    kernel_chunks: list[float] = field(default_factory=list)  # each kernel chunk's statistic (seconds)

    @property
    def speedup(self) -> float:
        return float(statistics.median(self.ratios))

    @property
    def spread(self) -> float:
        """Interquartile range of the pair ratios."""
        q25, q75 = np.percentile(np.asarray(self.ratios, dtype=np.float64), [25, 75])
        return float(q75 - q25)

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_PAIR_SPREAD * self.speedup


def paired_times(runtime: Runtime, kernel: Side, baseline: Side, target_s: float, pairs: int = PAIRS) -> Paired:
    """Time ``kernel`` and ``baseline`` in interleaved chunks -- (baseline, kernel), (baseline, kernel)
    ... -- at least ``pairs`` pairs and about ``target_s`` of wall time in all, the kernel's chunk
    always last (the outputs left behind are the kernel's, which its checks read).

    Both sides are timed the same way: one method (events or graphs) for both, chosen from the
    kernel's pilot, and the same preparation and cache eviction, which the caller puts in each
    side's ``before``. Each pair's ratio is taken between chunks measured seconds apart at most, so
    a load that comes and goes moves both and cancels; the median of the ratios is the figure."""
    wall = time.perf_counter()
    pilot_k = runtime.time(kernel.fn, reps=3, warmup=1, before=kernel.before, after=kernel.after)
    method = getattr(runtime, "last_timing", None)
    pilot_b = runtime.time(baseline.fn, reps=3, warmup=1, before=baseline.before, after=baseline.after,
                           method=method)
    if getattr(runtime, "last_timing", method) != method:  # the baseline would not capture: events for both
        method = "events"
    per_pair = max((time.perf_counter() - wall) / 4, float(np.median(pilot_k)) + float(np.median(pilot_b)), 1e-9)
    reps = max(MIN_REPS, min(TIMING_CHUNK, int(target_s / (pairs * per_pair))))
    deadline = wall + 3 * target_s
    # The statistic of each chunk: on a GPU the median (device timers; a graph sample is a difference
    # and can err both ways); on a CPU the fastest call, because there the noise only ever adds --
    # a call preempted by another process, or an OpenBLAS thread waiting on a descheduled sibling
    # (numpy's GEMM went from 250 us to 15.8 ms beside two busy loops, our OpenMP kernel from 244
    # to 256-467 us: the medians' ratio moved 60x, the fastest calls' did not).
    statistic = getattr(runtime, "chunk_statistic", "median")
    pick = min if statistic == "min" else (lambda values: float(np.median(values)))
    out = Paired([], [], [], method or "wall", statistic)
    # A noisy measurement gets more pairs (up to 4x), while the wall-clock budget lasts.
    while len(out.ratios) < pairs or (out.noisy and len(out.ratios) < 4 * pairs and time.perf_counter() < deadline):
        b = runtime.time(baseline.fn, reps=reps, warmup=0, before=baseline.before, after=baseline.after, method=method)
        k = runtime.time(kernel.fn, reps=reps, warmup=0, before=kernel.before, after=kernel.after, method=method)
        out.baseline += b
        out.kernel += k
        out.kernel_chunks.append(pick(k))
        out.ratios.append(pick(b) / max(out.kernel_chunks[-1], 1e-12))
    out.method = getattr(runtime, "last_timing", None) or out.method
    runtime.forget()
    return out
