"""The GA-side evaluator: genome -> source -> static check -> parallel compile -> sandbox.

It renders genomes, rejects kernels whose static resource estimate exceeds the device (immediate
death, as the seed says), compiles the rest in a thread pool (cached by the backend's
``cache_key``: identical sources compile and measure once), and sends each compiled artifact to a
sandboxed evaluator process (:mod:`core.evaluation.protocol`) through the :class:`SandboxPool`."""
from __future__ import annotations

import math
import os
import random
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

from core.backends.base import Artifact, Backend, CompileError, KernelSource
from core.config import RunConfig
from core.evaluation import devices
from core.evaluation.aot import workload_launches
from core.evaluation.pool import SandboxPool
from core.evaluation.tail_timeout import TailTimeout
from core.evaluation.record import SANDBOX_MEASURES, Evaluation, first_error_line, one_line, trim_log
from core.evaluation.twins import Twin
from core.evaluation.timing import TIMING_TARGET_S
from core.genome import Genome

TWINS_KEPT = 4096  # measurements remembered by machine code, for sources that compile to the same kernel
FULL_TIMING_EVERY = 9  # baseline timings (3 a generation) between two that time every baseline
CONTENDER_RATIO = 1.5  # a baseline this much slower than the fastest is timed only in full timings
MEASURES = SANDBOX_MEASURES  # what the evaluator copies from the sandbox's reply


