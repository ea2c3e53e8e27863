"""The soak in short form (benchmarks/tools/soak.py runs it long), and a commit that meets a full disk.

The short form kills the worker with kill -9 three times at random moments and resumes it, crashes
the sandbox in a burst and takes the free space under the run's threshold, then checks that every
committed generation survived unchanged, with contiguous numbers and no duplicates.
"""
from __future__ import annotations

import errno
import json
import os
import random
import threading
import time
from pathlib import Path

import duckdb
import pytest

from core.backends import availability
from core.evaluation.disk_space import DiskGuard, disk_full, parse_bytes

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(availability("c") is not None, reason=f"no C backend: {availability('c')}")


def _can_fallocate(folder: Path) -> bool:
    try:
        with open(folder / ".probe", "wb") as f:
            os.posix_fallocate(f.fileno(), 0, 1 << 20)
        return True
    except OSError:
        return False
    finally:
        (folder / ".probe").unlink(missing_ok=True)


GENERATIONS_BETWEEN_KILLS = 1  # committed generations the worker makes between two kills (and after the last)


def _counted_soak(opts):
    """benchmarks/tools/soak.py's Soak with a schedule driven by counts, not by the wall clock: a kill
    -9 at a random moment after every GENERATIONS_BETWEEN_KILLS committed generations, ``opts.kills``
    times; a crash burst held until a crashed candidate is stored; a disk pause; then one more
    generation and a stop. However slow the machine, the same events happen in the same order
    (``opts.minutes`` plays no part; every wait has the soak's own generous timeout)."""
    from benchmarks.tools.soak import Soak

    class CountedSoak(Soak):
        def burst_until_crash(self) -> None:
            t, before = self.elapsed(), max(self.crashed_live(), 0)
            self.flag.touch()
            try:
                self.wait_for(lambda: self.crashed_live() > before, 180, "a candidate crashed by the burst")
            finally:
                self.flag.unlink(missing_ok=True)
            after = self.crashed_live()
            self.res.bursts.append({"t": round(t, 1), "seconds": round(self.elapsed() - t, 1), "crashed": after - before})

        def generations_more(self, n: int, what: str) -> bool:
            target = self.committed() + n
            return self.wait_for(lambda: self.committed() >= target, 180, what)

        def run(self):
            o = self.o
            rng = random.Random(o.seed)
            self.t0 = time.monotonic()
            threading.Thread(target=self.sampler, daemon=True).start()
            self.start_worker()
            try:
                if not self.wait_for(lambda: self.committed() >= 0, 180, "generation 0"):
                    return self.res
                for k in range(o.kills):
                    if not self.generations_more(GENERATIONS_BETWEEN_KILLS, f"generations before kill {k + 1}"):
                        return self.res
                    time.sleep(rng.uniform(*o.kill_delay_s))  # a random moment of a later generation
                    self.kill_worker("scheduled")
                    self.start_worker()
                    resumed_at = self.res.generations[-1]
                    if not self.wait_for(lambda: self.committed() > resumed_at, 180, "a generation after resume"):
                        return self.res
                    if k < o.crash_bursts:
                        self.burst_until_crash()
                for _ in range(o.disk_pauses):
                    self.disk_pause()
                self.generations_more(GENERATIONS_BETWEEN_KILLS, "a generation before the stop")
            finally:
                self.finish()
            return self.res

    return CountedSoak(opts).run()


