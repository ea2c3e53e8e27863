"""Evaluation: genome -> source -> binary -> verified, timed, measured, stability-tested result.

Two halves, one per process:

* :class:`Evaluator` lives in the GA process: it renders genomes, rejects kernels whose static
  resource estimate exceeds the device, compiles the rest in a thread pool (cached by the backend's
  ``cache_key``), and sends each compiled :class:`~core.backends.base.Artifact` to the sandbox.
* :class:`Protocol` lives in the sandboxed evaluator process (:mod:`core.sandbox`) and runs the
  protocol on one candidate: verify on every shape with fresh random inputs -> time (median and
  IQR of adaptive repetitions, inputs rotated) -> check the timed outputs and the roofline ->
  stability (repeated launches, bit-compared) -> memory.

Statuses: ``ok``, ``compile_error``, ``resource_exceeded``, ``wrong_result``, ``crashed``,
``timeout``, ``unstable``. Every status but ``ok`` is lethal; ``cause`` says why in one line.
"""
from __future__ import annotations

import inspect
import itertools
import math
import os
import random
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from core.backends.base import Artifact, Backend, CompileError, DeviceInfo, KernelSource
from core.config import RunConfig
from core.genome import Genome
from core.sandbox import Sandbox, SandboxError

STATUSES = ("ok", "compile_error", "resource_exceeded", "wrong_result", "crashed", "timeout", "unstable")
LETHAL = frozenset(STATUSES) - {"ok"}

TIMING_TARGET_S = 0.2  # wall time the timed repetitions of one candidate should take
MIN_REPS, MAX_REPS = 5, 200
TIMING_CHUNK = 25  # timed calls between wall-clock checks
CPU_MAX_CASES = 4  # inputs rotated on the CPU; a GPU rotates enough to exceed its L2
GPU_MAX_CASES = 256  # small problems are launch-bound; beyond this rotation costs more than it tells
COMPILE_LOG_LINES = 12


@dataclass
class Evaluation:
    """One candidate's measurements (see docs/CONTRACTS.md, "Evaluation").

    Times are in microseconds: ``time_us`` is the median of the timed launches and
    ``time_spread_us`` their interquartile range. ``memory_bytes`` = io bytes + ``extra_bytes``
    (workspaces) + ``onchip_bytes``. ``stability`` is the fraction of repeated launches whose output
    is bit-identical to the first. Measurements are None when the candidate died before them.
    """

    genome_hash: str
    status: str
    cause: str = ""
    time_us: float | None = None
    time_spread_us: float | None = None
    memory_bytes: int | None = None
    extra_bytes: int | None = None
    onchip_bytes: int | None = None
    stability: float = 0.0
    max_abs_err: float | None = None
    rel_err: float | None = None
    source_hash: str = ""
    compile_s: float = 0.0
    eval_s: float = 0.0
    resources: dict = field(default_factory=dict)
    source: str | None = None
    entry: str = ""
    flags: list = field(default_factory=list)
    launch: dict = field(default_factory=dict)
    compile_log: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def lethal(self) -> bool:
        return self.status in LETHAL

    def to_dict(self) -> dict:
        return asdict(self)


