"""Two SIGTERMs (or a SIGTERM and a Ctrl-C) stop a worker as one does: exit 130, status `stopped`.

Issue 36, item 9. The evaluator is a fake that sends the signals at the worst moments: while the
baseline is measured, while the `stopped` status is saved, and while the evaluator closes.
"""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

import core.evaluation.cluster as cluster
from core.config import RunConfig
from core.run.worker import RunWorker
from store import RunWriter
from store.runs import read_json

CFG = RunConfig(workload="gemm", backend="c", population=4, generations=3, problem={"m": 32, "n": 32, "k": 32})


class SignalledEvaluator:
    """start() is interrupted by ``first``; close() receives ``later`` again."""

    def __init__(self, first: int, later: int | None):
        self.first, self.later, self.closed = first, later, False

    def start(self):
        os.kill(os.getpid(), self.first)
        time.sleep(5)  # the handler raises long before this ends
        raise AssertionError("the signal was not delivered")

    def close(self):
        if self.later is not None:
            os.kill(os.getpid(), self.later)
            time.sleep(0.05)
        self.closed = True


@pytest.fixture
def worker(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    w = RunWriter.create(runs, "r1", json.loads(CFG.to_json()))
    yield RunWorker(w, CFG, w.path, runs, echo=None)
    w.close()


@pytest.mark.parametrize("first,later", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGTERM, signal.SIGINT),
                                         (signal.SIGINT, signal.SIGTERM), (signal.SIGTERM, None)])
def test_a_second_signal_while_stopping_is_harmless(worker, monkeypatch, first, later):
    fake = SignalledEvaluator(first, later)
    monkeypatch.setattr(cluster, "make_evaluator", lambda *a, **k: fake)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    assert worker.run() == 130 and fake.closed
    assert read_json(worker.run_dir / "heartbeat.json")["status"] == "stopped"
    assert {sig: signal.getsignal(sig) for sig in before} == before  # the handlers are given back


def test_a_second_signal_while_the_stopped_status_is_saved_is_harmless(worker, monkeypatch):
    fake = SignalledEvaluator(signal.SIGTERM, None)
    monkeypatch.setattr(cluster, "make_evaluator", lambda *a, **k: fake)
    real = worker.writer.set_status

    def set_status(status, message=""):
        if status == "stopped":
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        real(status, message)

    monkeypatch.setattr(worker.writer, "set_status", set_status)
    assert worker.run() == 130
    assert read_json(worker.run_dir / "heartbeat.json")["status"] == "stopped"


def test_two_runs_of_one_name_in_one_process_each_write_their_own_worker_log(tmp_path):
    """The worker's logger was per run name: a second run called ``r1`` (another runs folder; a test
    worker process running several tests) wrote into the first one's worker.log and left its own
    missing (tests/test_disk_full_pause.py failed so in CI, by test order)."""
    from core.run.worker import _log_to

    first, second = tmp_path / "a" / "r1", tmp_path / "b" / "r1"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    _log_to(first, None)("into the first")
    _log_to(second, None)("into the second")
    assert "into the first" in (first / "worker.log").read_text()
    assert "into the second" in (second / "worker.log").read_text()
    assert "into the second" not in (first / "worker.log").read_text()
