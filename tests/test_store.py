"""Contract tests of the run store (docs/CONTRACTS.md, "Store").

The tests talk to the store through the ``store_impl`` fixture, so another implementation of the
same contract (say, SQLite) runs the same suite by adding a parameter, as Optuna does for storages.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from core.tools.export import export_champions, export_zip
from store import (RunReader, RunWriter, StoreError, list_runs, new_run_id, read_control, run_dir,
                   write_control)
from store.runs import RUN_ID_RE
from store.schema import columns

ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"workload": "gemm", "backend": "c", "generations": 10, "population": 4, "problem": {"m": 32}}


@dataclass
class StoreImpl:
    name: str
    create: Callable
    open: Callable
    reader: Callable


IMPLS = {"duckdb+parquet": StoreImpl("duckdb+parquet", RunWriter.create, RunWriter.open, RunReader)}


@pytest.fixture(params=sorted(IMPLS))
def store_impl(request) -> StoreImpl:
    return IMPLS[request.param]


@pytest.fixture
def runs(tmp_path) -> Path:
    path = tmp_path / "runs"
    path.mkdir()
    return path


@pytest.fixture
def writer(store_impl, runs):
    w = store_impl.create(runs, new_run_id("gemm", "c"), CONFIG)
    yield w
    w.close()


def individuals(g: int, n: int = 4) -> list[dict]:
    return [{"genome_hash": f"g{g}i{i}", "genome": {"parallel_config": {"tile": i}}, "parents": [f"g{g - 1}i0"],
             "origin": "mutation", "status": "ok" if i else "compile_error", "cause": "" if i else "syntax error",
             "fitness": (i + g) / 10 if i else 0.0, "time_us": 100.0 - i - g, "time_spread_us": 1.0,
             "memory_bytes": 1000 + i, "extra_bytes": i, "onchip_bytes": 0, "stability": 1.0,
             "time_term": 1.0, "memory_term": 1.0, "stability_term": 1.0, "pareto_rank": 0 if i == n - 1 else 1,
             "source_hash": f"s{i}", "compile_s": 0.1, "eval_s": 0.2, "max_abs_err": 1e-6, "rel_err": 1e-7,
             "resources": {"workspace_bytes": i}, "reused": False} for i in range(n)]


def kernels(n: int = 4) -> list[dict]:
    return [{"source_hash": f"s{i}", "backend": "c", "entry": "abebot_gemm", "source": f"/* kernel {i} */",
             "flags": ["-O3"], "launch": {"tile": i}, "resources": {"workspace_bytes": i}, "compile_log": ""}
            for i in range(n)]


def summary(g: int) -> dict:
    return {"best_fitness": (3 + g) / 10, "mean_fitness": 0.2, "worst_fitness": 0.0, "n_evaluated": 4, "n_lethal": 1,
            "best_time_us": 97.0 - g, "best_memory_bytes": 1003, "diversity": 0.5,
            "lethal_causes": {"compile_error": 1}, "champion_hash": f"g{g}i3", "elapsed_s": 1.0, "evals_per_s": 4.0}


def commit(w, g: int, n: int = 4) -> None:
    w.commit_generation(g, individuals(g, n), kernels(n), summary(g), {"population": [f"g{g}i{i}" for i in range(n)],
                                                                      "rng": [3, list(range(5)), None]})


BASELINE = {"device": {"backend": "c", "index": 0, "name": "test cpu", "memory_bytes": 1 << 30, "multiprocessors": 2,
                       "arch": "x86_64", "versions": {"cc": "gcc 14"}},
            "primary": "numpy", "time_us": 200.0, "memory_bytes": 2000, "baselines": {}}


# -- runs folder ---------------------------------------------------------------------------------
def test_new_run_id_matches_config_pattern():
    rid = new_run_id("gemm", "c")
    assert RUN_ID_RE.match(rid) and "-gemm-c-" in rid
    assert RUN_ID_RE.match(new_run_id("weird name/../x" * 5, "cu da"))


@pytest.mark.parametrize("bad", ["../x", "/etc", "a/b", "", ".", "..", ".cache", "x" * 65, "a\0b"])
def test_run_dir_refuses_escapes(runs, bad):
    with pytest.raises(ValueError):
        run_dir(runs, bad)


def test_run_dir_refuses_symlink_out(runs, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (runs / "evil").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError):
        run_dir(runs, "evil")
    assert run_dir(runs, "good-1") == (runs / "good-1").resolve()


def test_list_runs_skips_non_runs(writer, runs):
    (runs / ".cache").mkdir()
    (runs / "notes.txt").write_text("x")
    (runs / "empty-folder").mkdir()
    commit(writer, 0)
    [row] = list_runs(runs)
    assert row["run_id"] == writer.run_id and row["workload"] == "gemm" and row["backend"] == "c"
    assert row["status"] == "running" and row["generation"] == 0 and row["best_fitness"] == pytest.approx(0.3)


def test_control_round_trip(writer):
    assert read_control(writer.path) is None
    write_control(writer.path, "pause")
    assert read_control(writer.path) == "pause"
    with pytest.raises(ValueError):
        write_control(writer.path, "rm -rf")
    (writer.path / "control.json").write_text("{garbage")
    assert read_control(writer.path) is None


# -- writer/reader contract ----------------------------------------------------------------------
def test_round_trip(store_impl, writer):
    writer.set_baseline(BASELINE)
    for g in range(3):
        commit(writer, g)
    assert writer.last_state()[0] == 2 and writer.last_state()[1]["rng"] == [3, [0, 1, 2, 3, 4], None]
    assert writer.baseline() == BASELINE
    evals = writer.evaluations()
    assert set(evals) == {f"g{g}i{i}" for g in range(3) for i in range(4)} and evals["g1i2"]["time_us"] == 97.0
    writer.heartbeat(phase="evaluating", evaluations=12, total_generations=10)

    r = store_impl.reader(writer.path)
    assert r.config()["workload"] == "gemm" and r.baseline() == BASELINE
    gens = r.generations()
    assert list(gens["generation"]) == [0, 1, 2] and list(gens.columns) == columns("generations")
    assert json.loads(gens["lethal_causes"].iloc[0]) == {"compile_error": 1}
    one = r.individuals(1)
    assert len(one) == 4 and set(one["generation"]) == {1} and list(one.columns) == columns("individuals")
    assert json.loads(one["parents"].iloc[0]) == ["g0i0"] and bool(one["reused"].iloc[0]) is False
    assert len(r.individuals()) == 12 and list(r.individuals(columns=["fitness"]).columns) == ["fitness"]
    champ = r.champion()
    assert champ["genome_hash"] == "g2i3" and champ["kernel"]["source"] == "/* kernel 3 */"
    assert r.kernel("s1")["entry"] == "abebot_gemm" and r.kernel("nope") is None
    hb = r.heartbeat()
    assert hb["pid"] == os.getpid() and hb["generation"] == 2 and hb["phase"] == "evaluating"
    assert hb["run_id"] == writer.run_id and abs(hb["updated_at"] - time.time()) < 60
    assert r.status() == "running"
    writer.set_status("finished", "done")
    assert r.status() == "finished" and r.heartbeat()["message"] == "done"


def test_duplicate_generation_refused(store_impl, writer):
    commit(writer, 0)
    commit(writer, 1)
    with pytest.raises(StoreError, match="already committed"):
        commit(writer, 1)
    with pytest.raises(StoreError, match="already committed"):
        commit(writer, 0)
    commit(writer, 2)
    r = store_impl.reader(writer.path)
    assert list(r.generations()["generation"]) == [0, 1, 2] and len(r.individuals()) == 12


def test_failed_commit_leaves_nothing(store_impl, writer):
    with pytest.raises(StoreError):
        writer.commit_generation(0, individuals(0), kernels(), summary(0), {"bad": object()})
    assert writer.last_state() is None
    commit(writer, 0)
    assert len(store_impl.reader(writer.path).individuals()) == 4


def test_reader_on_empty_run(store_impl, writer):
    r = store_impl.reader(writer.path)
    assert r.generations().empty and list(r.generations().columns) == columns("generations")
    assert r.individuals().empty and list(r.individuals(0).columns) == columns("individuals")
    assert r.champion() is None and r.kernel("s0") is None and r.baseline() is None
    assert r.log_tail() == []
    (writer.path / "worker.log").write_text("".join(f"line {i}\n" for i in range(1000)))
    assert r.log_tail(3) == ["line 997", "line 998", "line 999"]


COMPACT_EVERY = 8  # small, so compaction happens within a fast test


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(RunWriter, "compact_every", COMPACT_EVERY)


def test_compaction_keeps_all_rows(store_impl, writer, small_chunks):
    n_gens = COMPACT_EVERY * 2 + 5
    for g in range(n_gens):
        commit(writer, g, n=2)
    files = sorted(os.listdir(writer.path / "live" / "individuals"))
    assert len(files) == 2 + 5 and files[0] == f"chunk_00000000_{COMPACT_EVERY - 1:08d}.parquet"
    r = store_impl.reader(writer.path)
    every = r.individuals()
    assert len(every) == n_gens * 2 and not every.duplicated(["generation", "genome_hash"]).any()
    assert list(every["generation"]) == sorted(every["generation"])
    for g in (0, COMPACT_EVERY - 1, COMPACT_EVERY, n_gens - 1):
        assert len(r.individuals(g)) == 2
    assert r.kernel("s1") is not None and len(r.generations()) == n_gens


def test_reader_retries_when_a_file_vanishes(store_impl, writer):
    commit(writer, 0)
    r = store_impl.reader(writer.path)
    real, calls = r._files, []

    def stale(*args):
        calls.append(1)
        return [writer.path / "live" / "individuals" / "gen_00000099.parquet"] if len(calls) == 1 else real(*args)

    r._files = stale
    assert len(r.individuals()) == 4 and len(calls) == 2


# -- durability ----------------------------------------------------------------------------------
KILL_SCRIPT = """
from tests.test_store import commit, CONFIG
from store import RunWriter
w = RunWriter.create({runs!r}, {rid!r}, CONFIG)
for g in range(10_000):
    commit(w, g)
    print(g, flush=True)
