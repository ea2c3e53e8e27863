"""The GA's surrogate filter (LFBO style, as Helion's pattern search): measure only what a model expects to be good.

With ``surrogate`` = k > 1 the GA breeds k times the children a generation needs
(:func:`core.search.ga.step`), and :func:`choose` keeps the ones a scikit-learn random forest, trained
on the run's own evaluations so far (genes -> fitness, lethal ones at 0), ranks highest: those are
measured, the rest never are. Until the run has :data:`MIN_TRAINING` evaluations, the first children
bred are kept (the filter is off). Each generation the filter's *hit rate* is recorded in
``ctx.strategy_state["surrogate"]`` and logged: the share of the children it chose last time that
landed in the top 10 % of every evaluation of the run.
"""
from __future__ import annotations

import random
from typing import Sequence

import numpy as np

from core.search.operators import flat_genes

MIN_TRAINING = 8
TOP = 0.10


def _features(individuals: Sequence, vocab: dict, keys: list | None = None) -> np.ndarray:
    """One row per genome: numbers as they are, anything else as its index in a growing vocabulary.
    ``keys``: the genes, in order (default: those of the individuals; a gene a genome lacks -- an
    optional group at its defaults, docs/machine-code.md -- reads as ())."""
    rows = []
    flats = [flat_genes(ind.genome) for ind in individuals]
    for flat in flats:
        row = []
        for key in keys if keys is not None else sorted(set().union(*flats), key=str):
            v = flat.get(key, ())
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row.append(float(v))
            else:
                row.append(float(vocab.setdefault((key, repr(v)), len(vocab))))
        rows.append(row)
    return np.array(rows, dtype=float)


def _record(population: Sequence, state: dict) -> None:
    """Add the population's measured genomes to the training set and score last generation's choice."""
    seen: dict = state.setdefault("seen", {})
    for ind in population:
        if ind.measure and not ind.remeasured:
            seen[ind.hash] = (ind, float(ind.fitness))
    chosen = state.pop("chosen", None)
    if chosen and len(seen) >= MIN_TRAINING:
        cut = float(np.quantile([f for _, f in seen.values()], 1 - TOP))
        hits = sum(1 for h in chosen if h in seen and seen[h][1] >= cut and seen[h][1] > 0)
        state["hits"] = state.get("hits", 0) + hits
        state["measured"] = state.get("measured", 0) + len(chosen)
        state.setdefault("history", []).append({"chosen": len(chosen), "hits": hits})


def hit_rate(state: dict) -> float | None:
    """Hits / children chosen over the run so far, or None before the filter has chosen anything."""
    s = state.get("surrogate") or {}
    return s["hits"] / s["measured"] if s.get("measured") else None


def choose(children: list, n: int, population: Sequence, ctx, rng: random.Random) -> list:
    """The ``n`` of ``children`` the forest ranks best (the first ``n`` until it can be trained)."""
    from sklearn.ensemble import RandomForestRegressor

    state = ctx.strategy_state.setdefault("surrogate", {})
    _record(population, state)
    seen = list(state["seen"].values())
    if len(seen) < MIN_TRAINING:
        return children[:n]
    vocab = state.setdefault("vocab", {})
    keys = sorted(set().union(*(flat_genes(i.genome) for i in [*(i for i, _ in seen), *children])), key=str)
    x = _features([i for i, _ in seen], vocab, keys)
    y = np.array([f for _, f in seen])
    forest = RandomForestRegressor(n_estimators=50, min_samples_leaf=1, random_state=rng.getrandbits(31), n_jobs=1)
    forest.fit(x, y)
    predicted = forest.predict(_features(children, vocab, keys))
    order = np.argsort(-predicted, kind="stable")[:n]
    kept = [children[i] for i in sorted(order)]
    state["chosen"] = [c.hash for c in kept]
    rate = hit_rate(ctx.strategy_state)
    if ctx.log:
        ctx.log(f"surrogate: measuring {n} of {len(children)} bred children"
                + (f" (hit rate so far {rate:.0%})" if rate is not None else ""))
    return kept