# =================================================================================================
# GA-process side
# =================================================================================================
class Evaluator:
    """Evaluates genomes of one run's workload on one backend device.

    ``cache_dir`` is the runs folder's compile cache root (``<runs_dir>/.cache``, shared across
    runs); kernels are compiled into ``<cache_dir>/<backend>/``. ``log_path`` receives the sandbox
    process's output (the run folder's ``sandbox.log``; by default a file in the temp directory).
    ``log`` gets one line per noteworthy event (baseline, crashes, timeouts); ``progress(done,
    total)`` is called after each candidate of a batch is measured.
    """

    def __init__(self, config: RunConfig, cache_dir: Path, log: Callable[[str], None] = print,
                 log_path: Path | str | None = None, timing_target_s: float = TIMING_TARGET_S,
                 progress: Callable[[int, int], None] = lambda done, total: None):
        from core.workloads import get_workload

        self.config = config
        self.cache_dir = Path(cache_dir)
        self.compile_dir = self.cache_dir / config.backend
        self.log = log
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"abebot-sandbox-{os.getpid()}.log"
        self.timing_target_s = timing_target_s
        self.progress = progress  # (measured, to measure) after each candidate, for the heartbeat
        self.workload = get_workload(config.workload)
        self.problem = self.workload.validate_problem(dict(config.problem), config.backend)
        self.backend: Backend | None = None
        self.template = None
        self.sandbox: Sandbox | None = None
        self.baseline: dict | None = None
        self._rng = random.Random(config.seed)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> dict:
        """Build the backend and template, start the sandbox, time the baselines; return them.

        Raises (BackendUnavailable, SandboxError, RuntimeError) when evaluation cannot work at all.
        """
        from core.backends import make_backend

        self.compile_dir.mkdir(parents=True, exist_ok=True)
        self.backend = make_backend(self.config.backend, self.config.device)
        self.template = self.workload.template(self.config.backend, self.problem, self.backend.device)
        self.sandbox = Sandbox(self._spec(), self.config.timeout_s, self.log_path)
        self.sandbox.start()
        try:
            reply = self.remeasure_baselines()
        except RuntimeError:
            self.close()
            raise
        self.baseline = reply
        self.log(f"evaluator ready on {self.backend.device.label()}: baseline {reply['primary']} "
                 f"{reply['time_us']:.1f} us (sandbox log {self.log_path})")
        return reply

    def remeasure_baselines(self) -> dict:
        """Time every baseline again in the sandbox (the record ``start`` returns)."""
        self._require_started()
        reply = self.sandbox.call({"op": "baseline", "seed": self._seed()}, timeout_s=max(120.0, 4 * self.config.timeout_s))
        if reply.get("status") != "ok":
            raise RuntimeError(f"baseline measurement failed: {reply.get('status')}: {reply.get('cause')}")
        reply.pop("status", None)
        return reply

    def close(self) -> None:
        """Stop the sandbox process."""
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def __enter__(self) -> "Evaluator":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _spec(self) -> dict:
        return {"server": "core.evaluate:Protocol", "backend": self.config.backend, "device": self.config.device,
                "workload": self.config.workload, "problem": self.problem,
                "stability_launches": self.config.stability_launches, "timing_target_s": self.timing_target_s}

    def _seed(self) -> int:
        return self._rng.getrandbits(62)

    # -- evaluation ------------------------------------------------------------------------------
    def evaluate(self, genomes: list[Genome]) -> list[Evaluation]:
        """Evaluate ``genomes``; same order, duplicates evaluated once; never raises for a bad kernel."""
        self._require_started()
        unique: dict[str, Genome] = {}
        for g in genomes:
            unique.setdefault(g.hash, g)
        done: dict[str, Evaluation] = {}
        rendered: list[tuple[str, KernelSource]] = []
        for h, g in unique.items():
            try:
                rendered.append((h, self.template.render(g)))
            except Exception as exc:  # a template bug or an unrenderable genome kills only this one
                done[h] = Evaluation(h, "compile_error", cause=_one_line(f"render failed: {type(exc).__name__}: {exc}"))
        evaluations = self.evaluate_sources([k for _, k in rendered], [h for h, _ in rendered])
        done.update(zip([h for h, _ in rendered], evaluations))
        return [_copy(done[g.hash]) for g in genomes]

    def evaluate_sources(self, kernels: list[KernelSource], genome_hashes: list[str] | None = None) -> list[Evaluation]:
        """The path every candidate takes after rendering: static check, compile, sandbox.

        Identical sources (by cache key) are compiled and measured once. ``genome_hashes`` labels
        the results (defaults to the source hash).
        """
        self._require_started()
        keys = [self.backend.cache_key(k) for k in kernels]
        labels = genome_hashes or keys
        first: dict[str, KernelSource] = {}
        for key, k in zip(keys, kernels):
            first.setdefault(key, k)
        results: dict[str, Evaluation] = {}
        to_compile = {}
        for key, k in first.items():
            reason = self.template.resource_violation(k)
            if reason:
                results[key] = _base(key, k, "resource_exceeded", reason)
            else:
                to_compile[key] = k
        compiled = self._compile_all(to_compile)
        for done, (key, (k, artifact, seconds, error)) in enumerate(compiled.items(), 1):
            if error is not None:
                results[key] = _base(key, k, "compile_error", _first_line(error), compile_s=seconds, compile_log=error)
            else:
                results[key] = self._measure(key, k, artifact, seconds)
            self.progress(done, len(compiled))
        out = []
        for label, key in zip(labels, keys):
            ev = _copy(results[key])
            ev.genome_hash = label
            out.append(ev)
        return out

    def _require_started(self) -> None:
        if self.sandbox is None:
            raise RuntimeError("Evaluator.start() must be called before evaluating")

    def _compile_all(self, kernels: dict[str, KernelSource]) -> dict[str, tuple]:
        """key -> (kernel, artifact or None, seconds, error log or None), compiled in parallel."""
        if not kernels:
            return {}
        workers = self.config.compile_workers or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=min(workers, len(kernels)), thread_name_prefix="compile") as pool:
            futures = {key: pool.submit(self._compile_one, k) for key, k in kernels.items()}
            return {key: (kernels[key], *f.result()) for key, f in futures.items()}

    def _compile_one(self, kernel: KernelSource) -> tuple[Artifact | None, float, str | None]:
        t0 = time.perf_counter()
        try:
            artifact = self.backend.compile(kernel, self.compile_dir)
            return artifact, time.perf_counter() - t0, None
        except CompileError as exc:
            return None, time.perf_counter() - t0, _trim_log(str(exc)) or "compile failed (no log)"
        except Exception as exc:  # the compiler missing, a cache folder gone: still only this kernel
            return None, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"

    def _measure(self, key: str, kernel: KernelSource, artifact: Artifact, compile_s: float) -> Evaluation:
        t0, restarts = time.perf_counter(), self.sandbox.restarts
        reply = self.sandbox.call({"op": "evaluate", "artifact": artifact, "seed": self._seed()})
        eval_s = time.perf_counter() - t0
        if self.sandbox.restarts != restarts:
            self.log(f"candidate {key[:12]}: {reply.get('status')} ({reply.get('cause', '')}); sandbox restarted")
        ev = _base(key, kernel, reply.get("status", "crashed"), _one_line(reply.get("cause", "")),
                   compile_s=compile_s, compile_log=artifact.log)
        ev.resources = {**kernel.resources, **artifact.resources}
        ev.eval_s = eval_s
        for name in ("time_us", "time_spread_us", "memory_bytes", "extra_bytes", "onchip_bytes",
                     "stability", "max_abs_err", "rel_err"):
            value = reply.get(name)
            if value is not None and math.isfinite(value):  # inf error of a NaN output: the cause says it
                setattr(ev, name, value)
        return ev