@pytest.mark.slow
def test_short_soak_loses_and_duplicates_no_generation(tmp_path):
    """Count-driven (see :func:`_counted_soak`): three kills, a crash burst and a disk pause happen
    whatever the machine's load."""
    if not _can_fallocate(tmp_path):
        pytest.skip("this filesystem cannot fallocate the filler that fills the disk")
    from benchmarks.tools.soak import Options

    t0 = time.monotonic()
    res = _counted_soak(Options(kills=3, crash_bursts=1, disk_pauses=1, pause_hold_s=2.0, dashboard_restarts=0,
                                kill_delay_s=(0.0, 1.5), seed=11, work_dir=tmp_path / "soak", log=False))
    print(f"soak: {len(res.generations)} generations in {time.monotonic() - t0:.1f} s, kills {res.kills}, "
          f"bursts {res.bursts}, pauses {res.pauses}, crashed {res.crashed_rows}")
    assert res.problems == []
    assert len(res.kills) == 3
    gens = res.generations
    assert gens == list(range(len(gens))) and len(gens) >= len(res.kills) + 1  # each resumed worker committed
    assert len(res.checks) == 4  # after each kill and at the end
    pause = res.pauses[0]
    assert pause["paused"] and pause["status"] == "paused" and "disk nearly full" in pause["message"]
    assert pause["held_generation"] and pause["resumed"]
    assert res.bursts and res.crashed_rows >= 1  # the burst crashed candidates and the run went on
    assert res.final_status == "stopped"
    con = duckdb.connect(str(tmp_path / "soak" / "runs" / res.run_id / "run.duckdb"), read_only=True)
    try:
        per_gen = con.execute("SELECT count(*), count(DISTINCT generation) FROM individuals").fetchone()
        states = con.execute("SELECT count(*) FROM ga_state").fetchone()[0]
    finally:
        con.close()
    assert per_gen == (4 * len(gens), len(gens))  # every generation whole, none twice
    assert states >= 1
    sizes = [s["db_bytes"] for s in res.samples if s["generation"] >= 0]
    assert sizes and max(sizes) / len(gens) < 1 << 20  # tiny rows: well under 1 MiB of database per generation


class _FullAtCommit:
    """A DuckDB connection whose COMMIT of one generation fails as DuckDB fails on a full disk: the
    transaction is rolled back and a TransactionException names ENOSPC (so the writer's own ROLLBACK
    then raises again). ``on_fail`` runs then (the test frees space)."""

    def __init__(self, con, generation: int, on_fail):
        self._con, self._generation, self._on_fail = con, generation, on_fail
        self._pending: int | None = None
        self.failed = 0

    def execute(self, sql, *args):
        if isinstance(sql, str) and sql.startswith("INSERT INTO ga_state"):
            self._pending = int(args[0][1])
        if sql == "COMMIT" and self._pending == self._generation and not self.failed:
            self._con.execute("ROLLBACK")
            self.failed += 1
            self._on_fail()
            raise duckdb.TransactionException('TransactionContext Error: Failed to commit: Could not write file '
                                              f'"run.duckdb.wal": {os.strerror(errno.ENOSPC)}')
        return self._con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._con, name)


@pytest.mark.slow
def test_enospc_at_commit_pauses_then_commits_the_generation_once(tmp_path, monkeypatch):
    if not _can_fallocate(tmp_path):
        pytest.skip("this filesystem cannot fallocate")
    from core.config import RunConfig, validate
    from core.run.worker import RunWorker
    from store.reader import RunReader
    from store.writer import RunWriter

    monkeypatch.setenv("ABEBOT_DISK_POLL_S", "0.05")
    monkeypatch.setenv("ABEBOT_MIN_FREE_BYTES", "0")  # no threshold: only the failed write pauses the run
    runs = tmp_path / "runs"
    runs.mkdir()
    filler = runs / "filler"
    with open(filler, "wb") as f:  # freed when the commit fails: the space that "returns"
        os.posix_fallocate(f.fileno(), 0, 256 << 20)
    cfg = validate(RunConfig(workload="rmsnorm", backend="c", population=3, generations=5, elites=1, seed=5,
                             stability_launches=2, baseline_checks=2, problem={"rows": 4, "cols": 32}))
    writer = RunWriter.create(runs, "enospc", json.loads(cfg.to_json()))
    seen: list[dict] = []

    def free_space_soon():
        seen.append(json.loads((runs / "enospc" / "heartbeat.json").read_text()))
        threading.Timer(1.0, lambda: (seen.append(json.loads((runs / "enospc" / "heartbeat.json").read_text())),
                                      filler.unlink())).start()

    writer._con = proxy = _FullAtCommit(writer._con, 2, free_space_soon)
    try:
        assert RunWorker(writer, cfg, runs / "enospc", runs, echo=None).run() == 0
    finally:
        writer.close()
    assert proxy.failed == 1
    log = (runs / "enospc" / "worker.log").read_text()
    assert "generation 2 not committed, the disk is full" in log and "resumed:" in log
    assert seen[-1]["status"] == "paused" and seen[-1]["paused_for"] == "disk"  # while it waited for space
    reader = RunReader(runs / "enospc")
    assert list(reader.generations()["generation"]) == [0, 1, 2, 3, 4]
    inds = reader.individuals()
    assert inds.groupby("generation").size().tolist() == [3] * 5  # generation 2 stored once, whole
    assert reader.status() == "finished"


