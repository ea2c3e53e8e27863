"""The worker side: the only process that opens a run's ``run.duckdb``.

Each generation is one transaction (individuals, new kernels, the generation row, the GA state).
After it commits, the generation is mirrored to ``live/`` as Parquet with atomic renames, and
``heartbeat.json`` is rewritten; the dashboard reads only those. ``live/`` is derived data: a file
missing (the worker died between COMMIT and the Parquet write), truncated or unreadable is rewritten
from the database by :meth:`RunWriter.open` (resume, ``python -m core repair``), which reads every
live file, and at the next commit, which checks the files it wrote for changes. A mirror failure
only logs a warning: it never fails a commit or an open.
"""
from __future__ import annotations

import ctypes
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterable

import duckdb

from store.mirror import LiveMirror
from store.run_file import connect, lock, memory_limit, unlock
from store.runs import (CONFIG, DB, HEARTBEAT, LIVE, LOCK, STATUSES, atomic_write_json, read_json, run_dir,
                        this_process, write_reserved)
from store.schema import SCHEMA_VERSION, StoreError, ddl, migrate, select_list, stored_terms, term_names, to_arrow

log = logging.getLogger(__name__)
_OWN_FIELDS = {"run_id", "pid", "host", "pid_start", "status", "message", "generation", "created_at", "updated_at"}
COMPACT_EVERY = 64  # per-generation Parquet files merged into one chunk, so readers glob ~N/64 files
# The database instance keeps memory that grows with the run whatever its memory_limit (about 2 kB per
# individual, the rate the file grows: issue 36); closing it gives that back, so the writer reopens its
# connection (a CHECKPOINT, a close and an open: tens of milliseconds) every REOPEN_EVERY commits or
# REOPEN_ROWS individual rows, whichever comes first, then hands glibc's free heap back (trim_heap).
REOPEN_EVERY = 256
REOPEN_ROWS = 16_384
KEEP_STATES = 4  # GA states kept (all genomes stay in ``individuals``; a state holds the RNG too)
class RunWriter(LiveMirror):
    """Writes one run. Holds ``worker.lock`` (flock) from create/open until :meth:`close`."""

    compact_every = COMPACT_EVERY
    reopen_every = REOPEN_EVERY
    reopen_rows = REOPEN_ROWS

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection, lock_fd: int):
        self.path, self._con, self._lock_fd = path, con, lock_fd
        self._mutex = threading.RLock()
        row = _one(con, "SELECT run_id, status, message, created_at FROM runs")
        self.run_id, self._status, self._message, self._created_at = row
        self._generation = _one(con, "SELECT max(generation) FROM generations")[0]
        self.terms = stored_terms(con)  # the run's objectives: its individuals table's <name>_term columns
        self._hb: dict[str, Any] = {}
        self._live_dirty = False
        self._commits = self._rows = 0  # since the database was (re)opened: :data:`REOPEN_EVERY`
        self._seen: dict[Path, tuple[int, int, int]] = {}  # live files as written or verified: their stat
        self.repaired: list[str] = []  # live files rewritten or removed because they were damaged or stray

    # -- opening -----------------------------------------------------------------------------------
    @classmethod
    def create(cls, runs_dir: Path | str, run_id: str, config: dict) -> "RunWriter":
        """Create the run folder (it may already hold config.json and worker.log) and its database.

        StoreError when the run already has a database; ValueError for an invalid run id.
        """
        path = run_dir(runs_dir, run_id)
        if hasattr(config, "to_json"):  # a RunConfig
            config = json.loads(config.to_json())
        if (path / DB).exists():
            raise StoreError(f"run {run_id} already exists at {path}")
        terms = term_names(config)
        memory_limit()  # a bad $ABEBOT_DUCKDB_MEMORY leaves no half-made run folder
        path.mkdir(parents=True, exist_ok=True)
        lock_fd, _ = lock(path, run_id)
        try:
            atomic_write_json(path / CONFIG, config)
            con = connect(path / DB)
            now = time.time()
            con.execute("BEGIN")
            con.execute(ddl(terms))
            con.execute("INSERT INTO runs VALUES (?, ?, ?, 'running', '', NULL, ?)",
                        [run_id, now, json.dumps(config, sort_keys=True), now])
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        except BaseException:
            unlock(lock_fd)
            raise
        writer = cls(path, con, lock_fd)
        writer._sync_live()
        writer.heartbeat()
        return writer

    @classmethod
    def open(cls, path: Path | str) -> "RunWriter":
        """Open an existing run to resume it; StoreError (one line) if it is missing, corrupt or locked.

        A database of an older schema version gets the columns added since (null in its rows).
        Brings ``live/`` up to date with the database before returning.
        """
        path = Path(path)
        if not path.is_dir():
            raise StoreError(f"no run folder at {path}")
        if not isinstance(read_json(path / CONFIG), dict):
            raise StoreError(f"run {path.name}: config.json is missing or not valid JSON")
        if not (path / DB).is_file():
            raise StoreError(f"run {path.name}: run.duckdb is missing")
        lock_fd, created_lock = lock(path, path.name)
        con = None
        try:
            con = connect(path / DB)
            version = _one(con, "SELECT max(version) FROM schema_version")[0]
            if version is None or version > SCHEMA_VERSION:
                raise StoreError(f"run {path.name}: run.duckdb has schema version {version}, expected {SCHEMA_VERSION}")
            if _one(con, "SELECT count(*) FROM runs")[0] != 1:
                raise StoreError(f"run {path.name}: run.duckdb has no run record")
            for table in ("runs", "generations", "individuals", "kernels", "ga_state"):
                # read every block once, so a damaged file fails here, before live/ is touched
                con.execute(f"SELECT count(*), max(hash(COLUMNS(*))) FROM {table}").fetchall()
            if version < SCHEMA_VERSION:
                migrate(con)
            writer = cls(path, con, lock_fd)
            writer._repair_live(full=True)
        except BaseException as exc:
            if con is not None:
                con.close()
            unlock(lock_fd, path / LOCK if created_lock else None)
            if isinstance(exc, duckdb.Error):
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StoreError(f"run {path.name}: run.duckdb is corrupt or unreadable ({first})") from None
            raise
        previous = read_json(path / HEARTBEAT)
        if isinstance(previous, dict):  # keep the worker's fields (total_generations, started_at...)
            writer._hb = {k: v for k, v in previous.items() if k not in _OWN_FIELDS}
        writer.heartbeat()
        return writer

    def close(self) -> None:
        """Checkpoint and close the database and release the lock (idempotent)."""
        with self._mutex:
            if self._con is None:
                return
            try:
                self._con.execute("CHECKPOINT")
            except duckdb.Error:
                pass
            self._con.close()
            self._con = None
            unlock(self._lock_fd)

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- run record --------------------------------------------------------------------------------
    def set_baseline(self, baseline: dict) -> None:
        """Store the evaluator's baseline record (device, baseline timings) and mirror it to live/."""
        with self._mutex:
            self._db.execute("UPDATE runs SET baseline = ?, updated_at = ?",
                             [json.dumps(baseline, sort_keys=True, default=str), time.time()])
        atomic_write_json(self._live / "baseline.json", baseline)

    def baseline(self) -> dict | None:
        with self._mutex:
            text = _one(self._db, "SELECT baseline FROM runs")[0]
        return json.loads(text) if text else None

    def set_status(self, status: str, message: str = "") -> None:
        """Record ``running``, ``paused``, ``finished``, ``stopped`` or ``failed`` (and a one-line message)."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r} (choose from: {', '.join(STATUSES)})")
        with self._mutex:
            self._status, self._message = status, message
            try:  # the heartbeat says it even when the database cannot (a full disk): the dashboard reads that
                self._db.execute("UPDATE runs SET status = ?, message = ?, updated_at = ?",
                                 [status, message, time.time()])
            finally:
                self.heartbeat()

    def heartbeat(self, **fields: Any) -> None:
        """Rewrite heartbeat.json atomically: run_id, pid, host, status, generation (the last committed;
        absent before the first commit), updated_at (epoch seconds), plus
        every field given now or earlier (phase, evaluations, evals_per_s, total_generations, ...).

        A ``status`` (and ``message``) different from the recorded one goes through :meth:`set_status`;
        ``run_id``, ``pid`` and ``generation`` are always the writer's own. Safe to call from a
        background thread.
        """
        with self._mutex:
            status, message = fields.pop("status", self._status), fields.pop("message", self._message)
            self._hb.update(fields)
            if (status, message) != (self._status, self._message):
                self.set_status(status, message)  # writes the heartbeat too
                return
            hb = dict(self._hb)
            hb.update(this_process(), run_id=self.run_id, status=self._status, message=self._message,
                      generation=self._generation, created_at=self._created_at, updated_at=time.time())
            if hb["generation"] is None:  # nothing committed yet: absent, not null
                del hb["generation"]
            # in reserved space: a worker paused on a full disk still says so (store/runs.py)
            write_reserved(self.path / HEARTBEAT, json.dumps(hb, indent=1, sort_keys=True, default=str).encode())

    # -- generations -------------------------------------------------------------------------------
    def last_state(self) -> tuple[int, dict] | None:
        """The last committed generation and its GA state, or None before the first commit."""
        with self._mutex:
            row = _one(self._db, "SELECT generation, state FROM ga_state ORDER BY generation DESC LIMIT 1")
        return (int(row[0]), json.loads(row[1])) if row else None

    def evaluations(self, hashes: Iterable[str] | None = None) -> dict[str, dict]:
        """genome_hash -> its latest stored row (measurements and all), for every genome of the run or
        only those in ``hashes``; a hash never stored is absent."""
        where, params = "", []
        if hashes is not None:
            where, params = "WHERE list_contains(?, genome_hash) ", [list(hashes)]
        with self._mutex:
            rows = self._db.sql(
                f"SELECT {select_list('individuals')} FROM individuals {where}"
                "QUALIFY row_number() OVER (PARTITION BY genome_hash ORDER BY generation DESC) = 1", params=params
            ).to_arrow_table().to_pylist()
        return {r["genome_hash"]: r for r in rows}

    def genome_hashes(self) -> set[str]:
        """Every genome hash stored in the run (what a restarted worker must not evaluate again)."""
        with self._mutex:
            return {r[0] for r in self._db.execute("SELECT DISTINCT genome_hash FROM individuals").fetchall()}

    def baseline_times(self, through: int | None = None) -> list[float]:
        """Every committed generation's baseline time (``baseline_time_us``, µs), in generation order,
        up to ``through`` when given; generations without one (runs from before re-timing) are left
        out. A resumed run rebuilds its run-level reference from these (core/search/retiming.py)."""
        sql = "SELECT baseline_time_us FROM generations WHERE baseline_time_us IS NOT NULL"
        params: list = []
        if through is not None:
            sql += " AND generation <= ?"
            params.append(int(through))
        with self._mutex:
            rows = self._db.execute(sql + " ORDER BY generation", params).fetchall()
        return [float(r[0]) for r in rows]

    def commit_generation(self, generation: int, individuals: list[dict], kernels: list[dict],
                          summary: dict, state: dict, baseline: dict | None = None) -> None:
        """Store one generation in a single transaction, then mirror it to live/ and heartbeat.

        ``individuals``/``kernels``/``summary`` use the row keys of docs/CONTRACTS.md (missing keys
        are stored as null, unknown keys ignored); kernels already stored are skipped. ``state`` must
        be JSON-serialisable. ``baseline``, the generation's baseline record, becomes the run's
        (:meth:`baseline`, ``live/baseline.json``) in the same transaction. StoreError when
        ``generation`` is not after the last committed one.
        """
        generation = int(generation)
        now = time.time()
        ind = to_arrow("individuals", individuals, terms=self.terms, generation=generation)
        gen = to_arrow("generations", [summary], generation=generation, finished_at=now)
        try:
            state_text = json.dumps(state)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"GA state of generation {generation} is not JSON-serialisable: {exc}") from None
        unique = {k["source_hash"]: k for k in kernels if k.get("source_hash")}
        baseline_text = None if baseline is None else json.dumps(baseline, sort_keys=True, default=str)
        with self._mutex:
            con = self._db
            con.execute("BEGIN")
            try:
                last = self._generation  # this process is the only writer; the primary key backs it up
                if last is not None and generation <= last:
                    taken = _one(con, "SELECT count(*) FROM generations WHERE generation = ?", [generation])[0]
                    raise StoreError(f"generation {generation} of run {self.run_id} is already committed" if taken else
                                     f"generation {generation} is not after the last committed generation {last}")
                known = set()
                if unique:
                    known = {r[0] for r in con.execute("SELECT source_hash FROM kernels WHERE list_contains(?, source_hash)",
                                                       [list(unique)]).fetchall()}
                new = to_arrow("kernels", [k for h, k in unique.items() if h not in known], generation=generation)
                con.register("_ind", ind)
                con.register("_gen", gen)
                con.register("_ker", new)
                con.execute("INSERT INTO individuals SELECT ?, * FROM _ind", [self.run_id])
                con.execute("INSERT INTO generations SELECT ?, * FROM _gen", [self.run_id])
                con.execute("INSERT INTO kernels SELECT * FROM _ker")
                con.execute("INSERT INTO ga_state VALUES (?, ?, ?)", [self.run_id, generation, state_text])
                con.execute("DELETE FROM ga_state WHERE generation <= ?", [generation - KEEP_STATES])
                con.execute("UPDATE runs SET updated_at = ?, baseline = coalesce(?, baseline)", [now, baseline_text])
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            finally:
                for name in ("_ind", "_gen", "_ker"):
                    con.unregister(name)
            self._generation = generation
            self._mirror(generation, ind, new, gen, baseline_text)
            self._commits, self._rows = self._commits + 1, self._rows + ind.num_rows
            if self._commits >= self.reopen_every or self._rows >= self.reopen_rows:
                self._reopen()
            best = summary.get("best_fitness")
            self.heartbeat(best_fitness=best if best is None else float(best),
                           **{k: summary.get(k) for k in ("champion_hash", "champion_speedup", "champion_speedup_spread",
                                                          "champion_noisy", "champion_samples", "cache")})

    def _reopen(self) -> None:
        """Checkpoint, close and open the database again (see :data:`REOPEN_EVERY`). A checkpoint that
        fails (a full disk) leaves the connection as it is; the WAL keeps every commit either way."""
        try:
            self._db.execute("CHECKPOINT")
        except duckdb.Error as exc:
            log.warning("run %s: checkpoint before reopening the database failed: %s", self.run_id, exc)
            return
        self._con.close()
        self._con = None
        self._con = connect(self.path / DB)
        self._commits = self._rows = 0
        trim_heap()

    # -- live/ mirror ------------------------------------------------------------------------------
    @property
    def _db(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise StoreError(f"run {self.run_id}: writer is closed")
        return self._con

    @property
    def _live(self) -> Path:
        return self.path / LIVE



def trim_heap() -> bool:
    """Give glibc's free heap memory back to the system (``malloc_trim(0)``); False where there is none
    (not glibc). The writer calls it after reopening its database: what the closed connection's Python
    side freed otherwise stays in the process as free-but-kept heap (issue 36)."""
    global _TRIM
    if _TRIM is None:
        try:
            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):
            _TRIM = False
    if not _TRIM:
        return False
    _TRIM(0)
    return True


_TRIM = None


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> tuple | None:
    """The first row; fetchall so no result is left open (DuckDB 2 refuses new work on the connection then)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None
