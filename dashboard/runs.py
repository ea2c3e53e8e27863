"""Run discovery for the dashboard: every run id the user can pick comes from here.

A run id never reaches the file system unless it was listed by :func:`store.runs.list_runs` and
resolved by :func:`store.runs.run_dir`, which refuses ids that leave the runs folder.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from dashboard.meta import load_meta
from store.reader import RunReader
from store.runs import list_runs, run_dir


def all_runs(runs: Path) -> list[dict]:
    """Every run in ``runs`` (newest first), as :func:`store.runs.list_runs` describes them."""
    try:
        rows = list_runs(runs)
    except FileNotFoundError:
        return []
    for row in rows:
        row["path"] = Path(runs) / row["run_id"]  # listed by list_runs: a folder inside ``runs``
    return sorted(rows, key=lambda r: str(r.get("created_at") or ""), reverse=True)


def resolve(runs: Path, run_id: str | None, known: list[str]) -> Path | None:
    """The folder of ``run_id`` if it is a listed run and resolves inside ``runs``, else None."""
    if not run_id or run_id not in known:
        return None
    try:
        return run_dir(runs, run_id)
    except ValueError:
        return None


def reader(runs: Path, run_id: str) -> RunReader:
    """A :class:`RunReader` for a listed run (ValueError for an id outside the runs folder)."""
    return RunReader(run_dir(runs, run_id))


def run_label(row: dict) -> str:
    """What a run is, under its id: name, workload/backend, status and generations done."""
    done = generations_done(row.get("generation"))
    total = row.get("total_generations")
    name = (load_meta(row["path"]).get("name") or "") if row.get("path") else ""
    return (f"{name + ' · ' if name else ''}{row.get('workload', '?')}/{row.get('backend', '?')} · {row.get('status', '?')}"
            f" · {done}{f' of {total}' if total else ''} generations done")


def generations_done(last_generation) -> int:
    """Generations are numbered from 0; "done" counts them: last generation 4 means 5 done."""
    try:
        return int(last_generation) + 1
    except (TypeError, ValueError):
        return 0


def runs_table(rows: list[dict]) -> pd.DataFrame:
    """The Runs page's table: one row per run, the columns users sort by."""
    cols = ["run_id", "status", "workload", "backend", "generation", "best_fitness", "created_at", "updated_at"]
    df = pd.DataFrame(rows, columns=cols) if rows else pd.DataFrame(columns=cols)
    return df


def data_signature(folder: Path) -> tuple:
    """A cheap token that changes when a run writes new data (heartbeat, live files, status).

    Used as a cache key so that refreshing an idle page costs a few ``stat`` calls, not a query.
    """
    sig: list = [str(folder)]
    for name in ("heartbeat.json", "live", "run.duckdb", "config.json", "control.json", "status.json"):
        try:
            st = os.stat(folder / name)
            sig.append((name, st.st_mtime_ns, st.st_size))
        except OSError:
            sig.append((name, None))
    return tuple(sig)


def load_json(path: Path) -> dict | None:
    """A JSON file's object, or None when missing or unreadable (a writer may be mid-replace)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
