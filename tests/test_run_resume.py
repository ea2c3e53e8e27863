"""End to end on the CPU backend: a real run through the CLI, kill -9, resume, export."""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.backends import availability

ROOT = Path(__file__).resolve().parents[1]
TINY = '{"m": 48, "n": 40, "k": 56}'
pytestmark = [pytest.mark.slow, pytest.mark.skipif(availability("c") is not None, reason=f"no C backend: {availability('c')}")]


def core_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "core", *args]


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(core_cmd(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def generations(run_dir: Path):
    from store.reader import RunReader

    return RunReader(run_dir).generations()


def test_run_finishes_retimes_its_elites_and_champion_exports(tmp_path):
    r = run_cli("run", "--workload", "gemm", "--backend", "c", "--population", "6", "--generations", "3",
                "--seed", "1", "--problem", TINY, "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("run ")
    run_id = lines[0].split()[1]
    gen_lines = [line for line in lines if line.startswith("gen ")]
    assert len(gen_lines) == 3 and all(" baseline numpy " in line and "(3 timings)" in line for line in gen_lines)
    assert "re-timed 2" in gen_lines[1] and " median of " in gen_lines[1]
    assert [line.split(" best ")[0] for line in gen_lines] == ["gen 0 (1/3 done)", "gen 1 (2/3 done)", "gen 2 (3/3 done)"]
    gens = generations(tmp_path / run_id)
    assert list(gens["generation"]) == [0, 1, 2] and gens["best_fitness"].iloc[0] > 0

    from store.reader import RunReader

    reader = RunReader(tmp_path / run_id)
    # every generation has its own baseline: the median of 3 timings interleaved with the candidates
    for _, g in gens.iterrows():
        samples = json.loads(g["baseline_samples_us"])
        assert len(samples) == 3 and g["baseline_time_us"] == pytest.approx(statistics.median(samples))
        assert g["baseline_primary"] == "numpy" and g["noisy"] == (g["baseline_rel_spread"] > 0.05)
    inds = reader.individuals()
    for g in (1, 2):  # the champion is carried into the next generation and timed again there
        prev_champion = gens["champion_hash"].iloc[g - 1]
        row = inds[(inds["generation"] == g) & (inds["genome_hash"] == prev_champion)].iloc[0]
        assert row["origin"] == "elite" and row["remeasured"] and not row["reused"]
        samples = json.loads(row["time_samples_us"])
        assert len(samples) >= 2 and (row["status"] != "ok" or row["time_us"] == pytest.approx(statistics.median(samples)))
        here = inds[inds["generation"] == g]
        assert gens["n_evaluated"].iloc[g] == (~here["remeasured"] & ~here["reused"]).sum()  # a re-timing is not new
        assert gens["n_remeasured"].iloc[g] == here["remeasured"].sum() == 2
    assert reader.status() == "finished"
    champ = reader.champion()
    assert champ["status"] == "ok" and champ["source"]
    assert champ["time_us"] == pytest.approx(statistics.median(json.loads(champ["time_samples_us"])))

    out = tmp_path / "export"
    r = run_cli("export", run_id, "--out", str(out), "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    script = next(out.rglob("run_kernel.py"))
    check = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=script.parent)
    assert check.returncode == 0, check.stdout + check.stderr

    listing = run_cli("runs", "--runs-dir", str(tmp_path))
    assert run_id in listing.stdout and "finished" in listing.stdout


def test_same_seed_same_first_generation(tmp_path):
    ids = []
    for name in ("a", "b"):
        r = run_cli("run", "--workload", "rmsnorm", "--backend", "c", "--population", "5", "--generations", "1",
                    "--seed", "9", "--problem", '{"rows": 16, "cols": 96}', "--runs-dir", str(tmp_path / name))
        assert r.returncode == 0, r.stderr[-2000:]
        ids.append(tmp_path / name / r.stdout.split()[1])
    from store.reader import RunReader

    genomes = [sorted(RunReader(d).individuals(0)["genome_hash"]) for d in ids]
    assert genomes[0] == genomes[1]


def test_kill_9_then_resume_loses_no_committed_generation(tmp_path):
    proc = subprocess.Popen(core_cmd("run", "--workload", "gemm", "--backend", "c", "--population", "4",
                                     "--generations", "7", "--seed", "3", "--problem", TINY, "--runs-dir", str(tmp_path)),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    run_id = proc.stdout.readline().split()[1]
    run_dir = tmp_path / run_id
    deadline = time.time() + 240
    while time.time() < deadline:
        hb = run_dir / "heartbeat.json"
        if hb.exists():
            try:
                if json.loads(hb.read_text()).get("generation", -1) >= 2:
                    break
            except ValueError:
                pass
        time.sleep(0.1)
    else:
        pytest.fail("the run never reached generation 2")
    os.killpg(proc.pid, signal.SIGKILL)  # the worker and its sandbox, no chance to clean up
    proc.wait(timeout=30)

    from store.reader import RunReader

    assert RunReader(run_dir).status() == "dead"
    before = RunReader(run_dir).individuals()
    committed = sorted(set(before["generation"]))
    assert committed[:3] == [0, 1, 2]

    r = run_cli("resume", run_id, "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    after = RunReader(run_dir).individuals()
    assert sorted(set(after["generation"])) == list(range(7))
    cols = ["generation", "genome_hash", "fitness", "status"]
    old = before[cols].sort_values(cols[:2]).reset_index(drop=True)
    kept = after[after["generation"].isin(committed)][cols].sort_values(cols[:2]).reset_index(drop=True)
    assert old.equals(kept), "committed generations changed after resume"
    assert all(isinstance(json.loads(r), dict) for r in after["resources"].dropna())  # not double-encoded
    gens = RunReader(run_dir).generations()
    assert list(gens["generation"]) == list(range(7))
    assert gens["baseline_time_us"].notna().all() and gens["n_remeasured"].iloc[1:].gt(0).all()
    assert RunReader(run_dir).status() == "finished"


def test_hours_budget_ends_the_run_and_random_init_places_no_seed(tmp_path):
    r = run_cli("run", "--workload", "rmsnorm", "--backend", "c", "--population", "3", "--generations", "0",
                "--hours", "0.00001", "--init", "random", "--problem", '{"rows": 8, "cols": 64}', "--runs-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    run_dir = tmp_path / r.stdout.split()[1]
    from store.reader import RunReader

    assert RunReader(run_dir).status() == "finished"
    assert len(RunReader(run_dir).generations()) == 1  # 0.036 s: spent before the first generation ends
    assert set(RunReader(run_dir).individuals(0)["origin"]) == {"random"}  # --init random: random search's start
