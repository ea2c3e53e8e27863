"""Read-only queries over a run's ``live/`` Parquet for the dashboard's table and importance views.

:class:`IndividualsTable` loads every individual of a run once into an in-memory DuckDB table --
genes flattened to one column each (``gene.<group>.<name>``), per-phase seconds to ``phase.<name>``
-- and answers filtered, sorted, limited queries on it, so a run of 300,000 rows is read once and
each interaction costs one small SQL query. Nothing here writes or opens ``run.duckdb``.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Sequence

import duckdb
import pandas as pd

from store.reader import RunReader

BASE = ["generation", "genome_hash", "origin", "status", "cause", "fitness", "time_us", "time_spread_us",
        "memory_bytes", "stability", "determinism", "steadiness", "error_margin", "remeasured", "pareto_rank",
        "compile_s", "eval_s", "source_hash"]
OPTIONAL = ["device"]  # added by a later schema version: shown when the live files have it


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class IndividualsTable:
    """Every individual of one run as one queryable table (a snapshot of the live files)."""

    def __init__(self, folder: Path | str):
        reader = RunReader(folder)
        self.terms = [f"{t}_term" for t in reader.terms]
        files = [str(p) for p in reader._files("individuals")]
        self._con = duckdb.connect(":memory:")
        self._mutex = threading.Lock()
        self.genes: list[str] = []
        self.phases: list[str] = []
        if not files:
            self.columns: list[str] = []
            self.rows = 0
            return
        src = "read_parquet($files, union_by_name = true)"
        present = {r[0] for r in self._con.sql(f"DESCRIBE SELECT * FROM {src}", params={"files": files}).fetchall()}
        base = [c for c in BASE + self.terms + OPTIONAL if c in present]
        sample = self._con.sql(f"SELECT genome, phases FROM {src} WHERE phases IS NOT NULL OR genome IS NOT NULL "
                               "ORDER BY generation DESC LIMIT 64", params={"files": files}).fetchall() \
            if "phases" in present else [(g, None) for (g,) in self._con.sql(
                f"SELECT genome FROM {src} ORDER BY generation DESC LIMIT 64", params={"files": files}).fetchall()]
        gene_paths: dict[str, None] = {}
        phase_keys: dict[str, None] = {}
        for genome, phases in sample:
            for group, genes in (_loads(genome) or {}).items():
                for name in (genes or {}) if isinstance(genes, dict) else ():
                    gene_paths[f"{group}.{name}"] = None
            for key, value in (_loads(phases) or {}).items():
                if isinstance(value, (int, float)):
                    phase_keys[str(key)] = None
        self.genes = [f"gene.{p}" for p in gene_paths]
        self.phases = [f"phase.{k}" for k in phase_keys]
        # A scalar gene comes back as its text; a map or a sequence as its JSON text.
        gene_sql = [f"json_extract_string(genome, '$.\"{g}\".\"{n}\"') AS {_q('gene.' + g + '.' + n)}"
                    for g, n in (p.split(".", 1) for p in gene_paths)]
        phase_sql = [f"TRY_CAST(json_extract(phases, '$.\"{k}\"') AS DOUBLE) AS {_q('phase.' + k)}" for k in phase_keys]
        select = ", ".join([_q(c) for c in base] + gene_sql + phase_sql)
        self._con.execute(f"CREATE TABLE t AS SELECT {select} FROM {src}", {"files": files})
        self.columns = base + self.genes + self.phases
        self.rows = self._con.execute("SELECT count(*) FROM t").fetchone()[0]

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
              limit: int | None = 1000, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """The matching rows, sorted, at most ``limit`` of them (None: all)."""
        if not self.columns:
            return pd.DataFrame(columns=BASE)
        cols = list(columns) if columns else self.columns
        self._check(cols + [sort])
        where, params = self.where(filters)
        sql = (f"SELECT {', '.join(_q(c) for c in cols)} FROM t{where} ORDER BY {_q(sort)} "
               f"{'DESC' if descending else 'ASC'} NULLS LAST, generation, genome_hash")
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._mutex:
            return self._con.execute(sql, params).df()

    def latest_sample(self, filters: dict | None, columns: Sequence[str], n: int, seed: int = 0) -> pd.DataFrame:
        """One row per distinct genome among the matching rows (its latest: an elite re-timed in
        every generation is most trusted there), at most ``n`` of them, a seeded random sample."""
        if not self.columns:
            return pd.DataFrame(columns=list(columns))
        cols = list(dict.fromkeys(["genome_hash", *columns]))
        self._check(cols)
        where, params = self.where(filters)
        sql = (f"SELECT {', '.join(_q(c) for c in cols)} FROM (SELECT * FROM t{where} QUALIFY row_number() OVER "
               f"(PARTITION BY genome_hash ORDER BY generation DESC) = 1) "
               f"USING SAMPLE reservoir({int(n)} ROWS) REPEATABLE ({int(seed)})")
        with self._mutex:
            return self._con.execute(sql, params).df()

    def count(self, filters: dict | None = None) -> int:
        """How many rows match ``filters``."""
        if not self.columns:
            return 0
        where, params = self.where(filters)
        with self._mutex:
            return int(self._con.execute(f"SELECT count(*) FROM t{where}", params).fetchone()[0])

    def export(self, filters: dict | None, fmt: str) -> bytes:
        """The matching rows as CSV or Parquet bytes (every column, every matching row)."""
        import io

        frame = self.query(filters, limit=None)
        if fmt == "csv":
            return frame.to_csv(index=False).encode()
        buf = io.BytesIO()
        frame.to_parquet(buf, index=False)
        return buf.getvalue()

    def _check(self, cols: Sequence[str]) -> None:
        bad = [c for c in cols if c not in self.columns]
        if bad:
            raise ValueError(f"unknown column {bad[0]!r}")


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
    con = duckdb.connect(":memory:")
    src = "read_parquet($files, union_by_name = true)"
    present = {r[0] for r in con.sql(f"DESCRIBE SELECT * FROM {src}", params={"files": files}).fetchall()}
    if "device" not in present:
        return empty
    out = con.sql(f"""SELECT device, count(*) AS evaluations,
                             count(*) FILTER (WHERE status IN ('crashed', 'timeout')) AS crashed_or_timeout
                      FROM {src} WHERE device IS NOT NULL AND NOT coalesce(reused, false)
                                   AND NOT coalesce(remeasured, false)
                      GROUP BY device ORDER BY device""", params={"files": files}).df()
    out["share"] = out["evaluations"] / max(1, int(out["evaluations"].sum()))
    return out[["device", "evaluations", "share", "crashed_or_timeout"]]
