"""A recorded sweep: a gene space measured once, as a Parquet table and a small JSON header.

``<folder>/sweep.json`` (the header) says what was measured and how: workload, backend, problem,
the genes varied and the base genome (:func:`core.search.space.subspace`), exhaustive or sampled (with
its seed), the baseline, cache policy, device, toolchain, timer version and the command. ``<folder>/
rows-NNNNN.parquet`` hold one row per measured genome (:data:`COLUMNS`), written in parts as the sweep
goes, so an interrupted sweep loses at most the part in progress and ``resume`` skips the genomes
already recorded. :func:`read_table` reads every part as one table.
"""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Iterable, Mapping

HEADER = "sweep.json"
PART = "rows-{:05d}.parquet"

#: column -> (arrow type name, meaning)
COLUMNS: dict[str, tuple[str, str]] = {
    "genome": ("string", "the canonical genome as JSON"),
    "genome_hash": ("string", "its hash"),
    "status": ("string", "ok, or the lethal status of its first measurement"),
    "cause": ("string", "why it died, one line"),
    "time_us": ("double", "median of time_samples_us"),
    "time_spread_us": ("double", "interquartile range of the timed launches of the first measurement"),
    "time_samples_us": ("list<double>", "the median launch time of every measurement (one per repeat)"),
    "speedup": ("double", "median of speedup_samples (None: not timed in pairs)"),
    "speedup_spread": ("double", "interquartile range of the pair ratios of the first measurement"),
    "speedup_samples": ("list<double>", "the paired speed-up over the primary baseline of every measurement"),
    "memory_bytes": ("int64", "io bytes + extra bytes"),
    "stability": ("double", "the stability objective"),
    "noisy": ("bool", "a measurement's pair ratios spread more than 10 % of their median"),
    "cache": ("string", "cache policy of the timed launches"),
    "device": ("string", "the slot that measured it"),
    "compile_s": ("double", "compile time, s"),
    "eval_s": ("double", "sandbox time of every repeat together, s"),
}


class TableError(ValueError):
    """A sweep folder that cannot be read (one line)."""


def _schema():
    import pyarrow as pa

    kinds = {"string": pa.string(), "double": pa.float64(), "int64": pa.int64(), "bool": pa.bool_(),
             "list<double>": pa.list_(pa.float64())}
    return pa.schema([(name, kinds[kind]) for name, (kind, _) in COLUMNS.items()])


def row_from_measures(genome_json: str, genome_hash: str, measures: list[Mapping]) -> dict:
    """One table row from the evaluations (dicts) of one genome, the first one's status deciding."""
    first = measures[0]
    ok = [m for m in measures if m.get("status") == "ok" and m.get("time_us") is not None]
    times = [float(m["time_us"]) for m in ok]
    ratios = [float(m["speedup"]) for m in ok if m.get("speedup") is not None]
    status = first.get("status", "?") if first.get("status") != "ok" or ok else "crashed"
    return {
        "genome": genome_json, "genome_hash": genome_hash, "status": status, "cause": str(first.get("cause") or ""),
        "time_us": statistics.median(times) if times and status == "ok" else None,
        "time_spread_us": first.get("time_spread_us"), "time_samples_us": times,
        "speedup": statistics.median(ratios) if ratios and status == "ok" else None,
        "speedup_spread": first.get("speedup_spread"), "speedup_samples": ratios,
        "memory_bytes": first.get("memory_bytes"), "stability": first.get("stability"),
        "noisy": any(bool(m.get("noisy")) for m in ok) if ok else None,
        "cache": first.get("cache"), "device": first.get("device") or "",
        "compile_s": float(first.get("compile_s") or 0.0),
        "eval_s": float(sum(float(m.get("eval_s") or 0.0) for m in measures)),
    }


def write_part(folder: Path, rows: list[dict]) -> Path:
    """Append ``rows`` as the next part file (written to a temporary name, then renamed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(list(folder.glob("rows-*.parquet")))
    path = folder / PART.format(n)
    tmp = path.with_suffix(".tmp")
    table = pa.Table.from_pylist([{k: r.get(k) for k in COLUMNS} for r in rows], schema=_schema())
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    return path


def write_header(folder: Path, header: Mapping) -> None:
    tmp = folder / (HEADER + ".tmp")
    tmp.write_text(json.dumps(header, indent=1, sort_keys=True, default=str))
    os.replace(tmp, folder / HEADER)


def read_header(folder: Path) -> dict:
    path = Path(folder) / HEADER
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise TableError(f"{folder} is not a sweep folder (no {HEADER})") from None
    except (OSError, ValueError) as exc:
        raise TableError(f"{path}: unreadable ({exc})") from None
    if not isinstance(raw, dict) or "workload" not in raw or "backend" not in raw:
        raise TableError(f"{path}: not a sweep header (no workload/backend)")
    return raw


def read_rows(folder: Path) -> list[dict]:
    """Every recorded row, in the order measured (a genome recorded twice: its first row)."""
    import pyarrow.parquet as pq

    rows: list[dict] = []
    seen: set[str] = set()
    for part in sorted(Path(folder).glob("rows-*.parquet")):
        try:
            for r in pq.read_table(part).to_pylist():
                if r["genome_hash"] not in seen:
                    seen.add(r["genome_hash"])
                    rows.append(r)
        except Exception as exc:  # a torn or foreign file
            raise TableError(f"{part}: unreadable Parquet ({type(exc).__name__}: {exc})") from None
    return rows


def compact(folder: Path) -> None:
    """Merge every part into ``rows-00000.parquet`` (one file for a finished sweep). Safe at any moment:
    the merged file replaces the first part before the others go, and a genome read twice counts once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = sorted(Path(folder).glob("rows-*.parquet"))
    if len(parts) < 2:
        return
    rows = read_rows(folder)
    tmp = parts[0].with_suffix(".tmp")
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in COLUMNS} for r in rows], schema=_schema()), tmp,
                   compression="zstd")
    os.replace(tmp, parts[0])
    for part in parts[1:]:
        part.unlink()


def recorded_hashes(folder: Path) -> set[str]:
    return {r["genome_hash"] for r in read_rows(folder)} if Path(folder).is_dir() else set()


def best_known(rows: Iterable[Mapping]) -> float | None:
    """The lowest median time of an ok row (µs), or None when none is ok."""
    return min((float(r["time_us"]) for r in rows if r["status"] == "ok" and r["time_us"] is not None), default=None)
