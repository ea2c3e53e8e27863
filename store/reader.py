"""The dashboard side: reads a run from ``live/`` Parquet, ``heartbeat.json`` and ``worker.log``.

It never opens ``run.duckdb`` (a reader would block the worker's writes). Queries run on an
in-memory DuckDB connection over ``read_parquet``. ``live/individuals/``, ``live/kernels/`` and
``live/generations/`` hold one ``gen_XXXXXXXX.parquet`` per generation until the writer merges a run
of them into a ``chunk_FIRST_LAST.parquet`` (:mod:`store.live_files`); a part a wider one covers is
ignored, and since compaction deletes parts while we may be reading them, a query whose file
vanished is retried on a fresh listing.
A live file that is there but unreadable (truncated, garbage) raises :class:`LiveDamaged`, one line
for the page to show, until the writer rewrites it from ``run.duckdb``.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq

from store.live_files import Part, generation_files, live_parts  # noqa: F401 - Part re-exported
from store.runs import CONFIG, HEARTBEAT, LIVE, LOG, effective_status, read_json
from store.schema import LEGACY_TERMS, StoreError, columns, empty_frame, fill_missing, term_names

LIVE_REBUILDING = "this run's live files are being rebuilt"


class LiveDamaged(StoreError):
    """A ``live/`` Parquet file is damaged. The run's worker rewrites it from ``run.duckdb`` at its
    next commit; a run with no worker at resume or ``python -m core repair RUN``. Its message is
    one line for the page, starting with :data:`LIVE_REBUILDING`."""


def live_damaged(run: Path, exc: BaseException) -> LiveDamaged:
    """The one-line error a page shows for a read of ``run``'s live files that failed with ``exc``."""
    detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    detail = detail.replace(str(run / LIVE) + os.sep, "live/")[:160]
    return LiveDamaged(f"{LIVE_REBUILDING} (run {run.name}: {detail}); a stopped run is repaired by resuming it "
                       f"or by `python -m core repair {run.name}`")


_FOOTERS: dict[str, tuple[tuple, str | None]] = {}  # live file -> (its stat, why it is unreadable or None)
_FOOTERS_LOCK = threading.Lock()


def live_problem(run: Path | str) -> str | None:
    """The one line a page shows instead of its content when a live Parquet file of ``run`` is
    unreadable (truncated, garbage: its footer does not parse), else None.

    Cheap enough for every page run: a listing, a stat per file, and a footer read only for
    files that changed since the last look (in this process).
    """
    run = Path(run)
    files = [p.path for d in ("individuals", "kernels") for p in live_parts(run / LIVE / d)]
    files += generation_files(run / LIVE)
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue  # missing: the readers see fewer rows, not an error
        sig = (st.st_size, st.st_mtime_ns, st.st_ino)
        with _FOOTERS_LOCK:
            seen = _FOOTERS.get(str(path))
        if seen is None or seen[0] != sig:
            try:
                pq.read_metadata(path)
                why = None
            except Exception as exc:  # noqa: BLE001 - whatever pyarrow says, the file is unreadable
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            with _FOOTERS_LOCK:
                if len(_FOOTERS) > 100_000:
                    _FOOTERS.clear()
                _FOOTERS[str(path)] = seen = (sig, why)
        if seen[1] is not None:
            return str(live_damaged(run, RuntimeError(f"{path.relative_to(run)}: {seen[1]}")))
    return None


# What DuckDB raises for a live file it cannot read: no magic bytes, too small, a bad page.
DAMAGE = (duckdb.InvalidInputException, duckdb.IOException, duckdb.InternalException, duckdb.ConversionException)

_RETRIES = 5
_DATABASE: tuple[int, duckdb.DuckDBPyConnection] | None = None
_DATABASE_LOCK = threading.Lock()


def query_connection() -> duckdb.DuckDBPyConnection:
    """A new connection (a cursor) to this process's in-memory DuckDB database, for queries over
    Parquet files. A new database and its first query take about 20 ms, a cursor on an open one
    and its first query 0.3 ms, and a page run creates several readers. The database holds no tables; a forked child opens its own
    (DuckDB's threads do not survive a fork)."""
    global _DATABASE
    with _DATABASE_LOCK:
        if _DATABASE is None or _DATABASE[0] != os.getpid():
            _DATABASE = (os.getpid(), duckdb.connect(":memory:"))
        return _DATABASE[1].cursor()


