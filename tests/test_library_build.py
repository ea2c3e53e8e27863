"""A real C-backend library built from short runs, loaded, verified, tampered with, exported, added to.

One build for the module (two entries of the tiny ``--small`` Llama-3.1-8B: RMSNorm with the residual
at M = 1 and M = 4, one generation of three individuals each); the tests then use copies of it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.library.manifest import MANIFEST, Library
from store.runs import read_json
from tests.helpers import cli

RUN_SETTINGS = {"stability_launches": 3, "timeout_s": 20, "elites": 1, "baseline_checks": 2}
M1, M4 = "lib-llama-3_1-8b-c-rmsnorm-m1-s64", "lib-llama-3_1-8b-c-rmsnorm-m4-s64"


def build_args(out: Path, tmp: Path, *more: str) -> list[str]:
    settings = tmp / "run-settings.json"
    settings.write_text(json.dumps(RUN_SETTINGS))
    return ["library", "build", "--model", "llama-3.1-8b", "--ops", "rmsnorm", "--m", "1,4", "--budget", "1",
            "--population", "3", "--small", "--rounds", "1", "--run-config", str(settings), "--out", str(out), *more]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path, str]:
    tmp = tmp_path_factory.mktemp("library")
    runs, out = tmp / "runs", tmp / "lib"
    res = cli(*build_args(out, tmp, "--runs-dir", str(runs)), runs_dir=runs, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return out, runs, res.stdout


@pytest.fixture
def lib_copy(built, tmp_path) -> Path:
    shutil.copytree(built[0], tmp_path / "lib")
    return tmp_path / "lib"


def test_a_build_writes_one_entry_per_planned_bucket(built):
    out, runs, _ = built
    lib = Library.load(out)
    assert lib.model == "llama-3.1-8b"
    assert sorted((e.op, e.fmt, e.shape["N"], e.shape["K"], e.shape["M"]) for e in lib.entries) == [
        ("rmsnorm", "fp32-res", 64, 64, 1), ("rmsnorm", "fp32-res", 64, 64, 4)]
    for e in lib.entries:
        assert e.verify_files(out) is None
        assert e.artefact.endswith(".so") and e.source.endswith("kernel.c")
        assert (out / "entries" / e.id / "genome.json").is_file()
        assert e.figures["cache"] == "cold" and e.figures["speedup"] > 0
        assert e.figures["primary"] in e.figures["baselines"] and len(e.figures["baselines"]) >= 1
        assert e.device["kind"] == "cpu" and e.toolchain["python"]
        assert e.provenance["run_id"] in (M1, M4) and e.provenance["part"] == "rmsnorm"
        assert e.launch["entry"] and isinstance(e.launch["flags"], list) and "argtypes" in e.launch  # flat, as bound


def test_each_entry_is_a_normal_run_named_for_the_dashboard(built):
    _, runs, _ = built
    for rid in (M1, M4):
        assert read_json(runs / rid / "heartbeat.json")["status"] == "finished"
        assert (runs / rid / "bench.json").is_file()  # the champion was re-timed by the bench machinery
        assert read_json(runs / rid / "meta.json")["name"].startswith("library lib: rmsnorm M=")


def test_the_second_run_warm_starts_from_the_first(built):
    _, runs, stdout = built
    assert read_json(runs / M1 / "config.json")["start_from"] == ""
    assert read_json(runs / M4 / "config.json")["start_from"] == M1
    assert f"warm-started from {M1}" in stdout


def test_a_second_build_finds_every_entry_built_and_starts_no_run(built, tmp_path):
    out, runs, _ = built
    before = sorted(p.name for p in runs.iterdir())
    res = cli(*build_args(out, tmp_path, "--runs-dir", str(runs)), runs_dir=runs, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("already in the library") == 2 and "0 entries written, 2 in all" in res.stdout
    assert sorted(p.name for p in runs.iterdir()) == before


def test_verify_re_times_every_entry_and_passes(built, lib_copy):
    res = cli("library", "verify", str(lib_copy), "--runs-dir", str(built[1]), runs_dir=built[1], timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 of 2 entries verified" in res.stdout and "geometric-mean speed-up of rmsnorm" in res.stdout


def test_verify_refuses_a_tampered_artefact_and_exits_1(built, lib_copy):
    entry = Library.load(lib_copy).entries[0]
    path = entry.artefact_path(lib_copy)
    path.write_bytes(path.read_bytes() + b"\0")
    res = cli("library", "verify", str(lib_copy), "--json", "--runs-dir", str(built[1]), runs_dir=built[1],
              timeout=180)
    assert res.returncode == 1, res.stdout + res.stderr
    rows = {r["id"]: r for r in json.loads(res.stdout)}
    assert rows[entry.id]["verdict"].startswith("tampered:") and not rows[entry.id]["ok"]
    assert sum(r["ok"] for r in rows.values()) == 1


def test_building_into_a_library_with_a_tampered_artefact_writes_nothing(built, lib_copy, tmp_path):
    entry = Library.load(lib_copy).entries[0]
    entry.artefact_path(lib_copy).write_bytes(b"not the kernel")
    manifest = (lib_copy / MANIFEST).read_bytes()
    runs = tmp_path / "fresh-runs"
    res = cli(*build_args(lib_copy, tmp_path, "--runs-dir", str(runs), "--m", "2"), runs_dir=runs, timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "does not match its sha256" in res.stderr
    assert (lib_copy / MANIFEST).read_bytes() == manifest and not runs.exists()


def test_an_export_can_be_a_one_entry_library(built, tmp_path):
    runs = built[1]
    res = cli("export", M1, "--out", str(tmp_path / "one"), "--library", "--runs-dir", str(runs), runs_dir=runs,
              timeout=180)
    assert res.returncode == 0, res.stderr
    lib = Library.load(tmp_path / "one")
    assert len(lib.entries) == 1 and lib.entries[0].provenance["run_id"] == M1
    assert lib.entries[0].verify_files(tmp_path / "one") is None


def test_library_add_writes_the_champions_of_existing_runs(built, tmp_path):
    runs = built[1]
    res = cli("library", "add", str(tmp_path / "added"), M4, "--rounds", "1", "--runs-dir", str(runs),
              runs_dir=runs, timeout=180)
    assert res.returncode == 0, res.stderr
    (entry,) = Library.load(tmp_path / "added").entries
    assert entry.shape["M"] == 4 and entry.provenance["run_id"] == M4 and entry.id in res.stdout


def test_verify_fails_entries_of_another_arch_without_running_them(built, lib_copy):
    data = json.loads((lib_copy / MANIFEST).read_text())
    for e in data["entries"]:
        e["device"]["arch"] = "armv9"
    (lib_copy / MANIFEST).write_text(json.dumps(data))
    res = cli("library", "verify", str(lib_copy), "--runs-dir", str(built[1]), runs_dir=built[1], timeout=120)
    assert res.returncode == 1 and res.stdout.count("other arch: built for armv9") == 2, res.stdout + res.stderr
    assert "0 of 2 entries verified; 2 FAILED" in res.stdout
