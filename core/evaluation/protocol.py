"""The evaluation protocol, run inside the sandboxed evaluator process on one candidate at a time:
load -> verify on every shape with fresh random inputs -> time (inputs rotated) -> check the timed
outputs and the roofline -> stability (repeated launches, bit-compared) -> memory.

Also times the library baselines the same way, on the same cases. Every status but ``ok`` is
lethal; ``cause`` says why in one line.
"""
from __future__ import annotations

import os
import random
import time
import traceback
from dataclasses import asdict
from typing import Any, Callable

from core.backends.base import Artifact, CompileError
from core.evaluation.harness import Harness
from core.evaluation.record import one_line
from core.evaluation.timing import (TIMING_TARGET_S, adaptive_times, median_iqr_us, rotation,
                                    timing_case_count)


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

        self.backend = make_backend(spec["backend"], spec.get("device", 0))
        self.device = self.backend.device
        self.runtime = self.backend.make_runtime()
        self.workload = get_workload(spec["workload"])
        self.problem = dict(spec["problem"])
        self.template = self.workload.template(spec["backend"], self.problem, self.device)
        self.harness = Harness(self.workload, self.template, self.runtime, self.problem)
        self.shapes = self.workload.shapes(self.problem)
        self.main = self.shapes[0]
        self.stability_launches = int(spec.get("stability_launches", 20))
        self.timing_target_s = float(spec.get("timing_target_s", TIMING_TARGET_S))
        self.io_bytes = int(self.workload.io_bytes(self.main, self.problem))
        bandwidth = float(self.device.memory_bandwidth or 0)
        min_bytes = self.workload.min_bytes(self.main, self.problem)
        self.roofline_us = min_bytes / bandwidth * 1e6 if bandwidth else None

    def info(self) -> dict:
        return {"device": asdict(self.device), "pid": os.getpid()}

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "evaluate":
            return self.evaluate(request["artifact"], int(request.get("seed", 0)))
        if op == "baseline":
            return self.baseline(int(request.get("seed", 0)))
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
        result["stages_s"] = seconds
        print(f"[sandbox] {artifact.source_hash[:12]} {result['status']} "
              + " ".join(f"{k}={v:.3f}s" for k, v in seconds.items()), flush=True)
        return result

    def _memory(self, kernel: Any, artifact: Artifact, case: Any, result: dict) -> None:
        extra = int(self.harness.extra_memory_bytes(kernel, artifact, case))
        onchip = int(self.harness.onchip_bytes(artifact, kernel))
        result.update(extra_bytes=extra, onchip_bytes=onchip, memory_bytes=self.io_bytes + extra + onchip)

    def _verify(self, kernel: Any, rng: random.Random, result: dict) -> None:
        """Every shape once, the main shape twice, each on fresh inputs; first failure is the verdict."""
        for i, shape in enumerate(self.shapes):
            for _ in range(2 if i == 0 else 1):
                case = self.harness.make_case(shape, rng.getrandbits(31))
                self.harness.launch(kernel, case)
                self.runtime.synchronize()
                self._check(case, result, "wrong_result", f"on {_fmt(shape)}")

    def _check(self, case: Any, result: dict, status: str, where: str) -> None:
        chk = self.harness.check(case)
        result["max_abs_err"] = max(result["max_abs_err"], float(chk.max_abs_err))
        result["rel_err"] = max(result["rel_err"], float(chk.rel_err))
        if not chk.ok:
            detail = f": {chk.detail}" if chk.detail else ""
            raise Failure(status, one_line(f"{chk.cause or 'wrong_result'} {where}{detail}"))

    def _benchmark(self, kernel: Any, rng: random.Random, result: dict) -> None:
        cases = self._timing_cases(rng)
        times = self._time(lambda c: self.harness.launch(kernel, c), cases)
        result["time_us"], result["time_spread_us"] = median_iqr_us(times)
        for case in cases:  # each case's last output is a timed launch's
            self._check(case, result, "wrong_result", "in a timed launch")
        if self.roofline_us and result["time_us"] < self.roofline_us:
            raise Failure("wrong_result", f"faster than roofline ({result['time_us']:.2f} us < {self.roofline_us:.2f} us): "
                                          "the timing does not measure the kernel")

    def _stability(self, kernel: Any, rng: random.Random, result: dict) -> Any:
        """Repeated launches on one fresh case, each re-poisoned and checked; returns the case."""
        case = self.harness.make_case(self.main, rng.getrandbits(31))
        n = self.stability_launches
        first, same = None, 0
        for j in range(n):
            self.harness.reset_outputs(case)
            self.harness.launch(kernel, case)
            self.runtime.synchronize()
            try:
                self._check(case, result, "unstable", f"in stability launch {j + 1}/{n}")
            finally:
                result["stability"] = same / n
            out = self.harness.output_bytes(case)
            first = out if first is None else first
            same += out == first
        result["stability"] = same / n
        return case

    # -- timing ----------------------------------------------------------------------------------
    def _timing_cases(self, rng: random.Random) -> list:
        n = timing_case_count(self.io_bytes, self.device, self.backend.device_kind)
        return [self.harness.make_case(self.main, rng.getrandbits(31)) for _ in range(n)]

    def _time(self, launch: Callable[[Any], None], cases: list) -> list[float]:
        """Seconds per launch, rotating through ``cases``; reps adapt to ~``timing_target_s``.

        The sample ends with one pass over freshly reset cases, so each case's output afterwards is
        a timed launch's own, even for kernels that update a buffer in place (a residual).
        """
        times = adaptive_times(self.runtime, rotation(launch, cases), self.timing_target_s, reserve=len(cases))
        for case in cases:
            self.harness.reset_outputs(case)
        times += self.runtime.time(rotation(launch, cases), reps=len(cases), warmup=0)
        self.runtime.synchronize()
        return times

    # -- baselines -------------------------------------------------------------------------------
    def baseline(self, seed: int) -> dict:
        """Time (and verify) every library baseline on the main shape, as the kernels are timed.

        The primary baseline, which normalises fitness, is the fastest one that verified."""
        rng = random.Random(seed)
        cases = self._timing_cases(rng)
        entries: dict[str, dict] = {}
        for name, fn in self.harness.baselines().items():
            entries[name] = self._one_baseline(name, fn, cases, rng)
        timed = {n: e for n, e in entries.items() if e.get("time_us") is not None and e.get("verified")}
        if not timed:
            causes = "; ".join(f"{n}: {e.get('cause')}" for n, e in entries.items()) or "the workload has no baselines here"
            return {"status": "crashed", "cause": f"no baseline verified: {causes}"}
        primary = min(timed, key=lambda n: timed[n]["time_us"])
        p = entries[primary]
        return {"status": "ok", "device": asdict(self.device), "primary": primary, "time_us": p["time_us"],
                "spread_us": p["spread_us"], "memory_bytes": p["memory_bytes"], "baselines": entries,
                "roofline_us": self.roofline_us, "io_bytes": self.io_bytes,
                "flops": float(self.workload.flops(self.main, self.problem)), "shape": dict(self.main),
                "timing": "median of adaptive repetitions, spread = interquartile range, inputs rotated; "
                          "primary = the fastest baseline that verified"}

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
            entry["time_us"], entry["spread_us"] = median_iqr_us(self._time(fn, cases))
        except Exception as exc:
            traceback.print_exc()
            entry["cause"] = one_line(f"{type(exc).__name__}: {exc}")
        return entry


def _fmt(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())
