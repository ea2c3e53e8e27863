"""Fitness: normalised objective terms times the user's weights, and Pareto ranks.

The seed adds ``1/time`` and ``1/bytes`` raw, which mixes units so its weights mean nothing. Here
each term is a ratio against the baseline measured in the same process at the start of the run:

* time term      = baseline time / candidate time       (1.0 = as fast as the library, 2.0 = twice)
* memory term    = baseline bytes / candidate bytes     (1.0 = same footprint as the library)
* stability term = fraction of repeated launches bit-identical to the first, in [0, 1]

``fitness = (w_t * time + w_m * memory + w_s * stability) / (w_t + w_m + w_s)``; a lethal
candidate has fitness 0. Raw objectives are always stored beside the terms.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

LETHAL_STATUSES = ("compile_error", "resource_exceeded", "wrong_result", "crashed", "timeout", "unstable")


@dataclass(frozen=True)
class Baseline:
    """The reference point of the normalisation, measured once per run."""

    time_us: float
    memory_bytes: float

    @classmethod
    def from_record(cls, record: Mapping) -> "Baseline":
        return cls(float(record["time_us"]), float(record["memory_bytes"]))


@dataclass(frozen=True)
class Score:
    fitness: float
    time_term: float | None
    memory_term: float | None
    stability_term: float | None


def normalised_weights(weights: Sequence[float]) -> tuple[float, float, float]:
    """Weights scaled to sum to one; ValueError when negative or all zero."""
    if len(weights) != 3 or any(w < 0 for w in weights):
        raise ValueError("fitness weights must be three non-negative numbers")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("fitness weights must not all be zero")
    return tuple(w / total for w in weights)  # type: ignore[return-value]


def score(measure: Mapping, baseline: Baseline, weights: Sequence[float]) -> Score:
    """Fitness of one evaluated candidate (``measure`` has status, time_us, memory_bytes, stability)."""
    if measure["status"] != "ok":
        return Score(0.0, None, None, None)
    wt, wm, ws = normalised_weights(weights)
    time_term = baseline.time_us / float(measure["time_us"])
    memory_term = baseline.memory_bytes / float(measure["memory_bytes"])
    stability_term = float(measure["stability"])
    return Score(wt * time_term + wm * memory_term + ws * stability_term, time_term, memory_term, stability_term)


def objectives(measures: Iterable[Mapping]) -> np.ndarray:
    """Rows of (time_us, memory_bytes, -stability), all to be minimised."""
    return np.array([[m["time_us"], m["memory_bytes"], -m["stability"]] for m in measures], dtype=float).reshape(-1, 3)


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
