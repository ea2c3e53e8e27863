"""A run's database file as its one writer holds it: the ``worker.lock`` flock, and the DuckDB
connection with its cache capped."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

import duckdb

from store.runs import LOCK
from store.schema import StoreError

# DuckDB caches up to 80% of RAM by default, so over a 72-hour run the writer's memory grows with
# the database (issue 10: 5.5 kB per individual). A fixed cap; DuckDB spills to disk beyond it.
MEMORY_LIMIT_ENV = "ABEBOT_DUCKDB_MEMORY"
MEMORY_LIMIT = "256MB"


def memory_limit() -> str:
    """``$ABEBOT_DUCKDB_MEMORY`` (default :data:`MEMORY_LIMIT`), checked before any file is made."""
    limit = os.environ.get(MEMORY_LIMIT_ENV, MEMORY_LIMIT)
    try:
        duckdb.connect(":memory:", config={"memory_limit": limit}).close()
    except (duckdb.InvalidInputException, duckdb.ParserException) as exc:
        raise StoreError(f"${MEMORY_LIMIT_ENV}={limit!r} is not a DuckDB memory limit (e.g. 256MB): "
                         f"{str(exc).splitlines()[0]}") from None
    return limit


def connect(db: Path) -> duckdb.DuckDBPyConnection:
    """The run database, its cache capped at :func:`memory_limit`."""
    return duckdb.connect(str(db), config={"memory_limit": memory_limit()})


class RunLocked(StoreError):
    """Another live process holds the run's ``worker.lock``."""


def lock(path: Path, run_id: str) -> tuple[int, bool]:
    """flock ``worker.lock``; StoreError naming the holder's pid when another process writes the run."""
    lock = path / LOCK
    created = not lock.exists()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise RunLocked(f"run {run_id} is already being written by pid {holder}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd, created


def unlock(fd: int, remove: Path | None = None) -> None:
    if remove is not None:
        remove.unlink(missing_ok=True)
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def stored_config(db: Path) -> dict | None:
    """The configuration a run was created with (its ``runs`` row), read from ``run.duckdb`` opened
    read-only for the moment, writing nothing; None when a live worker holds the database (its
    lock refuses the caller anyway). StoreError (one line) when it is missing or unreadable."""
    import json

    name = db.parent.name
    if not db.is_file():
        raise StoreError(f"run {name}: run.duckdb is missing")
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        if "lock" in str(exc).lower():
            return None
        raise StoreError(f"run {name}: run.duckdb is corrupt or unreadable ({_first_line(exc)})") from None
    try:
        row = con.execute("SELECT config FROM runs LIMIT 1").fetchone()
        value = json.loads(row[0]) if row and row[0] else None
    except (duckdb.Error, ValueError) as exc:
        raise StoreError(f"run {name}: run.duckdb is corrupt or unreadable ({_first_line(exc)})") from None
    finally:
        con.close()
    if not isinstance(value, dict):
        raise StoreError(f"run {name}: run.duckdb has no run record")
    return value


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
