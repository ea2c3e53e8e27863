"""Several devices in one run (core/evaluation/devices.py, pool.py): CPU core sets are real,
pinned sandboxes; the pool spreads candidates over whichever slot frees up; each individual records
the slot that measured it, and its time is scaled by that slot's baseline."""
from __future__ import annotations

import json
import os
import threading
import time

import duckdb
import pytest

from core.config import ConfigError, RunConfig
from core.evaluation import devices
from core.evaluation.pool import SandboxPool
from tests.helpers import cli

CORES = sorted(os.sched_getaffinity(0))
TWO_CORES = pytest.mark.skipif(len(CORES) < 2, reason="core sets need at least 2 cores")


def test_core_sets_are_disjoint_contiguous_and_cover_every_core():
    for n in range(1, 6):
        sets = devices.split(list(range(11)), n)
        assert [c for s in sets for c in s] == list(range(11))
        assert max(map(len, sets)) - min(map(len, sets)) <= 1
    with pytest.raises(devices.DevicesError):
        devices.split([0, 1], 3)


def test_devices_are_parsed_against_the_machine():
    assert devices.parse("", 4) == [] and devices.parse("all", 3) == [0, 1, 2] and devices.parse("1,0", 2) == [1, 0]
    for bad, why in (("0,0", "twice"), ("2", "does not exist"), ("a", "indices")):
        with pytest.raises(devices.DevicesError, match=why):
            devices.parse(bad, 2)
    slots = devices.plan("gpu", "cuda", "all", 0, 2)
    assert [(s.label, s.index, s.cores) for s in slots] == [("cuda:0", 0, ()), ("cuda:1", 1, ())]
    with pytest.raises(ConfigError, match="devices"):
        RunConfig.from_dict({"devices": "0;1"})


def test_the_pool_gives_more_work_to_the_slot_that_frees_up_first():
    pool = SandboxPool({}, [devices.Slot("a", 0), devices.Slot("b", 1)], timeout_s=1.0)
    seen: dict[str, int] = {"a": 0, "b": 0}
    lock = threading.Lock()

    def run(item, slot):
        time.sleep(0.002 if slot == "a" else 0.03)  # b is 15x slower
        with lock:
            seen[slot] += 1
        return item * 2

    assert sorted(pool.map(iter(range(40)), run)) == [2 * i for i in range(40)]
    assert seen["a"] > 3 * seen["b"] > 0


def test_a_failing_producer_is_reported_not_hung():
    pool = SandboxPool({}, [devices.Slot("a", 0), devices.Slot("b", 1)], timeout_s=1.0)

    def work():
        yield 1
        raise RuntimeError("compile pool gone")

    with pytest.raises(RuntimeError, match="compile pool gone"):
        list(pool.map(work(), lambda item, slot: item))


@TWO_CORES
def test_a_cpu_run_on_two_core_sets(tmp_path):
    """A real run on two pinned core sets: every individual names its slot, both slots measured, each
    generation stores both slots' baselines, and the sandboxes were pinned to disjoint cores."""
    res = cli("run", "--workload", "silu_mul", "--backend", "c", "--devices", "0,1", "--population", "6",
              "--generations", "2", "--seed", "3", "--problem", '{"tokens": 8, "hidden": 256}', "--timeout-s", "10",
              "--runs-dir", str(tmp_path), "--run-id", "two", runs_dir=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    con = duckdb.connect(str(tmp_path / "two" / "run.duckdb"), read_only=True)
    rows = con.execute("SELECT device, time_us, device_time_us FROM individuals WHERE NOT reused").fetchall()
    gens = con.execute("SELECT baseline_devices FROM generations ORDER BY generation").fetchall()
    assert {r[0] for r in rows} == {"c:0", "c:1"}
    assert all(r[2] is not None and r[1] > 0 for r in rows if r[1] is not None)
    assert all(set(json.loads(g[0])) == {"c:0", "c:1"} for g in gens)
    log = (tmp_path / "two" / "run.log").read_text() if (tmp_path / "two" / "run.log").exists() else res.stdout
    assert "c:0" in log and "c:1" in log


def test_devices_the_machine_does_not_have_exit_2(tmp_path):
    res = cli("run", "--backend", "c", "--devices", "0,9", "--runs-dir", str(tmp_path), runs_dir=tmp_path)
    assert res.returncode == 2 and "does not exist" in res.stderr
    assert not any(p for p in tmp_path.iterdir() if not p.name.startswith("."))


@TWO_CORES
def test_a_core_set_sandbox_is_pinned(tmp_path):
    from core.evaluation.sandbox import Sandbox

    slot = devices.plan("cpu", "c", "0,1", 0, 1)[1]
    box = Sandbox({"server": "tests.test_devices:Affinity", **slot.spec()}, timeout_s=10)
    try:
        box.start()
        reply = box.call({"op": "affinity"})
    finally:
        box.close()
    assert reply["cores"] == list(slot.cores) and reply["omp"] == str(len(slot.cores))


class Affinity:
    """A sandbox server that reports where it runs."""

    def __init__(self, spec):
        pass

    def handle(self, request):
        return {"status": "ok", "cores": sorted(os.sched_getaffinity(0)), "omp": os.environ.get("OMP_NUM_THREADS")}


@TWO_CORES
def test_bench_retimes_the_champion_on_every_core_set(tmp_path):
    res = cli("run", "--workload", "silu_mul", "--backend", "c", "--devices", "0,1", "--population", "4",
              "--generations", "1", "--problem", '{"tokens": 8, "hidden": 256}', "--timeout-s", "10",
              "--runs-dir", str(tmp_path), "--run-id", "b", runs_dir=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    res = cli("bench", "b", "--runs-dir", str(tmp_path), "--rounds", "1", runs_dir=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "on c:0: champion" in res.stdout and "on c:1: champion" in res.stdout
    bench = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert set(bench["devices"]) == {"c:0", "c:1"} and all(d["champion_us"] > 0 for d in bench["devices"].values())
