"""Evaluation on several hosts through Dask distributed (an optional dependency).

The GA and the DuckDB writer stay in the run's one process, the Dask *client*; Dask *workers*
only compile and evaluate. Each worker process holds one ordinary
:class:`~core.evaluation.evaluator.Evaluator` for the run (built on its first task and kept): its
own compile cache, its own sandbox on its own device, its own baselines. So a worker is one device:
start one per GPU (``CUDA_VISIBLE_DEVICES`` picks it; the run's ``device`` is then 0 everywhere).

* a generation's candidates are Dask tasks (``client.map``); Dask gives them to the workers as
  they free up, and re-runs the tasks of a worker that dies on the others (``retries``), so a
  killed worker loses no candidate and the generation commits complete;
* the baselines are timed on every worker (``client.run``) at each of the generation's baseline
  timings; a candidate's time is scaled by the first worker's baseline over its own worker's, so
  its time term is its own device's baseline over its own time (as for several local devices);
* the gene space comes from the first worker's device, so the client needs no GPU.

``cluster`` names the cluster: ``local:N`` starts a local cluster of N worker processes (tests,
one host), anything else is a scheduler address (``tcp://host:8786``). docs/CLUSTER.md says how
to start one.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from core.backends.base import DeviceInfo, KernelSource
from core.evaluation.evaluator import Evaluator
from core.evaluation.record import Evaluation

TASK_RETRIES = 3  # a task whose worker died is re-run elsewhere this many times


class ClusterError(RuntimeError):
    """The cluster cannot be used (dask missing, no scheduler at the address, no workers)."""


class ClusterEvaluator(Evaluator):
    """An :class:`Evaluator` whose candidates and baselines are measured by Dask workers."""

    def start(self) -> dict:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:
            raise ClusterError(f"cluster runs need dask distributed (pip install distributed): {exc}") from None
        address = self.config.cluster
        self._local_cluster = None
        if address.startswith("local:"):
            import dask

            dask.config.set({"distributed.worker.daemon": False})  # each worker starts a sandbox process
            self._local_cluster = LocalCluster(n_workers=int(address.split(":", 1)[1]), threads_per_worker=1,
                                               processes=True, dashboard_address=None)
            self.client = Client(self._local_cluster)
        else:
            try:
                self.client = Client(address, timeout=30)
            except OSError as exc:
                raise ClusterError(f"no Dask scheduler answers at {address}: {exc}") from None
        if not self.client.scheduler_info().get("workers"):
            self.client.wait_for_workers(1, timeout=120)
        reply = self.remeasure_baselines()
        self.backend = None  # compiles happen on the workers
        self.template = self.workload.template(self.config.backend, self.problem,
                                               DeviceInfo.from_dict(reply["device"], self.config.backend)).run_with(self.config)
        self.sandbox = self.client  # "started"
        self.baseline = reply
        self.log(f"evaluator ready on {len(reply['slots'])} Dask workers: baseline {reply['primary']} "
                 + ", ".join(f"{s} {v['time_us']:.1f} us" for s, v in reply["slots"].items()))
        return reply

    def compile_ahead(self, genomes: list) -> None:
        """Nothing to start here: each Dask worker compiles the candidates it is handed."""

    def remeasure_baselines(self, every: bool = False) -> dict:
        records = self._on_every_worker(_worker_baseline, self._config_json(), self._seed(), every)
        if not records:
            raise RuntimeError("no Dask worker answered the baseline timing")
        failed = {w: r for w, r in records.items() if r.get("status") != "ok"}
        if failed:
            worker, r = next(iter(failed.items()))
            raise RuntimeError(f"baseline measurement failed on {worker}: {r.get('cause')}")
        ordered = dict(sorted(records.items()))
        reply = dict(next(iter(ordered.values())))
        primary = reply["primary"]
        reply["slots"] = {w: {"time_us": r["baselines"].get(primary, {}).get("time_us") or r["time_us"],
                              "device": r.get("device", {}).get("name")} for w, r in ordered.items()}
        reply.pop("status", None)
        self._scale = {w: reply["time_us"] / v["time_us"] for w, v in reply["slots"].items() if v["time_us"]}
        return reply

    def evaluate_sources(self, kernels: list[KernelSource], genome_hashes: list[str] | None = None) -> list[Evaluation]:
        from distributed import as_completed

        seeds = [self._seed() for _ in kernels]
        futures = self.client.map(_worker_evaluate, [self._config_json()] * len(kernels), kernels, seeds,
                                  pure=False, retries=TASK_RETRIES)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Evaluation | None] = [None] * len(kernels)
        for done, future in enumerate(as_completed(futures), 1):
            worker, raw = future.result()
            ev = Evaluation(**raw)
            ev.device, ev.device_time_us = worker, ev.time_us
            scale = self._scale.get(worker, 1.0)
            if ev.time_us is not None:
                ev.time_us *= scale
            results[index[future.key]] = ev
            self.progress(done, len(kernels))
        labels = genome_hashes or [r.genome_hash for r in results]
        return [r.copy(genome_hash=label) for r, label in zip(results, labels)]

    def evaluate_everywhere(self, kernel: KernelSource) -> dict[str, Evaluation]:
        out = self._on_every_worker(_worker_evaluate, self._config_json(), kernel, self._seed())
        return {w: Evaluation(**raw).copy(device=w, device_time_us=raw.get("time_us")) for w, (_, raw) in out.items()}

    def _on_every_worker(self, fn: Callable, *args: Any) -> dict[str, Any]:
        """``fn(*args)`` as a task on each worker (queued behind its candidates, in its task thread);
        worker -> result, leaving out a worker that died meanwhile."""
        from distributed import wait

        workers = sorted(self.client.scheduler_info()["workers"])
        futures = {w: self.client.submit(fn, *args, workers=[w], allow_other_workers=False, pure=False)
                   for w in workers}
        try:
            wait(list(futures.values()), timeout=max(300.0, 10 * self.config.timeout_s))
        except TimeoutError:  # a worker gone mid-way: its task never runs; the others answered
            pass
        return {w: f.result() for w, f in sorted(futures.items()) if f.status == "finished"}

    def close(self) -> None:
        for part in ("client", "_local_cluster"):
            thing = getattr(self, part, None)
            if thing is not None:
                thing.close()
                setattr(self, part, None)
        self.sandbox = None

    def _config_json(self) -> str:
        return self.config.to_json()


def make_evaluator(config, cache_dir: Path, **kwargs: Any) -> Evaluator:
    """The run's evaluator: on Dask workers when ``config.cluster`` is set, else on this host."""
    return (ClusterEvaluator if config.cluster else Evaluator)(config, cache_dir, **kwargs)


