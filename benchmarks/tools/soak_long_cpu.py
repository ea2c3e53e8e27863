#!/usr/bin/env python3
"""The long CPU run of issue 36 ("Done when"): 60,000 candidates at population 512 on a small problem
(rmsnorm 16 x 1024, C backend), with the launcher's memory mappings and RSS sampled over time.

One command::

    python -m benchmarks.tools.soak_long_cpu --work-dir /tmp/abebot-long [--candidates 60000]
        [--population 512] [--minutes M] [--report benchmarks/reports/soak/long_cpu_run.md]

It starts ``python -m core run`` (a fresh run in ``WORK_DIR/runs``) and, every ``--sample-s`` seconds,
reads from /proc the worker's RSS, its sandbox's (the judge, which never loads a kernel) and the
*launcher*'s (the judge's child that loads every kernel: ``core/evaluation/launcher.py``): RSS and
memory mappings (lines of ``/proc/<pid>/maps``, the count that reached the kernel's limit of 65,530 in
the issue's run). Candidates are counted from the heartbeat: the committed evaluations plus the
"measured N of M" of the generation in flight. Once ``--candidates`` are measured the script writes
``stop`` to control.json (the run stops after its generation commits, resumable); after ``--minutes``
it sends SIGTERM (the worker saves ``stopped`` and exits; resumable too). Then it counts from
``live/`` the candidates whose kernel failed to *load* (cause ``load:``), and writes a report section
(Markdown, with the samples as JSON beside it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.tools.soak_machine import launcher_pid, maps, rss, sandbox_pid

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "long-cpu"
_MEASURED = re.compile(r"measured (\d+) of (\d+) candidates")


def candidates_done(hb: dict) -> int:
    """Candidates measured so far: the committed evaluations plus the generation in flight's progress."""
    m = _MEASURED.search(str(hb.get("phase") or ""))
    return int(hb.get("evaluations") or 0) + (int(m.group(1)) if m else 0)