"""


def test_kill_9_mid_run_loses_nothing(store_impl, runs):
    rid = new_run_id("gemm", "c")
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT.format(runs=str(runs), rid=rid)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)  # `python -c` imports tests.* from its cwd
    printed = []
    for line in proc.stdout:
        printed.append(int(line))
        if len(printed) >= 5:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    path = run_dir(runs, rid)
    assert RunReader(path).status() == "dead"
    w = store_impl.open(path)
    try:
        last, state = w.last_state()
        assert last >= printed[-1] and state["population"][0] == f"g{last}i0"
        r = store_impl.reader(path)
        assert list(r.generations()["generation"]) == list(range(last + 1))
        assert len(r.individuals()) == 4 * (last + 1)
        commit(w, last + 1)
        assert w.last_state()[0] == last + 1
    finally:
        w.close()


def test_live_rebuilt_when_missing(store_impl, writer, small_chunks):
    import shutil

    n_gens = COMPACT_EVERY + 3
    for g in range(n_gens):
        commit(writer, g, n=2)
    writer.set_baseline(BASELINE)
    path = writer.path
    before = store_impl.reader(path).individuals()
    writer.close()
    shutil.rmtree(path / "live")
    w = store_impl.open(path)
    r = store_impl.reader(path)
    assert r.individuals().equals(before) and len(r.generations()) == n_gens and r.baseline() == BASELINE
    # the crash window: committed, but the last generation's Parquet never written
    commit(w, n_gens, n=2)
    w.close()
    (path / "live" / "individuals" / f"gen_{n_gens:08d}.parquet").unlink()
    (path / "live" / "kernels" / f"gen_{n_gens:08d}.parquet").unlink(missing_ok=True)
    w = store_impl.open(path)
    assert len(r.individuals(n_gens)) == 2 and len(r.individuals()) == 2 * (n_gens + 1)
    w.close()


def test_the_writer_reopens_its_database_now_and_then_and_loses_nothing(store_impl, writer, monkeypatch):
    """Issue 36: the database instance's memory grows with the run; the writer gives it back by
    reopening its connection every few commits (here 3) or rows (here 10)."""
    monkeypatch.setattr(RunWriter, "reopen_every", 3)
    monkeypatch.setattr(RunWriter, "reopen_rows", 10)
    first = writer._con
    for g in range(8):
        commit(writer, g, n=4)
    assert writer._con is not first and writer.last_state()[0] == 7
    assert len(writer.genome_hashes()) == 32 and len(store_impl.reader(writer.path).individuals()) == 32


def test_repair_of_a_long_missing_tail_never_duplicates_rows(store_impl, writer, monkeypatch):
    monkeypatch.setattr(RunWriter, "compact_every", 100)
    for g in range(12):
        commit(writer, g, n=2)
    path = writer.path
    writer.close()
    for g in range(5, 12):  # committed, never mirrored
        (path / "live" / "individuals" / f"gen_{g:08d}.parquet").unlink()
    monkeypatch.setattr(RunWriter, "compact_every", 4)
    w = store_impl.open(path)
    for g in range(12, 15):
        commit(w, g, n=2)
    every = store_impl.reader(path).individuals()
    assert len(every) == 30 and not every.duplicated(["generation", "genome_hash"]).any()
    w.close()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "half"])
def test_corrupt_database_refused(store_impl, writer, damage):
    commit(writer, 0)
    path = writer.path
    writer.close()
    db = path / "run.duckdb"
    data = db.read_bytes()
    db.write_bytes({"truncate": b"", "garbage": os.urandom(50_000), "half": data[: len(data) // 2]}[damage])
    before = sorted(os.listdir(path))
    with pytest.raises(StoreError, match="run.duckdb"):
        store_impl.open(path)
    assert sorted(os.listdir(path)) == before


def test_open_refuses_missing_things(store_impl, writer, runs):
    with pytest.raises(StoreError, match="no run folder"):
        store_impl.open(runs / "nope")
    path = writer.path
    writer.close()
    (path / "config.json").write_text("{not json")
    with pytest.raises(StoreError, match="config.json"):
        store_impl.open(path)
    (path / "config.json").write_text(json.dumps(CONFIG))
    (path / "run.duckdb").rename(path / "moved.duckdb")
    with pytest.raises(StoreError, match="run.duckdb is missing"):
        store_impl.open(path)


def test_lock_held_by_another_process(store_impl, writer):
    path = writer.path
    writer.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import sys; from store import RunWriter; "
                               f"w = RunWriter.open({str(path)!r}); print('ready', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match=f"already being written by pid {holder.pid}"):
            store_impl.open(path)
    finally:
        holder.kill()
        holder.wait()
    store_impl.open(path).close()


def test_create_refuses_existing_run_and_open_keeps_heartbeat_fields(store_impl, writer, runs):
    with pytest.raises(StoreError, match="already exists"):
        store_impl.create(runs, writer.run_id, CONFIG)
    writer.heartbeat(total_generations=10, started_at=123.0)
    commit(writer, 0)
    path = writer.path
    writer.close()
    w = store_impl.open(path)
    hb = store_impl.reader(path).heartbeat()
    assert hb["total_generations"] == 10 and hb["started_at"] == 123.0 and hb["generation"] == 0
    w.close()


def test_second_writer_in_same_process_refused(store_impl, writer):
    with pytest.raises(StoreError, match="already being written"):
        store_impl.open(writer.path)


def test_dead_when_worker_gone_or_silent(store_impl, writer):
    r = store_impl.reader(writer.path)
    hb_path = writer.path / "heartbeat.json"
    hb = json.loads(hb_path.read_text())
    writer.close()  # the lock released, as by a worker that exited (a held lock is alive: test_runs_liveness.py)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    hb_path.write_text(json.dumps({**hb, "pid": gone.pid, "pid_start": None}))
    assert r.status() == "dead"
    hb_path.write_text(json.dumps({**hb, "updated_at": time.time() - 24 * 3600}))
    assert r.status() == "dead"
    hb_path.write_text(json.dumps({**hb, "status": "finished", "updated_at": 0}))
    assert r.status() == "finished"


# -- export --------------------------------------------------------------------------------------
def _fake_standalone(monkeypatch, fail: bool = False) -> None:
    """Stand in for core.evaluation.standalone, so export is tested apart from the script's contents."""
    import types

    def write_standalone(folder, kernel, workload, problem):
        assert workload == "gemm" and problem == {"m": 32}
        if fail:
            raise RuntimeError("no script for this one")
        (folder / "run_kernel.py").write_text(f"# standalone for {kernel.entry} on {kernel.backend}\n")

    fake = types.ModuleType("core.evaluation.standalone")
    fake.write_standalone = write_standalone
    monkeypatch.setitem(sys.modules, "core.evaluation.standalone", fake)


