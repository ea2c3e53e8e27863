#!/usr/bin/env python3
"""GPU benchmark of AbeBot's cuda and triton templates, in one call on the device machine.

Every candidate goes through the real evaluator (render -> compile -> sandboxed verify on every
shape -> timed with rotation / CUDA graphs -> stability -> memory), against baselines timed in the
same sandbox. Parts (``--parts``, comma-separated, run in this order under one ``--budget-s``):

* ``climb``   -- per (workload, backend): seeds + random genomes, then mutation hill-climbing for
  its share of the budget; champion vs the first baseline (cuBLAS / vLLM eager), evaluations/min;
* ``shapes``  -- GEMM champion and a small search at M=16 N=10240 K=8192 and 4095x4097x1023;
  RMSNorm champions at 1x8192 and 64x8192 (launch-bound: the runtime times them under CUDA graphs);
* ``faults``  -- planted CUDA kernels (out-of-bounds write, illegal address, endless loop) each
  rejected, then a good kernel still evaluates in the same run;
* ``roofline``-- device-to-device copy bandwidth (bytes read + written) measured with torch;
* ``cli``     -- ``python -m core run`` for a few generations per GPU backend.

Results: ``<out>/bench.json`` (everything) and ``<out>/bench.md`` (tables), written after every part.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path


from core.config import RunConfig  # noqa: E402
from core.evaluation.evaluator import Evaluator  # noqa: E402
from core.genome import Genome  # noqa: E402

RESULTS: dict = {"parts": {}}
T0 = time.time()


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def save(out: Path) -> None:
    (out / "bench.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    (out / "bench.md").write_text(markdown())


def evaluator(workload: str, backend: str, problem: dict, cache: Path, timeout_s: float = 30.0) -> Evaluator:
    cfg = RunConfig.from_dict({"workload": workload, "backend": backend, "problem": problem, "population": 8,
                               "generations": 1, "timeout_s": timeout_s, "stability_launches": 10})
    ev = Evaluator(cfg, cache, log=log, log_path=Path("/tmp/abebot_logs") / f"{workload}_{backend}_{int(time.time())}.log",
                   timing_target_s=0.1)
    ev.start()
    return ev


def mutate(space, g: Genome, rng: random.Random, n: int = 1) -> Genome | None:
    genes = list(space.genes())
    for _ in range(50):
        child = g
        for _ in range(n):
            group, gene = rng.choice(genes)
            child = child.replace(group, gene.name, gene.mutate(child[group][gene.name], rng))
        if child != g and space.validate(child) is None:
            return child
    return None


def row(e) -> dict:
    return {k: getattr(e, k) for k in ("genome_hash", "status", "cause", "time_us", "time_spread_us", "memory_bytes",
                                       "extra_bytes", "onchip_bytes", "stability", "max_abs_err", "rel_err", "compile_s", "eval_s")} | \
        {"resources": {k: v for k, v in (e.resources or {}).items() if k in ("registers", "shared_bytes", "spill_bytes", "local_bytes", "threads")}}


def climb(workload: str, backend: str, problem: dict, cache: Path, budget_s: float, n_random: int, seed: int = 0) -> dict:
    t_start = time.time()
    ev = evaluator(workload, backend, problem, cache)
    try:
        space = ev.template.gene_space()
        rng = random.Random(seed)
        pop = space.seed_genomes() + [space.random(rng) for _ in range(n_random)]
        seen: dict[str, tuple] = {}
        n_eval, t_eval = 0, 0.0

        def run(genomes):
            nonlocal n_eval, t_eval
            genomes = [g for g in genomes if g.hash not in seen]
            if not genomes:
                return
            t = time.time()
            for g, e in zip(genomes, ev.evaluate(genomes)):
                seen[g.hash] = (g, e)
            t_eval += time.time() - t
            n_eval += len(genomes)

        run(pop)
        initial = {h: row(e) for h, (g, e) in seen.items()}
        deadline = t_start + budget_s
        rounds = 0
        while time.time() < deadline - 5:
            ok = sorted((e.time_us, h) for h, (g, e) in seen.items() if e.status == "ok")
            if not ok:
                break
            parents = [seen[h][0] for _, h in ok[:3]]
            kids = [k for k in (mutate(space, rng.choice(parents), rng, rng.choice((1, 1, 2))) for _ in range(6)) if k]
            run(kids)
            rounds += 1
        ok = sorted((e.time_us, h) for h, (g, e) in seen.items() if e.status == "ok")
        base = ev.baseline
        statuses: dict[str, int] = {}
        causes: dict[str, int] = {}
        for g, e in seen.values():
            statuses[e.status] = statuses.get(e.status, 0) + 1
            if e.status != "ok":
                causes[(e.cause or "")[:140]] = causes.get((e.cause or "")[:140], 0) + 1
        champ = seen[ok[0][1]] if ok else None
        res = {"workload": workload, "backend": backend, "problem": ev.problem, "baseline": base,
               "evaluated": n_eval, "rounds": rounds, "eval_wall_s": t_eval,
               "evals_per_min": 60.0 * n_eval / max(t_eval, 1e-9), "statuses": statuses, "causes": causes,
               "initial": initial, "top": [row(seen[h][1]) | {"genome": seen[h][0].to_dict()} for _, h in ok[:5]]}
        if champ:
            g, e = champ
            res["champion"] = {"genome": g.to_dict(), **row(e), "speedup_vs_primary": base["time_us"] / e.time_us,
                               "speedups": {n: (b["time_us"] / e.time_us if b.get("time_us") else None) for n, b in base["baselines"].items()},
                               "source": ev.template.render(g).source}
            log(f"{workload}/{backend}: champion {e.time_us:.2f} us vs {base['primary']} {base['time_us']:.2f} us "
                f"-> {base['time_us'] / e.time_us:.3f}x; {n_eval} evals, {res['evals_per_min']:.1f}/min; {statuses}")
        else:
            log(f"{workload}/{backend}: no ok candidate; {statuses}; {causes}")
        return res
    finally:
        ev.close()


def eval_genomes(workload: str, backend: str, problem: dict, cache: Path, genomes: list[dict], n_random: int = 0,
                 extra_budget_s: float = 0.0) -> dict:
    ev = evaluator(workload, backend, problem, cache)
    try:
        space = ev.template.gene_space()
        gs = [space.from_json(g) for g in genomes]
        rng = random.Random(7)
        gs += [space.random(rng) for _ in range(n_random)]
        evs = ev.evaluate(gs)
        best = None
        t_end = time.time() + extra_budget_s
        pool = list(zip(gs, evs))
        while time.time() < t_end:
            ok = sorted([(e.time_us, i) for i, (g, e) in enumerate(pool) if e.status == "ok"])
            if not ok:
                break
            parent = pool[ok[rng.randrange(min(3, len(ok)))][1]][0]
            kids = [k for k in (mutate(space, parent, rng) for _ in range(4)) if k]
            pool += list(zip(kids, ev.evaluate(kids)))
        ok = sorted([(e.time_us, i) for i, (g, e) in enumerate(pool) if e.status == "ok"])
        if ok:
            g, e = pool[ok[0][1]]
            best = {"genome": g.to_dict(), **row(e)}
        base = ev.baseline
        res = {"workload": workload, "backend": backend, "problem": ev.problem, "baseline": base,
               "given": [row(e) for e in evs[:len(genomes)]], "best": best, "evaluated": len(pool)}
        if best:
            res["speedups"] = {n: (b["time_us"] / best["time_us"] if b.get("time_us") else None) for n, b in base["baselines"].items()}
            log(f"{workload}/{backend} {ev.problem}: best {best['time_us']:.2f} us; baselines "
                + ", ".join(f"{n} {b.get('time_us') or float('nan'):.2f}" for n, b in base["baselines"].items()))
        return res
    finally:
        ev.close()


FAULTS = {
    "out_of_bounds_write": "    if (blockIdx.x == 0 && threadIdx.x == 0) C[(long long)M * N + 7] = C[0];\n",
    "illegal_address": "    if (blockIdx.x == 0 && threadIdx.x == 0) *(volatile T *)(0x10) = C[0];\n",
    # (a loop without side effects may be deleted by the compiler: spin on the clock instead)
    "endless_loop": "    if (threadIdx.x == 0) { long long t0 = clock64(); while (clock64() - t0 < (1LL << 62)) { } }\n",
}


def faults(cache: Path) -> dict:
    from dataclasses import replace

    ev = evaluator("gemm", "cuda", {"m": 1024, "n": 1024, "k": 1024}, cache, timeout_s=15.0)
    try:
        space = ev.template.gene_space()
        good = ev.template.render(space.seed_genomes()[0])
        kernels, names = [], []
        for name, code in FAULTS.items():
            marker = "    store_c(C, acc, m0, n0, M, N);\n"
            src = good.source.replace(marker, marker + code)
            assert src != good.source
            kernels.append(replace(good, source=src))
            names.append(name)
        out = {}
        for name, k in zip(names, kernels):  # one at a time: each may take the sandbox down
            t = time.time()
            e = ev.evaluate_sources([k])[0]
            out[name] = {"status": e.status, "cause": e.cause, "wall_s": time.time() - t}
            log(f"fault {name}: {e.status} ({e.cause[:120]})")
        t = time.time()
        e = ev.evaluate_sources([replace(good, source=good.source + "\n// fresh\n")])[0]
        out["good_after_faults"] = {"status": e.status, "time_us": e.time_us, "wall_s": time.time() - t}
        log(f"good kernel after faults: {e.status} {e.time_us}")
        return out
    finally:
        ev.close()


def roofline() -> dict:
    import torch

    x = torch.randn(1 << 30, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); y.copy_(x); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    ts.sort()
    bw = 2 * x.numel() * 2 / ts[len(ts) // 2]
    del x, y
    torch.cuda.empty_cache()
    return {"copy_bytes_per_s": bw, "rmsnorm_4096x8192_roofline_us": (2 * 4096 * 8192 * 2 + 8192 * 2) / bw * 1e6}


def cli(out: Path, gens: int, pop: int, backends: list[str]) -> dict:
    res = {}
    runs = Path("/tmp/abebot_runs")
    for backend in backends:
        cmd = [sys.executable, "-m", "core", "run", "--workload", "gemm", "--backend", backend, "--population", str(pop),
               "--generations", str(gens), "--runs-dir", str(runs), "--timeout-s", "30"]
        t = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
        res[backend] = {"cmd": " ".join(cmd[1:]), "rc": p.returncode, "wall_s": time.time() - t, "tail": (p.stdout + p.stderr)[-3000:]}
        log(f"cli {backend}: rc={p.returncode} in {time.time() - t:.0f}s\n{(p.stdout + p.stderr)[-1200:]}")
    subprocess.run(["tar", "czf", str(out / "runs.tar.gz"), "-C", str(runs.parent), runs.name])
    return res


def markdown() -> str:
    L = ["| part | workload/backend | problem | champion | baseline | speed-up | evals/min | statuses |", "|---|---|---|---|---|---|---|---|"]
    for key, r in RESULTS["parts"].get("climb", {}).items():
        c, b = r.get("champion"), r.get("baseline") or {}
        L.append(f"| climb | {key} | {r.get('problem')} | {c['time_us']:.2f} us | {b.get('primary')} {b.get('time_us', 0):.2f} us | "
                 f"{c['speedup_vs_primary']:.3f}x | {r['evals_per_min']:.1f} | {r['statuses']} |" if c else
                 f"| climb | {key} | {r.get('problem')} | - | - | - | {r.get('evals_per_min', 0):.1f} | {r.get('statuses')} |")
    for key, r in RESULTS["parts"].get("shapes", {}).items():
        if not isinstance(r, dict) or "baseline" not in r:
            continue
        b, best = r["baseline"], r.get("best")
        bl = ", ".join(f"{n} {v.get('time_us') or float('nan'):.2f} us" for n, v in b["baselines"].items())
        L.append(f"| shapes | {key} | {r['problem']} | {best['time_us']:.2f} us | {bl} | "
                 f"{', '.join(f'{n} {s:.3f}x' for n, s in (r.get('speedups') or {}).items() if s)} | - | - |" if best else
                 f"| shapes | {key} | {r['problem']} | - | {bl} | - | - | - |")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    ap.add_argument("--parts", default="roofline,climb,faults,shapes")
    ap.add_argument("--combos", default="gemm:triton:150,gemm:cuda:70,rmsnorm:triton:60,rmsnorm:cuda:60",
                    help="workload:backend:seconds for the climb part")
    ap.add_argument("--random", type=int, default=6, help="random genomes in each initial population")
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop starting new parts after this")
    ap.add_argument("--cli-generations", type=int, default=3)
    ap.add_argument("--cli-population", type=int, default=8)
    ap.add_argument("--cli-backends", default="triton,cuda")
    ap.add_argument("--shape-jobs", default="", help="comma-separated indices of the shape jobs to run (default all)")
    ap.add_argument("--champions", default="", help="bench.json of an earlier call: reuse its champions for 'shapes'")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    Path("/tmp/abebot_logs").mkdir(exist_ok=True)
    cache = Path("/tmp/abebot_cache")
    RESULTS["command"] = " ".join(sys.argv)
    RESULTS["env"] = env()
    parts = args.parts.split(",")
    prior = json.loads(Path(args.champions).read_text())["parts"].get("climb", {}) if args.champions else {}
    try:
        if "roofline" in parts:
            RESULTS["parts"]["roofline"] = roofline()
            log(f"roofline: {RESULTS['parts']['roofline']}")
            save(out)
        if "climb" in parts:
            RESULTS["parts"]["climb"] = {}
            for spec in args.combos.split(","):
                w, b, s = spec.split(":")
                if time.time() - T0 > args.budget_s:
                    break
                try:
                    RESULTS["parts"]["climb"][f"{w}/{b}"] = climb(w, b, {}, cache, float(s), args.random)
                except Exception as exc:
                    RESULTS["parts"]["climb"][f"{w}/{b}"] = {"error": repr(exc)}
                    log(f"{w}/{b} failed: {exc!r}")
                save(out)
        if "faults" in parts and time.time() - T0 < args.budget_s:
            RESULTS["parts"]["faults"] = faults(cache)
            save(out)
        if "shapes" in parts:
            RESULTS["parts"]["shapes"] = {}
            champs = {**{k: v.get("champion", {}).get("genome") for k, v in prior.items()},
                      **{k: v.get("champion", {}).get("genome") for k, v in RESULTS["parts"].get("climb", {}).items()}}
            jobs = [("gemm", "triton", {"m": 4096, "n": 4096, "k": 4096}, 0, 0),
                    ("gemm", "triton", {"m": 16, "n": 10240, "k": 8192}, 16, 40),
                    ("gemm", "triton", {"m": 4095, "n": 4097, "k": 1023}, 4, 25),
                    ("gemm", "cuda", {"m": 4095, "n": 4097, "k": 1023}, 0, 0),
                    ("rmsnorm", "triton", {"rows": 1, "cols": 8192}, 6, 20),
                    ("rmsnorm", "triton", {"rows": 64, "cols": 8192}, 6, 20),
                    ("rmsnorm", "cuda", {"rows": 1, "cols": 8192}, 6, 15),
                    ("rmsnorm", "cuda", {"rows": 64, "cols": 8192}, 6, 15),
                    ("rmsnorm", "cuda", {"rows": 4096, "cols": 8192}, 0, 0),
                    ("rmsnorm", "triton", {"rows": 4096, "cols": 8192}, 0, 0)]
            if args.shape_jobs:
                jobs = [jobs[int(i)] for i in args.shape_jobs.split(",")]
            for w, b, prob, n_random, extra in jobs:
                if time.time() - T0 > args.budget_s:
                    break
                key = f"{w}/{b} " + "x".join(str(v) for v in prob.values())
                given = [champs[f"{w}/{b}"]] if champs.get(f"{w}/{b}") else []
                try:
                    RESULTS["parts"]["shapes"][key] = eval_genomes(w, b, prob, cache, given, n_random, extra)
                except Exception as exc:
                    RESULTS["parts"]["shapes"][key] = {"error": repr(exc)}
                    log(f"{key} failed: {exc!r}")
                save(out)
        if "cli" in parts and time.time() - T0 < args.budget_s + 60:
            RESULTS["parts"]["cli"] = cli(out, args.cli_generations, args.cli_population, args.cli_backends.split(","))
    finally:
        RESULTS["wall_s"] = time.time() - T0
        save(out)
        subprocess.run(["tar", "czf", str(out / "logs.tar.gz"), "-C", "/tmp", "abebot_logs"])
        print(markdown())


def env() -> dict:
    from core.backends.cuda import probe

    info = probe()
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem", "--format=csv,noheader"],
                         capture_output=True, text=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "nvidia_smi": smi.stdout.strip(), "probe": info,
            "python": sys.version.split()[0]}


if __name__ == "__main__":
    main()
