"""`resume` does what it says: a pause or stop left by the dashboard is cleared and the run runs;
``--keep-paused`` keeps it paused; a config.json edited to another run is refused in one line.

Issue 36, items 3 and 9. The worker itself is replaced by a probe that records what it would see.
"""
from __future__ import annotations

import json

import pytest

import core.cli as cli
from core.config import RunConfig
from store import RunWriter, read_control, write_control
from store.runs import read_json

CFG = RunConfig(workload="gemm", backend="c", population=4, generations=5, problem={"m": 32, "n": 32, "k": 32})


@pytest.fixture
def stopped_run(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    w = RunWriter.create(runs, "r1", json.loads(CFG.to_json()))
    w.set_status("stopped", "stopped on request")
    w.close()
    return runs, runs / "r1"


@pytest.fixture
def worker_probe(monkeypatch):
    """Replaces the GA worker: records the control command it would read first, and returns 0."""
    seen = []

    def probe(writer, cfg, target, runs_dir):
        seen.append(read_control(target))
        writer.close()
        return 0

    monkeypatch.setattr(cli, "_work", probe)
    return seen


@pytest.mark.parametrize("left", ["stop", "pause"])
def test_resume_clears_a_stop_or_pause_request_and_says_so(stopped_run, worker_probe, capsys, left):
    runs, folder = stopped_run
    write_control(folder, left)
    assert cli.main(["resume", "r1", "--runs-dir", str(runs)]) == 0
    assert worker_probe == ["resume"] and read_control(folder) == "resume"
    out = capsys.readouterr().out
    assert f"asked the run to be {'stopped' if left == 'stop' else 'paused'}; cleared: resuming" in out


def test_resume_without_a_pending_request_says_nothing_about_it(stopped_run, worker_probe, capsys):
    runs, folder = stopped_run
    assert cli.main(["resume", "r1", "--runs-dir", str(runs)]) == 0
    assert worker_probe == [None] and "cleared" not in capsys.readouterr().out


@pytest.mark.parametrize("left", ["stop", "pause", None])
def test_keep_paused_resumes_the_run_paused(stopped_run, worker_probe, capsys, left):
    runs, folder = stopped_run
    if left:
        write_control(folder, left)
    assert cli.main(["resume", "r1", "--runs-dir", str(runs), "--keep-paused"]) == 0
    assert worker_probe == ["pause"] and "--keep-paused" in capsys.readouterr().out


@pytest.mark.parametrize("edit", [{"workload": "rmsnorm"}, {"problem": {"m": 64, "n": 32, "k": 32}},
                                  {"weights": {"time": 1.0}}])
def test_resume_refuses_a_config_edited_to_another_run_in_one_line(stopped_run, worker_probe, capsys, edit):
    runs, folder = stopped_run
    cfg = read_json(folder / "config.json")
    cfg.update(edit)
    if "workload" in edit:
        cfg["problem"] = {}
    (folder / "config.json").write_text(json.dumps(cfg))
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert cli.main(["resume", "r1", "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "restore config.json" in err[0] and worker_probe == []
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before  # nothing written


def test_resume_may_extend_a_runs_budget_in_config_json(stopped_run, worker_probe):
    runs, folder = stopped_run
    cfg = read_json(folder / "config.json")
    cfg["generations"] = 50
    (folder / "config.json").write_text(json.dumps(cfg))
    assert cli.main(["resume", "r1", "--runs-dir", str(runs)]) == 0 and worker_probe == [None]
