"""Several hosts through Dask distributed (core/evaluation/cluster.py), on a real local cluster of
two worker processes evaluating C kernels: a run from the CLI, and a worker killed mid-generation
whose candidates another worker measures."""
from __future__ import annotations

import os
import signal
import threading
import time

import duckdb
import pytest

pytest.importorskip("distributed")

from core.config import RunConfig  # noqa: E402
from core.evaluation.cluster import ClusterEvaluator  # noqa: E402
from tests.helpers import cli  # noqa: E402

PROBLEM = '{"tokens": 8, "hidden": 256}'


def test_a_run_on_a_local_dask_cluster(tmp_path):
    res = cli("run", "--workload", "silu_mul", "--backend", "c", "--cluster", "local:2", "--population", "6",
              "--generations", "2", "--seed", "5", "--problem", PROBLEM, "--timeout-s", "10",
              "--runs-dir", str(tmp_path), "--run-id", "dask", runs_dir=tmp_path, timeout=400)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "Dask workers" in res.stdout
    con = duckdb.connect(str(tmp_path / "dask" / "run.duckdb"), read_only=True)
    devices = {r[0] for r in con.execute("SELECT device FROM individuals WHERE NOT reused").fetchall()}
    gens = con.execute("SELECT count(*), min(generation), max(generation) FROM generations").fetchone()
    assert gens == (2, 0, 1)
    assert devices and all(d.startswith("tcp://") for d in devices)


def test_a_worker_killed_mid_generation_loses_no_candidate(tmp_path):
    config = RunConfig.from_dict({"workload": "silu_mul", "backend": "c", "cluster": "local:2", "seed": 2,
                                  "problem": {"tokens": 8, "hidden": 256}, "timeout_s": 10.0, "stability_launches": 4})
    ev = ClusterEvaluator(config, tmp_path / ".cache", log=lambda line: None)
    ev.start()
    try:
        space = ev.template.gene_space()
        import random

        rng = random.Random(0)
        genomes = list({g.hash: g for g in (space.random(rng) for _ in range(40))}.values())[:10]
        pids = ev.client.run(os.getpid)
        out: list = []
        thread = threading.Thread(target=lambda: out.extend(ev.evaluate(genomes)))
        thread.start()
        time.sleep(2.0)  # both workers busy with the generation's candidates
        victim = sorted(pids)[0]
        os.kill(pids[victim], signal.SIGKILL)
        thread.join(timeout=300)
        assert not thread.is_alive()
        assert len(out) == len(genomes)
        assert all(e.status in ("ok", "compile_error", "resource_exceeded") for e in out), [e.cause for e in out]
        assert any(e.device != victim for e in out)
    finally:
        ev.close()
