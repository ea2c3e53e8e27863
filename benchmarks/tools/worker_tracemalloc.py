#!/usr/bin/env python3
"""Where a worker's memory goes: a real run in this process (``core.cli.main``) under ``tracemalloc``,
snapshots after generation WARM and after the last one, and the allocation sites that grew between
them, per individual, with the RSS beside them (tracemalloc sees Python's allocations only; DuckDB's and
Arrow's own are in the RSS alone).

    python3 -m benchmarks.tools.worker_tracemalloc RUNS_DIR [GENERATIONS [WARM [POPULATION]]]

The run is the soak's (rmsnorm 4 x 32 on the C backend).
"""
from __future__ import annotations

import gc
import sys
import tracemalloc
from pathlib import Path


def rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    runs = sys.argv[1]
    generations = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    warm = int(sys.argv[3]) if len(sys.argv) > 3 else generations // 3
    population = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    tracemalloc.start(8)
    from core import cli
    from core.run import worker as W

    snaps: list = []
    original = W.RunWorker._commit

    def commit(self, generation, population_, *args, **kwargs):
        done = original(self, generation, population_, *args, **kwargs)
        if generation in (warm, generations - 1):
            gc.collect()
            snaps.append((generation, self.evaluated, tracemalloc.take_snapshot(), rss()))
        return done

    W.RunWorker._commit = commit
    code = cli.main(["run", "--workload", "rmsnorm", "--backend", "c", "--population", str(population),
                     "--generations", str(generations), "--baseline-checks", "2", "--seed", "3", "--problem",
                     '{"rows": 4, "cols": 32}', "--runs-dir", runs, "--run-id", f"trace-{Path(runs).name}"])
    if len(snaps) < 2:
        print(f"run ended with {code} before both snapshots")
        return 1
    (g1, e1, s1, r1), (g2, e2, s2, r2) = snaps
    rows = (g2 - g1) * population
    print(f"generations {g1}..{g2}: {rows} individual rows, {e2 - e1} new evaluations")
    traced = sum(s.size for s in s2.statistics("filename")) - sum(s.size for s in s1.statistics("filename"))
    print(f"traced Python memory: {traced / 1e6:+.2f} MB = {traced / rows:+.0f} B per individual row")
    print(f"RSS: {(r2 - r1) / 1e6:+.2f} MB = {(r2 - r1) / rows:+.0f} B per individual row")
    for stat in s2.compare_to(s1, "traceback")[:12]:
        if stat.size_diff <= 0:
            continue
        print(f"\n{stat.size_diff / rows:+8.0f} B/row  {stat.size_diff / 1e3:+9.1f} kB  {stat.count_diff:+7d} blocks")
        for line in stat.traceback.format()[-8:]:
            print("    " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
