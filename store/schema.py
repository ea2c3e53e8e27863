"""The run database's tables, and the Arrow schemas of their ``live/`` Parquet mirrors.

One column list per table drives everything: the DDL, the Arrow schema the writer builds rows
with, the empty frames the reader returns before anything is committed. Change a column here and
bump :data:`SCHEMA_VERSION`. Columns are only ever added, at the end of their table, and listed
in :data:`ADDED`: the writer adds them to an older database it opens (null in the old rows), and the
reader fills them with nulls for live files written before them.

The individuals table has one ``<name>_term`` column per fitness objective of the run, named by the
keys of the run configuration's ``weights`` (:func:`term_names`); every function here that depends
on it takes those names as ``terms`` (default: the three objectives every run had before
objectives were data). The store knows objectives only by these names, never by importing ``core``.
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

import pandas as pd
import pyarrow as pa

SCHEMA_VERSION = 6


class StoreError(Exception):
    """A run folder or its database cannot be used; the message says which and why, in one line."""


# (name, DuckDB type, Arrow type). JSON columns travel as text in Arrow and Parquet.
_T = {"VARCHAR": pa.string(), "JSON": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64(),
      "BOOLEAN": pa.bool_()}


def _cols(spec: str) -> list[tuple[str, str]]:
    return [tuple(part.split()) for part in spec.split(",")]  # type: ignore[misc]


# Term columns of runs whose config.json predates ``weights`` (weight_time, weight_memory, ...).
LEGACY_TERMS = ("time", "memory", "stability")
_TERM_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")  # becomes part of a column name in the DDL

# The individuals columns before and after the term columns.
_INDIVIDUALS_HEAD = _cols(
    "generation BIGINT, genome_hash VARCHAR, genome JSON, parents JSON, origin VARCHAR, status VARCHAR,"
    "cause VARCHAR, fitness DOUBLE, time_us DOUBLE, time_spread_us DOUBLE, memory_bytes BIGINT,"
    "extra_bytes BIGINT, onchip_bytes BIGINT, stability DOUBLE"
)
# Version 2, re-timing (core/search/retiming.py): ``time_us`` is the median of ``time_samples_us`` (every
# timing of the genome in the run, a JSON list kept as text); ``remeasured``: an elite timed again.
# The checked protocol: ``phases`` (seconds per phase, JSON text), the three parts of stability, and
# ``shape_errors`` (the worst error on each verification shape, JSON text).
_INDIVIDUALS_V2 = _cols("time_samples_us VARCHAR, remeasured BOOLEAN, phases VARCHAR, determinism DOUBLE,"
                        "steadiness DOUBLE, error_margin DOUBLE, shape_errors VARCHAR")
# Version 3, several devices (core/evaluation/devices.py): the slot that measured the genome last
# ("cuda:1", "c:0") and its time there; ``time_us`` is scaled to the run's first slot.
_INDIVIDUALS_V3 = _cols("device VARCHAR, device_time_us DOUBLE")
# Version 4, weights repacked by the template (core/workloads/template.py, ``repack``): the one-time
# repack's time in microseconds, apart from ``time_us``; null when the kernel reads the canonical layout.
_INDIVIDUALS_V4 = _cols("repack_us DOUBLE")
# Version 6, paired timing and the cache policy (core/evaluation/timing.py, ``paired_times``): the kernel's
# speed-up over the baseline it was timed beside (median of the pair ratios; of the re-measurements once
# re-timed, ``speedup_samples`` a JSON list kept as text), its spread, the noisy flag, that baseline and its
# time in the pairs, the cache policy and how the launches were timed.
_INDIVIDUALS_V6 = _cols("speedup DOUBLE, speedup_spread DOUBLE, speedup_samples VARCHAR, noisy BOOLEAN,"
                        "pair_baseline VARCHAR, pair_baseline_us DOUBLE, cache VARCHAR, timing_method VARCHAR")
_INDIVIDUALS_TAIL = _cols(
    "pareto_rank BIGINT, source_hash VARCHAR, compile_s DOUBLE, eval_s DOUBLE,"
    "max_abs_err DOUBLE, rel_err DOUBLE, resources JSON, reused BOOLEAN"
) + _INDIVIDUALS_V2 + _INDIVIDUALS_V3 + _INDIVIDUALS_V4 + _INDIVIDUALS_V6


def term_names(config: Mapping | None) -> tuple[str, ...]:
    """The objective names of a run's ``<name>_term`` columns, from its configuration dict.

    The keys of ``config["weights"]``; for a configuration written before weights were a dict, the
    three :data:`LEGACY_TERMS`. StoreError for a name that cannot be a column name. The order is
    canonical (the original three first, any others by name) because JSON files are written with
    sorted keys, so a dict's order says nothing.
    """
    weights = (config or {}).get("weights")
    names = tuple(str(n) for n in weights) if isinstance(weights, Mapping) and weights else LEGACY_TERMS
    names = tuple(sorted(names, key=lambda n: (LEGACY_TERMS.index(n) if n in LEGACY_TERMS else len(LEGACY_TERMS), n)))
    bad = [n for n in names if not _TERM_NAME.match(n)]
    if bad:
        raise StoreError(f"objective name {bad[0]!r} cannot name a column (lowercase letters, digits, _)")
    return names


def term_columns(terms: Sequence[str] | None = None) -> list[str]:
    """``["time_term", ...]`` for the objective names ``terms`` (default :data:`LEGACY_TERMS`)."""
    return [f"{name}_term" for name in (LEGACY_TERMS if terms is None else terms)]


def individuals_columns(terms: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(name, type) of the individuals table of a run whose objectives are ``terms``."""
    return _INDIVIDUALS_HEAD + [(c, "DOUBLE") for c in term_columns(terms)] + _INDIVIDUALS_TAIL