def read_heartbeat(run: Path) -> dict:
    try:
        data = json.loads((run / "heartbeat.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def sample(worker: int, run: Path, t0: float) -> dict:
    """One line of the time series (pids included: a restarted sandbox or launcher is a new process)."""
    hb = read_heartbeat(run)
    box = sandbox_pid(worker)
    launcher = launcher_pid(box) if box else None
    return {"t": round(time.monotonic() - t0, 1), "generation": hb.get("generation"), "candidates": candidates_done(hb),
            "worker_rss": rss(worker), "sandbox_pid": box, "sandbox_rss": rss(box) if box else None,
            "sandbox_maps": maps(box) if box else None, "launcher_pid": launcher,
            "launcher_rss": rss(launcher) if launcher else None, "launcher_maps": maps(launcher) if launcher else None}


def load_failures(run: Path) -> tuple[int, int, dict[str, int]]:
    """(candidates stored, those whose kernel failed to load, statuses) from live/, as the dashboard reads them."""
    from store.reader import RunReader

    frame = RunReader(run).individuals(columns=["status", "cause", "reused", "remeasured"])
    fresh = frame[~frame["reused"].fillna(False).astype(bool) & ~frame["remeasured"].fillna(False).astype(bool)]
    loads = fresh["cause"].fillna("").str.contains(r"\bload:", regex=True)
    return len(fresh), int(loads.sum()), {str(k): int(v) for k, v in fresh["status"].value_counts().items()}


def rate(samples: list[dict]) -> tuple[float, float]:
    """(candidates per minute from the first measured candidate to the last sample, the same over the
    whole wall time including start-up)."""
    measured = [s for s in samples if s["candidates"] > 0]
    if len(measured) < 2 or measured[-1]["t"] <= measured[0]["t"]:
        return 0.0, 0.0
    steady = (measured[-1]["candidates"] - measured[0]["candidates"]) / (measured[-1]["t"] - measured[0]["t"]) * 60
    return steady, measured[-1]["candidates"] / samples[-1]["t"] * 60 if samples[-1]["t"] else 0.0


def slope_per(samples: list[dict], key: str, per: int = 10_000) -> float | None:
    """Least-squares growth of ``key`` per ``per`` candidates within the longest-lived launcher process,
    after the first third of the candidates it measured (its warm-up: imports, first loads)."""
    by_pid: dict[int, list[dict]] = {}
    for s in samples:
        if s.get("launcher_pid") and s.get(key) is not None:
            by_pid.setdefault(s["launcher_pid"], []).append(s)
    if not by_pid:
        return None
    rows = max(by_pid.values(), key=len)
    start = rows[0]["candidates"] + (rows[-1]["candidates"] - rows[0]["candidates"]) / 3
    rows = [r for r in rows if r["candidates"] >= start]  # after its warm-up: the first third of its candidates
    xs, ys = [r["candidates"] for r in rows], [r[key] for r in rows]
    if len(set(xs)) < 2:
        return None
    return statistics.linear_regression(xs, ys).slope * per


def report(o: argparse.Namespace, samples: list[dict], outcome: dict) -> str:
    steady, overall = rate(samples)
    blocks: dict[int, list[dict]] = {}
    for s in samples:
        blocks.setdefault(s["candidates"] // o.block, []).append(s)
    mb = lambda v: f"{v / 1e6:.1f} MB" if v else "-"  # noqa: E731
    lines = [
        "## Long CPU run: launcher mappings and RSS", "",
        f"Command: `{outcome['command']}` (from the repository root)", "",
        f"Machine: {platform.node()} · {platform.machine()} · {os.cpu_count()} CPUs · "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(outcome['started']))} · load average (1 min) "
        f"{outcome['load_average'][0]:.1f} at the start, {outcome['load_average'][1]:.1f} at the end", "",
        f"Run: rmsnorm {json.dumps(outcome['problem'])} on the C backend, population {o.population}, seed {o.seed}; "
        f"wall time {outcome['wall_s']:.0f} s, ended by {outcome['ended_by']}, worker exit status {outcome['exit']}.", "",
        f"- Candidates measured: **{outcome['candidates']}** (target {o.candidates}); stored in live/: "
        f"{outcome['stored']}, statuses {outcome['statuses']}.",
        f"- Candidates whose kernel failed to load (`load:` in the cause): **{outcome['load_failures']}**.",
        f"- Rate: **{steady:.0f} candidates per minute** from the first measured candidate on "
        f"({overall:.0f} per minute over the whole wall time, start-up and the baseline included).",
        f"- Launcher processes seen: {len({s['launcher_pid'] for s in samples if s.get('launcher_pid')})}; "
        f"in the longest-lived one, after its first third, mappings grow {_fmt(slope_per(samples, 'launcher_maps'))} and RSS "
        f"{_fmt(slope_per(samples, 'launcher_rss'), 1e6, ' MB')} per 10,000 candidates (least squares).", "",
        f"Samples every {o.sample_s:g} s ({len(samples)}); per block of {o.block:,} candidates, the largest values:", "",
        "| candidates | launcher maps max | launcher RSS max | sandbox (judge) maps max | sandbox RSS max | worker RSS max |",
        "|---|---|---|---|---|---|",
    ]
    for b, rows in sorted(blocks.items()):
        top = lambda k: max((r.get(k) or 0 for r in rows), default=0)  # noqa: E731
        lines.append(f"| {b * o.block}-{(b + 1) * o.block - 1} | {top('launcher_maps') or '-'} | {mb(top('launcher_rss'))} | "
                     f"{top('sandbox_maps') or '-'} | {mb(top('sandbox_rss'))} | {mb(top('worker_rss'))} |")
    return "\n".join(lines) + "\n"


def _fmt(v: float | None, scale: float = 1.0, unit: str = "") -> str:
    return "n/a (too few samples)" if v is None else f"{v / scale:+.1f}{unit}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work-dir", required=True, type=Path, help="a new folder: runs/ and the samples go there")
    ap.add_argument("--candidates", type=int, default=60_000)
    ap.add_argument("--population", type=int, default=512)
    ap.add_argument("--problem", default='{"rows": 16, "cols": 1024}')
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=0.0, help="stop (SIGTERM) after this long; 0: no limit")
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--block", type=int, default=5_000, help="candidates per line of the report's table")
    ap.add_argument("--report", type=Path, default=None, help="the Markdown section (default WORK_DIR/long_cpu_run.md)")
    o = ap.parse_args(argv)
    if o.candidates < 1 or o.population < 2 or o.sample_s <= 0 or o.minutes < 0 or o.block < 1:
        print("soak_long_cpu: error: --candidates, --population, --sample-s and --block must be positive", file=sys.stderr)
        return 2
    if o.work_dir.exists() and any(o.work_dir.iterdir()):
        print(f"soak_long_cpu: error: {o.work_dir} is not empty", file=sys.stderr)
        return 2
    runs = o.work_dir / "runs"
    runs.mkdir(parents=True)
    generations = 2 * (o.candidates // o.population + 2)  # re-timed elites and repeats are not new candidates
    cmd = [sys.executable, "-m", "core", "run", "--workload", "rmsnorm", "--backend", "c", "--population",
           str(o.population), "--generations", str(generations), "--seed", str(o.seed), "--problem", o.problem,
           "--runs-dir", str(runs), "--run-id", RUN_ID]
    run = runs / RUN_ID
    started, t0, load_before = time.time(), time.monotonic(), os.getloadavg()[0]
    log = open(o.work_dir / "worker.out", "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    samples: list[dict] = []
    ended_by = "the generation budget"
    try:
        while proc.poll() is None:
            time.sleep(o.sample_s)
            if proc.poll() is not None:
                break
            samples.append(sample(proc.pid, run, t0))
            if samples[-1]["candidates"] >= o.candidates and ended_by == "the generation budget":
                from store.control import write_control

                write_control(run, "stop")
                ended_by = f"control.json stop after {o.candidates} candidates"
            if o.minutes and time.monotonic() - t0 >= o.minutes * 60:
                ended_by = f"SIGTERM after {o.minutes:g} minutes"
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
                break
    except KeyboardInterrupt:
        ended_by = "Ctrl-C"
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
    code = proc.wait()
    log.close()
    (o.work_dir / "samples.json").write_text(json.dumps(samples))
    stored, failures, statuses = load_failures(run) if (run / "live").is_dir() else (0, 0, {})
    outcome = {"command": " ".join(["python -m benchmarks.tools.soak_long_cpu", *(argv if argv is not None else sys.argv[1:])]),
               "started": started, "wall_s": time.monotonic() - t0, "ended_by": ended_by, "exit": code,
               "problem": json.loads(o.problem), "candidates": max((s["candidates"] for s in samples), default=0),
               "stored": stored, "load_failures": failures, "statuses": statuses,
               "load_average": (load_before, os.getloadavg()[0])}
    text = report(o, samples, outcome)
    out = o.report or o.work_dir / "long_cpu_run.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
