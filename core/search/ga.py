"""The genetic algorithm: one generation step, written out plainly.

``step`` takes the evaluated population of generation g and returns that of generation g + 1:

1. keep the elites (best fitness, unchanged genomes, whose time is measured again in every
   generation: :mod:`core.search.retiming`);
2. breed children from parents chosen by the configured selection -- the seed's top 10 %,
   tournament, or NSGA-II's binary tournament on (Pareto rank, crowding distance);
   crossover (one-point on sequences, uniform elsewhere), mutation, repair or rejection;
3. skip genomes already evaluated in this run (a duplicate is never evaluated twice; if the
   space is exhausted a known genome is reused with its stored measurements);
4. evaluate the new genomes (the evaluator compiles them in parallel) and re-time the elites,
   with the baseline timed before, between and after them (:func:`core.search.retiming.measure_generation`);
5. score everyone against the run-level reference -- the median of every generation's baseline so
   far, this one's included (:func:`core.search.retiming.with_reference`) -- (an elite by the median of
   its timings), rank
   by Pareto dominance; with NSGA-II, parents and children compete for the places (mu + lambda
   survival) after the elites, which are kept by weighted fitness.

All randomness comes from one ``random.Random`` whose state is saved with every generation, so a
resumed run continues exactly where its last committed generation ended.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from core.config import RunConfig
from core.search.fitness import crowding_distance, objectives, pareto_ranks, score
from core.genome import GeneSpace, Genome
from core.search.known import KnownMeasures
from core.search.operators import crossover, flat_genes, make_valid, mutate
from core.search.retiming import champion_figures, first_measure, measure_generation, remeasured, unique, with_reference

EvaluateFn = Callable[[Sequence[Genome]], list[dict]]


@dataclass
class Individual:
    """A genome with where it came from and its measurements (``measure`` is an Evaluation dict)."""

    genome: Genome
    origin: str  # seed, start, random, elite, crossover, mutation, immigrant
    parents: tuple[str, ...] = ()
    measure: dict = field(default_factory=dict)
    reused: bool = False  # measurements taken from an earlier evaluation of the same genome
    remeasured: bool = False  # an elite timed again in this generation (not a new evaluation)
    fitness: float = 0.0
    terms: dict[str, float | None] = field(default_factory=dict)  # objective name -> normalised term
    pareto_rank: int | None = None

    @property
    def hash(self) -> str:
        return self.genome.hash

    @property
    def ok(self) -> bool:
        return self.measure.get("status") == "ok"


@dataclass
class GAContext:
    """What a step needs besides the population."""

    config: RunConfig
    space: GeneSpace
    baseline: Mapping  # the current generation's baseline record: the library's measurement of every objective,
    # plus ``reference`` (the median of ``baseline_times``) once a generation has timed it
    evaluate: EvaluateFn
    known: KnownMeasures = field(default_factory=KnownMeasures)  # genome hash -> measure, over the whole run
    retime: EvaluateFn | None = None  # measures elites again (not new evaluations); None: they keep theirs
    remeasure: Callable[[], Mapping] | None = None  # times the baselines; None: ``baseline`` never changes
    compile_ahead: Callable[[list], None] | None = None  # starts compiling genomes about to be evaluated
    log: Callable[[str], None] | None = None
    # the primary's median time (µs) of every generation's baseline in this run, in order: one entry per
    # generation measured (a resumed run reloads it from the store's generations table)
    baseline_times: list[float] = field(default_factory=list)
    start: list[Genome] = field(default_factory=list)  # earlier runs' best (core.run.warm_start), after the seeds
    strategy_state: dict = field(default_factory=dict)  # what a non-GA strategy keeps between steps (core.search.strategies)


def initial_population(ctx: GAContext, rng: random.Random) -> list[Individual]:
    """Seed genomes from the gene space (unless ``init`` is ``random``), then the warm start's
    (``ctx.start``), then distinct random ones, evaluated and scored."""
    pop: list[Individual] = []
    seen: set[str] = set()
    seeds = ctx.space.seed_genomes() if ctx.config.init == "seeds" else []
    for g, origin in [(g, "seed") for g in seeds] + [(g, "start") for g in ctx.start]:
        if len(pop) < ctx.config.population and g.hash not in seen:
            pop.append(Individual(g, origin))
            seen.add(g.hash)
    for _ in range(50 * ctx.config.population):
        if len(pop) >= ctx.config.population:
            break
        g = ctx.space.random(rng)
        if g.hash not in seen:
            pop.append(Individual(g, "random"))
            seen.add(g.hash)
    return _evaluate_and_score(pop, ctx)


def step(population: list[Individual], ctx: GAContext, rng: random.Random) -> list[Individual]:
    """Generation g -> g + 1 (see the module docstring)."""
    cfg = ctx.config
    ranked = sorted(population, key=lambda i: i.fitness, reverse=True)
    elites = [Individual(i.genome, "elite", (i.hash,)) for i in ranked[: cfg.elites] if i.ok]
    taken = {i.hash for i in elites}
    elite_hashes = set(taken)
    pick = _selector(population, cfg, rng)
    n_children = cfg.population if cfg.selection == "nsga2" else cfg.population - len(elites)
    children: list[Individual] = []
    for _ in range(n_children * max(1, cfg.surrogate)):  # surrogate k: breed k x, measure the predicted best
        child = _breed(pick, ctx, rng, taken)
        taken.add(child.hash)
        children.append(child)
    if len(children) > n_children:
        from core.search.surrogate import choose

        children = choose(children, n_children, population, ctx, rng)
    if cfg.selection == "nsga2":  # every parent competes again, rescored; the elites among them re-timed
        carried = [Individual(p.genome, "elite", (p.hash,)) for p in population]
        scored = _evaluate_and_score(children + carried, ctx, retime=[c for c in carried if c.hash in elite_hashes])
        return _nsga2_survivors(scored[len(children):], scored[: len(children)], cfg.population, cfg.elites)
    return _evaluate_and_score(elites + children, ctx, retime=elites)


def _breed(pick: Callable[[], Individual], ctx: GAContext, rng: random.Random, taken: set[str]) -> Individual:
    """One new child; prefers genomes never evaluated in this run."""
    cfg, space = ctx.config, ctx.space
    fallback: Individual | None = None
    for _ in range(30):
        a = pick()
        if rng.random() < cfg.crossover_rate:
            b = pick()
            child = crossover(a.genome, b.genome, space, rng)
            origin, parents = "crossover", (a.hash, b.hash)
            if rng.random() < cfg.mutation_rate * 2 or child in (a.genome, b.genome):
                child = mutate(child, space, cfg.mutation_rate, rng)
        else:
            child = mutate(a.genome, space, cfg.mutation_rate, rng)
            origin, parents = "mutation", (a.hash,)
        child = make_valid(child, space, rng)
        if child is None:
            continue  # rejected: an invalid child is never evaluated
        if child.hash in taken:
            continue
        candidate = Individual(child, origin, parents)
        if child.hash not in ctx.known:
            return candidate
        fallback = fallback or candidate
    immigrant = space.random(rng)
    if immigrant.hash not in taken and immigrant.hash not in ctx.known:
        return Individual(immigrant, "immigrant")
    return fallback or Individual(immigrant, "immigrant")


def _selector(population: list[Individual], cfg: RunConfig, rng: random.Random) -> Callable[[], Individual]:
    ranked = sorted(population, key=lambda i: i.fitness, reverse=True)
    viable = [i for i in ranked if i.ok] or ranked
    if cfg.selection == "top10":
        n = max(2, math.ceil(cfg.parent_fraction * len(population)))
        parents = viable[:n]
        return lambda: rng.choice(parents)
    if cfg.selection == "tournament":
        return lambda: max(rng.sample(population, min(cfg.tournament_size, len(population))), key=lambda i: i.fitness)
    keys = _nsga2_keys(population)
    return lambda: min(rng.sample(population, 2), key=lambda i: keys[id(i)])


def _nsga2_keys(population: list[Individual]) -> dict[int, tuple]:
    """Sort key (rank, -crowding) per individual; lethal ones last."""
    keys: dict[int, tuple] = {}
    fronts: dict[int, list[Individual]] = {}
    for ind in population:
        if ind.pareto_rank is None:
            keys[id(ind)] = (math.inf, 0.0)
        else:
            fronts.setdefault(ind.pareto_rank, []).append(ind)
    for rank, front in fronts.items():
        for ind, cd in zip(front, crowding_distance(objectives(i.measure for i in front))):
            keys[id(ind)] = (rank, -cd)
    return keys


def _nsga2_survivors(parents: list[Individual], children: list[Individual], size: int, elites: int) -> list[Individual]:
    """(mu + lambda) survival by Pareto rank then crowding, after the ``elites`` fittest by weighted
    fitness (so the champion is never lost); ``parents`` are already rescored (and re-timed) copies."""
    merged: dict[str, Individual] = {}
    for ind in children + parents:
        merged.setdefault(ind.hash, ind)
    pool = list(merged.values())
    _rank(pool)
    keys = _nsga2_keys(pool)
    kept = sorted((i for i in pool if i.ok), key=lambda i: -i.fitness)[:elites]
    rest = sorted((i for i in pool if i not in kept), key=lambda i: (keys[id(i)], -i.fitness))
    survivors = (kept + rest)[:size]
    _rank(survivors)
    return survivors


def _evaluate_and_score(pop: list[Individual], ctx: GAContext, retime: Sequence[Individual] = ()) -> list[Individual]:
    """Measure what needs measuring (new genomes; ``retime``: elites timed again), with this
    generation's baseline timings around them when ``ctx.remeasure`` is set; then score everyone."""
    fresh = unique(i.genome for i in pop if i.hash not in ctx.known and not i.measure)
    again = unique(i.genome for i in retime if ctx.known.get(i.hash, {}).get("status") == "ok")
    if fresh or again or ctx.remeasure:
        measures, repeats, baseline = measure_generation(fresh, again, ctx.evaluate, ctx.retime, ctx.remeasure,
                                                         ctx.config.baseline_checks, ctx.log,
                                                         ctx.compile_ahead)
        for g, m in zip(fresh, measures):
            ctx.known[g.hash] = first_measure(m)
        for g, m in zip(again, repeats):
            ctx.known[g.hash] = remeasured(ctx.known[g.hash], m)
        if baseline is not None:  # once per generation: initial_population and step each call this once
            if baseline.get("time_us") is not None:
                ctx.baseline_times.append(float(baseline["time_us"]))
            ctx.baseline = with_reference(baseline, ctx.baseline_times)
    new = {g.hash for g in fresh}
    timed = {g.hash for g in again} if ctx.retime else set()
    for ind in pop:
        if not ind.measure:
            ind.remeasured = ind.hash in timed
            ind.reused = ind.hash not in new and not ind.remeasured
            ind.measure = ctx.known[ind.hash]
    return _score(pop, ctx)


