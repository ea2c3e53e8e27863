#!/usr/bin/env python3
"""Where a worker's memory goes: a real run in this process (``core.cli.main``), measured after commits.

Two modes:

* ``--trace`` (the default before issue 36's breakdown): under ``tracemalloc``, snapshots after
  generation WARM and after the last one, and the allocation sites that grew between them, per
  individual, with the RSS beside them (tracemalloc sees Python's allocations only, and its own
  snapshot is in the RSS);
* ``--breakdown``: no tracing; after every commit the RSS split into what can be told apart --
  Python's small-object arenas (pymalloc), glibc's heap in use and free-but-kept (``mallinfo2``: Python's
  larger objects, NumPy's, the C libraries'), Arrow's memory pool,
  DuckDB's buffer-managed memory (``duckdb_memory()`` on the writer's connection), the RSS of mapped
  files (libraries) and the anonymous rest (DuckDB's own allocator, thread stacks...) -- and each part's
  growth per 1,000 generations by least squares after the warm-up and over its second half. (The
  allocators' figures are what they hold, resident or not, so the rest is approximate.)

    python3 -m benchmarks.tools.worker_tracemalloc RUNS_DIR [GENERATIONS [WARM [POPULATION]]] [--breakdown]
        [--reopen-every N]

The run is the soak's (rmsnorm 4 x 32 on the C backend). ``--reopen-every N`` sets the writer's
:attr:`~store.writer.RunWriter.reopen_every` (0: never reopen the database).
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import statistics
import sys
import tracemalloc
from pathlib import Path


def rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
    return 0


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def glibc_heap() -> tuple[int, int]:
    """(bytes in use, bytes free but kept) of glibc's malloc over all arenas; (0, 0) without mallinfo2."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return 0, 0
    fn.restype = _Mallinfo2
    m = fn()
    return m.uordblks + m.hblkhd, m.fordblks


def pymalloc_arenas() -> int:
    """Bytes of Python's small-object arenas (pymalloc maps them itself, outside glibc's heap), read
    from ``sys._debugmallocstats`` (which writes to file descriptor 2, borrowed meanwhile)."""
    import os
    import re
    import tempfile

    with tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode(errors="replace")
    m = re.search(r"(\d[\d,]*) arenas \* (\d[\d,]*) bytes/arena", text)
    return int(m.group(1).replace(",", "")) * int(m.group(2).replace(",", "")) if m else 0


