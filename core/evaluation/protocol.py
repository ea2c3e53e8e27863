"""The evaluation protocol, run inside the sandboxed evaluator process on one candidate at a time:
load -> verify on every shape with fresh random inputs -> time, with every timed launch poisoned,
fed freshly permuted inputs and checked (:mod:`core.evaluation.checks`), in interleaved pairs with
the primary baseline (:func:`core.evaluation.timing.paired_times`), every launch of either side
finding the caches as the problem's cache policy says (``cold`` by default: nothing a preparation
wrote is left in them, :meth:`core.backends.base.Runtime.evict`) -> the physical floor
(:mod:`core.evaluation.rooflines`) -> stability (repeated launches, bit-compared on the device)
-> memory. A template that repacks the weights does so once per case, before the case's first
launch; its time is reported apart (``repack_us``) and its bytes count as memory.

Also times the library baselines the same way, on the same cases. Every status but ``ok`` is
lethal; ``cause`` says why in one line.
"""
from __future__ import annotations

import os
import random
import statistics
import time
import traceback
from dataclasses import asdict
from typing import Any, Callable

from core.backends.base import Artifact, CompileError
from core.evaluation.checks import LaunchChecks
from core.evaluation.harness import Harness, case_arrays
from core.evaluation.primary import choose_primary
from core.evaluation.priority import raise_priority
from core.evaluation.record import one_line
from core.evaluation.rooflines import ALLOWANCE, Peaks, measure_peaks, suspect_floor_us
from core.evaluation.timing import (TIMING_TARGET_S, Side, adaptive_times, graph_block, median_iqr_us, paired_times,
                                    rotation, timing_case_count)
from core.workloads.spec import cache_policy


SUSPECT_REMEASURES = 3  # peak measurements before a candidate faster than the floor is called suspect


class Failure(Exception):
    """A candidate's verdict reached mid-protocol (status and cause)."""

    def __init__(self, status: str, cause: str):
        super().__init__(cause)
        self.status, self.cause = status, cause


