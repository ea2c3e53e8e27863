"""The GA loop and fitness on a toy gene space with a deterministic evaluator (no kernels)."""
from __future__ import annotations

import random

import pytest

from core.config import RunConfig
from core.config import ConfigError
from core.search.fitness import crowding_distance, normalised_weights, objectives, pareto_ranks, score
from core.search.ga import GAContext, initial_population, rng_from_json, rng_state_to_json, step, summarise
from tests.helpers import fake_measure, toy_space


class CountingEvaluator:
    def __init__(self):
        self.seen: list[str] = []

    def __call__(self, genomes):
        self.seen += [g.hash for g in genomes]
        return [fake_measure(g) for g in genomes]


def make_ctx(**overrides) -> tuple[GAContext, CountingEvaluator]:
    cfg = RunConfig(**{"population": 12, "generations": 10, "elites": 2, **overrides})
    ev = CountingEvaluator()
    return GAContext(cfg, toy_space(), {"time_us": 50.0, "memory_bytes": 1000.0}, ev), ev


def run_ga(seed: int, gens: int = 8, **overrides):
    ctx, ev = make_ctx(seed=seed, **overrides)
    rng = random.Random(seed)
    history = [initial_population(ctx, rng)]
    for _ in range(gens):
        history.append(step(history[-1], ctx, rng))
    return history, ev


@pytest.mark.parametrize("selection", ["top10", "tournament", "nsga2"])
def test_same_seed_same_genomes(selection):
    a, _ = run_ga(7, selection=selection)
    b, _ = run_ga(7, selection=selection)
    assert [[i.hash for i in pop] for pop in a] == [[i.hash for i in pop] for pop in b]
    c, _ = run_ga(8, selection=selection)
    assert [[i.hash for i in pop] for pop in a] != [[i.hash for i in pop] for pop in c]


@pytest.mark.parametrize("selection", ["top10", "tournament", "nsga2"])
def test_best_fitness_never_drops_with_elites(selection):
    history, _ = run_ga(3, gens=12, selection=selection)
    best = [max(i.fitness for i in pop) for pop in history]
    assert all(b2 >= b1 for b1, b2 in zip(best, best[1:]))
    assert best[-1] > best[0]  # the toy landscape is easy: evolution must improve on random


def test_duplicates_are_never_evaluated_twice():
    history, ev = run_ga(5, gens=15)
    assert len(ev.seen) == len(set(ev.seen))
    reused = [i for pop in history[1:] for i in pop if i.reused]
    assert reused and all(i.origin == "elite" or i.hash in ev.seen for i in reused)
    for pop in history:
        assert len({i.hash for i in pop}) == len(pop)


def test_lethal_candidates_score_zero_and_are_counted():
    history, _ = run_ga(11, gens=4)
    lethal = [i for pop in history for i in pop if not i.ok]
    assert lethal, "the toy space has a lethal region; random sampling should hit it"
    assert all(i.fitness == 0.0 and i.pareto_rank is None for i in lethal)
    summary = summarise(history[0])
    assert summary["n_lethal"] == sum(not i.ok for i in history[0])


@pytest.mark.parametrize("selection", ["top10", "tournament", "nsga2"])
def test_every_individual_carries_its_own_score(selection):
    history, _ = run_ga(4, gens=6, selection=selection)
    ctx, _ = make_ctx()
    for pop in history:
        for ind in pop:
            expected = score(ind.measure, ctx.baseline, ctx.config.weights)
            assert ind.fitness == pytest.approx(expected.fitness) and ind.terms == pytest.approx(expected.terms)
            assert list(ind.terms) == ["time", "memory", "stability"]


def test_population_size_and_elites_kept():
    history, _ = run_ga(2, gens=5)
    for prev, pop in zip(history, history[1:]):
        assert len(pop) == 12
        top = sorted(prev, key=lambda i: i.fitness, reverse=True)[:2]
        assert {i.hash for i in top} <= {i.hash for i in pop}