def _base(key: str, kernel: KernelSource, status: str, cause: str, compile_s: float = 0.0, compile_log: str = "") -> Evaluation:
    return Evaluation(genome_hash=key, status=status, cause=_one_line(cause), source_hash=key, compile_s=compile_s,
                      resources=dict(kernel.resources), source=kernel.source, entry=kernel.entry,
                      flags=list(kernel.flags), launch=dict(kernel.launch), compile_log=compile_log)


def _copy(ev: Evaluation) -> Evaluation:
    return Evaluation(**{**ev.__dict__, "resources": dict(ev.resources), "flags": list(ev.flags), "launch": dict(ev.launch)})


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _trim_log(log: str) -> str:
    lines = [ln for ln in log.strip().splitlines() if ln.strip()]
    return "\n".join(lines[:COMPILE_LOG_LINES])


def _first_line(log: str) -> str:
    """The most telling line of a compiler log: the first one that says "error"."""
    lines = log.splitlines() or [""]
    for ln in lines:
        if "error" in ln.lower():
            return ln.strip()
    return lines[0].strip()


# =================================================================================================
# Sandbox-process side
# =================================================================================================
def sticky_errors(backend: Backend) -> bool:
    """Whether an exception may leave the device unusable (CUDA errors are sticky)."""
    return bool(getattr(backend, "sticky_errors", backend.name != "c"))