evaluate_and_score = _evaluate_and_score  # what other strategies (core.search.strategies) measure and score with


def _score(pop: list[Individual], ctx: GAContext) -> list[Individual]:
    """Fitness and terms of everyone against ``ctx.baseline``, then Pareto ranks (nothing measured)."""
    for ind in pop:
        s = score(ind.measure, ctx.baseline, ctx.config.weights)
        ind.fitness, ind.terms = s.fitness, s.terms
    _rank(pop)
    return pop


def _rank(pop: list[Individual]) -> None:
    for ind, r in zip(pop, pareto_ranks([i.measure for i in pop])):
        ind.pareto_rank = r


def diversity(pop: Sequence[Individual], rng: random.Random | None = None, max_pairs: int = 2000) -> float:
    """Mean number of differing genes between pairs of the population (sampled for big ones)."""
    n = len(pop)
    if n < 2:
        return 0.0
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    if len(pairs) > max_pairs:
        pairs = (rng or random.Random(0)).sample(pairs, max_pairs)
    flat = [flat_genes(ind.genome) for ind in pop]  # converted once, not once per pair
    return float(np.mean([sum(v != flat[j].get(k) for k, v in flat[i].items()) for i, j in pairs]))


def rng_state_to_json(rng: random.Random) -> list:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def rng_from_json(state: Sequence) -> random.Random:
    rng = random.Random()
    rng.setstate((state[0], tuple(state[1]), state[2]))
    return rng


def summarise(pop: Sequence[Individual]) -> Mapping:
    """Per-generation figures stored in the ``generations`` table."""
    fits = [i.fitness for i in pop]
    ok = [i for i in pop if i.ok]
    causes: dict[str, int] = {}
    for i in pop:
        if not i.ok:
            causes[i.measure.get("status", "?")] = causes.get(i.measure.get("status", "?"), 0) + 1
    best = max(pop, key=lambda i: i.fitness)
    champion = champion_figures(best.measure) if best.ok else champion_figures({})
    return {
        "best_fitness": max(fits),
        "mean_fitness": float(np.mean(fits)),
        "worst_fitness": min(fits),
        "n_lethal": len(pop) - len(ok),
        "best_time_us": min((i.measure["time_us"] for i in ok), default=None),
        "best_memory_bytes": min((i.measure["memory_bytes"] for i in ok), default=None),
        "lethal_causes": causes,
        "champion_hash": best.hash,
        "n_remeasured": sum(i.remeasured for i in pop),
        "cache": next((i.measure.get("cache") for i in ok if i.measure.get("cache")), None),
        **champion,
    }
