#!/usr/bin/env python3
"""The decode figures of README and DECODE_H200.md timed again: each champion genome of
``benchmarks/suites/cold_recheck_genomes.json`` through the protocol (``core check``'s sandboxed
evaluator: baselines timed, then the kernel verified and timed), and through the second method in
the same process (:mod:`core.evaluation.crosscheck`: a CUDA-graph chain over rotated copies beyond
2.5x the L2), with each one's host overhead.

    python3 -m benchmarks.tools.cold_recheck --out OUT [--only down_m1,qkv_m1] [--cache cold|hot]

Run with the code of an older commit on the path, the same file measures that commit's protocol
(no pairs, no second method there: the table then has the protocol's columns only), so old and new
policies can be put side by side from one device call. Writes ``OUT/results.json`` and prints a
table per entry.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENOMES = ROOT / "benchmarks" / "suites" / "cold_recheck_genomes.json"


def measure(entry: dict, runs_dir: Path, cache: str | None, rounds: int) -> dict:
    from core.tools.check import Checker

    problem = dict(entry["problem"])
    if cache:
        problem["cache"] = cache
    out: dict = {"name": entry["name"], "workload": entry["workload"], "problem": problem}
    t0 = time.time()
    with Checker(entry["workload"], entry["backend"], problem, runs_dir=runs_dir) as checker:
        ev_ = checker.evaluator
        template = ev_.template
        space = template.gene_space()
        genome = space.canonical(space.from_json(json.loads(entry["genome"])))
        kernel = template.render(genome)
        rounds_out = []
        for r in range(rounds):
            base = checker.baseline if r == 0 else ev_.remeasure_baselines(every=True)
            [ev] = ev_.evaluate_sources([kernel])
            if not ev.ok:
                out.update(status=ev.status, cause=ev.cause)
                return out
            rounds_out.append({"kernel_us": ev.time_us, "spread_us": ev.time_spread_us,
                               "speedup": getattr(ev, "speedup", None), "noisy": getattr(ev, "noisy", None),
                               "pair_baseline": getattr(ev, "pair_baseline", None),
                               "pair_baseline_us": getattr(ev, "pair_baseline_us", None),
                               "timing_method": getattr(ev, "timing_method", None),
                               "baselines": {n: b.get("time_us") for n, b in base["baselines"].items()
                                             if b.get("verified")}})
        out.update(status="ok", primary=checker.baseline["primary"], rounds=rounds_out,
                   roofline_us=checker.baseline.get("roofline_us"), cache_policy=checker.baseline.get("cache", "old"),
                   evict=checker.baseline.get("evict"))
        if hasattr(ev_, "pair"):  # every other baseline timed in pairs beside the kernel too
            out["paired"] = {}
            for name, b in checker.baseline["baselines"].items():
                if name != checker.baseline["primary"] and b.get("verified"):
                    replies = [ev_.pair(kernel, name) for _ in range(rounds)]
                    out["paired"][name] = [r.get("speedup") for r in replies if r.get("status") == "ok"]
        if hasattr(ev_, "crosscheck"):
            out["independent"] = ev_.crosscheck(kernel)
    out["seconds"] = time.time() - t0
    return out


def table(res: dict) -> str:
    if res.get("status") != "ok":
        return f"{res['name']}: {res.get('status')}: {res.get('cause')}"
    rs = res["rounds"]
    k = statistics.median(r["kernel_us"] for r in rs)
    names = sorted({n for r in rs for n in r["baselines"]})
    base = {n: statistics.median(r["baselines"][n] for r in rs if r["baselines"].get(n)) for n in names}
    lines = [f"== {res['name']} {res['workload']} {json.dumps(res['problem'])} cache={res.get('cache_policy')} "
             f"roofline {res.get('roofline_us') or 0:.2f} us ({res['seconds']:.0f} s)"]
    sp = [r["speedup"] for r in rs if r.get("speedup")]
    pair = (f"; paired vs {rs[0]['pair_baseline']}: {statistics.median(sp):.3f}x "
            f"(rounds {', '.join(f'{x:.3f}' for x in sp)}; noisy {[r['noisy'] for r in rs]}; {rs[0]['timing_method']})"
            if sp else "")
    each = ", ".join(f"{r['kernel_us']:.2f}" for r in rs)
    lines.append(f"  protocol: kernel {k:.2f} us (rounds {each}){pair}")
    paired = dict(res.get("paired") or {})
    if sp:
        paired[rs[0]["pair_baseline"]] = sp
    for n in sorted(names, key=lambda n: base[n]):
        p = paired.get(n)
        ptxt = f"  paired {statistics.median(p):.3f}x" if p else ""
        lines.append(f"    {n:32s} {base[n]:10.2f} us  {base[n] / k:7.3f}x{ptxt}")
    ind = res.get("independent")
    if ind and ind.get("status") == "ok":
        t = ind["times_us"]
        lines.append(f"  independent ({ind['method']}, {ind['copies']} copies, {ind['rotation_bytes'] / 1e6:.0f} MB "
                     f"rotated, L2 {ind['llc_bytes'] / 1e6:.0f} MB): kernel {t['kernel']:.2f} us, host overhead "
                     f"{ind['host_overhead_us'].get('kernel') or 0:.1f} us")
        for n in sorted((n for n in t if n != "kernel"), key=lambda n: t[n]):
            p = statistics.median(paired[n]) if paired.get(n) else None
            agree = f"  paired {p:.3f}x, methods {(t[n] / t['kernel']) / p:.3f}" if p else ""
            lines.append(f"    {n:32s} {t[n]:10.2f} us  {t[n] / t['kernel']:7.3f}x  host {ind['host_overhead_us'].get(n) or 0:6.1f} us{agree}")
        if ind.get("failed"):
            lines.append(f"    not chained: {ind['failed']}")
    elif ind:
        lines.append(f"  independent: {ind.get('status')}: {ind.get('cause')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="entry names, comma-separated (default: all)")
    ap.add_argument("--cache", default=None, choices=["cold", "hot"])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    entries = json.loads(GENOMES.read_text())
    only = {n for n in args.only.split(",") if n}
    results = []
    for entry in entries:
        if only and entry["name"] not in only:
            continue
        try:
            res = measure(entry, out / "runs", args.cache, args.rounds)
        except Exception as exc:  # one entry's failure is reported; the others still run
            res = {"name": entry["name"], "status": "error", "cause": f"{type(exc).__name__}: {exc}"}
        results.append(res)
        print(table(res), flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