class Evaluator:
    """Evaluates genomes of one run's workload on one backend device.

    ``cache_dir`` is the runs folder's compile cache root (``<runs_dir>/.cache``, shared across
    runs); kernels are compiled into ``<cache_dir>/<backend>/``. ``log_path`` receives the sandbox
    process's output (the run folder's ``sandbox.log``; by default a file in the temp directory).
    ``log`` gets one line per noteworthy event (baseline, crashes, timeouts); ``progress(done,
    total)`` is called after each candidate of a batch is measured."""

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
        self.progress = progress
        self.workload = get_workload(config.workload)
        self.problem = self.workload.validate_problem(dict(config.problem), config.backend)
        self.backend: Backend | None = None
        self.template = None
        self.sandbox: SandboxPool | None = None
        self.baseline: dict | None = None
        self._rng = random.Random(config.seed)
        self._contenders: set[str] | None = None  # baselines timed between full timings
        self._scale: dict[str, float] = {}  # slot -> factor to the first slot's time (from the last baseline timing)
        # code hash -> its latest measurement and the sources that had it (a compact Twin, not an
        # Evaluation); the latest TWINS_KEPT codes
        self._twins: OrderedDict[str, Twin] = OrderedDict()
        self._twins_lock = threading.Lock()
        self._baseline_calls = 0
        self._compile_pool: ThreadPoolExecutor | None = None
        self._ahead: dict[str, Future] = {}  # cache key -> its compile, started by compile_ahead()
        self._rendered: dict[str, KernelSource] = {}  # genome hash -> its kernel, rendered by compile_ahead()
        self._ahead_lock = threading.Lock()
        # Told why when a compile waits for disk space, and None once compiles go on (the worker shows
        # the run paused meanwhile); called from compile threads.
        self.on_disk_full: Callable[[str | None], None] = lambda why: None
        self.tail = TailTimeout(config.tail_timeout, config.timeout_s)  # --tail-timeout k (running median)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> dict:
        """Build the backend and template, start the sandboxes, time the baselines; return them.

        Raises (BackendUnavailable, SandboxError, RuntimeError) when evaluation cannot work at all.
        """
        from core.backends import make_backend

        self.compile_dir.mkdir(parents=True, exist_ok=True)
        self.backend = make_backend(self.config.backend, self.config.device)
        self._launches = workload_launches(self.config.workload, self.config.backend, self.problem, self.backend.device)
        slots = devices.plan(self.backend.device_kind, self.config.backend, self.config.devices, self.config.device,
                             len(self.backend.devices()))
        device = devices.slot_device(self.backend.device, devices.set_size(slots))
        self.template = self.workload.template(self.config.backend, self.problem, device).run_with(self.config)
        self.sandbox = SandboxPool(self._spec(), slots, self.config.timeout_s, self.log_path)
        self.sandbox.start()
        try:
            reply = self.remeasure_baselines()
        except RuntimeError:
            self.close()
            raise
        self.baseline = reply
        where = ", ".join(f"{s} {r['time_us']:.1f} us" for s, r in reply["slots"].items())
        self.log(f"evaluator ready on {self.backend.device.label()}: baseline {reply['primary']} {where} "
                 f"(sandbox log {self.log_path})")
        return reply

    def remeasure_baselines(self, every: bool = False) -> dict:
        """Time the baselines again in the sandbox (a record like the one ``start`` returns).

        Every baseline is timed when ``every`` is set, at the first call and every
        :data:`FULL_TIMING_EVERY` calls; the calls between time only the *contenders*, the baselines
        within :data:`CONTENDER_RATIO` of the fastest in the last full timing -- a baseline 10x
        slower than the primary (eager RMSNorm) cannot become the primary between two full timings,
        and timing it three times a generation cost as much as a few candidates."""
        self._require_started()
        full = every or self._contenders is None or self._baseline_calls % FULL_TIMING_EVERY == 0
        request = {"op": "baseline", "seed": self._seed()}
        if not full:
            request["names"] = sorted(self._contenders)
        timeout_s = max(120.0, 4 * self.config.timeout_s)
        replies = self.sandbox.each(lambda slot: self.sandbox.call(request, slot, timeout_s))
        for slot, r in replies.items():
            if r.get("status") != "ok":
                raise RuntimeError(f"baseline measurement failed on {slot}: {r.get('status')}: {r.get('cause')}")
            r.pop("status", None)
        reply = next(iter(replies.values()))
        # Each slot's time of the first slot's primary: a candidate timed on slot s is scaled by
        # first / slot-s, so its time term is its own device's baseline over its own time.
        primary = reply["primary"]
        reply["slots"] = {s: {"time_us": r["baselines"].get(primary, {}).get("time_us") or r["time_us"],
                              "spread_us": r.get("spread_us"), "device": r.get("device", {}).get("name")}
                          for s, r in replies.items()}
        self._scale = {s: reply["time_us"] / v["time_us"] for s, v in reply["slots"].items() if v["time_us"]}
        self._baseline_calls += 1
        if full:
            timed = {n: e["time_us"] for n, e in reply["baselines"].items() if e.get("time_us") and e.get("verified")}
            fastest = min(timed.values())
            self._contenders = {n for n, t in timed.items() if t <= CONTENDER_RATIO * fastest}
        return reply

    def close(self) -> None:
        """Stop the sandbox processes (and the compiles no one will wait for)."""
        if self._compile_pool is not None:
            self._compile_pool.shutdown(wait=False, cancel_futures=True)
            self._compile_pool = None
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
        if self.backend is not None:
            self.backend.close()

    def __enter__(self) -> "Evaluator":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _spec(self) -> dict:
        from core.evaluation.limits import sandbox_limits  # the CPU sandbox's rlimits (core/evaluation/sandbox.py applies them)

        return {"server": "core.evaluation.protocol:Protocol", "backend": self.config.backend,
                "workload": self.config.workload, "problem": self.problem,
                "stability_launches": self.config.stability_launches, "timing_target_s": self.timing_target_s,
                "limits": sandbox_limits(self.backend, self.config.timeout_s),
                "cache_dir": str(self.cache_dir.absolute())}  # read (and Triton's written) under isolation

    def _seed(self) -> int:
        return self._rng.getrandbits(62)

    def _require_started(self) -> None:
        if self.sandbox is None:
            raise RuntimeError("Evaluator.start() must be called before evaluating")

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
                rendered.append((h, self._rendered.pop(h, None) or self.template.render(g)))
            except Exception as exc:  # a template bug or an unrenderable genome kills only this one
                done[h] = Evaluation(h, "compile_error", cause=one_line(f"render failed: {type(exc).__name__}: {exc}"))
        evaluations = self.evaluate_sources([k for _, k in rendered], [h for h, _ in rendered])
        done.update(zip([h for h, _ in rendered], evaluations))
        return [done[g.hash].copy() for g in genomes]

    def evaluate_sources(self, kernels: list[KernelSource], genome_hashes: list[str] | None = None) -> list[Evaluation]:
        """The path every candidate takes after rendering: static check, compile, sandbox.

        Identical sources (by cache key) are compiled and measured once. ``genome_hashes`` labels
        the results (defaults to the source hash).
        """
        self._require_started()
        keys = [self.backend.cache_key(k) for k in kernels]
        first: dict[str, KernelSource] = {}
        for key, k in zip(keys, kernels):
            first.setdefault(key, k)
        results: dict[str, Evaluation] = {}
        to_compile = {}
        for key, k in first.items():
            reason = self.template.resource_violation(k)
            if reason:
                results[key] = _record(key, k, "resource_exceeded", reason)
            else:
                to_compile[key] = k
        seeds = {key: self._seed() for key in to_compile}  # drawn in a fixed order: measuring goes by compile completion
        compiled = self._compiled(to_compile)
        if self.backend.device_kind == "cpu":  # compiles would share the cores the kernels are timed on
            compiled = list(compiled)

        def measure(item: tuple, slot: str) -> tuple[str, Evaluation]:
            key, (k, artifact, seconds, error) = item
            if error is not None:
                return key, _record(key, k, "compile_error", first_error_line(error), compile_s=seconds, compile_log=error)
            twin = self._twin(artifact, key)
            if twin is not None:  # another source, the same machine code and launch, measured already
                return key, twin.answer(key, k, artifact, seconds)
            ev = self._measure(key, k, artifact, seconds, seeds[key], slot)
            self._remember(artifact, key, ev)
            return key, ev

        for done, (key, ev) in enumerate(self.sandbox.map(compiled, measure), 1):
            results[key] = ev
            self.progress(done, len(to_compile))
        return [results[key].copy(genome_hash=label) for label, key in zip(genome_hashes or keys, keys)]

    def _twin(self, artifact: Artifact, key: str) -> "Twin | None":
        """The measurement of another source with ``artifact``'s code, or None. A source that has
        had that measurement before is sent again to be re-timed: it is measured, not answered."""
        with self._twins_lock:
            held = self._twins.get(artifact.code_hash) if artifact.code_hash else None
            if held is None or key in held.users:
                return None
            held.users += (key,)
            return held

    def _remember(self, artifact: Artifact, key: str, ev: Evaluation) -> None:
        if not artifact.code_hash or ev.status in ("crashed", "timeout"):  # a crash may be the machine's, not the code's
            return
        with self._twins_lock:
            held = self._twins.get(artifact.code_hash)
            users = held.users if held else ()
            self._twins[artifact.code_hash] = Twin(ev, users if key in users else (*users, key))
            self._twins.move_to_end(artifact.code_hash)
            while len(self._twins) > TWINS_KEPT:
                self._twins.popitem(last=False)

    def evaluate_everywhere(self, kernel: KernelSource) -> dict[str, Evaluation]:
        """``kernel`` verified and timed on every device slot of the run (one compile): slot ->
        evaluation, ``device_time_us`` its time there. A kernel that works on one card only is caught
        here before it is reported."""
        self._require_started()
        key = self.backend.cache_key(kernel)
        artifact, seconds, error = self._compile_one(kernel)
        if error is not None:
            ev = _record(key, kernel, "compile_error", first_error_line(error), compile_s=seconds, compile_log=error)
            return {slot: ev.copy(device=slot) for slot in self.sandbox.labels}
        seed = self._seed()
        return self.sandbox.each(lambda slot: self._measure(key, kernel, artifact, seconds, seed, slot))

    def pair(self, kernel: KernelSource, baseline: str) -> dict:
        """``kernel`` (verified already) timed in interleaved pairs with the baseline ``baseline`` on
        the first device slot: the sandbox's reply (``speedup``, ``time_us``, ``pair_baseline_us``...)."""
        self._require_started()
        artifact, _seconds, error = self._compile_one(kernel)
        if error is not None:
            return {"status": "compile_error", "cause": first_error_line(error)}
        return self.sandbox.call({"op": "pair", "artifact": artifact, "seed": self._seed(), "baseline": baseline},
                                 self.sandbox.labels[0])

    def crosscheck(self, kernel: KernelSource, names: list[str] | None = None) -> dict:
        """``kernel`` and the baselines ``names`` (default all) timed by the second method, on the
        first device slot (:mod:`core.evaluation.crosscheck`): the sandbox's reply, or
        ``{"status": "compile_error", ...}``."""
        self._require_started()
        artifact, _seconds, error = self._compile_one(kernel)
        if error is not None:
            return {"status": "compile_error", "cause": first_error_line(error)}
        slot = self.sandbox.labels[0]
        return self.sandbox.call({"op": "crosscheck", "artifact": artifact, "seed": self._seed(), "names": names}, slot)

    def _compiled(self, kernels: dict[str, KernelSource]):
        """Yield (key, (kernel, artifact or None, seconds, error log or None)) as each compile
        finishes: compiles run in parallel, and the sandbox measures one while the rest compile."""
        if not kernels:
            return
        with self._ahead_lock:
            futures = {(self._ahead.pop(key, None) or self._pool().submit(self._compile_one, k)): key
                       for key, k in kernels.items()}
        for f in as_completed(futures):
            key = futures[f]
            yield key, (kernels[key], *f.result())

    def compile_ahead(self, genomes: list[Genome]) -> None:
        """Start compiling ``genomes`` in the background; :meth:`evaluate` then waits for those
        compiles instead of starting them. A generation's candidates are measured in chunks between
        baseline timings: compiled ahead, no chunk starts with every device waiting on a compiler."""
        self._require_started()
        for g in genomes:
            try:
                kernel = self.template.render(g)
            except Exception:  # noqa: BLE001 - evaluate() renders it again and reports why
                continue
            key = self.backend.cache_key(kernel)
            with self._ahead_lock:
                self._rendered[g.hash] = kernel
                if key not in self._ahead and not self.template.resource_violation(kernel):
                    self._ahead[key] = self._pool().submit(self._compile_one, kernel)

    def _pool(self) -> ThreadPoolExecutor:
        """The compile threads, kept for the run (at lowered priority: they yield to the timing)."""
        if self._compile_pool is None:
            self._compile_pool = ThreadPoolExecutor(max_workers=self._workers(), thread_name_prefix="compile",
                                                    initializer=_lower_priority)
        return self._compile_pool

    def _workers(self) -> int:
        return self.config.compile_workers or os.cpu_count() or 1

    def _compile_one(self, kernel: KernelSource) -> tuple[Artifact | None, float, str | None]:
        """Compile ``kernel``: (artifact, seconds, None) or (None, seconds, the error log).

        A compile that failed because the disk is full (ENOSPC, EDQUOT: the machine's fault, not
        the kernel's) is never reported: while space is short it waits for room
        (:func:`core.evaluation.disk_space.wait_for_room`) and compiles again, telling :attr:`on_disk_full`
        so the run shows the pause. With space to spare, such an error is retried once, then
        reported like any other (a kernel whose ``#error`` merely says so stalls nothing)."""
        from core.evaluation.disk_space import disk_full, space_short, wait_for_room

        t0, waited, spared = time.perf_counter(), False, 0
        while True:
            try:
                artifact = self.backend.compile(kernel, self.compile_dir)
                artifact = self.backend.precompile(artifact, self._launches, self._workers())
                error = None
            except CompileError as exc:
                artifact, error, full = None, trim_log(str(exc)) or "compile failed (no log)", disk_full(exc)
            except Exception as exc:  # noqa: BLE001 - the compiler missing, a cache folder gone: still only this kernel
                artifact, error, full = None, f"{type(exc).__name__}: {exc}", disk_full(exc)
            if error is not None and full is not None:
                short = space_short([self.compile_dir, tempfile.gettempdir()])
                if short or spared < 1:
                    spared += not short
                    if short:
                        waited = True
                        self.on_disk_full(f"a compile found the disk full ({first_error_line(str(full))}); "
                                          "it is retried when space returns")
                        wait_for_room(short)
                    continue
            if waited:
                self.on_disk_full(None)
            return artifact, time.perf_counter() - t0, error

    def _measure(self, key: str, kernel: KernelSource, artifact: Artifact, compile_s: float, seed: int,
                 slot: str | None = None) -> Evaluation:
        slot = slot or self.sandbox.labels[0]
        box = self.sandbox.sandboxes[slot]
        t0, restarts = time.perf_counter(), box.restarts
        reply = self.sandbox.call({"op": "evaluate", "artifact": artifact, "seed": seed}, slot, self.tail.limit())
        if box.restarts != restarts:
            self.log(f"candidate {key[:12]} on {slot}: {reply.get('status')} ({reply.get('cause', '')}); sandbox restarted")
        ev = _record(key, kernel, reply.get("status", "crashed"), reply.get("cause", ""),
                     compile_s=compile_s, compile_log=artifact.log)
        ev.resources = {**kernel.resources, **artifact.resources}
        ev.eval_s = time.perf_counter() - t0
        for name in MEASURES:
            value = reply.get(name)
            if isinstance(value, (str, bool)) or (value is not None and math.isfinite(value)):
                setattr(ev, name, value)  # (an inf error of a NaN output is left out: the cause says it)
        ev.device, ev.device_time_us = slot, ev.time_us
        scale = self._scale.get(slot, 1.0)
        if ev.time_us is not None and scale != 1.0:
            ev.time_us *= scale
            ev.time_spread_us = ev.time_spread_us * scale if ev.time_spread_us is not None else None
        ev.shape_errors = list(reply.get("shape_errors") or [])
        ev.phases = {"compile": compile_s, **{k: float(v) for k, v in (reply.get("stages_s") or {}).items()}}
        return self.tail.observe(ev.status, ev.eval_s) or ev


def _lower_priority() -> None:
    """Compile threads (and the compilers they start) yield the CPU to the sandbox's timing."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # Linux: per thread
    except (AttributeError, OSError):
        pass


def _record(key: str, kernel: KernelSource, status: str, cause: str, compile_s: float = 0.0,
            compile_log: str = "") -> Evaluation:
    return Evaluation(genome_hash=key, status=status, cause=one_line(cause), source_hash=key, compile_s=compile_s,
                      resources=dict(kernel.resources), source=kernel.source, entry=kernel.entry,
                      flags=list(kernel.flags), launch=dict(kernel.launch), compile_log=compile_log)
