#!/usr/bin/env python3
"""RSS of a real worker (``python -m core run``) left alone: sampled every 15 s with the generation it
had reached, and the slope over the second half (bytes per generation and per individual).

    python3 -m benchmarks.tools.worker_rss RUNS_DIR SECONDS [extra core run arguments]

The run is the soak's (rmsnorm 4 x 32 on the C backend, population 4) with no kills or other
disturbances; the database's size is printed at the end, so its growth can be set beside the RSS's.
"""
from __future__ import annotations

import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def rss(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    runs, seconds, extra = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    cmd = [sys.executable, "-m", "core", "run", "--workload", "rmsnorm", "--backend", "c", "--population", "4",
           "--generations", "0", "--hours", "100", "--baseline-checks", "2", "--seed", "3", "--problem",
           '{"rows": 4, "cols": 32}', "--runs-dir", runs, "--run-id", "rss", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    gen = [0]

    def follow() -> None:
        for line in proc.stdout:
            m = re.match(r"\s*gen (\d+)", line)
            if m:
                gen[0] = int(m.group(1))

    threading.Thread(target=follow, daemon=True).start()
    t0, rows = time.time(), []
    while time.time() - t0 < seconds and proc.poll() is None:
        time.sleep(15)
        rows.append((gen[0], rss(proc.pid)))
        print(f"{time.time() - t0:6.0f} s  generation {rows[-1][0]:6d}  rss {rows[-1][1] / 1e6:7.1f} MB", flush=True)
    proc.terminate()
    proc.wait()
    half = rows[len(rows) // 2:]
    if len(half) < 2:
        print("too few samples for a slope")
        return 1
    slope = statistics.linear_regression([g for g, _ in half], [r for _, r in half]).slope
    db = Path(runs) / "rss" / "run.duckdb"
    print(f"second half: {slope:.0f} B of RSS per generation, {slope / 4:.0f} B per individual")
    if db.exists() and rows[-1][0]:
        print(f"database: {db.stat().st_size / 1e6:.1f} MB, {db.stat().st_size / rows[-1][0]:.0f} B per generation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
