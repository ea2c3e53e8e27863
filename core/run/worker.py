"""The run worker: the GA loop wired to the evaluator and the store.

One worker process owns one run folder: it is the only writer of ``run.duckdb``. Every generation
is committed in one transaction together with the population and RNG state, so a worker killed at
any moment resumes (``python -m core resume <id>``) exactly after its last committed generation.
Between generations it obeys ``control.json`` (pause, resume, stop). A background thread refreshes
``heartbeat.json`` every few seconds so the dashboard can tell a slow generation from a dead worker.

Disk space: before every generation and every commit the worker checks the free space of the runs
folder's filesystem (:class:`DiskGuard`). Below the threshold (``$ABEBOT_MIN_FREE_BYTES``, default
the larger of 1 GiB and 8 times the largest generation written so far) the run shows ``paused`` with
a ``disk nearly full`` message and waits, holding any measured generation in memory, until space
returns. A commit that still fails for want of space (ENOSPC, EDQUOT) is rolled back by DuckDB and
retried once space returns, so no committed generation is lost or written twice.
"""
from __future__ import annotations

import dataclasses
import json
import hashlib
import logging
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from core.config import RunConfig
from core.evaluation.disk_space import MIN_FREE_ENV, RETRY_AFTER_POLLS, DiskGuard, disk_full, size_text as _size
from core.search.ga import GAContext, Individual, diversity, rng_from_json, rng_state_to_json, summarise
from core.search.strategies import steps
from core.genome import Genome
from core.search.retiming import baseline_summary, describe
from core.run.rows import champion_text, individual_row, kernel_rows, known_measures, rebuild_population