def test_export_champion_and_top(writer, tmp_path, monkeypatch):
    _fake_standalone(monkeypatch)
    writer.set_baseline(BASELINE)
    for g in range(3):
        commit(writer, g)
    out = export_champions(writer.path, tmp_path / "champ")
    [folder] = [p for p in out.iterdir() if p.is_dir()]
    assert folder.name == "01_g2i3"
    assert (folder / "kernel.c").read_text() == "/* kernel 3 */"
    assert (folder / "run_kernel.py").read_text().startswith("# standalone for abebot_gemm on c")
    report = json.loads((folder / "report.json").read_text())
    assert report["verification"]["status"] == "ok" and report["vs_baseline"]["speedup"] == pytest.approx(200 / 95)
    assert report["device"]["name"] == "test cpu" and "duckdb" in report["versions"]
    assert json.loads((folder / "launch.json").read_text())["launch"] == {"tile": 3}
    assert json.loads((folder / "genome.json").read_text()) == {"parallel_config": {"tile": 3}}
    top = export_champions(writer.path, tmp_path / "top", which="top", k=3)
    assert sorted(p.name for p in top.iterdir() if p.is_dir()) == ["01_g2i3", "02_g2i2", "03_g2i1"]  # one per kernel
    pareto = export_champions(writer.path, tmp_path / "pareto", which="pareto")
    assert [p.name for p in pareto.iterdir() if p.is_dir()] == ["01_g2i3"]
    with pytest.raises(StoreError, match="not empty"):
        export_champions(writer.path, tmp_path / "top", which="top")
    blob = export_zip(writer.path, "top", 2)
    names = zipfile.ZipFile(__import__("io").BytesIO(blob)).namelist()
    assert f"{writer.run_id}-top/02_g2i2/kernel.c" in names and f"{writer.run_id}-top/index.json" in names


