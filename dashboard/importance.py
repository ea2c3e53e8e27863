"""Which genes matter for fitness: scikit-learn's permutation importance of a random forest.

Why this method: a random forest (``sklearn.ensemble.RandomForestRegressor``) fits the
interactions and the non-linear, categorical gene effects of a kernel search without tuning, and
``sklearn.inspection.permutation_importance`` on rows held out from the fit measures how much the
forest's R² drops when one gene's values are shuffled. Unlike the forest's own impurity-based
importances it is not biased towards genes with many values (scikit-learn's documentation shows
that bias), and it says "this gene does not matter" with a value near zero. Optuna's fANOVA
evaluator is the same idea (a forest, then a variance decomposition) and would add a dependency
for no gain here. Both libraries are kept; nothing here is hand-written statistics.
"""
from __future__ import annotations

import pandas as pd

MAX_ROWS = 3000  # distinct genomes fitted; beyond that a random sample (seeded: same answer each time)


def gene_importance(frame: pd.DataFrame, genes: list[str], target: str = "fitness", seed: int = 0) -> pd.DataFrame:
    """One row per gene: ``importance`` (mean drop of held-out R² when the gene is shuffled) and
    ``spread`` (its standard deviation over the repeats), most important first; plus ``r2``, the
    forest's held-out R² (importance means little when it is low). Empty when there is too little data."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.inspection import permutation_importance
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import OrdinalEncoder

    cols = ["gene", "importance", "spread", "r2"]
    data = frame.dropna(subset=[target])
    if "genome_hash" in data:  # an elite appears once per generation: its latest (most re-timed) row
        data = data.drop_duplicates("genome_hash", keep="last")
    genes = [g for g in genes if g in data and data[g].nunique(dropna=False) > 1]
    if len(data) < 20 or not genes or data[target].nunique() < 2:
        return pd.DataFrame(columns=cols)
    if len(data) > MAX_ROWS:
        data = data.sample(MAX_ROWS, random_state=seed)
    x = OrdinalEncoder().fit_transform(data[genes].astype(str))
    y = data[target].astype(float).to_numpy()
    x_fit, x_test, y_fit, y_test = train_test_split(x, y, test_size=0.25, random_state=seed)
    forest = RandomForestRegressor(n_estimators=40, min_samples_leaf=2, max_depth=12, random_state=seed, n_jobs=1).fit(x_fit, y_fit)
    r2 = float(forest.score(x_test, y_test))
    result = permutation_importance(forest, x_test, y_test, n_repeats=4, random_state=seed, n_jobs=1)
    out = pd.DataFrame({"gene": genes, "importance": result.importances_mean, "spread": result.importances_std})
    out["r2"] = r2
    return out.sort_values("importance", ascending=False, ignore_index=True)


PARALLEL_ROWS = 500  # lines a parallel-coordinates plot draws (SVG, banded by fitness: a few paths whatever the count)
PARALLEL_TOP = 100  # of which the fittest genomes, always drawn; the rest a seeded uniform sample


def parallel_frame(frame: pd.DataFrame, genes: list[str], max_rows: int = PARALLEL_ROWS, seed: int = 0,
                   fittest: pd.DataFrame | None = None, top: int = PARALLEL_TOP) -> pd.DataFrame:
    """The rows a parallel-coordinates plot draws, genes and fitness only: at most ``max_rows`` --
    the ``top`` fittest genomes (of ``fittest`` when given, else of ``frame``) and a seeded uniform
    sample of the others in ``frame``, so the plot shows where the best are against the population
    and stays responsive on 300,000 rows. ``attrs["top"]`` says how many are the fittest."""
    cols = [g for g in genes if g in frame] + ["fitness"]
    data = frame.dropna(subset=["fitness"])
    covered = fittest is None or ("genome_hash" in data and set(fittest["genome_hash"]) <= set(data["genome_hash"]))
    if len(data) <= max_rows and covered:
        out = data[cols].reset_index(drop=True)
        out.attrs["top"] = 0
        return out
    pool = fittest.dropna(subset=["fitness"]) if fittest is not None else data
    best = pool.sort_values("fitness", ascending=False, kind="stable").head(min(top, max_rows))
    if "genome_hash" in data and "genome_hash" in best:
        rest = data[~data["genome_hash"].isin(set(best["genome_hash"]))]
    else:
        rest = data.drop(index=best.index, errors="ignore") if fittest is None else data
    rest = rest.sample(min(len(rest), max_rows - len(best)), random_state=seed)
    out = pd.concat([best[[c for c in cols if c in best]], rest[cols]], ignore_index=True)
    out.attrs["top"] = len(best)
    return out


def parallel_caption(frame: pd.DataFrame, sampled: int) -> str:
    """What the parallel-coordinates plot draws, for its caption."""
    top = int(frame.attrs.get("top", 0))
    if not top:
        return f"Every one of the {len(frame):,} distinct genomes that match, each at its latest row."
    return (f"{len(frame):,} lines: the {top:,} fittest distinct genomes that match and a uniform random sample of "
            f"{len(frame) - top:,} others (of {sampled:,} sampled, each genome at its latest row).")
