"""A run's name and notes, and its archived state: ``<run>/meta.json``, written atomically.

They are the user's, not the worker's, so they live beside the database rather than in it (the
worker is the only process that opens ``run.duckdb``).
"""
from __future__ import annotations

from pathlib import Path

from store.runs import atomic_write_json, read_json

META = "meta.json"
MAX_NAME, MAX_NOTES = 80, 4000


def load_meta(folder: Path | str) -> dict:
    """``{"name": str, "notes": str}`` of a run folder (empty strings when never set)."""
    data = read_json(Path(folder) / META)
    data = data if isinstance(data, dict) else {}
    return {"name": str(data.get("name") or ""), "notes": str(data.get("notes") or "")}


def save_meta(folder: Path | str, name: str, notes: str) -> dict:
    """Store a run's name and notes (trimmed to :data:`MAX_NAME` / :data:`MAX_NOTES` characters).

    The text is only ever shown, never used as a path or a command.
    """
    meta = {"name": " ".join(str(name).split())[:MAX_NAME], "notes": str(notes)[:MAX_NOTES]}
    atomic_write_json(Path(folder) / META, meta)
    return meta
