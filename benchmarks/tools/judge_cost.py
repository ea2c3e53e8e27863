#!/usr/bin/env python3
"""What the judge costs a short CPU GA run (issue 35): round trips and wall seconds per candidate.

Runs ``python -m core run`` (rmsnorm, C backend, a small problem, a few generations of a small
population; a fresh runs folder each time, so every kernel is compiled and measured as new) from the
current folder, with the tree on ``PYTHONPATH`` as given, ``--repeats`` times, and prints per repeat
and as medians over the repeats:

* ``round trips / candidate``: judge -> launcher requests (each waits for a reply) made while the
  sandbox evaluated one candidate, counted in the sandbox process by wrapping
  ``core.evaluation.channel.send_request`` (a ``sitecustomize`` put first on ``PYTHONPATH``; a tree
  without a launcher counts 0), split by operation;
* ``evaluate s / candidate``: the sandbox's own seconds in ``Protocol.evaluate`` (load, verification,
  timing, stability, memory: no compile), median over the run's candidates; ``judge s / candidate``:
  the part of it spent outside requests (drawing cases, references, checks); ``request <op>``: the
  seconds each operation's requests took, reply included, per candidate; ``cpu s / candidate``: the
  CPU seconds the judge and its launcher used meanwhile (less sensitive to a busy machine than wall
  time, though the timing loops fill a fixed wall time);
* ``phase <name>``: the run's own median seconds per phase (its Individuals table);
* ``wall s / candidate``: the generations' elapsed seconds over the candidates they evaluated, as
  evaluations per minute count them (render, compile, sandbox, baseline re-timings);
* ``run wall s``: the whole command, start-up included.

Works on any tree that has ``core`` and ``store`` (the pre-judge one included), and on a GPU with
``--backend cuda --problem '{}' --population 32`` (``'{}'``: the backend's default problem)::

    cd /work/main/.old && PYTHONPATH=$PWD python /path/to/benchmarks/tools/judge_cost.py --repeats 3
    cd WORKTREE && PYTHONPATH=$PWD python benchmarks/tools/judge_cost.py --repeats 3 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Loaded in every process of the run (PYTHONPATH): wraps the judge's channel and the protocol's evaluate
# when they are imported, and appends one JSON line per evaluated candidate to $ABEBOT_JUDGE_COST_LOG.
HOOK = r'''
import importlib.abc, json, os, sys, time
_LOG = os.environ.get("ABEBOT_JUDGE_COST_LOG")
_STATE = {"requests": 0, "ops": {}, "fds": 0, "seconds": {}, "sent": None}


def _channel(module):
    send, receive = module.send_request, module.recv_reply

    def send_request(sock, request, fds=()):
        op = request.get("op", "start") if isinstance(request, dict) else "?"
        if op != "exit":
            _STATE["requests"] += 1
            _STATE["ops"][op] = _STATE["ops"].get(op, 0) + 1
            _STATE["fds"] += len(list(fds))
            _STATE["sent"] = (op, time.perf_counter())
        return send(sock, request, fds)

    def recv_reply(sock):
        try:
            return receive(sock)
        finally:
            if _STATE["sent"] is not None:
                op, t0 = _STATE["sent"]
                _STATE["seconds"][op] = _STATE["seconds"].get(op, 0.0) + time.perf_counter() - t0
                _STATE["sent"] = None
    module.send_request, module.recv_reply = send_request, recv_reply


def _cpu(pid):
    """CPU seconds (user + system) of process ``pid`` so far (0 when it cannot be read)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _protocol(module):
    evaluate = module.Protocol.evaluate

    def wrapped(self, artifact, seed):
        n, ops, fds, t0 = _STATE["requests"], dict(_STATE["ops"]), _STATE["fds"], time.perf_counter()
        waited = dict(_STATE["seconds"])
        launcher = getattr(getattr(self, "launcher", None), "proc", None)
        pids = [os.getpid()] + ([launcher.pid] if launcher is not None else [])
        cpu = sum(_cpu(p) for p in pids)
        result = evaluate(self, artifact, seed)
        cpu = sum(_cpu(p) for p in pids) - cpu
        line = {"pid": os.getpid(), "requests": _STATE["requests"] - n, "fds": _STATE["fds"] - fds,
                "ops": {k: v - ops.get(k, 0) for k, v in _STATE["ops"].items() if v - ops.get(k, 0)},
                "ops_s": {k: v - waited.get(k, 0.0) for k, v in _STATE["seconds"].items() if v - waited.get(k, 0.0)},
                "seconds": time.perf_counter() - t0, "cpu_s": cpu, "status": result.get("status")}
        with open(_LOG, "a") as f:
            f.write(json.dumps(line) + "\n")
        return result
    module.Protocol.evaluate = wrapped


_PATCHES = {"core.evaluation.channel": _channel, "core.evaluation.protocol": _protocol}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _PATCHES or not _LOG:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _PATCHES[name](module)
        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