def breakdown(writer) -> dict[str, int]:
    import pyarrow as pa

    used, kept = glibc_heap()
    try:
        duck = int(writer._db.sql("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchall()[0][0] or 0)
    except Exception:  # noqa: BLE001 - between a close and an open
        duck = 0
    status = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in open("/proc/self/status")
              if line.startswith(("VmRSS", "RssAnon", "RssFile"))}
    parts = {"rss": status.get("VmRSS", 0), "rss_file": status.get("RssFile", 0), "rss_anon": status.get("RssAnon", 0),
             "python_arenas": pymalloc_arenas(), "glibc_in_use": used, "glibc_free_kept": kept,
             "arrow": pa.total_allocated_bytes(), "duckdb_buffers": duck}
    # the anonymous memory none of the above accounts for: DuckDB's own allocator, thread stacks...
    parts["anon_rest"] = parts["rss_anon"] - sum(parts[k] for k in ("python_arenas", "glibc_in_use", "glibc_free_kept",
                                                                      "arrow", "duckdb_buffers"))
    return parts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs")
    ap.add_argument("generations", nargs="?", type=int, default=300)
    ap.add_argument("warm", nargs="?", type=int, default=None)
    ap.add_argument("population", nargs="?", type=int, default=8)
    ap.add_argument("--breakdown", action="store_true", help="the RSS split by allocator after every commit")
    ap.add_argument("--every", type=int, default=100, help="--breakdown: print every this many generations")
    ap.add_argument("--reopen-every", type=int, default=None, help="the writer's reopen_every (0: never)")
    o = ap.parse_args(argv)
    warm = o.generations // 3 if o.warm is None else o.warm
    if not o.breakdown:
        tracemalloc.start(8)
    from core import cli
    from core.run import worker as W
    from store.writer import RunWriter

    if o.reopen_every is not None:
        RunWriter.reopen_every = o.reopen_every or 10**12
        RunWriter.reopen_rows = RunWriter.reopen_rows if o.reopen_every else 10**12
    snaps: list = []
    rows: list[tuple[int, dict]] = []
    original = W.RunWorker._commit

    def commit(self, generation, population_, *args, **kwargs):
        done = original(self, generation, population_, *args, **kwargs)
        if o.breakdown:
            rows.append((generation, breakdown(self.writer)))
            if generation % o.every == 0:
                b = rows[-1][1]
                print("  ".join(f"{k} {v / 1e6:.1f} MB" for k, v in b.items()), f"(generation {generation})", flush=True)
        elif generation in (warm, o.generations - 1):
            gc.collect()
            snaps.append((generation, self.evaluated, tracemalloc.take_snapshot(), rss()))
        return done

    W.RunWorker._commit = commit
    code = cli.main(["run", "--workload", "rmsnorm", "--backend", "c", "--population", str(o.population),
                     "--generations", str(o.generations), "--baseline-checks", "2", "--seed", "3", "--problem",
                     '{"rows": 4, "cols": 32}', "--runs-dir", o.runs, "--run-id", f"trace-{Path(o.runs).name}"])
    if o.breakdown:
        return report_breakdown(rows, warm, o.population, code)
    if len(snaps) < 2:
        print(f"run ended with {code} before both snapshots")
        return 1
    (g1, e1, s1, r1), (g2, e2, s2, r2) = snaps
    n = (g2 - g1) * o.population
    print(f"generations {g1}..{g2}: {n} individual rows, {e2 - e1} new evaluations")
    traced = sum(s.size for s in s2.statistics("filename")) - sum(s.size for s in s1.statistics("filename"))
    print(f"traced Python memory: {traced / 1e6:+.2f} MB = {traced / n:+.0f} B per individual row")
    print(f"RSS (the first snapshot included): {(r2 - r1) / 1e6:+.2f} MB = {(r2 - r1) / n:+.0f} B per individual row")
    # the sites that grew most (compare_to sorts by the absolute difference: the largest frees came first)
    print("\nby line:")
    for stat in sorted(s2.compare_to(s1, "lineno"), key=lambda st: st.size_diff, reverse=True)[:15]:
        frame = stat.traceback[0]
        print(f"{stat.size_diff / n:+8.0f} B/row  {stat.size_diff / 1e3:+9.1f} kB  {stat.count_diff:+7d} blocks  "
              f"{frame.filename}:{frame.lineno}")
    for stat in sorted(s2.compare_to(s1, "traceback"), key=lambda st: st.size_diff, reverse=True)[:12]:
        if stat.size_diff <= 0:
            continue
        print(f"\n{stat.size_diff / n:+8.0f} B/row  {stat.size_diff / 1e3:+9.1f} kB  {stat.count_diff:+7d} blocks")
        for line in stat.traceback.format()[-8:]:
            print("    " + line)
    return 0


def report_breakdown(rows: list[tuple[int, dict]], warm: int, population: int, code: int) -> int:
    """Each part's growth per 1,000 generations (and per individual) after ``warm`` and over the second half."""
    after = [(g, b) for g, b in rows if g >= warm]
    if len(after) < 4:
        print(f"run ended with {code} after {len(rows)} commits: too few for a slope")
        return 1
    half = after[len(after) // 2:]
    print(f"run ended with {code}; generations {after[0][0]}..{after[-1][0]} after the warm-up")
    print("part               growth per 1,000 gen  per individual  second half per 1,000 gen  per individual")
    for key in after[0][1]:
        whole = _slope([(g, b[key]) for g, b in after])
        late = _slope([(g, b[key]) for g, b in half])
        print(f"{key:17s}  {whole * 1000 / 1e6:+16.2f} MB  {whole / population:+12.0f} B  "
              f"{late * 1000 / 1e6:+21.2f} MB  {late / population:+12.0f} B")
    return 0


def _slope(points: list[tuple[int, int]]) -> float:
    """Least-squares growth in bytes per generation."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return statistics.linear_regression(xs, ys).slope if len(set(xs)) > 1 else 0.0


if __name__ == "__main__":
    sys.exit(main())