HEARTBEAT_EVERY_S = 5.0
PAUSE_POLL_S = 0.5


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived; the worker stops after saving its status."""


def _log_to(run_dir: Path, echo: Callable[[str], None] | None) -> Callable[[str], None]:
    # One logger per run folder, not per run name: two runs of one name in one process (two runs folders,
    # a test suite's workers) must each write their own worker.log.
    path = (run_dir / "worker.log").resolve()
    logger = logging.getLogger(f"abebot.run.{run_dir.name}.{hashlib.sha256(str(path).encode()).hexdigest()[:12]}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not logger.handlers:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        logger.addHandler(handler)

    def log(line: str) -> None:
        logger.info(line)
        if echo:
            echo(line)

    return log


class RunWorker:
    """Drives one run from its current state to the end of its budget."""

    def __init__(self, writer: Any, config: RunConfig, run_dir: Path, runs_dir: Path, echo: Callable[[str], None] | None = print):
        self.writer, self.config, self.run_dir, self.runs_dir = writer, config, run_dir, runs_dir
        self.log = _log_to(run_dir, echo)
        self.beat: dict[str, Any] = {"run_id": run_dir.name, "pid": os.getpid(), "status": "running",
                                     "total_generations": config.generations, "hours": config.hours}
        self._beat_lock = threading.Lock()
        self._stop_beat = threading.Event()
        self.baseline_name = "baseline"
        self.evaluated = 0  # evaluations made by this process (a resumed run adds its earlier count)
        self.paused_s = 0.0  # time spent paused does not consume an hours budget
        self.disk = DiskGuard(runs_dir, run_dir)  # ValueError for a malformed $ABEBOT_MIN_FREE_BYTES
        self._compiles_waiting: set[int] = set()  # compile threads waiting for disk space
        self._compile_pause_t = 0.0

    # -- heartbeat -------------------------------------------------------------------------------
    def heartbeat(self, **fields: Any) -> None:
        """Update and write heartbeat.json; a full disk only costs this heartbeat (the status is
        advisory, the database is what counts)."""
        with self._beat_lock:
            self.beat.update(fields)
            try:
                self.writer.heartbeat(**self.beat)
            except Exception as exc:
                if not disk_full(exc):
                    raise

    def _beat_forever(self) -> None:
        while not self._stop_beat.wait(HEARTBEAT_EVERY_S):
            try:  # the periodic look at free space, visible to the dashboard between generations
                self.heartbeat(disk_free_bytes=self.disk.free(), disk_min_free_bytes=self.disk.threshold())
            except OSError:
                pass

    # -- main loop -------------------------------------------------------------------------------
    def run(self) -> int:
        """Run (or resume) to the end of the budget; returns the process exit code."""
        from core.evaluation.cluster import make_evaluator
        from store.control import read_control

        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
        beat_thread = threading.Thread(target=self._beat_forever, daemon=True)
        evaluator = make_evaluator(self.config, self.runs_dir / ".cache", log=self.log, log_path=self.run_dir / "sandbox.log",
                              progress=lambda done, total: self.heartbeat(phase=f"measured {done} of {total} candidates"))
        if hasattr(evaluator, "on_disk_full"):
            evaluator.on_disk_full = self._compile_found_disk_full
        for sig in previous:
            signal.signal(sig, _raise_interrupted)
        try:
            self._set_status("running")
            self.heartbeat(phase="measuring baseline", started_at=time.time())
            beat_thread.start()
            measured = evaluator.start()
            if self.writer.baseline() is None:  # the device and a first timing, before generation 0 commits
                self.writer.set_baseline(measured)
            self.log(f"baseline {measured['primary']}: {measured['time_us']:.2f} us, {measured['memory_bytes']} bytes on "
                     f"{measured['device']['name']} (timed {self.config.baseline_checks} times in every generation, "
                     "interleaved with the candidates)")
            self.baseline_name = measured["primary"]
            pending = [measured]  # this timing is the first of the next generation's

            def remeasure() -> dict:
                self.heartbeat(phase="timing the baseline")
                return pending.pop() if pending else evaluator.remeasure_baselines()

            evaluate = self._counting(evaluator.evaluate)
            if self.config.timing_cache:  # genomes measured by earlier runs on this device are not measured again
                from core.search.timing_cache import TimingCache, cached, identity

                cache = TimingCache(self.runs_dir / ".cache" / "timings", identity(self.config, measured.get("device") or {}))
                evaluate = cached(evaluate, cache, self.log)
            ctx = GAContext(self.config, evaluator.template.gene_space(), measured, evaluate,
                            known=known_measures(self.writer),
                            retime=self._retiming(evaluator.evaluate),
                            remeasure=remeasure, log=self.log,
                            compile_ahead=getattr(evaluator, "compile_ahead", None))
            return self._generations(ctx, read_control)
        except Interrupted:
            self._set_status("stopped", "interrupted by a signal; resume to continue")
            self.log("interrupted: stopped after the last committed generation")
            return 130
        except Exception as exc:
            self._set_status("failed", f"{type(exc).__name__}: {exc}")
            logging.getLogger(f"abebot.run.{self.run_dir.name}").exception("worker failed")
            raise
        finally:
            for sig in previous:  # a signal now would cut the cleanup short: the status is saved already
                signal.signal(sig, signal.SIG_IGN)
            self._stop_beat.set()
            evaluator.close()
            self.heartbeat(phase="")
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _set_status(self, status: str, message: str = "") -> None:
        try:
            self.writer.set_status(status, message)
        except Exception as exc:  # with no room left even the status row cannot be written
            if not disk_full(exc):
                raise
        self.heartbeat(status=status, message=message)

    def _wait_for_space(self, read_control: Callable[[Path], str | None]) -> str | None:
        """While free space is short, show a disk-full pause and wait; "stop" when asked to stop meanwhile."""
        short = self.disk.shortage()
        if short is None:
            return None
        free, need = short
        where = self.runs_dir.resolve()
        self._set_status("paused", f"disk nearly full: {_size(free)} free on the filesystem of {where}, below the "
                                   f"{_size(need)} needed (${MIN_FREE_ENV}); the run resumes by itself when space returns")
        self.heartbeat(phase="paused: disk nearly full", paused_for="disk", disk_free_bytes=free, disk_min_free_bytes=need)
        self.log(f"paused: disk nearly full ({_size(free)} free on {where}, {_size(need)} needed)")
        t_pause, polls = time.monotonic(), 0
        while short is not None:
            time.sleep(self.disk.poll_s)
            polls += 1
            if read_control(self.run_dir) == "stop":
                self.paused_s += time.monotonic() - t_pause
                return "stop"
            if self.disk.wanted and polls % RETRY_AFTER_POLLS == 0:
                self.disk.wanted = 0  # a quota or a file-size limit frees nothing we can see: try again anyway
            short = self.disk.shortage()
            self.heartbeat(disk_free_bytes=short[0] if short else self.disk.free())
        self.paused_s += time.monotonic() - t_pause
        self._set_status("running")
        self.heartbeat(phase="", paused_for=None)
        self.log(f"resumed: {_size(self.disk.free())} free on {where}")
        return None

    def _compile_found_disk_full(self, why: str | None) -> None:
        """From a compile thread: ``why`` it waits for disk space (the run shows ``paused``), or None
        when it goes on (the run shows ``running`` once no compile waits). The pause does not count
        against an hours budget."""
        me = threading.get_ident()
        with self._beat_lock:
            before = bool(self._compiles_waiting)
            (self._compiles_waiting.add if why else self._compiles_waiting.discard)(me)
            after = bool(self._compiles_waiting)
        if after and not before:
            self._compile_pause_t = time.monotonic()
            self._set_status("paused", f"disk nearly full: {why}")
            self.heartbeat(phase="paused: disk full while compiling", paused_for="disk")
            self.log(f"paused: {why}")
        elif before and not after:
            self.paused_s += time.monotonic() - self._compile_pause_t
            self._set_status("running")
            self.heartbeat(phase="", paused_for=None)
            self.log(f"resumed: compiles go on ({_size(self.disk.free())} free)")

    def _counting(self, evaluate: Callable) -> Callable[[list[Genome]], list[dict]]:
        def run(genomes: list[Genome]) -> list[dict]:
            self.heartbeat(phase=f"compiling {len(genomes)} new candidates")
            results = [dataclasses.asdict(e) for e in evaluate(genomes)]
            self.evaluated += len(results)
            return results

        return run

    def _retiming(self, evaluate: Callable) -> Callable[[list[Genome]], list[dict]]:
        """Elites measured again: not new evaluations, so not counted."""
        def run(genomes: list[Genome]) -> list[dict]:
            self.heartbeat(phase=f"re-timing {len(genomes)} elites")
            return [dataclasses.asdict(e) for e in evaluate(genomes)]

        return run

    def _warm_start(self, ctx: GAContext) -> list[Genome]:
        """The best genomes of the runs in ``start_from`` (:mod:`core.run.warm_start`), logged."""
        from core.run import warm_start

        folders = warm_start.check(self.runs_dir, self.config.start_from, self.config.workload, self.config.backend)
        start, skipped = warm_start.genomes(folders, ctx.space, warm_start.share(self.config.population))
        self.log(f"warm start from {self.config.start_from}: {len(start)} genomes"
                 + (f" ({skipped} not legal in this gene space, left out)" if skipped else ""))
        return start

    def _generations(self, ctx: GAContext, read_control: Callable[[Path], str | None]) -> int:
        cfg = self.config
        initial_population, step = steps(cfg.strategy)  # the GA, random search or an Optuna sampler
        last = self.writer.last_state()
        t0 = time.monotonic()
        if last is None:
            rng = random.Random(cfg.seed)
            elapsed_before, evaluations_before = 0.0, 0
            t_gen = time.monotonic()
            if cfg.start_from:
                ctx.start = self._warm_start(ctx)
            population = initial_population(ctx, rng)
            generation = 0
            if not self._commit(generation, population, rng, time.monotonic() - t0, self.evaluated,
                                time.monotonic() - t_gen, ctx, read_control):
                return self._stopped_uncommitted(generation)
        else:
            generation, state = last
            rng = rng_from_json(state["rng"])
            elapsed_before, evaluations_before = state["elapsed_s"], state["evaluations"]
            # the run-level reference goes on from every committed generation's baseline (core/search/retiming.py)
            ctx.baseline_times = self.writer.baseline_times(through=generation)
            population = rebuild_population(state["population"], ctx, state.get("baseline") or self.writer.baseline())
            n = len(ctx.baseline_times)
            self.log(f"resuming after generation {generation}" + (f" (reference: median of {n} generation baselines)"
                                                                  if n else ""))
        while True:
            elapsed = elapsed_before + (time.monotonic() - t0) - self.paused_s
            if self._budget_spent(generation + 1, elapsed):
                self._set_status("finished")
                self.log(f"finished: {generation + 1} generations in {elapsed:.1f} s")
                return 0
            command = self._obey(read_control) or self._wait_for_space(read_control)
            if command == "stop":
                self._set_status("stopped", "stopped on request")
                self.log("stopped on request")
                return 0
            t_gen = time.monotonic()
            population = step(population, ctx, rng)
            generation += 1
            elapsed = elapsed_before + (time.monotonic() - t0) - self.paused_s
            if not self._commit(generation, population, rng, elapsed, evaluations_before + self.evaluated,
                                time.monotonic() - t_gen, ctx, read_control):
                return self._stopped_uncommitted(generation)

    def _stopped_uncommitted(self, generation: int) -> int:
        self._set_status("stopped", f"stopped on request while the disk was full; generation {generation} was not "
                                    "committed and is redone on resume")
        self.log(f"stopped on request during a disk-full pause; generation {generation} not committed")
        return 0

    def _budget_spent(self, next_generation: int, elapsed_s: float) -> bool:
        cfg = self.config
        if cfg.generations and next_generation >= cfg.generations:
            return True
        return bool(cfg.hours) and elapsed_s >= cfg.hours * 3600

    def _obey(self, read_control: Callable[[Path], str | None]) -> str | None:
        """Wait while paused; return "stop" when asked to stop."""
        command = read_control(self.run_dir)
        if command == "pause":
            self._set_status("paused")
            self.heartbeat(phase="paused")
            self.log("paused")
            t_pause = time.monotonic()
            while command == "pause":
                time.sleep(PAUSE_POLL_S)
                command = read_control(self.run_dir)
            self.paused_s += time.monotonic() - t_pause
            if command != "stop":
                self._set_status("running")
                self.heartbeat(phase="")
                self.log("resumed")
        return "stop" if command == "stop" else None

    def _commit(self, generation: int, population: list[Individual], rng: Any, elapsed: float,
                evaluations: int, gen_seconds: float, ctx: GAContext,
                read_control: Callable[[Path], str | None]) -> bool:
        """Store the generation (waiting for disk space first); False when asked to stop before it could be."""
        summary = dict(summarise(population))
        new = [i for i in population if not i.reused and not i.remeasured]
        baseline = json.loads(json.dumps(dict(ctx.baseline), default=str))  # the generation's, as stored
        summary.update(n_evaluated=len(new), diversity=diversity(population), elapsed_s=elapsed,
                       evals_per_s=len(new) / gen_seconds if gen_seconds > 0 else 0.0, **baseline_summary(baseline))
        state = {
            "rng": rng_state_to_json(rng),
            "population": [{"genome": i.genome.to_dict(), "origin": i.origin, "parents": list(i.parents)} for i in population],
            "elapsed_s": elapsed,
            "evaluations": evaluations,
            "baseline": baseline,  # a resumed run rescores the population against it
        }
        kernels = kernel_rows(new, self.config.backend)
        rows = [individual_row(generation, i) for i in population]
        while True:
            if self._wait_for_space(read_control) == "stop":
                return False
            before = self.disk.footprint()
            try:
                self.writer.commit_generation(generation, rows, kernels, summary, state, baseline=baseline)
            except Exception as exc:
                if not disk_full(exc):
                    raise
                if not self._is_committed(generation):  # else only the heartbeat after COMMIT failed
                    self.disk.write_failed()
                    self.log(f"generation {generation} not committed, the disk is full ({_first_line(disk_full(exc))}); "
                             "it is retried when space returns")
                    continue
            self.disk.committed(before)
            break
        self.baseline_name = baseline.get("primary", self.baseline_name)
        # The generation is in the store: only the population's measures stay in memory, compact.
        hashes = [i.hash for i in population]
        ctx.known.committed(stored=hashes, keep=hashes)
        for ind in population:
            ind.measure = ctx.known[ind.hash]
        self.heartbeat(generation=generation, elapsed_s=elapsed, evaluations=evaluations,
                       evals_per_s=summary["evals_per_s"], phase="")
        best = max(population, key=lambda i: i.fitness)
        champion = f"champion {champion_text(best, self.baseline_name)}" if best.ok else "no viable kernel yet"
        # numbered from 0, counted as done, as everywhere (README): "gen 4 (5/5 done)"
        budget = f" ({generation + 1}/{self.config.generations} done)" if self.config.generations else ""
        base = f" baseline {describe(baseline)}" if baseline.get("time_us") is not None else ""
        self.log(f"gen {generation}{budget} best {summary['best_fitness']:.4f} mean {summary['mean_fitness']:.4f} "
                 f"lethal {summary['n_lethal']}/{len(population)} new {len(new)} re-timed {summary['n_remeasured']} "
                 f"{champion}{base} {gen_seconds:.1f}s")
        return True

    def _is_committed(self, generation: int) -> bool:
        last = self.writer.last_state()
        return last is not None and last[0] >= generation


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _raise_interrupted(signum, frame):  # noqa: ARG001 - signal handler signature
    """The first SIGTERM or SIGINT interrupts the run; later ones are ignored until :meth:`RunWorker.run`
    restores the handlers, so a second signal cannot cut short the saving of the ``stopped`` status
    (it made the worker exit 1 with the status left ``running``)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted()
