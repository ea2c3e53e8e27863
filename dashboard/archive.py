"""Archived runs (``<runs>/.archive/<run_id>``, where :func:`dashboard.manage.archive` moves them):
list them and move one back among the runs.

Only folder names that are run ids are listed or moved (``store.runs.RUN_ID_RE``), so nothing a user
typed becomes a path.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from dashboard.manage import ARCHIVE
from dashboard.meta import load_meta
from store.runs import CONFIG, RUN_ID_RE, read_json


def archived(runs: Path | str) -> list[dict]:
    """Every archived run, newest id first: run_id, name, workload, backend."""
    root = Path(runs) / ARCHIVE
    try:
        folders = [p for p in root.iterdir() if p.is_dir() and RUN_ID_RE.match(p.name) and (p / CONFIG).exists()]
    except OSError:
        return []
    out = []
    for folder in sorted(folders, key=lambda p: p.name, reverse=True):
        cfg = read_json(folder / CONFIG)
        cfg = cfg if isinstance(cfg, dict) else {}
        out.append({"run_id": folder.name, "name": load_meta(folder)["name"], "workload": cfg.get("workload"),
                    "backend": cfg.get("backend")})
    return out


def restore(runs: Path | str, run_id: str) -> Path:
    """Move an archived run back to ``<runs>/<run_id>``; ValueError for an id that is not archived,
    FileExistsError when a run of that id is there already."""
    if not RUN_ID_RE.match(run_id or ""):
        raise ValueError(f"{run_id!r} is not a run id")
    root = Path(runs).resolve()
    source = root / ARCHIVE / run_id
    if not source.is_dir():
        raise ValueError(f"run {run_id} is not archived")
    target = root / run_id
    if target.exists():
        raise FileExistsError(f"a run {run_id} is already in {root}")
    shutil.move(str(source), str(target))
    return target
