"""live/ is derived state: a damaged, truncated or missing Parquet mirror is rebuilt from run.duckdb at
resume, at the next commit and by ``python -m core repair``; readers meanwhile raise one line.

Issue 36, item 2.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli import main
from store import RunReader, RunWriter, new_run_id
from store.queries import IndividualsTable, device_summary
from store.reader import LIVE_REBUILDING, LiveDamaged
from tests.test_store import CONFIG, commit

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 4  # generations per compacted chunk in these tests
N_GENS = CHUNK + 2  # one chunk, then two gen files


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(RunWriter, "compact_every", CHUNK)


@pytest.fixture
def run(tmp_path, small_chunks):
    """An open writer with N_GENS committed generations, and the frames a reader saw of them."""
    runs = tmp_path / "runs"
    runs.mkdir()
    w = RunWriter.create(runs, new_run_id("gemm", "c"), CONFIG)
    for g in range(N_GENS):
        commit(w, g)
    r = RunReader(w.path)
    yield w, r.individuals(), r.generations()
    w.close()


TARGETS = {  # what is damaged: a gen file, a compacted chunk, the generations file, a kernels file
    "individuals gen file": f"individuals/gen_{N_GENS - 1:08d}.parquet",
    "individuals chunk": f"individuals/chunk_00000000_{CHUNK - 1:08d}.parquet",
    "generations file": f"generations/gen_{N_GENS - 1:08d}.parquet",
    "generations chunk": f"generations/chunk_00000000_{CHUNK - 1:08d}.parquet",
    "kernels gen file": "kernels/gen_00000000.parquet",  # kernels s0..s3 are new in generation 0 only
}


def damage(path: Path, how: str) -> None:
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(b"not parquet at all " * 50)
    elif how == "missing":
        path.unlink()
    else:
        raise AssertionError(how)


def same_as_before(path: Path, inds, gens) -> None:
    r = RunReader(path)
    assert r.individuals().equals(inds)
    assert r.generations().equals(gens)
    assert r.kernel("s2") is not None


def read_everything(path: Path) -> None:
    r = RunReader(path)
    r.individuals()
    r.generations()
    r.kernel("s2")
    r.top(3)


@pytest.mark.parametrize("how", ["truncated", "garbage"])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_readers_of_a_damaged_live_file_get_one_line_not_a_traceback(run, target, how):
    w, _, _ = run
    damage(w.path / "live" / TARGETS[target], how)
    with pytest.raises(LiveDamaged) as caught:
        read_everything(w.path)
    text = str(caught.value)
    assert text.startswith(LIVE_REBUILDING) and "\n" not in text and "Traceback" not in text


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_the_individuals_table_and_device_summary_raise_the_same_line(run, how):
    w, _, _ = run
    damage(w.path / "live" / TARGETS["individuals gen file"], how)
    for read in (lambda: IndividualsTable(w.path), lambda: device_summary(w.path)):
        with pytest.raises(LiveDamaged, match=LIVE_REBUILDING):
            read()


@pytest.mark.parametrize("how", ["truncated", "garbage", "missing"])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_resume_rebuilds_a_damaged_live_file(run, target, how):
    w, inds, gens = run
    path = w.path
    w.close()
    damage(path / "live" / TARGETS[target], how)
    w2 = RunWriter.open(path)  # what `python -m core resume` does first
    try:
        same_as_before(path, inds, gens)
        assert any(TARGETS[target].split("/")[0] in name for name in w2.repaired) or how == "missing" \
            or target == "generations file"
        commit(w2, N_GENS)
        assert len(RunReader(path).individuals()) == len(inds) + 4
    finally:
        w2.close()


@pytest.mark.parametrize("how", ["truncated", "garbage", "missing"])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_next_commit_rebuilds_a_damaged_live_file(run, target, how):
    w, inds, gens = run
    damage(w.path / "live" / TARGETS[target], how)
    commit(w, N_GENS)  # never raises because of live/
    r = RunReader(w.path)
    every = r.individuals()
    assert len(every) == len(inds) + 4 and not every.duplicated(["generation", "genome_hash"]).any()
    assert every[every["generation"] < N_GENS].reset_index(drop=True).equals(inds)
    assert list(r.generations()["generation"]) == list(range(N_GENS + 1))
    assert r.kernel("s2") is not None


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_a_damaged_gen_file_at_compaction_never_fails_the_commit_and_the_next_one_repairs_it(tmp_path, small_chunks, how):
    """The issue's case: the compaction read a truncated gen file, and the run failed for good."""
    runs = tmp_path / "runs"
    runs.mkdir()
    w = RunWriter.create(runs, new_run_id("gemm", "c"), CONFIG)
    try:
        for g in range(CHUNK - 1):
            commit(w, g)
        damage(w.path / "live" / "individuals" / "gen_00000001.parquet", how)
        w._live_changed = lambda: False  # the damage unseen: the compaction itself trips over the file
        commit(w, CHUNK - 1)  # compacts: reading gen 1 fails, logged; the commit stands
        assert w.last_state()[0] == CHUNK - 1 and w._live_dirty
        del w._live_changed
        for g in range(CHUNK, CHUNK + 3):
            commit(w, g)
        every = RunReader(w.path).individuals()
        assert len(every) == 4 * (CHUNK + 3) and not every.duplicated(["generation", "genome_hash"]).any()
    finally:
        w.close()
    w = RunWriter.open(w.path)  # and the run still resumes
    w.close()


