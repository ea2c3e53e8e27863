"""CLI bad input: one clear line on stderr, exit status 2, no traceback, nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import cli

ROOT = Path(__file__).resolve().parents[1]


BAD_RUNS = [
    (["--workload", "conv9d"], "unknown workload"),
    (["--backend", "vulkan"], "backend"),
    (["--population", "1"], "population must be >= 2"),
    (["--weights", "0,0,0"], "must not all be zero"),
    (["--weights", "0.6,-0.3,0.1"], "fitness weight of memory must be a non-negative finite number"),
    (["--weights", "time=1,speed=2"], "unknown objective 'speed'"),
    (["--weights", "fast"], "name=value pairs"),
    (["--config", "no-such-config.json"], "--config no-such-config.json"),
    (["--config", "README.md"], "not valid JSON"),
    (["--problem", "{not json"], "not valid JSON"),
    (["--problem", '{"m": -4}'], "m must be an integer"),
    (["--problem", '{"q": 3}'], "no setting q"),
    (["--generations", "0"], "give a budget"),
    (["--selection", "roulette"], "invalid choice"),
    (["--run-id", "../escape"], "run id"),
    (["--start-from", "../other-runs/x"], "is not a run id"),
    (["--start-from", "no-such-run"], "no run 'no-such-run'"),
]


@pytest.mark.parametrize("args,message", BAD_RUNS, ids=[" ".join(a) for a, _ in BAD_RUNS])
def test_bad_run_arguments(tmp_path, args, message):
    r = cli("run", "--workload", "gemm", "--backend", "c", *[a for a in args], runs_dir=tmp_path)
    # later flags win in argparse, so the bad value above overrides the defaults given first
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message.lower() in lines[0].lower(), r.stderr
    assert list(tmp_path.iterdir()) == []


def test_unavailable_gpu_backend_is_refused_cleanly(tmp_path):
    r = cli("run", "--workload", "gemm", "--backend", "cuda", runs_dir=tmp_path)
    from core.backends import availability

    if availability("cuda") is None:
        pytest.skip("a CUDA GPU is present here")
    assert r.returncode == 2 and "not available" in r.stderr and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("run_id", ["nope", "../../etc", "a/b"])
def test_resume_missing_or_unsafe_run(tmp_path, run_id):
    r = cli("resume", run_id, "--runs-dir", str(tmp_path), runs_dir=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_resume_corrupt_run_folder_leaves_it_untouched(tmp_path):
    run = tmp_path / "20260101-000000-gemm-c-dead"
    run.mkdir()
    (run / "config.json").write_text("{ half written")
    (run / "run.duckdb").write_bytes(b"this is not a database" * 100)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    r = cli("resume", run.name, "--runs-dir", str(tmp_path), runs_dir=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.name in before} == before


def test_workloads_lists_backends_and_availability(tmp_path):
    r = cli("workloads", runs_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "gemm" in r.stdout and "rmsnorm" in r.stdout and "backend c" in r.stdout


def test_runs_on_empty_folder(tmp_path):
    r = cli("runs", "--runs-dir", str(tmp_path), runs_dir=tmp_path)
    assert r.returncode == 0 and "no runs" in r.stdout


def test_run_config_file_is_read_and_flags_given_beside_it_override_it(tmp_path):
    from core.cli import build_parser, config_from_args

    path = tmp_path / "launch.json"
    path.write_text(json.dumps({"workload": "gemm", "backend": "c", "population": 6, "seed": 3, "weight_time": 1.0,
                                "weight_memory": 0.0, "weight_stability": 0.0, "problem": {"m": 64}}))
    from_file = config_from_args(build_parser().parse_args(["run", "--config", str(path)]))
    assert (from_file.population, from_file.seed, from_file.problem["m"]) == (6, 3, 64)
    assert from_file.weights == {"time": 1.0, "memory": 0.0, "stability": 0.0}
    both = config_from_args(build_parser().parse_args(["run", "--config", str(path), "--seed", "9",
                                                       "--weights", "memory=1"]))
    assert (both.population, both.seed) == (6, 9)
    assert both.weights == {"time": 0.0, "memory": 1.0, "stability": 0.0}


def test_a_config_file_with_a_bad_setting_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"workload": "gemm", "backend": "c", "weights": {"time": -1}}))
    runs = tmp_path / "runs"
    r = cli("run", "--config", str(path), "--runs-dir", str(runs), runs_dir=runs)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["abebot: error: fitness weight of time must be a non-negative finite number (got -1)"]
    assert not runs.exists()


def test_a_bad_disk_threshold_is_refused_before_anything_is_written(tmp_path):
    res = cli("run", "--backend", "c", "--runs-dir", str(tmp_path), runs_dir=tmp_path,
              env={"ABEBOT_MIN_FREE_BYTES": "lots"})
    assert res.returncode == 2 and "ABEBOT_MIN_FREE_BYTES" in res.stderr and "Traceback" not in res.stderr
    assert not any(p for p in tmp_path.iterdir() if not p.name.startswith("."))
