"""Fitness: the objectives' normalised terms times the user's weights, and Pareto ranks.

What each term is and why it is a ratio against the run's baseline is explained in
:mod:`core.objectives`. ``fitness = sum(w * term) / sum(w)`` over the objectives the weights name;
a lethal candidate has fitness 0. The Pareto ranks use the raw measurements of every objective.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from core.objectives import OBJECTIVES, objective


@dataclass(frozen=True)
class Score:
    """The fitness of one candidate and the term of every weighted objective (None when lethal)."""

    fitness: float
    terms: dict[str, float | None]


def normalised_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Objective name -> weight, scaled to sum to one (ConfigError for weights that are not valid)."""
    from core.config import validate_weights

    checked = validate_weights(weights)
    total = sum(checked.values())
    return {name: w / total for name, w in checked.items()}


def score(measure: Mapping, baseline: Mapping, weights: Mapping[str, float]) -> Score:
    """Fitness of one evaluated candidate.

    ``measure`` is an evaluation (status and every objective's measurement), ``baseline`` the
    generation's baseline record (the measurements of the library baseline, with the run-level
    ``reference`` the time term divides, :mod:`core.objectives`), ``weights`` objective name ->
    weight. Every objective the weights name gets a term, a zero-weighted one too (it is stored).
    """
    if measure["status"] != "ok":
        return Score(0.0, {name: None for name in weights})
    terms = {name: objective(name).term(measure, baseline) for name in weights}
    fitness = sum(w * terms[name] for name, w in normalised_weights(weights).items() if name in terms)
    return Score(fitness, terms)


def objectives(measures: Iterable[Mapping]) -> np.ndarray:
    """One row per candidate, one column per objective of OBJECTIVES, all to be minimised."""
    rows = [[o.minimised(m) for o in OBJECTIVES] for m in measures]
    return np.array(rows, dtype=float).reshape(-1, len(OBJECTIVES))


def pareto_ranks(measures: Sequence[Mapping]) -> list[int | None]:
    """Non-dominated sorting rank (0 = Pareto front) of every viable candidate; None for lethal ones."""
    import moocore

    viable = [i for i, m in enumerate(measures) if m["status"] == "ok"]
    ranks: list[int | None] = [None] * len(measures)
    if viable:
        for i, r in zip(viable, moocore.pareto_rank(objectives([measures[i] for i in viable]))):
            ranks[i] = int(r)
    return ranks


def crowding_distance(points: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance of points in one front (boundary points get infinity)."""
    n, m = points.shape
    dist = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(m):
        order = np.argsort(points[:, j], kind="stable")
        span = points[order[-1], j] - points[order[0], j]
        dist[order[0]] = dist[order[-1]] = np.inf
        if span > 0:
            dist[order[1:-1]] += (points[order[2:], j] - points[order[:-2], j]) / span
    return dist