INDIVIDUALS = individuals_columns()
# Version 2: the generation's own baseline (median of its interleaved timings, ``baseline_samples_us``
# a JSON list kept as text), its spread and the ``noisy`` flag; elites re-timed; the champion's
# median time, spread and number of timings.
_GENERATIONS_V2 = _cols(
    "baseline_primary VARCHAR, baseline_time_us DOUBLE, baseline_spread_us DOUBLE, baseline_rel_spread DOUBLE,"
    "baseline_samples_us VARCHAR, noisy BOOLEAN, n_remeasured BIGINT, champion_time_us DOUBLE,"
    "champion_spread_us DOUBLE, champion_samples BIGINT"
)
GENERATIONS = _cols(
    "generation BIGINT, best_fitness DOUBLE, mean_fitness DOUBLE, worst_fitness DOUBLE, n_evaluated BIGINT,"
    "n_lethal BIGINT, best_time_us DOUBLE, best_memory_bytes BIGINT, diversity DOUBLE, lethal_causes JSON,"
    "champion_hash VARCHAR, elapsed_s DOUBLE, evals_per_s DOUBLE, finished_at DOUBLE"
) + _GENERATIONS_V2
# Columns added after version 1, per table, in table order (see the module docstring).
# Version 3: each device's baseline in the generation (slot -> time of the primary), JSON text.
_GENERATIONS_V3 = _cols("baseline_devices VARCHAR")
# Version 5: the run-level reference the time term divides (core/search/retiming.py, ``with_reference``): the
# median of every generation's ``baseline_time_us`` up to and including this one.
_GENERATIONS_V5 = _cols("baseline_reference_us DOUBLE")
# Version 6: the champion's speed-up (median of its re-measurements' pair ratios), their spread, whether
# any of them was noisy, and the run's cache policy.
_GENERATIONS_V6 = _cols("champion_speedup DOUBLE, champion_speedup_spread DOUBLE, champion_noisy BOOLEAN, cache VARCHAR")
GENERATIONS = GENERATIONS + _GENERATIONS_V3 + _GENERATIONS_V5 + _GENERATIONS_V6
ADDED = {"individuals": _INDIVIDUALS_V2 + _INDIVIDUALS_V3 + _INDIVIDUALS_V4 + _INDIVIDUALS_V6,
         "generations": _GENERATIONS_V2 + _GENERATIONS_V3 + _GENERATIONS_V5 + _GENERATIONS_V6}
# ``generation`` is the generation that first used the kernel: it partitions live/kernels/.
KERNELS = _cols(
    "source_hash VARCHAR, generation BIGINT, backend VARCHAR, entry VARCHAR, source VARCHAR, flags JSON,"
    "launch JSON, resources JSON, compile_log VARCHAR"
)
TABLES = {"individuals": INDIVIDUALS, "generations": GENERATIONS, "kernels": KERNELS}
_WITH_RUN_ID = ("individuals", "generations")


def _spec(table: str, terms: Sequence[str] | None = None) -> list[tuple[str, str]]:
    return individuals_columns(terms) if table == "individuals" else TABLES[table]


def ddl(terms: Sequence[str] | None = None) -> str:
    """The statements that create a run database whose objectives are ``terms``."""
    def cols(table: str) -> str:
        return ", ".join(f"{n} {t}" for n, t in _spec(table, terms))

    return f"""
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, created_at DOUBLE, config JSON, status VARCHAR,
                   message VARCHAR, baseline JSON, updated_at DOUBLE);
CREATE TABLE generations (run_id VARCHAR NOT NULL, {cols("generations")}, PRIMARY KEY (run_id, generation));
CREATE TABLE individuals (run_id VARCHAR NOT NULL, {cols("individuals")});
CREATE TABLE kernels ({cols("kernels")}, PRIMARY KEY (source_hash));
CREATE TABLE ga_state (run_id VARCHAR NOT NULL, generation BIGINT NOT NULL, state JSON,
                       PRIMARY KEY (run_id, generation));
INSERT INTO schema_version VALUES ({SCHEMA_VERSION});
"""


