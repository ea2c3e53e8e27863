"""The run writer's memory over a long run: replay a stored run into a fresh RunWriter, print its RSS.

The soak (benchmarks/tools/soak.py) measures the whole worker's RSS while it evaluates; this isolates the
part that is DuckDB and the writer, with nothing evaluated. It reads every generation of a finished
run (its ``run.duckdb``) and commits them again, in order and over and over, to a new run in a
temporary folder, renaming every genome and kernel on each pass so that the data keeps growing as a
longer run's would. Every ``--every`` generations it prints the process's RSS, the database file and
its WAL. ``--reopen-every N`` sets the writer's :attr:`~store.writer.RunWriter.reopen_every` (0: never
reopen the database), so the same replay can be measured with and without the periodic reopening::

    python -m benchmarks.tools.writer_memory /tmp/abebot-soak-s7/runs/<run id> --generations 3000 [--reopen-every 0]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import duckdb  # noqa: E402

from store.schema import select_list  # noqa: E402
from store.writer import RunWriter  # noqa: E402


def rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096


def load(run: Path) -> tuple[dict, list[list[dict]], dict[int, list[dict]], list[dict], dict]:
    """The run's config, individuals by generation, kernels by the generation that stored them,
    generation rows, and its latest GA state."""
    con = duckdb.connect(str(run / "run.duckdb"), read_only=True)
    try:
        rows = lambda t, order="": con.sql(f"SELECT {select_list(t)} FROM {t} {order}").to_arrow_table().to_pylist()
        gens = rows("generations", "ORDER BY generation")
        individuals: list[list[dict]] = [[] for _ in gens]
        for r in rows("individuals"):
            individuals[r["generation"]].append(r)
        kernels: dict[int, list[dict]] = {}
        for k in rows("kernels"):
            kernels.setdefault(k["generation"], []).append(k)
        state = con.sql("SELECT CAST(state AS VARCHAR) FROM ga_state ORDER BY generation DESC LIMIT 1").fetchall()[0][0]
    finally:
        con.close()
    return json.loads((run / "config.json").read_text()), individuals, kernels, gens, json.loads(state)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a run folder (config.json and a checkpointed run.duckdb)")
    ap.add_argument("--generations", type=int, default=3000, help="generations to commit")
    ap.add_argument("--every", type=int, default=250, help="print every this many generations")
    ap.add_argument("--reopen-every", type=int, default=None, help="the writer's reopen_every (0: never); "
                    "default: as shipped")
    o = ap.parse_args(argv)
    if o.reopen_every is not None:
        RunWriter.reopen_every = o.reopen_every or 10**12
        RunWriter.reopen_rows = RunWriter.reopen_rows if o.reopen_every else 10**12
    config, individuals, kernels, gens, state = load(o.run)
    print(f"replaying {len(gens)} generations of {o.run.name} ({sum(map(len, individuals))} individuals) "
          f"into a fresh run, {o.generations} generations", flush=True)
    print(f"reopen_every {RunWriter.reopen_every}, reopen_rows {RunWriter.reopen_rows}", flush=True)
    print("generation  RSS MB  (min-max since the last line)  database MB  WAL MB  seconds", flush=True)
    samples: list[tuple[int, int]] = []  # (generation, RSS) after every commit
    with tempfile.TemporaryDirectory() as tmp:
        writer = RunWriter.create(tmp, "replay", config)
        db = Path(tmp) / "replay" / "run.duckdb"
        t0 = time.perf_counter()
        try:
            for g in range(o.generations):
                lap, src = divmod(g, len(gens))
                rename = lambda h: f"{h}r{lap}" if h else h
                rows = [{**r, "genome_hash": rename(r["genome_hash"]), "source_hash": rename(r["source_hash"])}
                        for r in individuals[src]]
                new = [{**k, "source_hash": rename(k["source_hash"])} for k in kernels.get(src, [])]
                writer.commit_generation(g, rows, new, gens[src], state)
                samples.append((g, rss_bytes()))
                if g % o.every == 0 or g == o.generations - 1:
                    wal = db.with_name(db.name + ".wal")
                    window = [r for _, r in samples[-o.every:]]
                    print(f"{g:10d}  {samples[-1][1] / 1e6:6.1f}  ({min(window) / 1e6:6.1f}-{max(window) / 1e6:6.1f})"
                          f"{'':18s}{db.stat().st_size / 1e6:11.1f}  "
                          f"{(wal.stat().st_size if wal.exists() else 0) / 1e6:6.1f}  {time.perf_counter() - t0:7.1f}",
                          flush=True)
        finally:
            writer.close()
    half = samples[len(samples) // 2:]
    per_row = sum(map(len, individuals)) / len(gens)
    if len(half) > 1:
        slope = statistics.linear_regression([g for g, _ in half], [r for _, r in half]).slope
        print(f"second half (generations {half[0][0]}..{half[-1][0]}): RSS {slope * 1000 / 1e6:+.2f} MB per 1,000 "
              f"generations, {slope / per_row:+.0f} B per individual row (least squares over every commit); "
              f"max RSS {max(r for _, r in half[:len(half) // 4]) / 1e6:.1f} MB in its first quarter, "
              f"{max(r for _, r in half[-len(half) // 4:]) / 1e6:.1f} MB in its last")
    return 0


if __name__ == "__main__":
    sys.exit(main())
