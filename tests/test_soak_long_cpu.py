"""The long CPU run's script (issue 36, "Done when"): what it counts and reports, without running it."""
from __future__ import annotations

import argparse

import pytest

from benchmarks.tools.soak_long_cpu import candidates_done, main, rate, report, slope_per


def test_candidates_are_the_committed_evaluations_plus_the_generation_in_flight():
    assert candidates_done({"evaluations": 1024, "phase": "measured 17 of 510 candidates"}) == 1041
    assert candidates_done({"evaluations": 3, "phase": "compiling 510 new candidates"}) == 3
    assert candidates_done({}) == 0


def _samples(n: int, maps_per_candidate: float) -> list[dict]:
    return [{"t": 10.0 + i, "generation": i // 10, "candidates": 5 * i, "worker_rss": 300 << 20, "sandbox_pid": 5,
             "sandbox_rss": 50 << 20, "sandbox_maps": 400, "launcher_pid": 6, "launcher_rss": (200 << 20) + 1000 * i,
             "launcher_maps": 500 + int(maps_per_candidate * 5 * i)} for i in range(n)]


def test_the_rate_and_the_launchers_growth_per_ten_thousand_candidates():
    samples = _samples(60, 0.0)
    steady, overall = rate(samples)
    assert steady == pytest.approx(300.0)  # 5 candidates a second
    assert 0 < overall < steady  # the start-up counts against the whole wall time
    assert slope_per(samples, "launcher_maps") == pytest.approx(0.0)
    assert slope_per(_samples(60, 0.5), "launcher_maps") == pytest.approx(5000, rel=0.05)  # a leak shows


def test_the_report_gives_the_load_failures_rate_and_a_row_per_block():
    o = argparse.Namespace(population=512, seed=1, candidates=60_000, sample_s=5.0, block=100)
    outcome = {"command": "python -m benchmarks.tools.soak_long_cpu --work-dir X", "started": 0.0, "wall_s": 70.0,
               "ended_by": "SIGTERM after 1 minutes", "exit": 130, "problem": {"rows": 16, "cols": 1024},
               "candidates": 295, "stored": 0, "load_failures": 0, "statuses": {}, "load_average": (1.0, 2.0)}
    text = report(o, _samples(60, 0.0), outcome)
    assert "failed to load (`load:` in the cause): **0**" in text and "**300 candidates per minute**" in text
    assert [line.split(" |")[0] for line in text.splitlines() if line.startswith("| ")] == [
        "| candidates", "| 0-99", "| 100-199", "| 200-299"]


def test_bad_arguments_get_one_line_and_exit_2(tmp_path, capsys):
    assert main(["--work-dir", str(tmp_path / "w"), "--population", "1"]) == 2
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert main(["--work-dir", str(tmp_path / "full")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 2