def migrate(con: Any) -> None:
    """Bring an older run database (a DuckDB connection) to :data:`SCHEMA_VERSION`: add the columns
    of :data:`ADDED` that it lacks (null in its rows), in one transaction."""
    con.execute("BEGIN")
    try:
        for table, added in ADDED.items():
            have = {r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ?",
                                              [table]).fetchall()}
            for name, kind in added:
                if name not in have:
                    con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        con.execute("DELETE FROM schema_version")
        con.execute(f"INSERT INTO schema_version VALUES ({SCHEMA_VERSION})")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("CHECKPOINT")


def arrow_schema(table: str, terms: Sequence[str] | None = None) -> pa.Schema:
    """The Arrow schema of ``table``'s live Parquet files (no ``run_id``: one run per folder)."""
    return pa.schema([(name, _T[kind]) for name, kind in _spec(table, terms)])


def columns(table: str, terms: Sequence[str] | None = None) -> list[str]:
    """``table``'s column names (those of the live files) for a run whose objectives are ``terms``."""
    return [name for name, _ in _spec(table, terms)]


def json_columns(table: str) -> set[str]:
    return {name for name, kind in TABLES[table] if kind == "JSON"}


def select_list(table: str) -> str:
    """Columns for ``SELECT`` from the database in its column order (the Arrow schema's), JSON cast
    to text. Whatever term columns the run's table has come along."""
    exclude = " EXCLUDE (run_id)" if table in _WITH_RUN_ID else ""
    casts = ", ".join(f"CAST({n} AS VARCHAR) AS {n}" for n in sorted(json_columns(table)))
    return f"*{exclude}" + (f" REPLACE ({casts})" if casts else "")


def empty_frame(table: str, cols: list[str] | None = None, terms: Sequence[str] | None = None) -> pd.DataFrame:
    """A frame with ``table``'s columns and dtypes and no rows."""
    frame = arrow_schema(table, terms).empty_table().to_pandas()
    return frame[cols] if cols else frame


def fill_missing(frame: pd.DataFrame, table: str, cols: Sequence[str] | None = None,
                 terms: Sequence[str] | None = None) -> pd.DataFrame:
    """``frame`` with the columns of ``table`` (or just ``cols``) that it lacks added as nulls (NaN
    for numbers, None otherwise), in the schema's order, any other columns after them: the live
    files of a run written before a column was added read like new ones."""
    kinds = dict(_spec(table, terms))
    want = list(cols) if cols else list(kinds)
    missing = [c for c in want if c not in frame.columns]
    if not missing:
        return frame
    frame = frame.copy()
    for c in missing:
        numeric = kinds.get(c) in ("DOUBLE", "BIGINT")
        frame[c] = pd.Series([float("nan") if numeric else None] * len(frame), index=frame.index,
                             dtype="float64" if numeric else object)
    return frame[want + [c for c in frame.columns if c not in want]]


def json_text(value: Any) -> str | None:
    """Text for a JSON column: strings pass through (already JSON), objects are dumped."""
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "to_json"):  # Genome
        return value.to_json()
    return json.dumps(value, sort_keys=True, default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    if hasattr(value, "items"):  # MappingProxyType
        return dict(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def to_arrow(table: str, rows: list[dict], terms: Sequence[str] | None = None, **fixed: Any) -> pa.Table:
    """Rows (dicts; missing keys are null, unknown keys ignored) as an Arrow table of ``table``'s schema."""
    schema = arrow_schema(table, terms)
    jcols = json_columns(table)
    data: dict[str, list] = {}
    for field in schema:
        name = field.name
        if name in fixed:
            data[name] = [fixed[name]] * len(rows)
        elif name in jcols:
            data[name] = [json_text(r.get(name)) for r in rows]
        else:
            data[name] = [_scalar(r.get(name), field.type) for r in rows]
    try:
        return pa.table(data, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
        raise StoreError(f"bad {table} row: {exc}") from None


def _scalar(value: Any, kind: pa.DataType) -> Any:
    if value is None:
        return None
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if pa.types.is_floating(kind):
        return float(value)
    if pa.types.is_integer(kind):
        return None if isinstance(value, float) and value != value else int(value)
    if pa.types.is_boolean(kind):
        return bool(value)
    return str(value)


def stored_terms(con: Any) -> tuple[str, ...]:
    """The objective names of the individuals table's ``<name>_term`` columns, in table order."""
    rows = con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'individuals' "
                       "ORDER BY ordinal_position").fetchall()
    return tuple(name[: -len("_term")] for (name,) in rows if name.endswith("_term"))
