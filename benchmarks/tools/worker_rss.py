#!/usr/bin/env python3
"""RSS of a real worker (``python -m core run``) left alone, and of its sandbox: sampled every
``--every`` seconds with the generation the run had committed, then the growth per 1,000 generations by
least squares over the whole run after ``--warmup-s`` and over its second half.

    nice -n 19 python3 -m benchmarks.tools.worker_rss RUNS_DIR SECONDS [--reopen-every N] [-- core run args]

The run is the soak's (rmsnorm 4 x 32 on the C backend, population 4) with no kills or other
disturbances. ``--reopen-every N`` sets :attr:`store.writer.RunWriter.reopen_every` in the worker
(0: never reopen the database), so the same run can be measured with and without the writer's
periodic reopening. The database's size is printed at the end, so its growth can be set beside the RSS's.
"""
from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.tools.soak_machine import maps, rss, sandbox_pid  # noqa: E402

WRAPPER = ("import sys; import store.writer as w; n = int(sys.argv.pop(1)); "
           "w.RunWriter.reopen_every = n or 10**12; w.RunWriter.reopen_rows = w.RunWriter.reopen_rows if n else 10**12; "
           "from core.cli import main; sys.exit(main())")


def committed(hb: Path) -> int:
    try:
        return int(json.loads(hb.read_text()).get("generation", -1))
    except (OSError, ValueError):
        return -1


def slope_per_1000(rows: list[tuple[int, int]]) -> float:
    xs, ys = [g for g, _ in rows], [r for _, r in rows]
    return statistics.linear_regression(xs, ys).slope * 1000 if len(set(xs)) > 1 else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("seconds", type=float)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--warmup-s", type=float, default=60.0, help="samples before this are left out of the slopes")
    ap.add_argument("--reopen-every", type=int, default=None, help="the writer's reopen_every (0: never); "
                    "default: as shipped")
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--run-id", default="rss")
    ap.add_argument("extra", nargs="*", help="more `core run` arguments (after --)")
    o = ap.parse_args(argv)
    args = ["run", "--workload", "rmsnorm", "--backend", "c", "--population", str(o.population),
            "--generations", "0", "--hours", "100", "--baseline-checks", "2", "--seed", "3", "--problem",
            '{"rows": 4, "cols": 32}', "--runs-dir", str(o.runs), "--run-id", o.run_id, *o.extra]
    if o.reopen_every is None:
        cmd = [sys.executable, "-m", "core", *args]
    else:
        cmd = [sys.executable, "-c", WRAPPER, str(o.reopen_every), *args]
    log = open(o.runs.parent / f"{o.run_id}.worker.out", "w") if o.runs.parent.is_dir() else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the worker is stopped with us (finally below)
    hb = o.runs / o.run_id / "heartbeat.json"
    t0, rows = time.time(), []
    print("     s  generation  worker RSS MB  sandbox RSS MB  sandbox maps", flush=True)
    try:
        while time.time() - t0 < o.seconds and proc.poll() is None:
            time.sleep(o.every)
            box = sandbox_pid(proc.pid)
            row = (time.time() - t0, committed(hb), rss(proc.pid) or 0, (rss(box) or 0) if box else 0,
                   (maps(box) or 0) if box else 0)
            rows.append(row)
            print(f"{row[0]:6.0f}  {row[1]:10d}  {row[2] / 1e6:13.1f}  {row[3] / 1e6:14.1f}  {row[4]:12d}", flush=True)
    finally:
        proc.terminate()
        proc.wait()
    warm = [r for r in rows if r[0] >= o.warmup_s and r[1] >= 0]
    if len(warm) < 4:
        print("too few samples after the warm-up for a slope")
        return 1
    half = warm[len(warm) // 2:]
    gens = warm[-1][1] - warm[0][1]
    print(f"reopen_every: {'as shipped' if o.reopen_every is None else o.reopen_every or 'never'}; "
          f"generations {warm[0][1]}..{warm[-1][1]} after the warm-up ({gens} generations, {gens * o.population} individuals)")
    for name, i in (("worker RSS", 2), ("sandbox RSS", 3)):
        whole, late = slope_per_1000([(r[1], r[i]) for r in warm]), slope_per_1000([(r[1], r[i]) for r in half])
        print(f"{name}: {whole / 1e6:+.2f} MB per 1,000 generations ({whole / 1000 / o.population:+.0f} B per individual); "
              f"second half {late / 1e6:+.2f} MB per 1,000 generations ({late / 1000 / o.population:+.0f} B per individual)")
    print(f"sandbox maps: {slope_per_1000([(r[1], r[4]) for r in warm]):+.1f} per 1,000 generations "
          f"({warm[0][4]} -> {warm[-1][4]})")
    db = o.runs / o.run_id / "run.duckdb"
    if db.exists() and rows[-1][1] > 0:
        print(f"database: {db.stat().st_size / 1e6:.1f} MB, {db.stat().st_size / rows[-1][1]:.0f} B per generation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