def test_export_finished_run_without_live(writer, tmp_path):
    import shutil

    commit(writer, 0)
    writer.set_status("finished")
    path = writer.path
    writer.close()
    shutil.rmtree(path / "live")
    out = export_champions(path, tmp_path / "out")
    [folder] = [p for p in out.iterdir() if p.is_dir()]
    assert (folder / "kernel.c").exists() and (folder / "report.json").exists()
    assert not (path / "live").exists()  # export never writes into the run


def test_export_records_why_run_kernel_is_missing(writer, tmp_path, monkeypatch):
    _fake_standalone(monkeypatch, fail=True)
    commit(writer, 0)
    out = export_champions(writer.path, tmp_path / "out")
    [folder] = [p for p in out.iterdir() if p.is_dir()]
    assert (folder / "kernel.c").exists() and not (folder / "run_kernel.py").exists()
    [entry] = json.loads((out / "index.json").read_text())["kernels"]
    assert entry["standalone_error"] == "RuntimeError: no script for this one"
    assert json.loads((folder / "report.json").read_text())["standalone_error"] == entry["standalone_error"]


# -- objectives: the term columns come from the run's configuration --------------------------------
def test_term_columns_come_from_the_weights_of_the_runs_config(store_impl, runs):
    config = {**CONFIG, "weights": {"time": 1.0, "energy": 0.5}}
    w = store_impl.create(runs, new_run_id("gemm", "c"), config)
    try:
        r = store_impl.reader(w.path)
        assert w.terms == ("time", "energy") and r.terms == ("time", "energy")
        assert [c for c in r.individuals(0).columns if c.endswith("_term")] == ["time_term", "energy_term"]
        rows = [{k: v for k, v in row.items() if k not in ("memory_term", "stability_term")} | {"energy_term": 0.5}
                for row in individuals(0)]
        w.commit_generation(0, rows, kernels(), summary(0), {"population": []})
    finally:
        w.close()
    w = store_impl.open(w.path)  # reopened: the terms are read back from the database
    try:
        assert w.terms == ("time", "energy")
        assert w.evaluations()["g0i1"]["energy_term"] == 0.5
    finally:
        w.close()
    frame = r.individuals(0, columns=["genome_hash", "energy_term"])
    assert list(frame["energy_term"]) == [0.5] * 4
    assert "memory_term" not in r.individuals().columns and "energy_term" in r.top(1).columns