def test_a_mirror_that_cannot_be_written_never_fails_a_commit(run, monkeypatch):
    w, inds, _ = run
    import store.mirror as writer_module

    def full_disk(path, table):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_module, "write_parquet", full_disk)
    commit(w, N_GENS)  # committed in the database; the mirror only logged
    assert w.last_state()[0] == N_GENS
    monkeypatch.undo()
    commit(w, N_GENS + 1)
    assert len(RunReader(w.path).individuals()) == len(inds) + 8


@pytest.mark.parametrize("how", ["truncated", "garbage", "missing"])
def test_repair_command_rebuilds_live_files_and_says_which(run, how, capsys):
    w, inds, gens = run
    path = w.path
    w.close()
    damage(path / "live" / TARGETS["individuals chunk"], how)
    damage(path / "live" / TARGETS["generations file"], how)
    assert main(["repair", path.name, "--runs-dir", str(path.parent)]) == 0
    out = capsys.readouterr().out
    assert "rebuilt" in out if how != "missing" else ("rebuilt" in out or "nothing to repair" in out)
    same_as_before(path, inds, gens)
    assert main(["repair", path.name, "--runs-dir", str(path.parent)]) == 0
    assert "nothing to repair" in capsys.readouterr().out


def test_repair_of_a_run_its_worker_holds_is_refused_in_one_line(run):
    w, _, _ = run
    proc = subprocess.run([sys.executable, "-m", "core", "repair", w.path.name, "--runs-dir", str(w.path.parent)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "already being written" in proc.stderr and "next commit" in proc.stderr


PAGES_OF_A_RUN = ["monitor", "individuals", "genomes", "export", "benchmark", "runs"]


# (how the individuals file is damaged, how the generations file is): every kind of damage, on both
PAGE_DAMAGES = [("truncated", "garbage"), ("garbage", "truncated"), ("missing", "missing")]


@pytest.fixture(scope="module", params=PAGE_DAMAGES, ids=["-".join(d) for d in PAGE_DAMAGES])
def damaged_dashboard_run(tmp_path_factory, request):
    from dashboard.synthetic import build_run

    folder = tmp_path_factory.mktemp("damaged")
    run_id = build_run(folder, generations=4, population=6, seed=5)
    live = folder / run_id / "live"
    individuals, generations = request.param
    damage(live / "individuals" / "gen_00000001.parquet", individuals)
    damage(live / "generations" / "gen_00000003.parquet", generations)
    return folder, run_id, request.param


@pytest.mark.parametrize("page", PAGES_OF_A_RUN)
def test_every_page_of_a_run_with_a_damaged_live_file_shows_one_line(damaged_dashboard_run, page, monkeypatch):
    """Truncated or garbage: one line instead of the page; missing: the page, with fewer rows; never a traceback."""
    from streamlit.testing.v1 import AppTest

    folder, run_id, how = damaged_dashboard_run
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(folder))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params.update({"run": run_id})
    at.run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    lines = [str(e.value) for e in list(at.info) + list(at.caption) if LIVE_REBUILDING in str(e.value)]
    assert (bool(lines) or how == ("missing", "missing")) and all("\n" not in line for line in lines)
    assert not any("Traceback" in str(e.value) for e in list(at.error) + list(at.markdown) + list(at.code))
