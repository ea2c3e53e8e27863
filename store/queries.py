"""Read-only queries over a run's ``live/`` Parquet for the dashboard's table and importance views.

:class:`IndividualsTable` loads every individual of a run once into an in-memory DuckDB table --
genes flattened to one column each (``gene.<group>.<name>``), per-phase seconds to ``phase.<name>``
-- and answers filtered, sorted, limited queries on it, so a run of 300,000 rows is read once and
each interaction costs one small SQL query. Nothing here writes or opens ``run.duckdb``.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import duckdb
import pandas as pd

from store.reader import _RETRIES, DAMAGE, RunReader, live_damaged, live_parts, query_connection
from store.runs import LIVE

BASE = ["generation", "genome_hash", "origin", "status", "cause", "fitness", "time_us", "time_spread_us",
        "memory_bytes", "stability", "determinism", "steadiness", "error_margin", "remeasured", "pareto_rank",
        "compile_s", "eval_s", "source_hash"]
OPTIONAL = ["device"]  # added by a later schema version: shown when the live files have it


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class IndividualsTable:
    """Every individual of one run as one queryable table (a snapshot of the live files, brought up
    to date by :meth:`refresh`, which appends only the generations committed since)."""

    def __init__(self, folder: Path | str):
        reader = RunReader(folder)
        self.folder = Path(folder)
        self.terms = [f"{t}_term" for t in reader.terms]
        self._con = duckdb.connect(":memory:")
        # Loading in parallel is 2-3x faster; every query sorts explicitly, so the table's order is moot.
        self._con.execute("SET preserve_insertion_order = false")
        self._mutex = threading.RLock()
        self.genes: list[str] = []
        self.phases: list[str] = []
        self.columns: list[str] = []
        self.rows = 0
        self.last_generation = -1
        self._select = ""
        self.refresh()

    def refresh(self) -> int:
        """Append the rows of generations committed since the last call (only the live files that
        hold them are read); how many rows were added. Cheap when nothing is new: one listing."""
        with self._mutex:
            for attempt in range(_RETRIES):
                files = [str(p.path) for p in live_parts(self.folder / LIVE / "individuals")
                         if p.last > self.last_generation]
                if not files:
                    return 0
                try:
                    return self._append(files)
                except DAMAGE as exc:  # compaction replaced files under us: list again
                    if attempt == _RETRIES - 1 or all(Path(f).exists() for f in files):
                        raise live_damaged(self.folder, exc) from None
                    time.sleep(0.02 * (attempt + 1))
        return 0

    def _append(self, files: list[str]) -> int:
        src = "read_parquet($files, union_by_name = true)"
        args = {"files": files, "after": self.last_generation}
        present = {r[0] for r in self._con.execute(f"DESCRIBE SELECT * FROM {src}", {"files": files}).fetchall()}
        if not self.columns:
            self._create(src, files, present)
        base = [c for c in self.columns if c in present and c not in self.genes and c not in self.phases]
        # One JSON parse per row for all genes (a list of paths), and one for all phases.
        inner, outer = [], [_q(c) for c in base]
        if self.genes and "genome" in present:
            inner.append(f"json_extract_string(genome, [{', '.join(_path(g[5:]) for g in self.genes)}]) AS _g")
            outer += [f"_g[{i + 1}] AS {_q(g)}" for i, g in enumerate(self.genes)]
        if self.phases and "phases" in present:
            inner.append(f"json_extract(phases, [{', '.join(_path(p[6:], 1) for p in self.phases)}]) AS _p")
            outer += [f"TRY_CAST(_p[{i + 1}] AS DOUBLE) AS {_q(p)}" for i, p in enumerate(self.phases)]
        self._con.execute(f"INSERT INTO t BY NAME SELECT {', '.join(outer)} FROM (SELECT *{''.join(', ' + x for x in inner)} "
                          f"FROM {src} WHERE generation > $after)", args)
        before = self.rows
        self.rows, last = self._con.execute("SELECT count(*), max(generation) FROM t").fetchone()
        self.last_generation = -1 if last is None else int(last)
        return self.rows - before

    def _create(self, src: str, files: list[str], present: set[str]) -> None:
        """The table's columns: base columns the files have; a column per gene and per phase found
        in the newest rows; created empty (the caller appends)."""
        base = [c for c in BASE + self.terms + OPTIONAL if c in present]
        wanted = [c for c in ("genome", "phases") if c in present]
        # The newest files hold the newest rows: reading every genome only to keep 64 took 70 ms of 300,000 rows.
        sample = self._con.execute(f"SELECT {', '.join(wanted) or '1'} FROM {src} ORDER BY generation DESC LIMIT 64",
                                   {"files": files[-8:]}).fetchall() if wanted else []
        gene_paths: dict[str, None] = {}
        phase_keys: dict[str, None] = {}
        for row in sample:
            values = dict(zip(wanted, row))
            for group, genes in (_loads(values.get("genome")) or {}).items():
                for name in (genes or {}) if isinstance(genes, dict) else ():
                    gene_paths[f"{group}.{name}"] = None
            for key, value in (_loads(values.get("phases")) or {}).items():
                if isinstance(value, (int, float)):
                    phase_keys[str(key)] = None
        self.genes = [f"gene.{p}" for p in gene_paths]
        self.phases = [f"phase.{k}" for k in phase_keys]
        # A scalar gene comes back as its text; a map or a sequence as its JSON text.
        types = dict(self._con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {src})",
                                       {"files": files}).fetchall())
        cols = [f"{_q(c)} {types[c]}" for c in base] + [f"{_q(g)} VARCHAR" for g in self.genes] + \
            [f"{_q(p)} DOUBLE" for p in self.phases]
        self._con.execute(f"CREATE TABLE t ({', '.join(cols)})")
        self.columns = base + self.genes + self.phases

    def generation_span(self) -> tuple[int, int]:
        """The first and last generation in the table."""
        with self._mutex:
            lo, hi = self._con.execute("SELECT min(generation), max(generation) FROM t").fetchone()
        return int(lo or 0), int(hi or 0)

    def distinct(self, column: str, limit: int = 200) -> list[Any]:
        """The distinct values of ``column`` (a table column), most frequent first."""
        self._check([column])
        with self._mutex:
            return [r[0] for r in self._con.execute(
                f"SELECT {_q(column)} FROM t GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT ?", [int(limit)]).fetchall()]

    def where(self, filters: dict | None) -> tuple[str, list]:
        """SQL ``WHERE`` text and its parameters for ``filters``:

        ``{"status": [...], "generation": (lo, hi), "fitness_min": x, "hash": "prefix",
        "in": {column: [values]}}``; column names are checked against the table's own.
        """
        f, clauses, params = filters or {}, [], []
        if f.get("status"):
            clauses.append(f"status IN ({', '.join('?' * len(f['status']))})")
            params += list(f["status"])
        if f.get("generation"):
            clauses.append("generation BETWEEN ? AND ?")
            params += [int(f["generation"][0]), int(f["generation"][1])]
        if f.get("fitness_min") is not None:
            clauses.append("fitness >= ?")
            params.append(float(f["fitness_min"]))
        if f.get("hash"):
            clauses.append("starts_with(genome_hash, ?)")
            params.append(str(f["hash"]))
        for column, values in (f.get("in") or {}).items():
            if values:
                self._check([column])
                clauses.append(f"{_q(column)} IN ({', '.join('?' * len(values))})")
                params += [None if v is None else str(v) if column.startswith("gene.") else v for v in values]
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params

    def query(self, filters: dict | None = None, sort: str = "fitness", descending: bool = True,
              limit: int | None = 1000, columns: Sequence[str] | None = None, offset: int = 0) -> pd.DataFrame:
        """The matching rows, sorted, at most ``limit`` of them (None: all) after skipping ``offset``.

        Ties are broken by generation, genome hash and insertion order, so pages never overlap."""
        if not self.columns:
            return pd.DataFrame(columns=BASE)
        with self._mutex:
            return self._con.execute(*self._sql(filters, sort, descending, limit, columns, offset)).df()

    def _sql(self, filters: dict | None, sort: str, descending: bool, limit: int | None,
             columns: Sequence[str] | None, offset: int = 0) -> tuple[str, list]:
        cols = list(columns) if columns else self.columns
        self._check(cols + [sort])
        where, params = self.where(filters)
        sql = (f"SELECT {', '.join(_q(c) for c in cols)} FROM t{where} ORDER BY {_q(sort)} "
               f"{'DESC' if descending else 'ASC'} NULLS LAST, generation, genome_hash, rowid")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        if offset:
            sql += f" OFFSET {max(0, int(offset))}"
        return sql, params

    def latest_sample(self, filters: dict | None, columns: Sequence[str], n: int, seed: int = 0,
                      fittest: bool = False) -> pd.DataFrame:
        """One row per distinct genome among the matching rows (its latest: an elite re-timed in
        every generation is most trusted there), at most ``n`` of them: a seeded random sample, or
        with ``fittest`` the ``n`` with the highest fitness at that row."""
        if not self.columns:
            return pd.DataFrame(columns=list(columns))
        cols = list(dict.fromkeys(["genome_hash", *columns]))
        self._check(cols + ["fitness"])
        where, params = self.where(filters)
        latest = (f"SELECT * FROM t{where} QUALIFY row_number() OVER "
                  f"(PARTITION BY genome_hash ORDER BY generation DESC) = 1")
        pick = (f"ORDER BY fitness DESC NULLS LAST, genome_hash LIMIT {int(n)}" if fittest
                else f"USING SAMPLE reservoir({int(n)} ROWS) REPEATABLE ({int(seed)})")
        with self._mutex:
            return self._con.execute(f"SELECT {', '.join(_q(c) for c in cols)} FROM ({latest}) {pick}", params).df()

    def count(self, filters: dict | None = None) -> int:
        """How many rows match ``filters``."""
        if not self.columns:
            return 0
        where, params = self.where(filters)
        with self._mutex:
            return int(self._con.execute(f"SELECT count(*) FROM t{where}", params).fetchone()[0])

    def export(self, filters: dict | None, fmt: str, sort: str = "fitness", descending: bool = True) -> bytes:
        """The matching rows as CSV or Parquet bytes (every column, every matching row, in the
        table's order), written from DuckDB's Arrow result by pyarrow: no pandas frame in between."""
        import io

        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        if not self.columns:
            return b""
        with self._mutex:
            sql, params = self._sql(filters, sort, descending, None, None)
            cur = self._con.cursor()  # a fresh connection to the same table: no result pending on it
            try:
                rel = cur.sql(sql, params=params)
                arrow = rel.to_arrow_table() if hasattr(rel, "to_arrow_table") else rel.arrow()
            finally:
                cur.close()
        buf = io.BytesIO()
        if fmt == "csv":
            pacsv.write_csv(arrow, buf)
        else:
            pq.write_table(arrow, buf)
        return buf.getvalue()

    def _check(self, cols: Sequence[str]) -> None:
        bad = [c for c in cols if c not in self.columns]
        if bad:
            raise ValueError(f"unknown column {bad[0]!r}")


def _path(dotted: str, parts: int = 2) -> str:
    """``group.name`` -> the SQL literal of the JSON path ``$."group"."name"`` (``parts`` keys)."""
    keys = dotted.split(".", parts - 1)
    return "'" + "$." + ".".join('"' + k.replace('"', '\\"') + '"' for k in keys).replace("'", "''") + "'"


def _loads(text: Any) -> dict | None:
    if isinstance(text, dict):
        return text
    if not isinstance(text, str) or not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None



def device_summary(folder: Path | str) -> pd.DataFrame:
    """Per device of a run: the new evaluations it made, its share of them, and how many of its
    candidates crashed or timed out (the device's health); empty when no row records a device."""
    reader = RunReader(folder)
    files = [str(p) for p in reader._files("individuals")]
    empty = pd.DataFrame(columns=["device", "evaluations", "share", "crashed_or_timeout"])
    if not files:
        return empty
    con = query_connection()
    src = "read_parquet($files, union_by_name = true)"
    try:
        present = {r[0] for r in con.sql(f"DESCRIBE SELECT * FROM {src}", params={"files": files}).fetchall()}
        if "device" not in present:
            return empty
        out = con.sql(f"""SELECT device, count(*) AS evaluations,
                                 count(*) FILTER (WHERE status IN ('crashed', 'timeout')) AS crashed_or_timeout
                          FROM {src} WHERE device IS NOT NULL AND NOT coalesce(reused, false)
                                       AND NOT coalesce(remeasured, false)
                          GROUP BY device ORDER BY device""", params={"files": files}).df()
    except DAMAGE as exc:
        raise live_damaged(reader.path, exc) from None
    out["share"] = out["evaluations"] / max(1, int(out["evaluations"].sum()))
    return out[["device", "evaluations", "share", "crashed_or_timeout"]]