class RunReader:
    """Read-only view of one run folder, safe while the worker writes it.

    Frames keep JSON columns (genome, parents, resources, lethal_causes...) as JSON text. A run
    written before a column was added (:data:`store.schema.ADDED`) reads with that column null.
    """

    def __init__(self, run_dir: Path | str):
        self.path = Path(run_dir)
        if not self.path.is_dir():
            raise StoreError(f"no run folder at {self.path}")
        self._con = query_connection()
        self._mutex = threading.Lock()

    def config(self) -> dict:
        """The run's configuration (config.json); StoreError when it is missing or corrupt."""
        cfg = read_json(self.path / CONFIG)
        if not isinstance(cfg, dict):
            raise StoreError(f"run {self.path.name}: config.json is missing or not valid JSON")
        return cfg

    @property
    def terms(self) -> tuple[str, ...]:
        """The run's objective names (its ``<name>_term`` columns), from config.json.

        A run whose config.json is missing or unreadable is read with the original three.
        """
        cfg = read_json(self.path / CONFIG)
        return term_names(cfg) if isinstance(cfg, dict) else LEGACY_TERMS

    def heartbeat(self) -> dict | None:
        hb = read_json(self.path / HEARTBEAT)
        return hb if isinstance(hb, dict) else None

    def status(self) -> str:
        """running, paused, finished, stopped, failed; ``dead`` for a running/paused run whose worker
        is gone or silent too long (see :func:`store.runs.effective_status`); ``starting`` briefly
        before the first heartbeat."""
        return effective_status(self.path, self.heartbeat())

    def baseline(self) -> dict | None:
        data = read_json(self.path / LIVE / "baseline.json")
        return data if isinstance(data, dict) else None

    def generations(self, columns: list[str] | None = None) -> pd.DataFrame:
        """One row per committed generation, in order (empty frame before the first commit)."""
        _select(columns, "generations", None)
        return self._query("generations", lambda: generation_files(self.path / LIVE),
                           "SELECT {cols} FROM read_parquet($files, union_by_name = true) ORDER BY generation", {},
                           columns)

    def individuals(self, generation: int | None = None, columns: list[str] | None = None) -> pd.DataFrame:
        """Individuals of one generation (only its file is read), or of every generation.

        ``columns`` picks columns (an extension of the contract: the whole history of 5,000
        generations is cheap with a few numeric columns, not with every genome's JSON).
        """
        _select(columns, "individuals", self.terms)
        if generation is None:
            return self._query("individuals", lambda: self._files("individuals"),
                               "SELECT {cols} FROM read_parquet($files, union_by_name = true)", {}, columns)
        g = int(generation)
        return self._query("individuals", lambda: self._files("individuals", g),
                           "SELECT {cols} FROM read_parquet($files, union_by_name = true) WHERE generation = $g",
                           {"g": g}, columns)

    def top(self, k: int = 5) -> pd.DataFrame:
        """The ``k`` fittest ok individuals, one row per kernel: its latest row.

        A kernel's latest row is its most trusted: an elite is timed again in every generation and
        its time is the median of all its timings, so its best single showing would be luck. (In a
        run from before re-timing every row of a kernel has the same measurements.) A kernel whose
        latest measurement failed is left out.

        Kernels are ranked by their fitness with the time term taken against the run's latest
        reference (:meth:`time_reference`), not the one of the generation that scored the row: the
        reference, a median of noisy baselines, moves as generations add to it (call 31 on the H200:
        between 53 and 92 us), and a kernel last measured while it stood high would outrank a faster
        kernel measured later (a 20.3 us kernel was reported champion over a 16.8 us one). The rows
        come back with their fitness as stored, in that order.
        """
        # Rank on a few columns over every file, then read whole rows only from the winners' files.
        rank, extra, params = "fitness", "", {"k": int(k)}
        reference = self.time_reference()
        if reference is not None:  # (a time weight means a time_term column: the terms are the weights' names)
            rank, extra = "fitness + coalesce($w * ($ref / time_us - time_term), 0)", ", time_us, time_term"
            params.update(w=reference[1], ref=reference[0])
        best = self._query(
            "individuals", lambda: self._files("individuals"),
            f"SELECT generation, genome_hash, {rank} AS rank FROM ("
            f"SELECT generation, genome_hash, status, fitness{extra} FROM read_parquet($files, union_by_name = true) "
            "QUALIFY row_number() OVER (PARTITION BY coalesce(source_hash, genome_hash) "
            "ORDER BY generation DESC, fitness DESC NULLS LAST, genome_hash) = 1) "
            "WHERE status = 'ok' AND fitness IS NOT NULL "
            "ORDER BY rank DESC, generation, genome_hash LIMIT $k", params, None)
        if best.empty:
            return empty_frame("individuals", terms=self.terms)
        rows = []
        for g, hashes in best.groupby("generation", sort=False)["genome_hash"]:
            frame = self.individuals(int(g))
            rows.append(frame[frame["genome_hash"].isin(set(hashes))].drop_duplicates("genome_hash"))
        order = {(int(g), h): i for i, (g, h) in enumerate(zip(best["generation"], best["genome_hash"]))}
        out = pd.concat(rows, ignore_index=True)
        out = out.assign(_order=[order[(int(g), h)] for g, h in zip(out["generation"], out["genome_hash"])])
        return out.sort_values("_order", ignore_index=True).drop(columns="_order")

    def time_reference(self) -> tuple[float, float] | None:
        """(the latest generation's time reference in us, the time objective's share of the weights),
        or None when the run has no reference yet (or predates it) or does not weigh time."""
        gens = self.generations(["generation", "baseline_reference_us", "cache"])
        weights = (read_json(self.path / CONFIG) or {}).get("weights")
        if gens.empty or not isinstance(weights, dict) or not weights.get("time"):
            return None
        if isinstance(gens["cache"].iloc[-1], str):  # paired timing: the stored time term is a pair ratio
            return None
        ref = gens["baseline_reference_us"].iloc[-1]
        total = sum(float(w) for w in weights.values())
        return (float(ref), float(weights["time"]) / total) if ref == ref and ref and total > 0 else None

    def champion(self) -> dict | None:
        """The fittest ok individual of the whole run, with ``source`` (its kernel source) and
        ``kernel`` (its whole kernels row), or None while no individual is ok."""
        best = self._latest_champion()
        if best is None:
            top = self.top(1)
            if top.empty:
                return None
            best = _record(top.iloc[0])
        row = best
        row["kernel"] = self.kernel(row["source_hash"]) if row.get("source_hash") else None
        row["source"] = (row["kernel"] or {}).get("source")
        return row

    def _latest_champion(self) -> dict | None:
        """The latest generation's champion (its ``champion_hash``), as its latest ok row: the one
        champion every view shows (``store.runs.champion_figure``); None when there is none."""
        gens = self.generations(["generation", "champion_hash"])
        if gens.empty or not isinstance(gens["champion_hash"].iloc[-1], str):
            return None
        frame = self.individuals(int(gens["generation"].iloc[-1]))
        rows = frame[(frame["genome_hash"] == gens["champion_hash"].iloc[-1]) & (frame["status"] == "ok")]
        return _record(rows.iloc[0]) if not rows.empty else None

    def kernel(self, source_hash: str) -> dict | None:
        """A kernel's source, flags, launch and resources by its hash, or None."""
        frame = self._query("kernels", lambda: self._files("kernels"),
                            "SELECT * FROM read_parquet($files, union_by_name = true) WHERE source_hash = $h LIMIT 1",
                            {"h": str(source_hash)}, None)
        return None if frame.empty else _record(frame.iloc[0])

    def log_tail(self, n: int = 50) -> list[str]:
        """The last ``n`` lines of worker.log (empty when there is none)."""
        try:
            with open(self.path / LOG, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                data = b""
                while end > 0 and data.count(b"\n") <= n:
                    step = min(65536, end)
                    end -= step
                    f.seek(end)
                    data = f.read(step) + data
        except OSError:
            return []
        return data.decode(errors="replace").splitlines()[-n:] if n > 0 else []

    # -- plumbing ----------------------------------------------------------------------------------
    def _files(self, dataset: str, generation: int | None = None) -> list[Path]:
        parts = live_parts(self.path / LIVE / dataset)
        if generation is not None:
            parts = [p for p in parts if p.first <= generation <= p.last]
        return [p.path for p in parts]

    def _query(self, dataset: str, files, sql: str, params: dict, cols: list[str] | None) -> pd.DataFrame:
        """Run ``sql`` over the live files; a ``{cols}`` in it becomes the columns asked for, and
        asked-for columns that the files predate come back null."""
        terms = self.terms if dataset == "individuals" else None
        for attempt in range(_RETRIES):
            paths = files()
            if not paths:
                return empty_frame(dataset, cols, self.terms)
            args = {**params, "files": [str(p) for p in paths]}
            try:
                with self._mutex:
                    try:
                        frame = self._con.sql(sql.replace("{cols}", _select(cols, dataset, terms)), params=args).df()
                    except duckdb.BinderException:
                        if not cols or "{cols}" not in sql:
                            raise
                        present = {r[0] for r in self._con.sql(
                            "DESCRIBE SELECT * FROM read_parquet($files, union_by_name = true)",
                            params={"files": args["files"]}).fetchall()}
                        have = [c for c in cols if c in present]
                        frame = self._con.sql(sql.replace("{cols}", _select(have, dataset, terms) if have else "1 AS _none"),
                                              params=args).df()
                if "{cols}" not in sql:
                    return frame
                frame = fill_missing(frame, dataset, cols, terms)
                return frame[list(cols)] if cols else frame
            except DAMAGE as exc:
                if attempt == _RETRIES - 1 or all(p.exists() for p in paths):
                    raise live_damaged(self.path, exc) from None
                time.sleep(0.02 * (attempt + 1))  # compaction replaced files under us: list again
        raise AssertionError("unreachable")


def _select(cols: list[str] | None, dataset: str, terms: tuple[str, ...] | None) -> str:
    if not cols:
        return "*"
    known = set(columns(dataset, terms))
    bad = [c for c in cols if c not in known]
    if bad:
        raise ValueError(f"unknown {dataset} columns: {', '.join(bad)}")
    return ", ".join(f'"{c}"' for c in cols)


def _record(row: pd.Series) -> dict:
    out = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        out[key] = None if value is pd.NA or (isinstance(value, float) and value != value) else value
    return out
