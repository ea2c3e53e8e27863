"""What a replay reports: evaluations to within 2 % / 5 % of the best known, wins over random search, and a
Kernel-Tuner-style score.

*Score* (after Kernel Tuner's strategy benchmarks, Willemsen et al.): at every budget n the strategy's
best-so-far time is compared with random search's *expected* best-so-far time at n, computed exactly
from the table (uniform draws without replacement among its genomes, a lethal one never improving):
``(random(n) - strategy(n)) / (random(n) - best known)``, averaged over n = 1..budget. 0 is random
search, 1 finds the best at once, below 0 is worse than random. Before its first ok genome a curve
counts as the table's worst ok time.
"""
from __future__ import annotations

import math
import statistics
from typing import Sequence


def evals_to_within(curve: Sequence[float | None], best: float, fraction: float) -> int | None:
    """The first evaluation (1-based) whose best-so-far is within ``fraction`` of ``best``, or None."""
    for i, v in enumerate(curve, 1):
        if v is not None and v <= best * (1 + fraction):
            return i
    return None


def expected_random_curve(times: Sequence[float | None], budget: int) -> list[float]:
    """E[best-so-far] of random search after n = 1..budget draws without replacement from the table's genomes
    (``times``: the recorded median of every genome, None when lethal)."""
    n_all = len(times)
    ok = sorted(float(t) for t in times if t is not None)
    worst = ok[-1]
    out = []
    for n in range(1, budget + 1):
        n = min(n, n_all)
        # P(none of the j best is drawn) = C(N - j, n) / C(N, n), as a running product
        expected, p_above = 0.0, 1.0  # p_above: P(the j best are all missed), j = 0
        for j, v in enumerate(ok):
            p_next = _p_missed(n_all, j + 1, n)
            expected += (p_above - p_next) * v
            p_above = p_next
        expected += p_above * worst  # no ok genome drawn at all
        out.append(expected)
    return out


def _p_missed(n_all: int, j: int, n: int) -> float:
    if n > n_all - j:
        return 0.0
    return math.exp(math.lgamma(n_all - j + 1) - math.lgamma(n_all - j - n + 1)
                    - math.lgamma(n_all + 1) + math.lgamma(n_all - n + 1))


def score(curve: Sequence[float | None], random_curve: Sequence[float], best: float, worst: float) -> float:
    """Mean over the budget of (random - strategy) / (random - best); see the module docstring."""
    terms = []
    for v, r in zip(curve, random_curve):
        v = worst if v is None else v
        terms.append((r - v) / (r - best) if r > best else (0.0 if v <= best else -1.0))
    return float(statistics.fmean(terms)) if terms else 0.0


def _at(curve: Sequence[float | None], n: int, worst: float) -> float:
    if not curve:
        return worst
    v = curve[min(n, len(curve)) - 1]
    return worst if v is None else v


def summarise(results: list[dict], table, budget: int, checkpoints: Sequence[int] = (25, 50)) -> dict:
    """One summary per strategy (medians over seeds) plus the random-search expectation they are scored by.

    ``wins_over_random[n]`` counts the seeds where the strategy's best at n evaluations is strictly lower
    than that of the ``random`` strategy's run with the same seed (when random was replayed too)."""
    rows = list(table.rows.values())
    times = [r["time_us"] if r["status"] == "ok" else None for r in rows]
    worst = max(t for t in times if t is not None)
    expected = expected_random_curve(times, budget)
    by_strategy: dict[str, list[dict]] = {}
    for r in results:
        by_strategy.setdefault(r["strategy"], []).append(r)
    random_runs = {r["seed"]: r for r in by_strategy.get("random", [])}
    out = {"best_known_us": table.best, "worst_ok_us": worst, "genomes": len(rows), "budget": budget,
           "expected_random_curve": expected, "strategies": {}}
    for name, runs in by_strategy.items():
        to2 = [evals_to_within(r["curve"], table.best, 0.02) for r in runs]
        to5 = [evals_to_within(r["curve"], table.best, 0.05) for r in runs]
        summary = {
            "seeds": len(runs),
            "evals_to_2pct_median": _median_reached(to2), "reached_2pct": sum(x is not None for x in to2),
            "evals_to_5pct_median": _median_reached(to5), "reached_5pct": sum(x is not None for x in to5),
            "score_median": statistics.median(score(r["curve"], expected, table.best, worst) for r in runs),
            "not_recorded": sum(r["not_recorded"] for r in runs),
            "best_at": {n: statistics.median(_at(r["curve"], n, worst) for r in runs) for n in checkpoints if n <= budget},
        }
        if random_runs and name != "random":
            summary["wins_over_random"] = {
                n: sum(1 for r in runs if r["seed"] in random_runs
                       and _at(r["curve"], n, worst) < _at(random_runs[r["seed"]]["curve"], n, worst))
                for n in checkpoints if n <= budget}
        rates = [r["surrogate_hit_rate"] for r in runs if r.get("surrogate_hit_rate") is not None]
        if rates:
            summary["surrogate_hit_rate_median"] = statistics.median(rates)
        out["strategies"][name] = summary
    return out


def _median_reached(values: list[int | None]) -> float | None:
    """Median evaluations, a seed that never got there counting as infinitely many (None if half never did)."""
    ranked = sorted(math.inf if v is None else v for v in values)
    m = statistics.median(ranked) if ranked else math.inf
    return None if m == math.inf else float(m)
