"""Optuna's TPE and CMA-ES as strategies over a gene space (``--strategy tpe|cmaes``; Optuna optional).

Every free gene is one Optuna parameter: a choice gene's option index, a map gene's option index per
key. TPE sees them as categorical; CMA-ES as integers (an option's index, so numeric options keep
their order). A sequence gene is a categorical over a fixed list of its values drawn once per run
(its seeds' values first, then random ones up to :data:`SEQUENCE_CHOICES`, drawn from the run's
seed so that a resumed run gets the same list): Optuna has no permutation parameter. A gene with one option is no parameter.

One generation asks ``population`` trials. A suggestion that breaks the space's constraints is told
to the study as the worst value and never measured; one whose canonical genome the run already
measured is told that genome's fitness and not measured again; then the study is asked again (up
to :data:`ASKS_PER_CHILD` times a child, then a random unmeasured genome fills the place). The
measured ones are told ``-fitness`` (the study minimises). A resumed run rebuilds the study from
the population it reloads, not the whole history (docs/search.md).
"""
from __future__ import annotations

import random
from typing import Any

from core.genome import ChoiceGene, GeneSpace, Genome, MapGene
from core.search import ga
from core.search.ga import GAContext, Individual

SEQUENCE_CHOICES = 32
ASKS_PER_CHILD = 20


def require(strategy: str = "tpe") -> None:
    """ValueError (one line) when Optuna (or, for CMA-ES, its ``cmaes`` package) is not installed: the
    run configuration's own check."""
    from core.config import optuna_installed

    optuna_installed(strategy)


def _params(space: GeneSpace, rng: random.Random) -> list[tuple[str, str, str | None, list]]:
    """(param name, group, map key or None, options) of every free gene."""
    out = []
    for group, gene in space.genes():
        if isinstance(gene, ChoiceGene):
            choices = [(None, list(gene.options))]
        elif isinstance(gene, MapGene):
            choices = [(k, list(opts)) for k, opts in gene.keys]
        else:
            values = [s[group][gene.name] for s in space.seed_genomes()]
            for _ in range(SEQUENCE_CHOICES * 4):
                if len(values) >= SEQUENCE_CHOICES:
                    break
                v = gene.random(rng)
                if v not in values:
                    values.append(v)
            choices = [(None, values)]
        for key, options in choices:
            if len(options) > 1:
                out.append((f"{group}.{gene.name}" + (f".{key}" if key else ""), group, gene.name, key, options))
    return out


def _study(ctx: GAContext, rng: random.Random):
    import optuna

    state = ctx.strategy_state
    if "study" in state:
        return state["study"], state["params"]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    seed = rng.getrandbits(31)
    if ctx.config.strategy == "cmaes":
        sampler = optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, ctx.config.population))
    state["study"] = optuna.create_study(direction="minimize", sampler=sampler)
    state["params"] = _params(ctx.space, random.Random(ctx.config.seed))  # the same list again on resume
    return state["study"], state["params"]


def _distribution(options: list, cmaes: bool):
    import optuna

    if cmaes:
        return optuna.distributions.IntDistribution(0, len(options) - 1)
    return optuna.distributions.CategoricalDistribution(list(range(len(options))))


def _genome(trial, params, base: Genome, cmaes: bool) -> Genome:
    genes: dict[str, dict[str, Any]] = {g: dict(base[g]) for g in base.to_dict()}
    for name, group, gene, key, options in params:
        i = trial.suggest_int(name, 0, len(options) - 1) if cmaes else trial.suggest_categorical(name, list(range(len(options))))
        if key is None:
            genes.setdefault(group, {})[gene] = options[i]  # (an optional group at its defaults is not in to_dict)
        else:
            genes[group][gene] = {**dict(genes[group][gene]), key: options[i]}
    return Genome(genes)


def _ask(ctx: GAContext, rng: random.Random, n: int, taken: set[str]) -> list[tuple[Any, Individual]]:
    """Up to ``n`` (trial, individual) pairs of genomes valid, canonical and never measured."""
    from core.search.strategies import fresh_random

    study, params = _study(ctx, rng)
    cmaes = ctx.config.strategy == "cmaes"
    base = ctx.space.random(rng)  # the values of genes that are no parameter (one option each)
    out: list[tuple[Any, Individual]] = []
    for _ in range(n * ASKS_PER_CHILD):
        if len(out) >= n:
            break
        trial = study.ask()
        g = _genome(trial, params, base, cmaes)
        if ctx.space.validate(g) is not None or ctx.space.validate(ctx.space.canonical(g)) is not None:
            study.tell(trial, 0.0)  # illegal: the worst value (fitness 0), never measured
            continue
        g = ctx.space.canonical(g)
        if g.hash in taken or g.hash in ctx.known:
            known = ctx.known.get(g.hash) if g.hash in ctx.known else None
            study.tell(trial, -_fitness(known, ctx) if known else 0.0)
            continue
        taken.add(g.hash)
        out.append((trial, Individual(g, ctx.config.strategy)))
    for ind in fresh_random(ctx, rng, n - len(out), taken):  # the study keeps proposing measured genomes
        out.append((None, ind))
    return out


def _fitness(measure, ctx: GAContext) -> float:
    from core.search.fitness import score

    return score(measure, ctx.baseline, ctx.config.weights).fitness


def _tell(pairs: list[tuple[Any, Individual]], ctx: GAContext) -> None:
    study = ctx.strategy_state["study"]
    for trial, ind in pairs:
        if trial is not None:
            study.tell(trial, -float(ind.fitness))


def initial_population(ctx: GAContext, rng: random.Random) -> list[Individual]:
    """Generation 0: ``population`` suggestions of a new study (the seeds are not given to it)."""
    return step([], ctx, rng)


def step(population: list[Individual], ctx: GAContext, rng: random.Random) -> list[Individual]:
    """One generation: ``population`` new suggestions, measured, scored and told to the study. A study
    missing from ``ctx.strategy_state`` (a resumed run) is first told the reloaded population."""
    fresh_study = "study" not in ctx.strategy_state
    study, params = _study(ctx, rng)
    if fresh_study and population:
        _replay_population(study, params, population, ctx)
    pairs = _ask(ctx, rng, ctx.config.population, set())
    if not pairs:
        return population
    scored = ga.evaluate_and_score([ind for _, ind in pairs], ctx)
    _tell(pairs, ctx)
    return scored


def _replay_population(study, params, population: list[Individual], ctx: GAContext) -> None:
    """Tell a new study the individuals of a resumed run (their parameters read off their genomes)."""
    import optuna

    cmaes = ctx.config.strategy == "cmaes"
    for ind in population:
        values = {}
        for name, group, gene, key, options in params:
            v = ind.genome[group][gene] if key is None else ind.genome[group][gene][key]
            if v not in options:
                break
            values[name] = options.index(v)
        else:
            study.add_trial(optuna.trial.create_trial(
                params=values, distributions={n: _distribution(o, cmaes) for n, _, _, _, o in params},
                value=-float(ind.fitness)))


__all__ = ["initial_population", "require", "step"]
