"""A full disk pauses a run visibly and kills no candidate; a worker holding its lock is never `dead`.

Issue 36, item 4 and the worker.lock bullet of item 9. ENOSPC is simulated: no test fills a disk.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import core.evaluation.disk_space as disk_space
from core.backends.base import Artifact, CompileError, KernelSource
from core.config import RunConfig
from core.evaluation.evaluator import Evaluator
from dashboard import manage
from store import RunWriter
from store.runs import HEARTBEAT_RESERVE, effective_status, lock_holder, read_json, write_reserved

ROOT = Path(__file__).resolve().parents[1]
CFG = RunConfig(workload="gemm", backend="c", population=4, generations=3, problem={"m": 32, "n": 32, "k": 32})
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# -- compiles ------------------------------------------------------------------------------------
class FlakyBackend:
    """compile() fails with ``failures`` (one per call), then succeeds."""

    def __init__(self, failures: list[BaseException]):
        self.failures, self.calls = list(failures), 0

    def compile(self, kernel, folder):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return Artifact(backend="c", source_hash="h", entry=kernel.entry, path=str(Path(folder) / "k.so"))

    def precompile(self, artifact, launches, workers):
        return artifact


def evaluator_with(tmp_path, backend, monkeypatch, short: bool) -> tuple[Evaluator, list]:
    ev = Evaluator(CFG, tmp_path / ".cache")
    ev.backend, ev._launches = backend, None
    told: list = []
    ev.on_disk_full = told.append
    monkeypatch.setattr(disk_space, "space_short", lambda paths: Path(paths[0]) if short else None)
    monkeypatch.setattr(disk_space, "wait_for_room", lambda path: None)
    return ev, told


KERNEL = KernelSource(backend="c", source="int x;", entry="abebot_gemm")


@pytest.mark.parametrize("failure", [ENOSPC, CompileError("cc1: fatal error: error writing to /tmp/ccX.s: "
                                                          "No space left on device"),
                                     OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))])
def test_a_compile_that_finds_the_disk_full_is_retried_when_space_returns_not_stored_lethal(tmp_path, monkeypatch,
                                                                                           failure):
    backend = FlakyBackend([failure, failure, failure])
    ev, told = evaluator_with(tmp_path, backend, monkeypatch, short=True)
    artifact, _, error = ev._compile_one(KERNEL)
    assert error is None and artifact is not None and backend.calls == 4
    assert told[0] and "disk full" in told[0] and told[-1] is None


def test_a_kernel_whose_error_only_mentions_a_full_disk_is_rejected_when_the_disk_has_room(tmp_path, monkeypatch):
    hostile = CompileError("k.c:1:2: error: #error No space left on device")
    backend = FlakyBackend([hostile] * 10)
    ev, told = evaluator_with(tmp_path, backend, monkeypatch, short=False)
    artifact, _, error = ev._compile_one(KERNEL)
    assert artifact is None and "No space left" in error and backend.calls == 2 and told == []


def test_an_ordinary_compile_error_is_reported_at_once(tmp_path, monkeypatch):
    backend = FlakyBackend([CompileError("k.c:1: error: expected ';'")])
    ev, told = evaluator_with(tmp_path, backend, monkeypatch, short=True)
    assert ev._compile_one(KERNEL)[2].startswith("k.c:1") and backend.calls == 1 and told == []


def test_wait_for_room_returns_when_space_grows(tmp_path, monkeypatch):
    frees = iter([100, 100, 100 + disk_space.RETRY_MARGIN])

    class Usage:
        def __init__(self):
            self.free = next(frees)

    monkeypatch.setattr(disk_space.shutil, "disk_usage", lambda path: Usage())
    disk_space.wait_for_room(tmp_path, env={disk_space.DISK_POLL_ENV: "0.001"})  # would raise StopIteration if it polled on


# -- the pause is visible ------------------------------------------------------------------------
@pytest.fixture
def writer(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    w = RunWriter.create(runs, "r1", json.loads(CFG.to_json()))
    yield w
    w.close()


class FullDatabase:
    """The writer's connection on a full disk: every write fails as DuckDB reports it."""

    def __init__(self, con):
        self._con = con

    def execute(self, sql, *args):
        if sql.lstrip().upper().startswith(("UPDATE", "INSERT", "BEGIN")):
            raise OSError(errno.ENOSPC, f"IO Error: could not write file: {os.strerror(errno.ENOSPC)}")
        return self._con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._con, name)