def test_threshold_setting_and_full_disk_errors(tmp_path):
    assert parse_bytes("2G") == 2 << 30 and parse_bytes("512MiB") == 512 << 20 and parse_bytes("1000") == 1000
    with pytest.raises(ValueError):
        parse_bytes("lots")
    guard = DiskGuard(tmp_path, tmp_path, env={})
    assert guard.threshold() == 1 << 30  # the floor while no generation has been written
    guard.gen_bytes = 512 << 20
    assert guard.threshold() == 8 * (512 << 20)  # room for eight of the largest generations
    assert DiskGuard(tmp_path, tmp_path, env={"ABEBOT_MIN_FREE_BYTES": "0"}).shortage() is None
    assert DiskGuard(tmp_path, tmp_path, env={"ABEBOT_MIN_FREE_BYTES": "1024T"}).shortage() is not None
    inner = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    try:
        try:
            raise inner
        except OSError:
            raise RuntimeError("cannot rollback - no transaction is active")
    except RuntimeError as chained:
        assert disk_full(chained)
    assert not disk_full(OSError(errno.EACCES, os.strerror(errno.EACCES)))


@pytest.mark.slow
def test_a_stop_and_a_pause_resumed_from_the_cli_and_a_damaged_mirror_lose_nothing(tmp_path):
    """Issue 36: a Stop and a Pause written to control.json as the dashboard writes them, each resumed
    with `python -m core resume` (which must clear them and run), and a truncated live/ file, which
    the next commit must rewrite; every committed generation survives, unchanged and once."""
    from benchmarks.tools.soak import Options, Soak

    soak = Soak(Options(kills=0, crash_bursts=0, disk_pauses=0, dashboard_restarts=0, seed=12,
                        work_dir=tmp_path / "soak", log=False))
    soak.t0 = time.monotonic()
    soak.start_worker()
    try:
        assert soak.wait_for(lambda: soak.committed() >= 1, 180, "generation 1")
        soak.control_then_resume("stop")
        soak.control_then_resume("pause")
        soak.damage_mirror()
    finally:
        soak.finish()
    res = soak.res
    assert res.problems == [], res.problems
    assert [c["command"] for c in res.controls] == ["stop", "pause"]
    assert all(c["obeyed"] and c["resumed_and_ran"] and c["said_so"] for c in res.controls)
    said = res.mirrors[0]["reader_said"] if res.mirrors else ""
    assert res.mirrors[0]["rewritten"] and (said.startswith("this run's live") or said.startswith("no error"))
    assert res.final_status == "stopped" and res.generations == list(range(len(res.generations)))


def _can_mount_tmpfs(folder: Path) -> str | None:
    """Why a tmpfs cannot be mounted here (None when it can)."""
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True, text=True)
    if out.returncode != 0:
        return (out.stderr or out.stdout).strip() or f"mount exited {out.returncode}"
    subprocess.run(["umount", str(folder)], check=True)
    return None


