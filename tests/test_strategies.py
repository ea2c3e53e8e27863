"""Search strategies behind one interface (core/search/strategies.py, optuna_search.py, surrogate.py)."""
from __future__ import annotations

import random
import sys

import pytest

from core.config import ConfigError, RunConfig
from core.search.ga import GAContext
from core.search.strategies import steps
from tests.helpers import fake_measure

BASELINE = {"time_us": 100.0, "memory_bytes": 1000, "stability": 1.0}


def _ctx(space, strategy: str, **cfg) -> tuple[GAContext, list]:
    measured = []

    def evaluate(genomes):
        measured.extend(g.hash for g in genomes)
        return [{"genome_hash": g.hash, **fake_measure(g)} for g in genomes]

    config = RunConfig(population=6, elites=1, strategy=strategy, **cfg)
    return GAContext(config, space, dict(BASELINE), evaluate), measured


@pytest.mark.parametrize("strategy", ["ga", "random", "tpe", "cmaes"])
def test_every_strategy_measures_legal_canonical_genomes_each_once(toy_space, strategy):
    pytest.importorskip("optuna")
    if strategy == "cmaes":
        pytest.importorskip("cmaes")
    ctx, measured = _ctx(toy_space, strategy)
    first, step = steps(strategy)
    rng = random.Random(0)
    pop = first(ctx, rng)
    for _ in range(3):
        pop = step(pop, ctx, rng)
    assert len(measured) == len(set(measured)) >= 6 * 3
    for ind in pop:
        assert toy_space.validate(ind.genome) is None and toy_space.canonical(ind.genome) == ind.genome
        assert ind.measure and (ind.fitness > 0) == ind.ok


def test_the_optuna_study_is_told_every_measured_genome(toy_space):
    pytest.importorskip("optuna")
    ctx, measured = _ctx(toy_space, "tpe")
    first, step = steps("tpe")
    rng = random.Random(1)
    step(first(ctx, rng), ctx, rng)
    study = ctx.strategy_state["study"]
    told = [t for t in study.trials if t.value is not None and t.value < 0]  # measured ok: -fitness
    assert len(told) >= len([h for h in measured]) - sum(1 for t in study.trials if t.value == 0.0)


def test_a_resumed_optuna_run_rebuilds_its_study_from_the_population(toy_space):
    pytest.importorskip("optuna")
    ctx, _ = _ctx(toy_space, "tpe")
    first, step = steps("tpe")
    rng = random.Random(2)
    pop = first(ctx, rng)
    ctx.strategy_state.clear()  # as after a resume: no study in memory
    step(pop, ctx, rng)
    assert len(ctx.strategy_state["study"].trials) >= len(pop) + 6


def test_random_search_never_draws_the_seeds_or_a_measured_genome(toy_space):
    ctx, measured = _ctx(toy_space, "random")
    first, step = steps("random")
    rng = random.Random(3)
    pop = first(ctx, rng)
    assert all(i.origin == "random" for i in pop)
    step(pop, ctx, rng)
    assert len(measured) == len(set(measured)) == 12


def test_without_optuna_tpe_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna -> ImportError
    with pytest.raises(ConfigError) as err:
        RunConfig.from_dict({"strategy": "tpe"})
    assert "pip install optuna" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match="pip install optuna"):
        steps("tpe")


def test_an_unknown_strategy_is_refused():
    with pytest.raises(ConfigError, match="strategy must be one of"):
        RunConfig.from_dict({"strategy": "annealing"})
    with pytest.raises(ValueError, match="unknown strategy"):
        steps("annealing")


def test_the_surrogate_breeds_k_times_and_measures_one_generation_only(toy_space):
    ctx, measured = _ctx(toy_space, "ga", surrogate=4)
    first, step = steps("ga")
    rng = random.Random(4)
    pop = first(ctx, rng)
    for _ in range(3):
        pop = step(pop, ctx, rng)
    assert len(measured) == 6 + 3 * 5  # generation 0, then population - elites a generation, not 4 x
    assert ctx.strategy_state["surrogate"]["seen"]


def test_an_effort_preset_fills_only_the_settings_not_given():
    smoke = RunConfig.from_dict({"effort": "smoke"})
    assert (smoke.population, smoke.generations, smoke.elites, smoke.stability_launches) == (4, 2, 1, 3)
    full = RunConfig.from_dict({"effort": "full", "population": 10})
    assert (full.population, full.generations) == (10, 40)
    assert RunConfig.from_dict({}).population == 16  # no preset: the defaults
    with pytest.raises(ConfigError, match="effort must be one of"):
        RunConfig.from_dict({"effort": "huge"})