@pytest.mark.parametrize("path", sorted((ROOT / "benchmarks" / "h200_runs").iterdir()), ids=lambda p: p.name)
def test_an_existing_run_with_the_old_term_columns_still_opens_and_reads(store_impl, tmp_path, path):
    copy = tmp_path / path.name
    shutil.copytree(path, copy)
    r = store_impl.reader(copy)
    assert "weight_time" in r.config() and r.terms == ("time", "memory", "stability")
    inds = r.individuals()
    assert {"time_term", "memory_term", "stability_term"} <= set(inds.columns) and len(inds)
    assert r.champion()["time_term"] > 0
    w = store_impl.open(copy)
    try:
        assert w.terms == ("time", "memory", "stability") and w.evaluations()
    finally:
        w.close()


def test_store_imports_nothing_from_core():
    """store/ is the bottom layer: core and the dashboard use it, never the other way round."""
    import ast

    for path in sorted((ROOT / "store").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if not node.level else []
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                  in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
                names = [str(node.args[0].value)]
            else:
                continue
            bad = [n for n in names if n == "core" or n.startswith("core.")]
            assert not bad, f"{path.relative_to(ROOT)}:{node.lineno} imports {bad[0]}"


# -- scale (opt-in: ABEBOT_STORE_PERF=1; builds 5,000 x 64 through the real writer) ------------
@pytest.mark.skipif(not os.environ.get("ABEBOT_STORE_PERF"), reason="set ABEBOT_STORE_PERF=1 to run")
def test_scale_5000_generations(store_impl, writer):
    n_gens, pop = int(os.environ.get("ABEBOT_STORE_PERF_GENS", 5000)), 64
    t0 = time.perf_counter()
    for g in range(n_gens):
        writer.commit_generation(g, individuals(g, pop)[:pop], kernels(2), summary(g), {"population": list(range(pop))})
    build = time.perf_counter() - t0
    r = store_impl.reader(writer.path)
    t0 = time.perf_counter()
    gens = r.generations()
    t_gens = time.perf_counter() - t0
    t0 = time.perf_counter()
    last = r.individuals(n_gens - 1)
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    hist = r.individuals(columns=["generation", "fitness", "time_us", "memory_bytes", "status"])
    t_hist = time.perf_counter() - t0
    t0 = time.perf_counter()
    champ = r.champion()
    t_champ = time.perf_counter() - t0
    print(f"\nbuild {n_gens}x{pop}: {build:.1f}s ({1000 * build / n_gens:.1f} ms/commit); generations() {t_gens * 1000:.0f} ms; "
          f"one generation {t_one * 1000:.0f} ms; history 5 cols {t_hist * 1000:.0f} ms ({len(hist)} rows); "
          f"champion {t_champ * 1000:.0f} ms; live files {len(os.listdir(writer.path / 'live' / 'individuals'))}")
    assert len(gens) == n_gens and len(last) == pop and len(hist) == n_gens * pop and champ is not None
    assert t_gens + t_one + t_champ < 2.0


def test_the_writer_caps_duckdb_memory_and_names_a_bad_limit(tmp_path, monkeypatch):
    from store import RunWriter, new_run_id
    from store.schema import StoreError
    from store.run_file import MEMORY_LIMIT_ENV

    w = RunWriter.create(tmp_path, new_run_id("rmsnorm", "c"), {"workload": "rmsnorm", "backend": "c"})
    try:
        limit = w._db.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        assert limit.endswith("MiB") and float(limit.split()[0]) < 300  # 256MB, not 80% of the machine's RAM
    finally:
        w.close()
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "lots")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(StoreError, match="ABEBOT_DUCKDB_MEMORY"):
        RunWriter.create(tmp_path, new_run_id("rmsnorm", "c"), {"workload": "rmsnorm", "backend": "c"})
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no half-made run folder
