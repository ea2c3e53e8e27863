"""The Individuals page's cached data: the run's individuals as one DuckDB table, shared by every
session, and the gene importance of a filter. Here rather than in the page so that the warm-up
(:mod:`dashboard.prefetch`) fills the very caches the page reads."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboard import importance as I
from store.queries import IndividualsTable


def run_identity(folder: Path) -> tuple:
    """What tells one run in ``folder`` from another (its config.json's inode and mtime); new
    generations do not change it: :meth:`IndividualsTable.refresh` picks them up."""
    try:
        stat = (folder / "config.json").stat()
        return str(folder), stat.st_ino, stat.st_mtime_ns
    except OSError:
        return str(folder), None, None


@st.cache_resource(max_entries=4, show_spinner="Loading every individual of the run…")
def load_table(folder: str, created: tuple) -> IndividualsTable:
    """The run's individuals as one in-memory DuckDB table, shared by every session; the page calls
    :meth:`IndividualsTable.refresh` on each run, which appends only generations committed since."""
    return IndividualsTable(folder)


def filters(status: list, span: tuple[int, int], fitness_min: float | None, prefix: str,
            genes: dict[str, list]) -> dict:
    """The filter :meth:`IndividualsTable.where` takes, from the page's widgets; normalised, so the
    same choice is the same cache key whoever builds it (the page, or the warm-up with none chosen)."""
    return {"status": list(status), "generation": (int(span[0]), int(span[1])), "fitness_min": fitness_min,
            "hash": prefix.strip(), "in": {gene: list(values) for gene, values in genes.items()}}


def unfiltered(table: IndividualsTable) -> dict:
    """:func:`filters` with nothing chosen: what the page opens with."""
    return filters([], table.generation_span(), None, "", {})


@st.cache_data(max_entries=16, show_spinner="Fitting a random forest to the genes…")
def importance_of(folder: str, created: tuple, rows: int, chosen: dict) -> tuple:
    """Gene importance and the parallel-coordinates rows for the filter ``chosen``, cached per table size."""
    table = load_table(folder, created)
    frame = table.latest_sample(chosen, ["fitness", *table.genes], I.MAX_ROWS)
    best = table.latest_sample(chosen, ["fitness", *table.genes], I.PARALLEL_TOP, fittest=True)
    return I.gene_importance(frame, table.genes), I.parallel_frame(frame, table.genes, fittest=best), len(frame)
