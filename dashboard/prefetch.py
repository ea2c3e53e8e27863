"""Read the newest run ahead, as the Monitor and Individuals pages will first ask for it.

The pages open the newest run when no other is chosen (:func:`dashboard.ui.pick_run`). Reading it
-- its generations, lethal causes and last population, its 320,000 individuals into DuckDB, the gene
importance of no filter -- and building the Monitor's figures (the JSON it sends, cached per run
signature) cost a first visit 0.1-0.3 s on the Monitor page and about 1 s on the Individuals page of a
5,000 x 64 run (benchmarks/MONITOR_RESULTS.md, 2026-12-02). Done here, the pages find their caches
filled: the same cached functions, with the same arguments.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from dashboard import live, ui
from dashboard import individuals as IX
from dashboard.runs import all_runs
from dashboard.settings import read_ahead


def newest_run(runs: Path) -> Path | None:
    """The folder of the run the pages open by default, or None in an empty runs folder."""
    rows = all_runs(runs)
    return rows[0]["path"] if rows else None


def steps(runs: Path) -> list[Callable[[], None]]:
    """The reads, one callable each, in order (the warm-up runs them between page runs): none for an
    empty runs folder, or with ``ABEBOT_READ_AHEAD=0`` (:func:`dashboard.settings.read_ahead`). A step
    that raises is left to the page, which reports the error itself."""
    folder = newest_run(runs) if read_ahead() else None
    if folder is None:
        return []
    done: dict = {}

    def monitor() -> None:
        key, sig = str(folder), ui.signature(folder)
        live.run_charts_json(key, sig, False)
        gens = ui.generations(key, sig)
        if not gens.empty:
            live.pareto_json(key, int(gens["generation"].max()), sig)

    def table() -> None:
        done["created"] = IX.run_identity(folder)
        done["table"] = IX.load_table(str(folder), done["created"])
        done["table"].refresh()

    def importance() -> None:
        t = done.get("table")
        if t is not None and t.rows:
            IX.importance_of(str(folder), done["created"], t.rows, IX.unfiltered(t))

    return [monitor, table, importance]
