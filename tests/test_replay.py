"""Replay: strategies against a recorded table, without hardware (core/search/replay.py, core/tools/replay.py)."""
from __future__ import annotations

import json
import random

import pytest

from core.search import ga, replay
from core.search.replay_report import evals_to_within, expected_random_curve, score
from core.search.space import enumerate_space, subspace, workload_space
from core.search.table import row_from_measures, write_header, write_part
from core.workloads import get_workload
from tests.helpers import cli

VARY = ["threads", "schedule", "rows_per_chunk", "vector_width", "row_reuse"]
PROBLEM = {"rows": 16, "cols": 1024}


def _time(g) -> float:
    """A planted landscape: rows_per_chunk 4, vector width 4 and keeping the row are best."""
    d = g.to_dict()
    return (10.0 * (1 + 0.3 * abs(d["parallel_config"]["rows_per_chunk"] - 4) / 4)
            * (0.6 if d["memory_pattern"]["vector_width"] == 4 else 1.0)
            * (1.2 if d["memory_pattern"]["row_reuse"] == "reload" else 1.0))


def make_table(folder, lethal_every: int = 17, mode: str = "exhaustive", keep=lambda i: True):
    """A synthetic sweep of rmsnorm's C sub-space: three noisy samples per genome, a few lethal."""
    problem = get_workload("rmsnorm").validate_problem(PROBLEM, "c")
    space = workload_space("rmsnorm", "c", problem)
    base = space.seed_genomes()[0]
    genomes = enumerate_space(subspace(space, base, VARY))
    rng = random.Random(3)
    rows = []
    for i, g in enumerate(genomes):
        if not keep(i):
            continue
        if i % lethal_every == 5:
            ms = [{"status": "compile_error", "cause": "planted"}]
        else:
            t = _time(g)
            ms = [{"status": "ok", "time_us": t * (1 + 0.02 * rng.gauss(0, 1)), "speedup": 20 / t, "memory_bytes": 100,
                   "stability": 0.9} for _ in range(3)]
        rows.append(row_from_measures(g.to_json(), g.hash, ms))
    folder.mkdir(parents=True, exist_ok=True)
    write_part(folder, rows)
    write_header(folder, {"workload": "rmsnorm", "backend": "c", "problem": problem, "vary": VARY,
                          "base_genome": base.to_dict(), "mode": mode, "baseline": {"time_us": 20.0, "memory_bytes": 100},
                          "device": "synthetic"})
    return folder


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory):
    return make_table(tmp_path_factory.mktemp("sweep") / "t")


@pytest.fixture(scope="module")
def table(table_dir):
    return replay.load(table_dir)


def test_each_evaluation_draws_one_of_the_recorded_samples_and_the_seed_fixes_the_draws(table):
    g = next(h for h, r in table.rows.items() if r["status"] == "ok")
    genome = table.space.from_json(table.rows[g]["genome"])
    draws = [replay.TableEvaluator(table, random.Random(7)).evaluate([genome] * 5) for _ in range(2)]
    assert draws[0] == draws[1]
    times = {d["time_us"] for d in draws[0]}
    assert times <= set(table.rows[g]["time_samples_us"]) and len(times) > 1


def test_a_genome_the_table_lacks_is_lethal_not_recorded(tmp_path):
    sparse = replay.load(make_table(tmp_path / "s", mode="sample", keep=lambda i: i % 2 == 0))
    missing = next(g for g in enumerate_space(sparse.space) if g.hash not in sparse.rows)
    m = replay.TableEvaluator(sparse, random.Random(0)).evaluate([missing])[0]
    assert m["status"] == replay.NOT_RECORDED
    result = replay.run(sparse, "random", 60, seed=1)
    assert result["not_recorded"] > 0


def test_an_exhaustive_table_never_meets_a_genome_it_lacks(table):
    for strategy in ("ga", "random", "nsga2"):
        assert replay.run(table, strategy, 40, seed=2)["not_recorded"] == 0


def test_the_replayed_ga_is_the_live_ga_step(table, monkeypatch):
    calls = []
    live_step = ga.step
    monkeypatch.setattr(ga, "step", lambda *a: calls.append(1) or live_step(*a))
    result = replay.run(table, "ga", 30, seed=0)
    assert calls and len(result["trace"]) == 30


def test_the_same_seed_replays_the_same_search_and_another_seed_another(table):
    a, b, c = (replay.run(table, "ga", 25, seed=s)["trace"] for s in (4, 4, 5))
    assert a == b and a != c and len(set(a)) == 25


def test_the_best_so_far_curve_never_rises_and_ends_at_the_best_found(table):
    result = replay.run(table, "ga", 50, seed=3)
    values = [v for v in result["curve"] if v is not None]
    assert values == sorted(values, reverse=True)
    found = [table.rows[h]["time_us"] for h in result["trace"] if table.rows[h]["status"] == "ok"]
    assert values[-1] == min(found)


def test_expected_random_curve_is_exact_on_a_small_table():
    # genomes 1 us, 2 us and a lethal one: one draw averages 1, 2 and (lethal ->) the worst ok, 2
    assert expected_random_curve([1.0, 2.0, None], 3) == pytest.approx([5 / 3, 4 / 3, 1.0])


def test_evaluations_to_within_and_the_score_against_random():
    curve = [None, 3.0, 1.05, 1.0]
    assert evals_to_within(curve, 1.0, 0.02) == 4 and evals_to_within(curve, 1.0, 0.05) == 3
    assert evals_to_within(curve, 1.0, 0.0) == 4 and evals_to_within([2.0], 1.0, 0.05) is None
    random_curve = [3.0, 2.0, 1.5, 1.2]
    assert score(random_curve, random_curve, 1.0, 3.0) == 0.0
    assert score([1.0] * 4, random_curve, 1.0, 3.0) == 1.0


def test_the_surrogate_filter_measures_only_what_it_chose_and_records_its_hit_rate(table):
    plain = replay.run(table, "ga", 50, seed=6)
    filtered = replay.run(table, "ga", 50, seed=6, surrogate=4)
    assert len(filtered["trace"]) == 50 and filtered["trace"] != plain["trace"]
    assert filtered["surrogate_hit_rate"] is not None and 0.0 <= filtered["surrogate_hit_rate"] <= 1.0
    assert plain["surrogate_hit_rate"] is None


def test_replay_cli_prints_the_table_json_and_saves_for_the_dashboard(table_dir, tmp_path):
    out = cli("replay", str(table_dir), "--strategy", "ga,random", "--budget", "20", "--seeds", "3", runs_dir=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "score vs random" in out.stdout and "\nga " in out.stdout and "\nrandom " in out.stdout
    out = cli("replay", str(table_dir), "--strategy", "ga,random", "--budget", "25", "--seeds", "3", "--json", "--save",
              runs_dir=tmp_path)
    record = json.loads(out.stdout)
    assert len(record["runs"]) == 6 and record["summary"]["strategies"]["ga"]["wins_over_random"]
    assert list((table_dir / "replays").glob("*.json"))


@pytest.mark.parametrize("args, says", [
    (["--strategy", "annealing"], "unknown 'annealing'"),
    (["--budget", "0"], "--budget must be"),
])
def test_replay_bad_input_is_one_line_and_exit_2(table_dir, tmp_path, args, says):
    out = cli("replay", str(table_dir), *args, runs_dir=tmp_path)
    assert out.returncode == 2 and says in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_replay_of_a_folder_that_is_not_a_sweep_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "empty", tmp_path / "missing"):
        out = cli("replay", str(target), runs_dir=tmp_path)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