@pytest.mark.slow
def test_a_full_disk_during_a_compile_pauses_the_run_and_fails_no_candidate(tmp_path):
    """Issue 36: the runs folder (compile cache included) on a small tmpfs, filled to ENOSPC while a
    candidate compiles: the compile waits for room instead of being stored as a compile_error, the
    run shows the pause and resumes by itself when the filler goes, and every generation is kept once."""
    why = _can_mount_tmpfs(tmp_path / "probe")
    if why:
        pytest.skip(f"cannot mount a tmpfs here: {why}")
    from benchmarks.tools.soak import Options, Soak

    soak = Soak(Options(kills=0, crash_bursts=0, disk_pauses=0, dashboard_restarts=0, full_disks=1, tmpfs_mib=64,
                        full_hold_s=2.0, seed=13, work_dir=tmp_path / "soak", log=False))
    assert soak.tmpfs, soak.res.notes
    soak.t0 = time.monotonic()
    soak.start_worker()
    try:
        assert soak.wait_for(lambda: soak.committed() >= 1, 180, "generation 1")
        soak.full_disk()
    finally:
        soak.finish()
    res = soak.res
    assert res.problems == [], res.problems
    full = res.full_disks[0]
    assert full["compiling_at_fill"] and full["free_after_fill"] < 1 << 20
    assert full["paused"] and full["status"] == "paused" and full["resumed"]
    assert full["compile_waited"], full  # the compile met ENOSPC and waited: never a compile_error
    assert res.disk_lethal == 0 and full["disk_lethal_live"] == 0
    assert res.final_status == "stopped" and res.generations == list(range(len(res.generations)))
    assert not soak.tmpfs and (soak.dir / "run.duckdb").is_file()  # unmounted, the run copied back for the report


def test_the_report_gives_the_sandboxs_mappings_and_rss_per_thousand_generations():
    from benchmarks.tools.soak_report import per_thousand, sandbox_slopes

    samples = [{"t": float(t), "generation": 10 * t, "segment": 1, "rss_bytes": 100, "db_bytes": 1, "live_bytes": 0,
                "sandbox_pid": 7 if t < 150 else 8, "sandbox_rss_bytes": 1000 + 5 * t, "sandbox_maps": 400 + t // 10}
               for t in range(300)]
    slopes = sandbox_slopes(samples)
    assert [s["pid"] for s in slopes] == [7, 8]  # a new sandbox process is a new line
    assert slopes[0]["rss_per_1000"] == pytest.approx(500) and slopes[0]["maps_per_1000"] == pytest.approx(10, abs=1)
    blocks = per_thousand(samples, {})
    assert [b["sandbox_maps_max"] for b in blocks] == [409, 419, 429]


def test_the_writer_gives_the_heap_back_each_time_it_reopens_its_database(tmp_path, monkeypatch):
    """Issue 36, item 8: reopening the database frees the closed connection's memory, which glibc
    keeps as free heap (the worker's ``glibc_free_kept`` grew 9 MB per 1,000 generations,
    benchmarks/tools/worker_tracemalloc.py --breakdown); the writer hands it back with malloc_trim."""
    import store.writer as W

    calls: list[int] = []
    monkeypatch.setattr(W, "trim_heap", lambda: calls.append(1) or True)
    monkeypatch.setattr(W.RunWriter, "reopen_every", 2)
    writer = W.RunWriter.create(tmp_path, "trim", {"workload": "gemm", "backend": "c", "generations": 5,
                                                   "population": 2, "problem": {"m": 32}})
    try:
        for g in range(5):
            writer.commit_generation(g, [{"genome_hash": f"g{g}i{i}", "status": "ok", "fitness": 1.0, "origin": "mutation"}
                                         for i in range(2)], [], {"best_fitness": 1.0}, {"rng": g})
    finally:
        writer.close()
    assert len(calls) == 2  # after the reopens at commits 2 and 4


def test_the_report_gives_the_launchers_mappings_and_rss_beside_the_sandboxs():
    """The launcher (the judge's child) loads the kernels: its mappings are the ones that ran out (issue 36)."""
    from benchmarks.tools.soak_report import per_thousand, sandbox_slopes

    samples = [{"t": float(t), "generation": 10 * t, "segment": 1, "rss_bytes": 100, "db_bytes": 1, "live_bytes": 0,
                "sandbox_pid": 7, "sandbox_rss_bytes": 1000, "sandbox_maps": 400,
                "launcher_pid": 9, "launcher_rss_bytes": 2000 + 3 * t, "launcher_maps": 500 + t // 5} for t in range(300)]
    launcher = sandbox_slopes(samples, role="launcher")
    assert [s["pid"] for s in launcher] == [9] and launcher[0]["maps_per_1000"] == pytest.approx(20, abs=1)
    assert [b["launcher_maps_max"] for b in per_thousand(samples, {})] == [519, 539, 559]