# ---- on a Dask worker ---------------------------------------------------------------------------

_lock = threading.Lock()  # a worker's evaluator serves its task thread and client.run calls in turn
_evaluators: dict[str, Evaluator] = {}


def _local_evaluator(config_json: str) -> Evaluator:
    from core.config import RunConfig

    ev = _evaluators.get(config_json)
    if ev is None:
        import multiprocessing

        if multiprocessing.current_process().daemon:
            raise ClusterError("this Dask worker is a daemonic process and cannot start a sandbox: start workers "
                               "with DASK_DISTRIBUTED__WORKER__DAEMON=False (docs/CLUSTER.md)")
        raw = json.loads(config_json)
        config = RunConfig.from_dict({**raw, "cluster": "", "devices": ""})
        cache = Path(os.environ.get("ABEBOT_WORKER_CACHE") or Path(tempfile.gettempdir()) / "abebot-worker-cache")
        ev = Evaluator(config, cache, log=lambda line: None, log_path=cache / f"sandbox-{os.getpid()}.log")
        ev.start()
        _evaluators[config_json] = ev
    return ev


def _worker_evaluate(config_json: str, kernel: KernelSource, seed: int) -> tuple[str, dict]:
    from distributed import get_worker

    with _lock:
        ev = _local_evaluator(config_json)
        ev._rng.seed(seed)
        result = ev.evaluate_sources([kernel])[0]
    return get_worker().address, result.to_dict()


def _worker_baseline(config_json: str, seed: int, every: bool) -> dict:
    with _lock:
        try:
            ev = _local_evaluator(config_json)
            ev._rng.seed(seed)
            return {"status": "ok", **ev.remeasure_baselines(every=every)}
        except Exception as exc:  # reported to the client, which names the worker
            return {"status": "failed", "cause": f"{type(exc).__name__}: {exc}"}
