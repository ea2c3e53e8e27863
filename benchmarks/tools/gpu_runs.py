#!/usr/bin/env python3
"""On the GPU: GA runs from the CLI with the full protocol, their throughput, and their champions
re-timed by ``core bench`` against every baseline.

For each ``--runs`` entry ``workload:backend:population:generations[:problem JSON]`` (with a leading
``+``, the run starts from the best genomes of the call's earlier runs of the same workload and
backend: ``core run --start-from``):

1. ``python -m core run`` (a fresh runs folder, so every kernel is compiled and measured as new;
   Triton's cache starts empty too);
2. from the run's database (``--extra '--devices all'``: on every GPU): evaluations per minute per generation (``n_evaluated / elapsed_s``:
   render, compile, sandbox, the generation's baseline re-timings and elite re-timings), the
   median seconds per phase of the evaluated individuals, the statuses and lethal causes;
3. ``python -m core bench RUN --rounds 3``: the champion and every baseline timed side by side.

Writes ``<out>/runs.json`` and ``<out>/runs.md`` after every run, and each command's output.

    python3 -m benchmarks.tools.gpu_runs --out $OUT --runs 'gemm:triton:32:4;rmsnorm:cuda:32:4'
    python3 -m benchmarks.tools.gpu_runs --out $OUT --runs 'gemm:triton:32:4' --extra '--devices all'
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from store.reader import RunReader  # noqa: E402


def one_run(spec: str, runs: Path, out: Path, timeout_s: int, extra: list[str], bench_rounds: int,
            earlier: list[dict] = ()) -> dict:
    start = spec.startswith("+")  # warm start from this call's earlier runs of the same workload and backend
    workload, backend, population, generations, *rest = spec.lstrip("+").split(":", 4)
    if start:
        ids = [r["run_id"] for r in earlier if r.get("exit") == 0 and r["spec"].lstrip("+").startswith(f"{workload}:{backend}:")]
        extra = [*extra, "--start-from", ",".join(ids)] if ids else extra
    problem = rest[0] if rest else "{}"
    run_id = f"{workload}-{backend}-{int(time.time())}"
    cmd = [sys.executable, "-m", "core", "run", "--workload", workload, "--backend", backend, "--population", population,
           "--generations", generations, "--seed", "1", "--timeout-s", "30", "--problem", problem,
           "--runs-dir", str(runs), "--run-id", run_id, *extra]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    wall = time.time() - t0
    (out / f"{run_id}.run.log").write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    result: dict = {"spec": spec, "run_id": run_id, "exit": proc.returncode, "wall_s": round(wall, 1)}
    reader = RunReader(runs / run_id)
    gens = reader.generations()
    inds = reader.individuals()
    took = gens["elapsed_s"].diff().fillna(gens["elapsed_s"])  # elapsed_s counts from the run's start
    result["generations"] = [{"generation": int(g.generation), "n_evaluated": int(g.n_evaluated),
                              "seconds": round(float(s), 2), "evals_per_min": round(60 * float(g.n_evaluated) / max(float(s), 1e-9), 1),
                              "baseline_us": g.baseline_time_us, "baseline_rel_spread": g.baseline_rel_spread,
                              "noisy": bool(g.noisy)} for g, s in zip(gens.itertuples(), took)]
    fresh = inds[~inds["reused"].fillna(False).astype(bool)]
    phases: dict[str, list[float]] = {}
    for raw in fresh["phases"].dropna():
        for name, seconds in json.loads(raw).items():
            phases.setdefault(name, []).append(float(seconds))
    result["phase_median_s"] = {k: round(statistics.median(v), 3) for k, v in phases.items()}
    result["statuses"] = fresh["status"].value_counts().to_dict()
    if "device" in fresh:
        result["evaluations_per_device"] = fresh["device"].value_counts().to_dict()
    ok = inds[inds["status"] == "ok"]
    result["term_quantiles"] = {  # how much each objective's term varies over the run's viable individuals
        col: [round(float(q), 4) for q in ok[col].quantile([0.0, 0.1, 0.5, 0.9, 1.0])]
        for col in ("time_term", "memory_term", "stability_term", "determinism", "steadiness", "error_margin")
        if col in ok and ok[col].notna().any()}
    keep = [c for c in ("generation", "genome_hash", "genome", "status", "fitness", "time_us", "memory_bytes", "device")
            if c in inds]
    inds[keep].to_csv(out / f"{run_id}.individuals.csv.gz", index=False)  # for gene importance off the device
    result["top"] = [{"time_us": r.time_us, "fitness": r.fitness, "genome": r.genome}
                     for r in reader.top(3).itertuples()]
    result["lethal_causes"] = sorted({str(c)[:160] for c in fresh.loc[fresh["status"] != "ok", "cause"].dropna()})[:10]
    result["evals_per_min"] = round(60 * float(gens["n_evaluated"].sum()) / max(float(took.sum()), 1e-9), 1)
    result["evals_per_min_after_gen0"] = round(60 * float(gens["n_evaluated"][1:].sum()) /
                                               max(float(took[1:].sum()), 1e-9), 1) if len(gens) > 1 else None
    if not bench_rounds:
        return result
    bench = subprocess.run([sys.executable, "-m", "core", "bench", run_id, "--runs-dir", str(runs), "--rounds", str(bench_rounds)],
                           cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    (out / f"{run_id}.bench.log").write_text(bench.stdout + bench.stderr)
    result["bench_exit"] = bench.returncode
    result["bench"] = bench.stdout[-3000:]
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--runs", required=True, help="'workload:backend:population:generations[:problem JSON];...'")
    ap.add_argument("--runs-dir", type=Path, default=Path("/tmp/abebot_gpu_runs"))
    ap.add_argument("--timeout-s", type=int, default=400, help="per command")
    ap.add_argument("--extra", default="", help="more `core run` flags for every run, e.g. '--devices all'")
    ap.add_argument("--bench-rounds", type=int, default=3, help="core bench rounds per run (0: no bench)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in [s for s in args.runs.split(";") if s.strip()]:
        try:
            results.append(one_run(spec.strip(), args.runs_dir, args.out, args.timeout_s, args.extra.split(), args.bench_rounds,
                                   results))
        except Exception as exc:  # one failed run still leaves the others' figures
            results.append({"spec": spec, "error": f"{type(exc).__name__}: {exc}"})
        (args.out / "runs.json").write_text(json.dumps(results, indent=1, default=str))
        lines = ["| run | exit | evaluations / min (all gens; after gen 0) | phases (median s) | statuses |", "|---|---|---|---|---|"]
        for r in results:
            lines.append(f"| {r['spec']} | {r.get('exit', r.get('error'))} | {r.get('evals_per_min')}; "
                         f"{r.get('evals_per_min_after_gen0')} | {r.get('phase_median_s')} | {r.get('statuses')} |")
        (args.out / "runs.md").write_text("\n".join(lines) + "\n")
        print(json.dumps(results[-1], indent=1, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
