"""Dashboard -> worker commands through ``control.json`` (atomic; the worker polls it).

The file holds the latest command, not a queue: ``pause`` stays in force until ``resume``; ``stop``
asks the worker to finish the current generation, commit it and exit.
"""
from __future__ import annotations

import time
from pathlib import Path

from store.runs import CONTROL, atomic_write_json, read_json

COMMANDS = ("pause", "resume", "stop")


def write_control(run_dir: Path | str, command: str) -> None:
    """Record ``command`` (``pause``, ``resume`` or ``stop``); ValueError for anything else."""
    if command not in COMMANDS:
        raise ValueError(f"unknown command {command!r} (choose from: {', '.join(COMMANDS)})")
    path = Path(run_dir)
    if not path.is_dir():
        raise ValueError(f"no run folder at {path}")
    atomic_write_json(path / CONTROL, {"command": command, "written_at": time.time()})


def read_control(run_dir: Path | str) -> str | None:
    """The latest command, or None when there is none (or the file is not a valid command)."""
    data = read_json(Path(run_dir) / CONTROL)
    command = data.get("command") if isinstance(data, dict) else None
    return command if command in COMMANDS else None
