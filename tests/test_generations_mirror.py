"""The generations rows are mirrored incrementally (issue 36): a commit adds one small part to
``live/generations/`` and leaves the earlier ones alone (``live/generations.parquet`` was rewritten
in full at every commit: O(generations) per commit, O(generations²) over a run); parts are merged
level by level so a long run keeps few files; a run from before reads and migrates."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import store.mirror as mirror
from store import RunReader, RunWriter, new_run_id
from store.live_files import LEGACY_GENERATIONS, live_parts
from store.runs import champion_figure
from tests.test_store import CONFIG, commit

CHUNK = 4


@pytest.fixture
def writer(tmp_path, monkeypatch):
    monkeypatch.setattr(RunWriter, "compact_every", CHUNK)
    monkeypatch.setattr(mirror, "MERGE_CHUNKS", 3)
    runs = tmp_path / "runs"
    runs.mkdir()
    w = RunWriter.create(runs, new_run_id("gemm", "c"), CONFIG)
    yield w
    w.close()


def _files(w) -> dict[str, tuple]:
    folder = w.path / "live" / "generations"
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir()}


def test_a_commit_adds_its_generations_row_without_rewriting_the_earlier_ones(writer):
    for g in range(CHUNK + 1):  # a chunk, then gen files
        commit(writer, g)
    before = _files(writer)
    commit(writer, CHUNK + 1)
    after = _files(writer)
    assert not (writer.path / "live" / LEGACY_GENERATIONS).exists()
    assert set(after) - set(before) == {f"gen_{CHUNK + 1:08d}.parquet"}
    assert all(after[name] == stat for name, stat in before.items())  # untouched: same inode, time, size
    assert pq.read_table(writer.path / "live" / "generations" / f"gen_{CHUNK + 1:08d}.parquet").num_rows == 1
    assert list(RunReader(writer.path).generations()["generation"]) == list(range(CHUNK + 2))


def test_a_long_run_keeps_few_generations_files_and_every_row_in_order(writer):
    n = 3 * 3 * CHUNK * 2 + 5  # two merges of the second level, then some
    for g in range(n):
        commit(writer, g)
    parts = live_parts(writer.path / "live" / "generations")
    assert len(list((writer.path / "live" / "generations").iterdir())) == len(parts) <= (CHUNK - 1) + 2 * 2 + 2
    assert max(p.last - p.first + 1 for p in parts) == 3 * 3 * CHUNK  # merged twice: chunks of chunks
    gens = RunReader(writer.path).generations()
    assert list(gens["generation"]) == list(range(n))
    assert champion_figure(writer.path)["best_fitness"] == gens["best_fitness"].iloc[-1]


def test_a_run_with_the_old_single_generations_file_is_read_then_migrated_on_open(writer):
    for g in range(CHUNK + 2):
        commit(writer, g)
    live = writer.path / "live"
    expected = RunReader(writer.path).generations()
    old = pq.read_table(live / "generations" / f"chunk_00000000_{CHUNK - 1:08d}.parquet")
    rest = [pq.read_table(p.path) for p in live_parts(live / "generations")[1:]]
    import pyarrow as pa

    path = writer.path
    writer.close()
    pq.write_table(pa.concat_tables([old, *rest]), live / LEGACY_GENERATIONS)  # the layout before
    for p in (live / "generations").iterdir():
        p.unlink()
    (live / "generations").rmdir()
    assert RunReader(path).generations().equals(expected)
    assert champion_figure(path)["best_fitness"] == expected["best_fitness"].iloc[-1]
    w = RunWriter.open(path)  # resume: generations/ written from the database, the old file gone
    try:
        assert not (live / LEGACY_GENERATIONS).exists() and live_parts(live / "generations")
        assert RunReader(path).generations().equals(expected)
        commit(w, CHUNK + 2)
        assert list(RunReader(path).generations()["generation"]) == list(range(CHUNK + 3))
    finally:
        w.close()


def test_a_merge_cut_short_leaves_parts_that_readers_skip_and_the_next_open_removes(writer):
    for g in range(3 * CHUNK):  # three chunks: merged into one at the third
        commit(writer, g)
    folder = writer.path / "live" / "generations"
    merged = folder / f"chunk_00000000_{3 * CHUNK - 1:08d}.parquet"
    assert merged.exists()
    small = pq.read_table(merged).slice(0, CHUNK)
    pq.write_table(small, folder / f"chunk_00000000_{CHUNK - 1:08d}.parquet")  # as if the drop was cut short
    assert list(RunReader(writer.path).generations()["generation"]) == list(range(3 * CHUNK))
    path = writer.path
    writer.close()
    RunWriter.open(path).close()
    assert not (folder / f"chunk_00000000_{CHUNK - 1:08d}.parquet").exists()
    assert list(RunReader(path).generations()["generation"]) == list(range(3 * CHUNK))


def test_generations_rows_are_merged_every_eight_so_a_page_reads_few_files(tmp_path):
    """Every page reads the generations rows whole: with 64 gen files before a merge, a 5,000-generation
    run could read 79 files (200 ms on the development VM) instead of 9 (20 ms)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    w = RunWriter.create(runs, new_run_id("gemm", "c"), CONFIG)
    try:
        for g in range(20):
            commit(w, g, n=1)
    finally:
        w.close()
    names = sorted(p.path.name for p in live_parts(w.path / "live" / "generations"))
    assert names == ["chunk_00000000_00000007.parquet", "chunk_00000008_00000015.parquet",
                     *[f"gen_{g:08d}.parquet" for g in range(16, 20)]]
    assert len(live_parts(w.path / "live" / "individuals")) == 20  # individuals: merged every 64, as before