def test_rng_state_round_trips_through_json():
    rng = random.Random(42)
    rng.random()
    clone = rng_from_json(rng_state_to_json(rng))
    assert [rng.random() for _ in range(5)] == [clone.random() for _ in range(5)]


SEED_WEIGHTS = {"time": 0.6, "memory": 0.3, "stability": 0.1}
BASE = {"time_us": 100.0, "memory_bytes": 1000.0}


def ok(time_us: float, memory_bytes: float, stability: float = 1.0) -> dict:
    return {"status": "ok", "time_us": time_us, "memory_bytes": memory_bytes, "stability": stability}


def test_fitness_terms_are_ratios_against_the_baseline():
    assert score(ok(100.0, 1000.0), BASE, SEED_WEIGHTS).fitness == pytest.approx(1.0)
    twice = score(ok(50.0, 1000.0), BASE, SEED_WEIGHTS)
    assert twice.terms == pytest.approx({"time": 2.0, "memory": 1.0, "stability": 1.0})
    assert twice.fitness == pytest.approx(0.6 * 2 + 0.3 + 0.1)
    assert score(ok(50.0, 2000.0, 0.5), BASE, {"memory": 1}).fitness == pytest.approx(0.5)
    # weights are normalised: scaling them all changes nothing
    scaled = score(ok(50.0, 2000.0, 0.5), BASE, {"time": 6, "memory": 3, "stability": 1})
    assert scaled.fitness == pytest.approx(score(ok(50.0, 2000.0, 0.5), BASE, SEED_WEIGHTS).fitness)
    lethal = score({"status": "timeout"}, BASE, SEED_WEIGHTS)
    assert lethal.fitness == 0.0 and lethal.terms == {"time": None, "memory": None, "stability": None}


def test_an_objective_with_zero_weight_does_not_change_fitness():
    weights = {"time": 0.6, "memory": 0.4, "stability": 0.0}
    steady, flaky = score(ok(50.0, 2000.0, 1.0), BASE, weights), score(ok(50.0, 2000.0, 0.25), BASE, weights)
    assert steady.fitness == pytest.approx(flaky.fitness) == pytest.approx(0.6 * 2.0 + 0.4 * 0.5)
    assert (steady.terms["stability"], flaky.terms["stability"]) == (1.0, 0.25)  # still measured and stored


def test_weights_are_normalised_and_checked_by_the_config_validator():
    assert normalised_weights({"time": 2, "memory": 1, "stability": 1}) == {"time": 0.5, "memory": 0.25, "stability": 0.25}
    assert normalised_weights({"time": 3}) == {"time": 1.0, "memory": 0.0, "stability": 0.0}
    for bad in ({"time": 0, "memory": 0, "stability": 0}, {"time": 1, "memory": -1}, {"speed": 1}):
        with pytest.raises(ConfigError):
            normalised_weights(bad)


def test_the_pareto_matrix_has_one_minimised_column_per_objective():
    assert objectives([ok(2.0, 10.0, 0.5)]).tolist() == [[2.0, 10.0, -0.5]]
    assert objectives([]).shape == (0, 3)


def test_pareto_ranks_and_crowding():
    ms = [
        {"status": "ok", "time_us": 1.0, "memory_bytes": 10.0, "stability": 1.0},
        {"status": "ok", "time_us": 2.0, "memory_bytes": 5.0, "stability": 1.0},
        {"status": "ok", "time_us": 3.0, "memory_bytes": 20.0, "stability": 1.0},
        {"status": "crashed"},
    ]
    assert pareto_ranks(ms) == [0, 0, 1, None]
    import numpy as np

    cd = crowding_distance(np.array([[0.0, 3.0], [1.0, 2.0], [2.0, 1.0], [3.0, 0.0]]))
    assert np.isinf(cd[0]) and np.isinf(cd[3]) and cd[1] == pytest.approx(cd[2])