def no_room_for_new_files(monkeypatch):
    import store.runs as runs_module

    def full(path, data, durable=True, fsync_folder=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(runs_module, "atomic_write_bytes", full)


def test_the_heartbeat_is_written_in_its_reserved_space_when_the_disk_is_full(writer, monkeypatch):
    path = writer.path / "heartbeat.json"
    assert path.stat().st_size % HEARTBEAT_RESERVE == 0
    no_room_for_new_files(monkeypatch)
    real = writer._con
    writer._con = FullDatabase(real)
    try:
        with pytest.raises(OSError):  # the database could not record it ...
            writer.set_status("paused", "disk nearly full: 0.00 GiB free")
    finally:
        writer._con = real
    hb = read_json(path)  # ... the heartbeat does
    assert hb["status"] == "paused" and hb["message"].startswith("disk nearly full")
    assert effective_status(writer.path) == "paused"


def test_write_reserved_refuses_what_does_not_fit_its_reserve_on_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "hb.json"
    write_reserved(path, b'{"a": 1}')
    no_room_for_new_files(monkeypatch)
    write_reserved(path, b'{"a": 2}')
    assert read_json(path) == {"a": 2}
    with pytest.raises(OSError):
        write_reserved(path, b'{"a": "' + b"x" * HEARTBEAT_RESERVE + b'"}')
    assert read_json(path) == {"a": 2}


def test_a_worker_paused_by_a_compile_on_a_full_disk_shows_paused_then_running(writer, tmp_path):
    from core.run.worker import RunWorker

    worker = RunWorker(writer, CFG, writer.path, writer.path.parent, echo=None)
    worker._compile_found_disk_full("a compile found the disk full (No space left on device)")
    worker._compile_found_disk_full("a compile found the disk full (No space left on device)")
    hb = read_json(writer.path / "heartbeat.json")
    assert hb["status"] == "paused" and "disk" in hb["message"] and hb["paused_for"] == "disk"
    worker._compile_found_disk_full(None)
    hb = read_json(writer.path / "heartbeat.json")
    assert hb["status"] == "running" and not hb.get("paused_for")
    log = (writer.path / "worker.log").read_text()
    assert "paused: a compile found the disk full" in log and "resumed: compiles go on" in log


# -- a held lock is alive ------------------------------------------------------------------------
HOLDER = """
import sys, time
from store import RunWriter
w = RunWriter.open(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def suspended_worker(writer):
    """The run held by another process (a worker), which is then suspended (SIGSTOP)."""
    path = writer.path
    writer.close()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    proc.send_signal(signal.SIGSTOP)
    yield path, proc
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("heartbeat", ["stale", "torn", "pid of another process"])
def test_a_suspended_worker_with_a_bad_heartbeat_is_not_dead_and_cannot_be_deleted(suspended_worker, heartbeat):
    path, proc = suspended_worker
    hb = read_json(path / "heartbeat.json")
    if heartbeat == "stale":
        hb["updated_at"] = time.time() - 24 * 3600
        (path / "heartbeat.json").write_text(json.dumps(hb))
    elif heartbeat == "torn":
        (path / "heartbeat.json").write_text(json.dumps(hb)[:40])
    else:
        hb["pid"] = 1 << 22
        (path / "heartbeat.json").write_text(json.dumps(hb))
    os.utime(path / "config.json", (0, 0))  # long past the start grace
    assert lock_holder(path) == proc.pid
    assert effective_status(path) in ("running", "paused")
    reason = manage.live_reason(path.parent, path.name)
    assert reason and "stop it" in reason
    with pytest.raises(ValueError):
        manage.delete(path.parent, path.name)
    with pytest.raises(ValueError):
        manage.archive(path.parent, path.name)
    assert path.is_dir()


def test_a_held_run_whose_log_says_paused_reads_paused(suspended_worker):
    path, _ = suspended_worker
    hb = read_json(path / "heartbeat.json")
    (path / "heartbeat.json").write_text(json.dumps({**hb, "updated_at": 0}))
    with open(path / "worker.log", "a") as f:
        f.write("2026-12-03 10:00:00 paused: disk nearly full (0.00 GiB free on /runs, 1.00 GiB needed)\n")
    assert effective_status(path) == "paused"


def test_a_run_whose_worker_is_gone_is_dead_and_deletable(writer):
    path = writer.path
    writer.close()
    hb = read_json(path / "heartbeat.json")
    (path / "heartbeat.json").write_text(json.dumps({**hb, "updated_at": 0}))
    assert lock_holder(path) is None and effective_status(path) == "dead"
    assert manage.live_reason(path.parent, path.name) is None
    manage.delete(path.parent, path.name)
    assert not path.exists()
