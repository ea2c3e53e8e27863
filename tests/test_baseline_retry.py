"""A sandbox that dies while it times the baselines (issue 36): retried in a fresh sandbox a bounded
number of times, so a 72-hour run carries on, and one clear line when every try fails."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.evaluation import pool as pool_module
from core.evaluation.devices import Slot
from core.evaluation.pool import SandboxPool


def _take_one(counter: Path) -> bool:
    """True (and one fewer left) while ``counter`` holds a positive count: the crashes still to come."""
    left = int(counter.read_text()) if counter.exists() else 0
    if left <= 0:
        return False
    counter.write_text(str(left - 1))
    return True


class DiesOnBaselines:
    """A sandbox server that exits (as a crashed sandbox does) on the next ``spec["crashes"]`` baselines."""

    def __init__(self, spec: dict):
        self.counter = Path(spec["crashes"])
        self.inner = None
        if spec.get("inner"):
            from core.evaluation.protocol import Protocol

            self.inner = Protocol(spec)

    def info(self) -> dict:
        return self.inner.info() if self.inner is not None and hasattr(self.inner, "info") else {}

    def handle(self, request: dict) -> dict:
        if request["op"] == "baseline" and _take_one(self.counter):
            os._exit(70)
        if self.inner is not None:
            return self.inner.handle(request)
        return {"status": "ok", "pid": os.getpid()}

    def close(self) -> None:
        if self.inner is not None and hasattr(self.inner, "close"):
            self.inner.close()


@pytest.fixture(autouse=True)
def _no_pause(monkeypatch):
    monkeypatch.setattr(pool_module, "RETRY_PAUSE_S", 0.0)


def _pool(tmp_path: Path, crashes: int) -> SandboxPool:
    (tmp_path / "crashes").write_text(str(crashes))
    spec = {"server": f"{__name__}:DiesOnBaselines", "crashes": str(tmp_path / "crashes")}
    return SandboxPool(spec, [Slot("cpu0", 0)], timeout_s=20, log_path=tmp_path / "sandbox.log")


def test_a_baseline_whose_sandbox_died_is_timed_again_in_a_fresh_sandbox(tmp_path):
    lines: list[str] = []
    with _pool(tmp_path, crashes=2) as pool:
        first = pool.sandboxes["cpu0"].call({"op": "echo"})["pid"]
        reply = pool.call_retrying({"op": "baseline"}, "cpu0", log=lines.append)
        assert reply["status"] == "ok" and reply["pid"] != first
        assert pool.restarts == 2
    assert len(lines) == 2 and "try 1 of 3" in lines[0] and "fresh sandbox" in lines[0]


def test_a_baseline_that_kills_every_sandbox_gives_up_after_bounded_tries(tmp_path):
    lines: list[str] = []
    with _pool(tmp_path, crashes=99) as pool:
        reply = pool.call_retrying({"op": "baseline"}, "cpu0", log=lines.append)
    assert reply["status"] == "crashed" and "(3 tries, each in a fresh sandbox)" in reply["cause"]
    assert len(lines) == 3 and int((tmp_path / "crashes").read_text()) == 96


def test_a_candidate_that_crashes_is_not_retried(tmp_path):
    """Only baselines are retried: a candidate's crash is its verdict (call, not call_retrying)."""
    with _pool(tmp_path, crashes=0) as pool:
        assert pool.call_retrying({"op": "echo"}, "cpu0")["status"] == "ok"
        assert pool.call({"op": "baseline"})["status"] == "ok"


def test_the_evaluator_starts_when_its_first_baseline_timing_crashed_the_sandbox(tmp_path, monkeypatch):
    """Before: ``RuntimeError: baseline measurement failed ... crashed``, and the worker exited 1."""
    from core.backends import availability
    from core.config import RunConfig
    from core.evaluation.evaluator import Evaluator

    if availability("c") is not None:
        pytest.skip(f"C backend: {availability('c')}")
    (tmp_path / "crashes").write_text("1")
    spec = Evaluator._spec
    monkeypatch.setattr(Evaluator, "_spec", lambda self: {**spec(self), "server": f"{__name__}:DiesOnBaselines",
                                                          "inner": True, "crashes": str(tmp_path / "crashes")})
    config = RunConfig.from_dict({"workload": "rmsnorm", "backend": "c", "problem": {"rows": 4, "cols": 32},
                                  "timeout_s": 10.0, "seed": 1})
    lines: list[str] = []
    ev = Evaluator(config, tmp_path / ".cache", log=lines.append, log_path=tmp_path / "sandbox.log", timing_target_s=0.02)
    try:
        reply = ev.start()
        assert reply["time_us"] > 0 and ev.sandbox.restarts == 1
    finally:
        ev.close()
    assert any("try 1 of 3; trying again in a fresh sandbox" in line for line in lines)


def _run_args(runs: Path, *extra: str) -> list[str]:
    return ["run", "--workload", "rmsnorm", "--backend", "c", "--problem", '{"rows": 4, "cols": 32}',
            "--population", "3", "--elites", "1", "--generations", "2", "--baseline-checks", "2",
            "--stability-launches", "2", "--seed", "4", "--runs-dir", str(runs), *extra]


def test_a_run_whose_sandbox_dies_at_its_first_baseline_runs_and_one_that_always_dies_stops_in_one_line(
        tmp_path, monkeypatch, capsys):
    """Before: a sandbox crash while the worker timed its first baseline exited the run with status 1.
    Now it is retried; a baseline that kills every fresh sandbox stops the run with one line, and the run,
    undamaged, resumes once the cause is gone."""
    from core.backends import availability
    from core.cli import main
    from core.evaluation.evaluator import Evaluator
    from store import RunReader

    if availability("c") is not None:
        pytest.skip(f"C backend: {availability('c')}")
    counter = tmp_path / "crashes"
    spec = Evaluator._spec
    monkeypatch.setattr(Evaluator, "_spec", lambda self: {**spec(self), "server": f"{__name__}:DiesOnBaselines",
                                                          "inner": True, "crashes": str(counter)})
    runs = tmp_path / "runs"
    counter.write_text("1")
    assert main(_run_args(runs, "--run-id", "once")) == 0
    assert list(RunReader(runs / "once").generations()["generation"]) == [0, 1]
    assert "try 1 of 3; trying again in a fresh sandbox" in (runs / "once" / "worker.log").read_text()
    capsys.readouterr()

    counter.write_text("99")
    assert main(_run_args(runs, "--run-id", "always")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "baseline measurement failed" in err[0] and "3 tries" in err[0], err
    assert RunReader(runs / "always").status() == "failed"
    counter.write_text("0")
    assert main(["resume", "always", "--runs-dir", str(runs)]) == 0
    assert list(RunReader(runs / "always").generations()["generation"]) == [0, 1]
