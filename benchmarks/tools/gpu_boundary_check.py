#!/usr/bin/env python3
"""On the GPU: every registered workload x GPU backend through the generic evaluator, in one call.

For each (workload, backend) pair of the registry whose backend runs here (``cuda``, ``triton``):

1. start the real Evaluator (sandboxed; baselines timed side by side, the fastest that verifies is
   the primary);
2. evaluate the seed genomes and ``--random`` random ones at the default (LLM-sized) problem:
   verification on every shape, the odd ones too -> timing -> stability -> memory;
3. export the fastest ``ok`` kernel with ``write_standalone`` and run its ``run_kernel.py`` in a
   fresh process (the exported script must verify and time on the GPU by itself).

Then ``python -m core run`` for a few generations on ``--cli`` pairs. Writes ``<out>/check.json``
and ``<out>/check.md`` after every pair, so a call cut short still returns what it measured.

    python3 -m benchmarks.tools.gpu_boundary_check --out $OUT --random 4 --budget-s 480
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from core.backends import availability  # noqa: E402
from core.config import RunConfig  # noqa: E402
from core.evaluation.evaluator import Evaluator  # noqa: E402
from core.evaluation.standalone import write_standalone  # noqa: E402
from core.workloads import WORKLOADS, get_workload  # noqa: E402

T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def check_pair(workload: str, backend: str, n_random: int, cache: Path, logs: Path, problem: dict | None = None) -> dict:
    cfg = RunConfig.from_dict({"workload": workload, "backend": backend, "timeout_s": 60.0, "stability_launches": 10,
                               "problem": problem or {}})
    ev = Evaluator(cfg, cache, log=log, log_path=logs / f"{workload}_{backend}.log", timing_target_s=0.1)
    out: dict = {"workload": workload, "backend": backend, "problem": ev.problem}
    t0 = time.time()
    base = ev.start()
    out["baseline_s"] = round(time.time() - t0, 1)
    out["baselines"] = {n: {k: e.get(k) for k in ("time_us", "spread_us", "verified", "cause", "memory_bytes")}
                        for n, e in base["baselines"].items()}
    out["primary"], out["primary_us"], out["roofline_us"] = base["primary"], base["time_us"], base.get("roofline_us")
    out["floor_us"], out["peaks"] = base.get("floor_us"), base.get("peaks")
    space = ev.template.gene_space()
    rng = random.Random(7)
    genomes = list(space.seed_genomes()) + [space.random(rng) for _ in range(n_random)]
    t0 = time.time()
    results = ev.evaluate(genomes)
    out["eval_s"] = round(time.time() - t0, 1)
    out["evals_per_min"] = round(60 * len(genomes) / max(out["eval_s"], 1e-9), 1)
    out["candidates"] = [{"genome": g.hash, "origin": "seed" if i < len(space.seeds) else "random", "status": r.status,
                          "cause": r.cause[:160], "time_us": r.time_us, "spread_us": r.time_spread_us,
                          "vs_primary": base["time_us"] / r.time_us if r.time_us else None,
                          "memory_bytes": r.memory_bytes, "stability": r.stability, "determinism": r.determinism,
                          "steadiness": r.steadiness, "error_margin": r.error_margin, "max_abs_err": r.max_abs_err,
                          "eval_s": round(r.eval_s, 2)} for i, (g, r) in enumerate(zip(genomes, results))]
    ok = [(r, g) for g, r in zip(genomes, results) if r.ok]
    ev.close()
    if ok:
        best, genome = min(ok, key=lambda rg: rg[0].time_us)
        out["standalone"] = run_standalone(ev.template.render(genome), workload, ev.problem)
    return out


def run_standalone(kernel, workload: str, problem: dict) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="abebot-export-"))
    write_standalone(folder, kernel, workload, problem)
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(folder / "run_kernel.py"), "--seconds", "0.1"], capture_output=True,
                          text=True, timeout=400, cwd="/tmp")
    return {"returncode": proc.returncode, "seconds": round(time.time() - t0, 1),
            "stdout": proc.stdout[-3000:], "stderr": proc.stderr[-1500:]}


def run_cli(workload: str, backend: str, population: int, generations: int, runs: Path) -> dict:
    cmd = [sys.executable, "-m", "core", "run", "--workload", workload, "--backend", backend, "--population",
           str(population), "--generations", str(generations), "--seed", "1", "--runs-dir", str(runs)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=ROOT)
    return {"cmd": " ".join(cmd[1:]), "returncode": proc.returncode, "seconds": round(time.time() - t0, 1),
            "stdout": proc.stdout[-2500:], "stderr": proc.stderr[-1500:]}


def markdown(res: dict) -> str:
    lines = ["| workload | backend | primary baseline | other baselines | ok / evaluated | best kernel | vs primary | "
             "run_kernel.py |", "|---|---|---|---|---|---|---|---|"]
    for p in res["pairs"]:
        if "error" in p:
            lines.append(f"| {p['workload']} | {p['backend']} | error: {p['error'][:120]} | | | | | |")
            continue
        others = ", ".join(f"{n} {e['time_us']:.1f}" if e["time_us"] else f"{n} failed" for n, e in p["baselines"].items()
                           if n != p["primary"])
        ok = [c for c in p["candidates"] if c["status"] == "ok"]
        best = min(ok, key=lambda c: c["time_us"]) if ok else None
        sa = p.get("standalone", {})
        lines.append(f"| {p['workload']} | {p['backend']} | {p['primary']} {p['primary_us']:.1f} us | {others} | "
                     f"{len(ok)} / {len(p['candidates'])} | {best['time_us']:.1f} us | {best['vs_primary']:.3f}x | "
                     f"exit {sa.get('returncode')} |" if best else
                     f"{len(ok)} / {len(p['candidates'])} | - | - | - |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/abebot_check"))
    ap.add_argument("--random", type=int, default=4)
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--pairs", default="", help="';'-separated workload:backend[:problem JSON] (instead of every pair)")
    ap.add_argument("--cli", default="silu_mul:triton,silu_mul:cuda", help="workload:backend pairs for a CLI GA run")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logs = args.out / "sandbox_logs"
    logs.mkdir(exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="abebot-cache-"))
    res: dict = {"pairs": [], "cli": []}
    pairs = [(w, b, {}) for w in args.workloads.split(",") for b in get_workload(w).templates if b in ("cuda", "triton")]
    if args.pairs:
        pairs = [(p.split(":", 2)[0], p.split(":", 2)[1], json.loads(p.split(":", 2)[2]) if p.count(":") > 1 else {})
                 for p in args.pairs.split(";")]
    for w, b, problem in pairs:
        if time.time() - T0 > args.budget_s:
            res["pairs"].append({"workload": w, "backend": b, "error": "skipped: budget spent"})
            continue
        why = availability(b)
        if why:
            res["pairs"].append({"workload": w, "backend": b, "error": why})
            continue
        log(f"== {w} on {b}")
        try:
            res["pairs"].append(check_pair(w, b, args.random, cache, logs, problem))
        except Exception as exc:  # one pair failing must not lose the others' figures
            res["pairs"].append({"workload": w, "backend": b, "error": f"{type(exc).__name__}: {exc}"})
        save(args.out, res)
    for spec in filter(None, args.cli.split(",")):
        if time.time() - T0 > args.budget_s:
            break
        w, b = spec.split(":")
        log(f"== CLI {w} on {b}")
        res["cli"].append(run_cli(w, b, 8, 2, Path(tempfile.mkdtemp(prefix="abebot-runs-"))))
        save(args.out, res)
    save(args.out, res)
    log("done")


def save(out: Path, res: dict) -> None:
    (out / "check.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "check.md").write_text(markdown(res))


if __name__ == "__main__":
    main()