def device_bandwidth(device: DeviceInfo) -> float:
    """Peak memory bandwidth in bytes/s when the backend reports one (0: unknown, no roofline)."""
    return float(device.memory_bandwidth or 0)


def call_with_problem(fn: Callable[..., Any], shape: dict, problem: dict) -> Any:
    """``fn(shape, **problem keys fn accepts)``: lets ``min_bytes(shape, dtype, residual)`` see the problem."""
    params = list(inspect.signature(fn).parameters)[1:]
    return fn(shape, **{k: problem[k] for k in params if k in problem})


class _Failure(Exception):
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
        self.harness = self.template.harness(self.runtime)
        self.shapes = self.workload.shapes(self.problem)
        self.main = self.shapes[0]
        self.stability_launches = int(spec.get("stability_launches", 20))
        self.timing_target_s = float(spec.get("timing_target_s", TIMING_TARGET_S))
        self.sticky = sticky_errors(self.backend)
        self.io_bytes = int(call_with_problem(self.workload.io_bytes, self.main, self.problem))
        bandwidth = device_bandwidth(self.device)
        min_bytes = call_with_problem(self.workload.min_bytes, self.main, self.problem)
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
        try:
            for stage, run in stages:
                t0 = time.perf_counter()
                value = run()
                seconds[stage] = time.perf_counter() - t0
                kernel = value if stage == "load" else kernel
                case = value if stage == "stability" else case
        except _Failure as f:
            result.update(status=f.status, cause=f.cause)
        except CompileError as exc:  # a JIT backend (Triton) compiles at first launch: not a device fault
            result.update(status="compile_error", cause=_one_line(f"{stage}: {exc}"))
        except Exception as exc:
            traceback.print_exc()
            status = "unstable" if stage == "stability" else "crashed"
            result.update(status=status, cause=_one_line(f"{stage}: {type(exc).__name__}: {exc}"), restart=self.sticky)
        result["stages_s"] = seconds
        print(f"[sandbox] {artifact.source_hash[:12]} {result['status']} "
              + " ".join(f"{k}={v:.3f}s" for k, v in seconds.items()), flush=True)
        return result

    def _memory(self, kernel: Any, artifact: Artifact, case: Any, result: dict) -> None:
        extra = int(self.harness.extra_memory_bytes(kernel, artifact, case))
        onchip = int(self.harness.onchip_bytes(artifact))
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
            raise _Failure(status, _one_line(f"{chk.cause or 'wrong_result'} {where}{detail}"))

    def _benchmark(self, kernel: Any, rng: random.Random, result: dict) -> None:
        cases = self._timing_cases(rng)
        times = self._time(lambda c: self.harness.launch(kernel, c), cases)
        result["time_us"], result["time_spread_us"] = _median_iqr_us(times)
        for case in cases:  # each case's last output is a timed launch's
            self._check(case, result, "wrong_result", "in a timed launch")
        if self.roofline_us and result["time_us"] < self.roofline_us:
            raise _Failure("wrong_result", f"faster than roofline ({result['time_us']:.2f} us < {self.roofline_us:.2f} us): "
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
        n = timing_case_count(self.io_bytes, self.device)
        return [self.harness.make_case(self.main, rng.getrandbits(31)) for _ in range(n)]

    def _time(self, launch: Callable[[Any], None], cases: list) -> list[float]:
        """Seconds per launch, rotating through ``cases``; reps adapt to ~``timing_target_s``.

        The sample ends with one pass over freshly reset cases, so each case's output afterwards is
        a timed launch's own, even for kernels that update a buffer in place (a residual).
        """
        fn = _rotation(launch, cases)
        pilot = self.runtime.time(fn, reps=3, warmup=1)
        per_call = max(float(np.median(pilot)), 1e-9)
        reps = max(1, min(MAX_REPS, max(MIN_REPS, int(self.timing_target_s / per_call))) - len(cases))
        warmup = min(10, max(1, reps // 10))
        # In chunks, so a machine that turns busy mid-run (other processes preempting OpenMP
        # threads) costs at most a few times the target instead of reps x the stalled time.
        deadline = time.perf_counter() + 3 * self.timing_target_s
        times: list[float] = []
        while len(times) < reps:
            times += self.runtime.time(fn, reps=min(TIMING_CHUNK, reps - len(times)), warmup=warmup)
            warmup = 0
            if len(times) >= MIN_REPS and time.perf_counter() > deadline:
                break
        for case in cases:
            self.harness.reset_outputs(case)
        times += self.runtime.time(_rotation(launch, cases), reps=len(cases), warmup=0)
        self.runtime.synchronize()
        return times

    # -- baselines -------------------------------------------------------------------------------
    def baseline(self, seed: int) -> dict:
        """Time (and verify) every library baseline on the main shape, as the kernels are timed."""
        rng = random.Random(seed)
        cases = self._timing_cases(rng)
        entries: dict[str, dict] = {}
        for name, fn in self.harness.baselines().items():
            entries[name] = self._one_baseline(name, fn, cases, rng)
        primary = next(iter(entries), None)
        if primary is None or entries[primary].get("time_us") is None:
            cause = entries[primary].get("cause") if primary else "the harness has no baselines"
            return {"status": "crashed", "cause": f"primary baseline failed: {cause}"}
        p = entries[primary]
        return {"status": "ok", "device": asdict(self.device), "primary": primary, "time_us": p["time_us"],
                "spread_us": p["spread_us"], "memory_bytes": p["memory_bytes"], "baselines": entries,
                "roofline_us": self.roofline_us, "io_bytes": self.io_bytes,
                "flops": float(self.workload.flops(self.main)), "shape": dict(self.main),
                "timing": "median of adaptive repetitions, spread = interquartile range, inputs rotated"}

    def _one_baseline(self, name: str, fn: Callable, cases: list, rng: random.Random) -> dict:
        entry: dict[str, Any] = {"time_us": None, "spread_us": None, "verified": False, "cause": ""}
        try:
            case = self.harness.make_case(self.main, rng.getrandbits(31))
            result = fn(case)
            self.runtime.synchronize()
            self.harness.accept_baseline_result(case, result)
            chk = self.harness.check(case)
            entry.update(verified=bool(chk.ok), max_abs_err=float(chk.max_abs_err), rel_err=float(chk.rel_err),
                         cause="" if chk.ok else _one_line(f"{chk.cause} {chk.detail}"))
            entry["memory_bytes"] = self.io_bytes + int(self.harness.baseline_memory_bytes(name, case))
            entry["time_us"], entry["spread_us"] = _median_iqr_us(self._time(fn, cases))
        except Exception as exc:
            traceback.print_exc()
            entry["cause"] = _one_line(f"{type(exc).__name__}: {exc}")
        return entry


def timing_case_count(case_bytes: int, device: DeviceInfo) -> int:
    """Cases to rotate so their bytes exceed the device's L2 (2-4 on a CPU, where it is cheap to stop)."""
    cap = CPU_MAX_CASES if device.backend == "c" else GPU_MAX_CASES
    if device.memory_bytes:
        cap = max(2, min(cap, device.memory_bytes // max(1, 4 * case_bytes)))
    want = math.ceil(device.l2_bytes / max(1, case_bytes)) + 1 if device.l2_bytes else 2
    return int(min(cap, max(2, want)))


def _rotation(launch: Callable[[Any], None], cases: list) -> Callable[[int], None]:
    """``fn(i)`` launching on the cases in turn from the first; its own counter, so the rotation does
    not depend on how a runtime numbers warm-up and timed calls."""
    counter = itertools.count()
    return lambda _i: launch(cases[next(counter) % len(cases)])


def _median_iqr_us(times: list[float]) -> tuple[float, float]:
    t = np.asarray(times, dtype=np.float64) * 1e6
    q25, q50, q75 = np.percentile(t, [25, 50, 75])
    return float(q50), float(q75 - q25)


def _fmt(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


__all__ = ["Evaluation", "Evaluator", "Protocol", "STATUSES", "LETHAL", "SandboxError", "timing_case_count"]
