"""Single-host rates that size a multi-host run (docs/multihost.md): the GA's own time per generation
and the DuckDB writer's commit time, with evaluation taken out.

The real worker loop (:class:`core.run.worker.RunWorker`: GA step, scoring, Pareto ranks, diversity,
the commit, the live/ Parquet mirror, the heartbeat) runs against a stand-in evaluator that renders
every genome with the real template (so kernel sources, and so the rows written, have their real
size) and answers at once with a plausible measurement. What is left is the part that stays in one
process when evaluation is spread over 64 GPUs::

    nice -n 10 python -m benchmarks.tools.multihost_rates --workload gemm --backend triton --population 64 --generations 150
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from core.config import RunConfig, validate  # noqa: E402
from core.tools.contract import _device  # noqa: E402  (the simulated device the entry contract is written for)
from core.evaluation.record import Evaluation  # noqa: E402


class InstantEvaluator:
    """Evaluator's interface, answering without compiling or running anything."""

    def __init__(self, config: RunConfig, *args, **kwargs):
        from core.workloads import get_workload

        self.config, self.rng = config, random.Random(config.seed)
        self.template = get_workload(config.workload).template(config.backend, config.problem, _device(config.backend))
        self.evaluate_s = 0.0
        self.request_bytes: list[int] = []  # what a remote evaluator would be sent per candidate, as JSON
        self.reply_bytes: list[int] = []  # and what it would send back (the record without the source)

    def start(self) -> dict:
        return self.remeasure_baselines()

    def remeasure_baselines(self) -> dict:
        t = 1000.0 * (1 + 0.01 * self.rng.random())
        return {"primary": "library", "time_us": t, "memory_bytes": 1 << 27, "stability": 1.0, "samples_us": [t],
                "spread_us": 1.0, "rel_spread": 0.001, "noisy": False, "device": {"name": "simulated"}}

    def evaluate(self, genomes) -> list[Evaluation]:
        t0 = time.perf_counter()
        out = []
        for g in genomes:
            k = self.template.render(g)
            self.request_bytes.append(len(json.dumps({"genome": g.to_dict(), "source": k.source, "entry": k.entry,
                                                      "flags": list(k.flags), "launch": dict(k.launch)})))
            h = hashlib.sha256(k.source.encode()).hexdigest()[:24]
            ok = self.rng.random() < 0.7  # about the viable share seen in real runs; lethal ones carry no times
            t = 1000.0 * self.rng.lognormvariate(0.3, 0.4)
            out.append(Evaluation(g.hash, "ok" if ok else "wrong_result", "" if ok else "max error above tolerance",
                                  time_us=t if ok else None, time_spread_us=0.01 * t if ok else None,
                                  memory_bytes=(1 << 27) + self.rng.randrange(1 << 20) if ok else None, extra_bytes=0,
                                  stability=0.95 if ok else 0.0, determinism=1.0, steadiness=0.95, error_margin=0.9,
                                  source_hash=h, source=k.source, entry=k.entry, flags=list(k.flags),
                                  launch=dict(k.launch), resources={"registers": 128, "shared_bytes": 65536},
                                  compile_s=1.0, eval_s=2.0, phases={"compile": 1.0, "timing": 1.0},
                                  shape_errors=[{"shape": {"m": 67}, "max_abs_err": 1e-4}]))
        self.evaluate_s += time.perf_counter() - t0
        for e in out:
            reply = dataclasses.asdict(e)
            reply.pop("source")
            self.reply_bytes.append(len(json.dumps(reply)))
        return out

    def close(self) -> None:
        pass


def measure(workload: str, backend: str, population: int, generations: int, runs: Path) -> dict:
    import core.evaluation.evaluator as ev
    from core.run.worker import RunWorker
    from store.writer import RunWriter

    cfg = validate(RunConfig(workload=workload, backend=backend, population=population, generations=generations,
                             elites=2, seed=1))
    made: list[InstantEvaluator] = []

    def factory(*a, **k):
        made.append(InstantEvaluator(*a, **k))
        return made[-1]

    try:  # the worker asks for its evaluator here when it runs (core.evaluation.cluster, else the class itself)
        import core.evaluation.cluster as cluster

        cluster.make_evaluator = factory
    except ImportError:
        ev.Evaluator = factory
    writer = RunWriter.create(runs, "rates", json.loads(cfg.to_json()))
    commits: list[float] = []
    ends: list[tuple[float, float]] = []  # (when the commit returned, evaluation stand-in time so far)
    real_commit = writer.commit_generation

    rss: list[int] = []  # the process's resident memory after each commit

    def timed_commit(*a, **k):
        t0 = time.perf_counter()
        real_commit(*a, **k)
        commits.append(time.perf_counter() - t0)
        ends.append((time.perf_counter(), made[0].evaluate_s))
        rss.append(int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE"))

    writer.commit_generation = timed_commit
    t0 = time.perf_counter()
    try:
        RunWorker(writer, cfg, runs / "rates", runs, echo=None).run()
    finally:
        writer.close()
    wall = time.perf_counter() - t0
    fake = made[0]
    db = runs / "rates" / "run.duckdb"
    live = sum(p.stat().st_size for p in (runs / "rates" / "live").rglob("*") if p.is_file())
    first = len(commits) // 5  # after the first fifth: start-up is over, the compaction cadence is steady
    steady = commits[first:]
    # the GA's own time in one generation: from one commit's end to the next commit's start, less rendering
    ga = [(t1 - t0) - c - (r1 - r0) for (t0, r0), (t1, r1), c in zip(ends[first:], ends[first + 1:], commits[first + 1:])]
    return {
        "workload": workload, "backend": backend, "population": population, "generations": len(commits),
        "wall_s": wall, "per_generation_ms": 1000 * wall / len(commits),
        "ga_ms_median": 1000 * statistics.median(ga), "ga_ms_p95": 1000 * sorted(ga)[int(0.95 * len(ga))],
        "render_ms": 1000 * fake.evaluate_s / len(commits),
        "commit_ms_median": 1000 * statistics.median(steady), "commit_ms_p95": 1000 * sorted(steady)[int(0.95 * len(steady))],
        "commits_per_s": len(steady) / sum(steady), "db_bytes_per_generation": db.stat().st_size / len(commits),
        "live_bytes_per_generation": live / len(commits),
        "request_bytes_mean": statistics.mean(fake.request_bytes), "reply_bytes_mean": statistics.mean(fake.reply_bytes),
        # memory: RSS after the first and last commits, and its growth per individual over the second half of
        # the run (least squares), against the database's bytes per individual
        "rss_first_mb": rss[0] / 1e6, "rss_last_mb": rss[-1] / 1e6,
        "rss_growth_bytes_per_individual": statistics.linear_regression(
            range(len(rss) // 2, len(rss)), rss[len(rss) // 2:]).slope / population,
        "db_bytes_per_individual": db.stat().st_size / (len(commits) * population),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="gemm")
    ap.add_argument("--backend", default="triton")
    ap.add_argument("--population", type=int, default=64)
    ap.add_argument("--generations", type=int, default=150)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="abebot-rates-") as tmp:
        runs = Path(tmp)
        result = measure(a.workload, a.backend, a.population, a.generations, runs)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