class Protocol:
    """The sandbox server: built once per evaluator process, answers ``baseline`` and ``evaluate``.

    ``spec`` keys: backend, device, workload, problem, stability_launches, timing_target_s.
    """

    def __init__(self, spec: dict):
        from core.backends import make_backend
        from core.workloads import get_workload

        from core.evaluation.devices import slot_device

        self.backend = make_backend(spec["backend"], spec.get("device", 0))
        self.device = slot_device(self.backend.device, int(spec.get("set_size") or 0))
        self.slot = spec.get("slot") or self.device.label()
        self.runtime = self.backend.make_runtime()
        self.workload = get_workload(spec["workload"])
        self.problem = dict(spec["problem"])
        self.cache = cache_policy(self.problem)
        self.template = self.workload.template(spec["backend"], self.problem, self.device)
        self.harness = Harness(self.workload, self.template, self.runtime, self.problem)
        self.arrays = self.runtime.arrays
        self.shapes = self.workload.shapes(self.problem)
        self.main = self.shapes[0]
        self.stability_launches = int(spec.get("stability_launches", 20))
        self.timing_target_s = float(spec.get("timing_target_s", TIMING_TARGET_S))
        self.io_bytes = int(self.workload.io_bytes(self.main, self.problem))
        self.timing_cases = timing_case_count(self.io_bytes, self.device, self.backend.device_kind)
        self.runtime.graph_block = graph_block(self.io_bytes, self.device, self.timing_cases)
        if not self.runtime.can_evict:  # (the Triton interpreter): the caches stay as the preparation leaves them
            self.cache = "hot"
        self.runtime.cache = self.cache
        self._pair: tuple[str, Callable, list] | None = None  # the primary baseline, its fn and timing cases
        self.priority = raise_priority()
        self._cases: tuple[dict, list] | None = None  # every baseline's fn, and the cases they were timed on
        self.peaks: Peaks | None = None
        self.roofline_us: float | None = None  # at the measured peaks
        self.floor_us: float | None = None  # below this a candidate is suspect
        self.launch_us: float | None = None  # an empty kernel's launch, timed as candidates are (GPU)
        self._floor_cap = float("inf")  # the fastest verified baseline / ALLOWANCE

    def _measure_floor(self) -> None:
        """Measure the device's peaks (and where the runtime has one, an empty launch) and set the
        main shape's roofline and floor."""
        dtype = self.problem.get("dtype", "float32")
        self.peaks = measure_peaks(self.runtime, dtype, self.backend.device_kind,
                                   self.timing_cases * self.io_bytes).best(self.peaks)
        seconds = self.peaks.roofline_s(self.workload.min_bytes(self.main, self.problem),
                                        self.workload.flops(self.main, self.problem))
        self.roofline_us = seconds * 1e6
        try:
            empty = self.runtime.empty_launch()
            if empty is not None:  # a busy moment over-measures a launch: the fastest measurement holds
                launch_s = statistics.median(adaptive_times(self.runtime, empty, self.timing_target_s / 4))
                self.launch_us = min(self.launch_us or float("inf"), launch_s * 1e6)
        except Exception:  # the roofline alone still bounds the floor, as it did before launches were timed
            traceback.print_exc()
        self.floor_us = suspect_floor_us(self.roofline_us, self.launch_us, self._floor_cap)

    def info(self) -> dict:
        return {"device": asdict(self.device), "pid": os.getpid()}

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "evaluate":
            return self.evaluate(request["artifact"], int(request.get("seed", 0)))
        if op == "pair":
            return self.pair(request["artifact"], int(request.get("seed", 0)), str(request.get("baseline")))
        if op == "baseline":
            return self.baseline(int(request.get("seed", 0)), request.get("names"))
        if op == "crosscheck":
            from core.evaluation.crosscheck import crosscheck

            try:
                return crosscheck(self, request["artifact"], int(request.get("seed", 0)), request.get("names"))
            except Exception as exc:
                traceback.print_exc()
                return {"status": "crashed", "cause": one_line(f"crosscheck: {type(exc).__name__}: {exc}"),
                        "restart": self.backend.sticky_errors}
        if op == "ping":
            return {"status": "ok"}
        return {"status": "crashed", "cause": f"unknown sandbox op {op!r}"}

    # -- one candidate ---------------------------------------------------------------------------
    def evaluate(self, artifact: Artifact, seed: int) -> dict:
        """Run the whole protocol on one artifact; the reply carries status, cause and measurements."""
        rng = random.Random(seed)
        result: dict[str, Any] = {"status": "ok", "cause": "", "max_abs_err": 0.0, "rel_err": 0.0}
        seconds: dict[str, float] = {}
        kernel = case = None  # set by the load and stability stages; the later lambdas read them
        self.harness.repacks.clear()
        stages: list[tuple[str, Callable[[], Any]]] = [
            ("load", lambda: self.runtime.load(artifact)),
            ("verification", lambda: self._verify(kernel, rng, result)),
            ("timing", lambda: self._benchmark(kernel, rng, result)),
            ("stability", lambda: self._stability(kernel, rng, result)),
            ("memory", lambda: self._memory(kernel, artifact, case, result)),
        ]
        stage = "load"
        try:
            for stage, run in stages:
                t0 = time.perf_counter()
                value = run()
                seconds[stage] = time.perf_counter() - t0
                kernel = value if stage == "load" else kernel
                case = value if stage == "stability" else case
        except Failure as f:
            result.update(status=f.status, cause=f.cause)
        except CompileError as exc:  # a JIT backend (Triton) compiles at first launch: not a device fault
            result.update(status="compile_error", cause=one_line(f"{stage}: {exc}"))
        except Exception as exc:
            traceback.print_exc()
            status = "unstable" if stage == "stability" else "crashed"
            result.update(status=status, cause=one_line(f"{stage}: {type(exc).__name__}: {exc}"),
                          restart=self.backend.sticky_errors)
        self._repack_times(result, seconds)
        result["stages_s"] = seconds
        print(f"[sandbox] {artifact.source_hash[:12]} {result['status']} "
              + " ".join(f"{k}={v:.3f}s" for k, v in seconds.items()), flush=True)
        return result

    def pair(self, artifact: Artifact, seed: int, baseline: str) -> dict:
        """Time a kernel already verified in interleaved pairs with the baseline named ``baseline``
        (any of the last baseline timing's, not only the primary), every timed launch checked: what
        ``core bench`` asks for each baseline, so every ratio it reports is a paired one."""
        if self._cases is None or baseline not in self._cases[0]:
            return {"status": "crashed", "cause": f"no baseline {baseline!r} timed in this sandbox"}
        result: dict[str, Any] = {"status": "ok", "cause": "", "max_abs_err": 0.0, "rel_err": 0.0}
        fns, cases = self._cases
        kept = self._pair
        self._pair = (baseline, fns[baseline], cases)
        try:
            self._benchmark(self.runtime.load(artifact), random.Random(seed), result)
        except Failure as f:
            result.update(status=f.status, cause=f.cause)
        finally:
            self._pair = kept
        return result

    def _memory(self, kernel: Any, artifact: Artifact, case: Any, result: dict) -> None:
        """Inputs and outputs plus the larger of the declared workspace and what one launch was seen
        to allocate, plus the weights the template repacked for the kernel. Registers and shared
        memory are on-chip limits, reported apart, not bytes."""
        declared = int(self.harness.extra_memory_bytes(kernel, artifact, case))
        seen = int(self.arrays.peak_extra_bytes(lambda: self.harness.launch(kernel, case)))
        # The repacked weights live beside the canonical ones, made before the launch seen here.
        extra = max(declared, seen) + int(self.harness.packed_bytes(kernel, case))
        onchip = int(self.harness.onchip_bytes(artifact, kernel))
        result.update(extra_bytes=extra, onchip_bytes=onchip, memory_bytes=self.io_bytes + extra)

    def _repack_times(self, result: dict, seconds: dict) -> None:
        """The template's one-time repack, apart from the launches: ``repack_us``, the median over the
        main shape's cases, and the ``repack`` phase, every repack's seconds (within the other phases)."""
        if not self.harness.repacks:
            return
        main = [s for shape, s in self.harness.repacks if shape == self.main]
        if main:
            result["repack_us"] = statistics.median(main) * 1e6
        seconds["repack"] = sum(s for _, s in self.harness.repacks)

    def _verify(self, kernel: Any, rng: random.Random, result: dict) -> None:
        """Every shape once, the main shape twice, each on fresh inputs, then the main shape again in
        the same buffers with new inputs (a kernel answering by address, from memory, fails there:
        no timing rotation need ever bring an address back); first failure is the verdict. The worst
        error on each shape goes into ``result["shape_errors"]``."""
        result["shape_errors"] = errors = []
        for i, shape in enumerate(self.shapes):
            entry = {"shape": dict(shape), "max_abs_err": 0.0, "rel_err": 0.0, "margin_used": 0.0}
            errors.append(entry)
            for _ in range(2 if i == 0 else 1):
                case = self.harness.make_case(shape, rng.getrandbits(31))
                self.harness.launch(kernel, case)
                self.runtime.synchronize()
                self._check(case, result, "wrong_result", f"on {_fmt(shape)}", entry)
            if i == 0:
                again = self.harness.refill(case, rng.getrandbits(31))
                self.harness.launch(kernel, again)
                self.runtime.synchronize()
                self._check(again, result, "wrong_result", f"on {_fmt(shape)}, new inputs in the same buffers", entry)
        result["margin_used"] = max(e["margin_used"] for e in errors)

    def _check(self, case: Any, result: dict, status: str, where: str, entry: dict | None = None) -> None:
        chk = self.harness.check(case)
        result["max_abs_err"] = max(result["max_abs_err"], float(chk.max_abs_err))
        result["rel_err"] = max(result["rel_err"], float(chk.rel_err))
        if entry is not None:  # the shape's own errors, recorded before a failure is raised
            for key in ("max_abs_err", "rel_err", "margin_used"):
                entry[key] = max(entry[key], float(getattr(chk, key)))
        if not chk.ok:
            detail = f": {chk.detail}" if chk.detail else ""
            raise Failure(status, one_line(f"{chk.cause or 'wrong_result'} {where}{detail}"))
        return chk

    def _benchmark(self, kernel: Any, rng: random.Random, result: dict) -> None:
        """Time with every launch checked, in pairs with the primary baseline once one is known;
        then the floor: faster than physics is ``suspect``."""
        cases = self._timing_cases(rng)
        for c in cases:  # repack and bind now: neither belongs in a timed launch
            self.harness.prepare(kernel, c)
        checks = LaunchChecks(self.harness, cases, rng.getrandbits(31))
        side = self._side(lambda c: self.harness.launch(kernel, c), cases, checks)
        result["cache"] = self.cache
        if self._pair is None:  # no baseline timed in this sandbox yet: the kernel alone
            times = adaptive_times(self.runtime, side.fn, self.timing_target_s, before=side.before, after=side.after)
            result["timing_method"] = getattr(self.runtime, "last_timing", "")
            chunks: list[float] = []
        else:
            name, fn, bcases = self._pair
            paired = paired_times(self.runtime, side,
                                  self._side(fn, bcases, LaunchChecks(self.harness, bcases, rng.getrandbits(31), check=False)),
                                  self.timing_target_s)
            times, chunks = paired.kernel, paired.kernel_chunks
            result.update(speedup=paired.speedup, speedup_spread=paired.spread, noisy=paired.noisy,
                          pair_baseline=name, pair_baseline_us=statistics.median(paired.baseline) * 1e6,
                          timing_method=paired.method)
        self.runtime.synchronize()
        # Paired: the time and its spread are those of the chunks' statistic, the one the speed-up rests
        # on (on a CPU each chunk's fastest call: a call right after numpy's chunk can find OpenBLAS's
        # threads still spinning on both cores, seen as a 10x IQR on an idle 2-core VM).
        result["time_us"], result["time_spread_us"] = median_iqr_us(chunks or times)
        # The floor judges the fastest evidence the speed-up rests on: a chunk's statistic (on a CPU its
        # fastest call) below physics is a launch that skipped work, however slow the others were.
        fastest_us = min([result["time_us"]] + [t * 1e6 for t in chunks])
        verdict = checks.verify()
        if not verdict.ok:
            raise Failure("wrong_result", one_line(f"{verdict.cause} in timed launches: {verdict.detail}"))
        if self.floor_us is None:
            self._measure_floor()
        for _ in range(SUSPECT_REMEASURES):  # a busy moment may have under-measured the peaks
            if fastest_us >= self.floor_us:
                break
            time.sleep(0.05)
            self._measure_floor()
        if fastest_us < self.floor_us:
            launch = f", an empty launch {self.launch_us:.2f} us" if self.launch_us else ""
            raise Failure("suspect", f"{fastest_us:.2f} us is faster than the physical floor {self.floor_us:.2f} us "
                                     f"(roofline {self.roofline_us:.2f} us at the measured peaks / {ALLOWANCE}{launch}): "
                                     "the kernel skips work or the timing does not measure it")

    def _stability(self, kernel: Any, rng: random.Random, result: dict) -> Any:
        """Repeated launches on one fresh case, each re-poisoned: the share bit-identical to the first
        (compared on the device; a launch that differs is checked in full, and one out of tolerance
        makes the kernel ``unstable``). Stability is the mean of that determinism, the steadiness of
        the timing (1 - IQR / median) and the tolerance left unused on the worst element."""
        case = self.harness.make_case(self.main, rng.getrandbits(31))
        n, same, first = self.stability_launches, 0, None
        for j in range(n):
            self.harness.reset_outputs(case)
            self.harness.launch(kernel, case)
            self.runtime.synchronize()
            if first is None:
                self._check(case, result, "unstable", f"in stability launch 1/{n}")
                first = {t.name: self.arrays.clone(case.data[t.name]) for t in self.harness.written}
                same += 1
                continue
            if all(self.arrays.same_bits(case.data[name], ref) for name, ref in first.items()):
                same += 1
            else:
                self._check(case, result, "unstable", f"in stability launch {j + 1}/{n}")
        steady = max(0.0, 1.0 - result["time_spread_us"] / result["time_us"]) if result.get("time_us") else 0.0
        margin = max(0.0, 1.0 - result.get("margin_used", 0.0))
        result["determinism"], result["steadiness"], result["error_margin"] = same / n, steady, margin
        result["stability"] = (same / n + steady + margin) / 3
        return case

    # -- timing ----------------------------------------------------------------------------------
    def _timing_cases(self, rng: random.Random) -> list:
        return [self.harness.make_case(self.main, rng.getrandbits(31)) for _ in range(self.timing_cases)]

    def _side(self, launch: Callable[[Any], None], cases: list, checks: LaunchChecks) -> Side:
        """``launch`` rotating through ``cases``, with ``checks`` around every launch and, under the
        ``cold`` policy, the caches emptied after each preparation: the one way kernels and
        baselines alike are timed."""
        if self.cache != "cold":
            return Side(rotation(launch, cases), checks.before, checks.after)

        def prepare(i: int) -> None:
            checks.before(i)
            self.runtime.evict(case_arrays(cases[i % len(cases)]))
        return Side(rotation(launch, cases), prepare, checks.after)

    def _time(self, launch: Callable[[Any], None], cases: list, checks: LaunchChecks) -> list[float]:
        """Seconds per launch of ``launch`` alone (:meth:`_side`); reps adapt to ~``timing_target_s``."""
        side = self._side(launch, cases, checks)
        times = adaptive_times(self.runtime, side.fn, self.timing_target_s, before=side.before, after=side.after)
        self.runtime.synchronize()
        return times

    # -- baselines -------------------------------------------------------------------------------
    def baseline(self, seed: int, names: list | None = None) -> dict:
        """Time (and verify) every library baseline (or those in ``names``) on the main shape, as the
        kernels are timed. The primary, which normalises fitness, is the fastest that verified, in pairs
        (:mod:`core.evaluation.primary`)."""
        rng = random.Random(seed)
        self.priority = raise_priority()  # threads a baseline's library started since are reniced too
        if self.peaks is None:  # measured once per sandbox; again only when a candidate beats the floor
            self._measure_floor()
        cases = self._timing_cases(rng)
        entries: dict[str, dict] = {}
        fns = self.harness.baselines()
        for name, fn in fns.items():
            if names is None or name in names:
                entries[name] = self._one_baseline(name, fn, cases, rng)
        timed = {n: e for n, e in entries.items() if e.get("time_us") is not None and e.get("verified")}
        if not timed:
            causes = "; ".join(f"{n}: {e.get('cause')}" for n, e in entries.items()) or "the workload has no baselines here"
            return {"status": "crashed", "cause": f"no baseline verified: {causes}"}
        primary, paired = choose_primary(self.runtime, {n: e["time_us"] for n, e in timed.items()}, lambda n: self._side(
            fns[n], cases, LaunchChecks(self.harness, cases, rng.getrandbits(31), check=False)), self.timing_target_s)
        for n, (us, spread) in paired.items():  # timed as the candidates are: these are the figures
            entries[n].update(single_us=entries[n]["time_us"], time_us=us, spread_us=spread)
        p = entries[primary]
        self._pair = (primary, fns[primary], cases)  # what the next candidates are timed beside
        self._cases = ({n: fns[n] for n in timed}, cases)
        # A verified library path is physical: a floor above it means the peaks were under-measured.
        self._floor_cap = min(self._floor_cap, p["time_us"] / ALLOWANCE)
        self.floor_us = min(self.floor_us, self._floor_cap)
        return {"status": "ok", "device": asdict(self.device), "slot": self.slot, "primary": primary, "time_us": p["time_us"],
                "spread_us": p["spread_us"], "memory_bytes": p["memory_bytes"], "baselines": entries,
                "roofline_us": self.roofline_us, "floor_us": self.floor_us, "launch_us": self.launch_us,
                "peaks": self.peaks.as_dict(),
                "io_bytes": self.io_bytes,
                "flops": float(self.workload.flops(self.main, self.problem)), "shape": dict(self.main),
                "cache": self.cache, "evict": self._evict_method(), "priority": self.priority,
                "timing": "median of adaptive repetitions, spread = interquartile range; before every timed launch "
                          "the outputs are poisoned and the inputs rewritten with a fresh row permutation"
                          + ("; then the caches are emptied (cache=cold)" if self.cache == "cold" else " (cache=hot)")
                          + "; primary = the fastest baseline that verified, in pairs; each candidate is timed in "
                            "interleaved pairs with the primary"}

    def _evict_method(self) -> str:
        return self.runtime.evict_method() if self.cache == "cold" else ""

    def _one_baseline(self, name: str, fn: Callable, cases: list, rng: random.Random) -> dict:
        entry: dict[str, Any] = {"time_us": None, "spread_us": None, "verified": False, "cause": ""}
        try:
            case = self.harness.make_case(self.main, rng.getrandbits(31))
            result = fn(case)
            self.runtime.synchronize()
            self.harness.accept_baseline_result(case, result)
            chk = self.harness.check(case)
            entry.update(verified=bool(chk.ok), max_abs_err=float(chk.max_abs_err), rel_err=float(chk.rel_err),
                         cause="" if chk.ok else one_line(f"{chk.cause} {chk.detail}"))
            entry["memory_bytes"] = self.io_bytes + int(self.harness.baseline_memory_bytes(name, case))
            checks = LaunchChecks(self.harness, cases, rng.getrandbits(31), check=False)
            entry["time_us"], entry["spread_us"] = median_iqr_us(self._time(fn, cases, checks))
        except Exception as exc:
            traceback.print_exc()
            entry["cause"] = one_line(f"{type(exc).__name__}: {exc}")
        return entry


def _fmt(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())
