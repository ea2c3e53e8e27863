"""The evaluation protocol, run by the judge -- the sandboxed evaluator process, which never loads a
kernel (:mod:`core.evaluation.judge`: a launcher process loads and launches it on the judge's shared
cases) -- on one candidate at a time:
load -> verify on every shape with fresh random inputs -> time, with every timed launch poisoned,
fed freshly permuted inputs and checked (:mod:`core.evaluation.checks`), in interleaved pairs with
the primary baseline (:func:`core.evaluation.timing.paired_times`), every launch of either side
finding the caches as the problem's cache policy says (``cold`` by default: nothing a preparation
wrote is left in them, :meth:`core.backends.base.Runtime.evict`) -> the physical floor
(:mod:`core.evaluation.rooflines`) -> stability (repeated launches, bit-compared on the device)
-> memory. A template that repacks the weights does so once per case, before the case's first
launch; its time is reported apart (``repack_us``) and its bytes count as memory.

Also times the library baselines the same way, on the same cases. Every status but ``ok`` is
lethal; ``cause`` says why in one line. The judge draws every case and computes every reference; it
checks every verification and stability launch itself, and bounds what the launcher reports of a
timing (:func:`core.evaluation.judge.timing_bounds`, :func:`core.evaluation.judge.final_state`).
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
from core.evaluation import batches
from core.evaluation.harness import Harness
from core.evaluation.judge import (LauncherClient, LauncherDied, RemoteError, final_state, paired_figures, paired_primary,
                                   spawn_launcher, time_baselines, timing_bounds)
from core.evaluation.priority import raise_priority
from core.evaluation.record import one_line
from core.evaluation.rooflines import ALLOWANCE, Peaks, measure_peaks, suspect_floor_us
from core.evaluation.timing import TIMING_TARGET_S, adaptive_times, graph_block, median_iqr_us, timing_case_count
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

        inline = (spec.get("launcher") or os.environ.get("ABEBOT_LAUNCHER")) == "inline"
        early = None if inline else spawn_launcher(spec)  # it builds its runtime while the judge builds its own
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
        self.launcher = LauncherClient(spec, {"cache": self.cache, "graph_block": self.runtime.graph_block,
                                              "timing_target_s": self.timing_target_s}, self.harness, self.runtime,
                                       inline=inline, early=early)
        self._pool: list | None = None  # the candidates' timing cases (refilled for each)
        self.pool = batches.pool_for(self)  # their verification and stability cases (refilled for each)
        self.memory_reply: dict | None = None
        self._pair: tuple[str, Callable, list] | None = None  # the primary baseline, its fn and timing cases
        self.priority = raise_priority()
        self._cases: tuple[dict, list] | None = None  # every baseline's fn, and the cases they were timed on
        self._reference_us: dict[str, float] = {}  # each baseline's time at the start: bounds its paired chunks
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

    def close(self) -> None:
        """Ask the launcher to exit (the sandbox calls this as it ends)."""
        self.launcher.close()

    def info(self) -> dict:
        return {"device": asdict(self.device), "pid": os.getpid(), "launcher_pid": self.launcher.pid}

    def handle(self, request: dict) -> dict:
        try:
            return self._handle(request)
        except LauncherDied as exc:  # a segfault, abort or limit in the kernel's process: as a dead sandbox was
            return exc.reply()

    def _handle(self, request: dict) -> dict:
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
            except LauncherDied:
                raise
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
        case = None  # set by the stability stage; the memory stage's lambda reads it
        self.harness.repacks.clear()
        self.memory_reply = None  # (measured with the stability launches)
        stages: list[tuple[str, Callable[[], Any]]] = [
            ("load", lambda: self.launcher.load(artifact)),
            ("verification", lambda: self._verify(rng, result)),
            ("timing", lambda: self._benchmark(rng, result)),
            ("stability", lambda: self._stability(rng, result)),
            ("memory", lambda: self._memory(case, result)),
        ]
        stage = "load"
        try:
            for stage, run in stages:
                t0 = time.perf_counter()
                value = run()
                seconds[stage] = time.perf_counter() - t0
                case = value if stage == "stability" else case
        except Failure as f:
            result.update(status=f.status, cause=f.cause)
        except CompileError as exc:  # a JIT backend (Triton) compiles at first launch: not a device fault
            result.update(status="compile_error", cause=one_line(f"{stage}: {exc}"))
        except LauncherDied:
            raise
        except Exception as exc:
            if not isinstance(exc, RemoteError):  # (the launcher printed its own traceback to the log)
                traceback.print_exc()
            status = "unstable" if stage == "stability" else "crashed"
            kind = getattr(exc, "remote_type", type(exc).__name__)
            result.update(status=status, cause=one_line(f"{stage}: {kind}: {exc}"), restart=self.backend.sticky_errors)
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
            self.launcher.load(artifact)
            self._benchmark(random.Random(seed), result)
        except Failure as f:
            result.update(status=f.status, cause=f.cause)
        finally:
            self._pair = kept
        return result

    def _memory(self, case: Any, result: dict) -> None:
        """Inputs and outputs plus the larger of the declared workspace and what one launch was seen
        to allocate (measured in the launcher), plus the weights the template repacked for the kernel.
        Registers and shared memory are on-chip limits, reported apart, not bytes."""
        r = self.memory_reply or self.launcher.request("memory", cases=[case], case=case.token.uid)
        # The repacked weights live beside the canonical ones, made before the launch seen here.
        extra = max(int(r["declared"]), int(r["seen"])) + int(r["packed"])
        result.update(extra_bytes=extra, onchip_bytes=int(r["onchip"]), memory_bytes=self.io_bytes + extra)

    def _repack_times(self, result: dict, seconds: dict) -> None:
        """The template's one-time repack, apart from the launches: ``repack_us``, the median over the
        main shape's cases, and the ``repack`` phase, every repack's seconds (within the other phases)."""
        if not self.harness.repacks:
            return
        main = [s for shape, s in self.harness.repacks if shape == self.main]
        if main:
            result["repack_us"] = statistics.median(main) * 1e6
        seconds["repack"] = sum(s for _, s in self.harness.repacks)

    def _verify(self, rng: random.Random, result: dict) -> None:
        """Every shape once, the main shape twice, then the main shape in the same buffers with new
        inputs, in two requests; the judge checks every output (:func:`core.evaluation.batches.verify`)."""
        batches.verify(self, rng, result)

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

    def _candidate_cases(self, rng: random.Random) -> list:
        """The timing cases of a candidate: made once per judge (their buffers shared with the launcher
        once), then refilled with fresh inputs and references for each candidate."""
        if self._pool is None:
            self._pool = self._timing_cases(rng)
        else:
            self._pool = [self.harness.refill(c, rng.getrandbits(31)) for c in self._pool]
        return self._pool

    def _benchmark(self, rng: random.Random, result: dict) -> None:
        """Time with every launch checked, in pairs with the primary baseline once one is known (the
        launcher runs the loops on the judge's cases); then what the judge checks itself: the times
        against its own clock, every case's final inputs and outputs, and the floor: faster than
        physics is ``suspect``."""
        cases = self._candidate_cases(rng)
        result["cache"] = self.cache
        ask: dict[str, Any] = {"timing": [c.token.uid for c in cases], "seed": rng.getrandbits(31)}
        involved = list(cases)
        if self._pair is not None:
            name, _, bcases = self._pair
            ask.update(pair=name, pair_cases=[c.token.uid for c in bcases])
            involved += bcases
        t0 = time.perf_counter()
        reply = self.launcher.request("time", cases=involved, **ask)
        wall = time.perf_counter() - t0
        times, chunks = [float(t) for t in reply.get("kernel") or []], [float(t) for t in reply.get("chunks") or []]
        result["timing_method"] = str(reply.get("timing_method", ""))
        if self._pair is not None:  # the figures derived here from the samples, not the launcher's own
            figures = paired_figures(reply, self.runtime.chunk_statistic, self._reference_us.get(self._pair[0]))
            if isinstance(figures, str):
                raise Failure("suspect", figures)
            chunks = figures[0]
            result.update(figures[1], pair_baseline=self._pair[0])
        # Paired: the time and its spread are those of the chunks' statistic, the one the speed-up rests
        # on (on a CPU each chunk's fastest call: a call right after numpy's chunk can find OpenBLAS's
        # threads still spinning on both cores, seen as a 10x IQR on an idle 2-core VM).
        result["time_us"], result["time_spread_us"] = median_iqr_us(chunks or times or [0.0])
        # The floor judges the fastest evidence the speed-up rests on: a chunk's statistic (on a CPU its
        # fastest call) below physics is a launch that skipped work, however slow the others were.
        fastest_us = min([result["time_us"]] + [t * 1e6 for t in chunks])
        checks = reply.get("checks") or {}
        if not checks.get("ok"):  # the launcher's own checks found a wrong launch (a report it cannot gain by)
            raise Failure("wrong_result", one_line(f"{checks.get('cause')} in timed launches: {checks.get('detail')}"))
        state = final_state(self.harness, cases, reply.get("last") or {})
        if not state.ok:
            status = "suspect" if state.cause == "suspect" else "wrong_result"
            raise Failure(status, one_line(f"{state.cause} after the timed launches: {state.detail}"))
        if self.floor_us is None:
            self._measure_floor()
        bound = timing_bounds(reply, wall, self.floor_us)
        if bound:
            raise Failure("suspect", one_line(bound))
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

    def _stability(self, rng: random.Random, result: dict) -> Any:
        """Repeated launches on one fresh case, in one request, every one's outputs read back and
        compared by the judge (:func:`core.evaluation.batches.stability`); returns the case."""
        return batches.stability(self, rng, result)

    # -- timing ----------------------------------------------------------------------------------
    def _timing_cases(self, rng: random.Random) -> list:
        return [self.harness.make_case(self.main, rng.getrandbits(31), mirror=True) for _ in range(self.timing_cases)]

    # -- baselines -------------------------------------------------------------------------------
    def baseline(self, seed: int, names: list | None = None) -> dict:
        """Time (and verify) every library baseline (or those in ``names``) on the main shape, as the
        kernels are timed. The primary, which normalises fitness, is the fastest that verified, in pairs
        (:mod:`core.evaluation.primary`)."""
        rng = random.Random(seed)
        self.priority = raise_priority()  # threads a baseline's library started since are reniced too
        if self.peaks is None:  # measured once per sandbox; again only when a candidate beats the floor
            self._measure_floor()
        cases = self.pool.timing_cases("baseline", self.main, self.timing_cases, rng)
        fns = self.harness.baselines()
        entries = time_baselines(self, [name for name in fns if names is None or name in names], cases, rng)
        timed = {n: e for n, e in entries.items() if e.get("time_us") is not None and e.get("verified")}
        if not timed:
            causes = "; ".join(f"{n}: {e.get('cause')}" for n, e in entries.items()) or "the workload has no baselines here"
            return {"status": "crashed", "cause": f"no baseline verified: {causes}"}
        primary, paired = paired_primary(self, timed, cases, rng)
        for n, (us, spread) in paired.items():  # timed as the candidates are: these are the figures
            entries[n].update(single_us=entries[n]["time_us"], time_us=us, spread_us=spread)
        p = entries[primary]
        self._pair = (primary, fns[primary], cases)  # what the next candidates are timed beside
        self._cases = ({n: fns[n] for n in timed}, cases)
        self._reference_us = {n: float(entries[n]["time_us"]) for n in timed}
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

def _fmt(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())