'''


def one_run(args: argparse.Namespace, index: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="judge-cost-"))
    try:
        (work / "hook").mkdir()
        (work / "hook" / "sitecustomize.py").write_text(HOOK)
        log = work / "evaluations.jsonl"
        env = {**os.environ, "ABEBOT_JUDGE_COST_LOG": str(log), "OMP_NUM_THREADS": str(args.threads),
               "PYTHONPATH": os.pathsep.join([str(work / "hook"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        problem = args.problem or json.dumps({"rows": args.rows, "cols": args.cols})
        cmd = [sys.executable, "-m", "core", "run", "--workload", args.workload, "--backend", args.backend, "--population",
               str(args.population), "--generations", str(args.generations), "--seed", str(args.seed + index),
               "--timeout-s", "60", "--problem", problem, "--runs-dir", str(work / "runs"), "--run-id", "cost"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout_s)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"core run exited {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}")
        return summarise(work / "runs" / "cost", log, wall)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarise(run: Path, log: Path, wall: float) -> dict:
    from store.reader import RunReader

    reader = RunReader(run)
    gens = reader.generations()
    took = gens["elapsed_s"].diff().fillna(gens["elapsed_s"])  # elapsed_s counts from the run's start
    evaluated = int(gens["n_evaluated"].sum())
    inds = reader.individuals()
    fresh = inds[~inds["reused"].fillna(False).astype(bool)] if "reused" in inds else inds
    phases: dict[str, list[float]] = {}
    for raw in fresh["phases"].dropna() if "phases" in fresh else []:
        for name, seconds in json.loads(raw).items():
            phases.setdefault(name, []).append(float(seconds))
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    ops: dict[str, list[int]] = {}
    ops_s: dict[str, list[float]] = {}
    for line in lines:
        for op in set(ops) | set(line["ops"]):
            ops.setdefault(op, []).append(line["ops"].get(op, 0))
            ops_s.setdefault(op, []).append(line["ops_s"].get(op, 0.0))
    median = (lambda xs: statistics.median(xs) if xs else float("nan"))
    return {"candidates": len(lines), "evaluated": evaluated,
            "round_trips_per_candidate": median([x["requests"] for x in lines]),
            "fds_per_candidate": median([x["fds"] for x in lines]),
            "ops_per_candidate": {op: median(v) for op, v in sorted(ops.items())},
            "request_s_per_candidate": {op: round(median(v), 5) for op, v in sorted(ops_s.items())},
            "evaluate_s_per_candidate": median([x["seconds"] for x in lines]),
            "judge_s_per_candidate": median([x["seconds"] - sum(x["ops_s"].values()) for x in lines]),
            "cpu_s_per_candidate": median([x.get("cpu_s", 0.0) for x in lines]),
            "phase_median_s": {k: round(statistics.median(v), 4) for k, v in phases.items()},
            "wall_s_per_candidate": float(took.sum()) / max(1, evaluated), "run_wall_s": wall,
            "statuses": {s: sum(x["status"] == s for x in lines) for s in sorted({x["status"] for x in lines})}}


def spread(values: list[float]) -> str:
    """median (min..max, and the range as a share of the median)."""
    m = statistics.median(values)
    return f"{m:.4f} ({min(values):.4f}..{max(values):.4f}, ±{(max(values) - min(values)) / 2 / m * 100 if m else 0:.0f}%)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--population", type=int, default=8)
    ap.add_argument("--generations", type=int, default=3)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--workload", default="rmsnorm")
    ap.add_argument("--backend", default="c", help="c here; cuda or triton on a GPU")
    ap.add_argument("--problem", default="", help="a JSON problem (default: --rows and --cols)")
    ap.add_argument("--seed", type=int, default=1, help="the first repeat's; each repeat adds one")
    ap.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS for the run")
    ap.add_argument("--timeout-s", type=int, default=900, help="per run")
    ap.add_argument("--json", type=Path, help="also write every repeat's figures here")
    args = ap.parse_args()
    if min(args.repeats, args.population, args.generations, args.rows, args.cols) < 1:
        print("judge_cost: --repeats, --population, --generations, --rows and --cols must be positive", file=sys.stderr)
        return 2
    try:
        if args.problem and not isinstance(json.loads(args.problem), dict):
            raise ValueError
    except ValueError:
        print(f"judge_cost: --problem must be a JSON object (got {args.problem!r})", file=sys.stderr)
        return 2
    if not (Path.cwd() / "core").is_dir():
        print(f"judge_cost: run it from a tree with core/ (here: {Path.cwd()})", file=sys.stderr)
        return 2
    runs = []
    for i in range(args.repeats):
        runs.append(one_run(args, i))
        print(json.dumps({"repeat": i + 1, **runs[-1]}), flush=True)
    print(f"tree {Path.cwd()}: {args.repeats} runs of {args.workload}/{args.backend} {args.problem or (args.rows, args.cols)}, "
          f"population {args.population}, "
          f"{args.generations} generations")
    for key in ("round_trips_per_candidate", "fds_per_candidate", "evaluate_s_per_candidate", "judge_s_per_candidate",
                "cpu_s_per_candidate", "wall_s_per_candidate", "run_wall_s"):
        print(f"  {key:28s} {spread([r[key] for r in runs])}")
    for name in sorted({k for r in runs for k in r["phase_median_s"]}):
        print(f"  phase {name:22s} {spread([r['phase_median_s'][name] for r in runs if name in r['phase_median_s']])}")
    for op in sorted({k for r in runs for k in r["request_s_per_candidate"]}):
        print(f"  request {op:20s} {spread([r['request_s_per_candidate'][op] for r in runs if op in r['request_s_per_candidate']])}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
