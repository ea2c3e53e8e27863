"""Warm starts (``--start-from``): a run on one shape starts from another run's best genomes, for real
on the CPU backend; the runs it names are checked before anything is written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.run import warm_start
from core.backends import availability

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(availability("c") is not None, reason=f"no C backend: {availability('c')}")


def run(runs_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", "run", "--workload", "rmsnorm", "--backend", "c",
                           "--runs-dir", str(runs_dir), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> Path:
    """A finished 2-generation run of rmsnorm on 16 x 96."""
    runs_dir = tmp_path_factory.mktemp("runs")
    r = run(runs_dir, "--population", "5", "--generations", "2", "--seed", "3", "--problem", '{"rows": 16, "cols": 96}')
    assert r.returncode == 0, r.stderr[-2000:]
    return runs_dir / r.stdout.split()[1]


def test_generation_0_holds_the_named_runs_best_after_the_seeds(first):
    from store.reader import RunReader

    runs_dir = first.parent
    r = run(runs_dir, "--population", "6", "--generations", "1", "--seed", "4", "--init", "random",
            "--problem", '{"rows": 32, "cols": 128}', "--start-from", first.name)
    assert r.returncode == 0, r.stderr[-2000:]
    second = runs_dir / r.stdout.split()[1]
    gen0 = RunReader(second).individuals(0)
    started = gen0[gen0["origin"] == "start"]
    best = list(RunReader(first).top(6)["genome_hash"])
    assert 1 <= len(started) <= warm_start.share(6) and set(started["genome_hash"]) <= set(best)
    assert best[0] in set(started["genome_hash"])  # the champion first
    assert (gen0["origin"] == "random").any() and len(gen0) == 6  # the rest as --init says
    assert started["status"].notna().all()  # measured again, on this shape
    assert "warm start from " + first.name in (second / "worker.log").read_text()


def test_genomes_not_legal_here_are_left_out_and_counted(first, monkeypatch):
    from store.reader import RunReader

    space_top = RunReader(first).top(5)
    bad = json.loads(space_top["genome"].iloc[0])
    group = next(iter(bad))
    bad[group][next(iter(bad[group]))] = "no such value"
    frame = space_top.copy()
    frame.loc[0, "genome"] = json.dumps(bad)
    monkeypatch.setattr(RunReader, "top", lambda self, k=5: frame)
    from core.workloads import get_workload
    from core.backends import backend_class

    wl = get_workload("rmsnorm")
    problem = wl.validate_problem({"rows": 16, "cols": 96}, "c")
    space = wl.template("c", problem, backend_class("c").devices()[0]).gene_space()
    genomes, skipped = warm_start.genomes([first], space, 5)
    assert skipped == 1 and len(genomes) == len(frame) - 1
    assert all(space.validate(g) is None for g in genomes)


def test_a_run_of_another_workload_or_not_a_run_id_is_refused(first):
    with pytest.raises(warm_start.WarmStartError, match="evolved rmsnorm on c, not gemm on c"):
        warm_start.check(first.parent, first.name, "gemm", "c")
    for bad in ("../x", "a/b", "/etc"):
        with pytest.raises(warm_start.WarmStartError, match="not a run id"):
            warm_start.run_ids(bad)
    assert warm_start.run_ids(f" {first.name}, ,{first.name}") == [first.name]
