"""Search strategies behind one interface: ``initial_population(ctx, rng)`` and ``step(population, ctx, rng)``.

The worker (live runs) and :mod:`core.search.replay` (recorded tables) both drive a strategy through
these two functions and nothing else, so a replay runs the very code a live run runs:

* ``ga`` -- :mod:`core.search.ga` itself (its ``selection`` setting picks top10, tournament or nsga2;
  replay's ``nsga2`` is the GA with ``selection="nsga2"``), with the surrogate filter when
  ``config.surrogate`` > 0 (:mod:`core.search.surrogate`);
* ``random`` -- random search: every generation is ``population`` distinct random canonical genomes never
  measured in the run (``--init random`` has the GA start the same way);
* ``tpe`` and ``cmaes`` -- Optuna's samplers over the same gene space (:mod:`core.search.optuna_search`).

Every strategy measures and scores through :func:`core.search.ga.evaluate_and_score`: same evaluator
callback, same duplicate rule (a genome is measured once per run), same fitness.
"""
from __future__ import annotations

import random
from typing import Callable

from core.config import STRATEGIES  # noqa: F401 (the names, checked by RunConfig)
from core.search import ga
from core.search.ga import GAContext, Individual
Steps = tuple[Callable[[GAContext, random.Random], list[Individual]],
              Callable[[list[Individual], GAContext, random.Random], list[Individual]]]


def steps(name: str) -> Steps:
    """(initial_population, step) of strategy ``name`` (ValueError naming the known ones otherwise)."""
    if name == "ga":
        return ga.initial_population, ga.step
    if name == "random":
        return random_initial, random_step
    if name in ("tpe", "cmaes"):
        from core.search import optuna_search

        optuna_search.require(name)
        return optuna_search.initial_population, optuna_search.step
    raise ValueError(f"unknown strategy {name!r} (choose from: {', '.join(STRATEGIES)})")


def fresh_random(ctx: GAContext, rng: random.Random, n: int, taken: set[str] | None = None) -> list[Individual]:
    """Up to ``n`` distinct random canonical genomes never measured in the run (nor in ``taken``)."""
    taken = set(taken or ())
    out: list[Individual] = []
    for _ in range(50 * n):
        if len(out) >= n:
            break
        g = ctx.space.random(rng)
        if g.hash not in taken and g.hash not in ctx.known:
            taken.add(g.hash)
            out.append(Individual(g, "random"))
    return out


def random_initial(ctx: GAContext, rng: random.Random) -> list[Individual]:
    """Generation 0 of random search: random genomes only (the seeds are not drawn)."""
    return random_step([], ctx, rng)


def random_step(population: list[Individual], ctx: GAContext, rng: random.Random) -> list[Individual]:
    """One generation of random search: ``population`` new random genomes, measured and scored; when the
    space has none left unmeasured, the last population again (nothing is measured)."""
    new = fresh_random(ctx, rng, ctx.config.population)
    if not new:
        return population
    return ga.evaluate_and_score(new, ctx)
