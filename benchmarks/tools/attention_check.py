#!/usr/bin/env python3
"""attention_decode on a GPU: a few genomes per GPU backend verified and timed against SDPA's
backends (math, flash, efficient, cudnn, each where it runs) and FlashInfer (where it imports),
through the GA's own protocol, cold caches by default.

For every GPU backend that is available (cuda, triton) and every problem -- contexts 1024 and 8192,
batch 1, K = 0 and K = 4 drafted tokens (queries 1 and 5), Llama-3.1-70B heads (8 KV heads x 8,
head dim 128), bf16 -- one :class:`core.tools.check.Checker` (``core check``'s sandboxed evaluator)
times the baselines, then each genome is rendered, verified on every verification shape and timed
in interleaved pairs with the fastest baseline, as in a run. Prints one JSON object per (backend,
problem) as it finishes, then a summary object; ``--out FILE`` writes the list too.

    python3 -m benchmarks.tools.attention_check [--out attention.json] [--backends cuda,triton]
        [--contexts 1024,8192] [--queries 1,5] [--cache cold|hot] [--budget-s 280]

The genomes are each template's seeds and a few one-gene variants of its fast seed (more splits,
more rows per score thread, the other load path or merge). Problems run longest context and one
query token first, both backends each; a problem not started within ``--budget-s`` seconds is
skipped with a line, so the whole call stays under five minutes.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

WORKLOAD = "attention_decode"
HEADS = {"kv_heads": 8, "group": 8, "head_dim": 128, "batch": 1, "dtype": "bfloat16"}
# one-gene variants of each backend's fast seed: (group, gene, value)
VARIANTS = {
    "cuda": [("parallel_config", "splits", 32), ("parallel_config", "splits", 64),
             ("register_allocation", "score_rows", 8), ("memory_pattern", "load", "plain")],
    "triton": [("parallel_config", "splits", 32), ("instruction_sequence", "combine", "running"),
               ("memory_pattern", "kv_load", "plain")],
}


def genomes(template, backend: str) -> list:
    """The seeds, then the variants of the last (fast) seed the constraints accept, canonical and distinct."""
    from core.genome import with_gene

    space = template.gene_space()
    seeds = space.seed_genomes()
    out = list(seeds)
    for group, gene, value in VARIANTS.get(backend, []):
        g = space.canonical(with_gene(seeds[-1], group, gene, value))
        if space.validate(g) is None and g not in out:
            out.append(g)
    return out


def check_problem(backend: str, problem: dict, runs_dir: Path, second_method: bool) -> dict:
    from core.tools.check import Checker

    t0 = time.time()
    result: dict = {"backend": backend, "problem": problem}
    with Checker(WORKLOAD, backend, problem, runs_dir=runs_dir, second_method=second_method) as checker:
        base = checker.baseline
        result["baselines"] = {n: {"time_us": b.get("time_us"), "verified": b.get("verified"),
                                   "cause": b.get("cause") or None} for n, b in base["baselines"].items()}
        result.update(primary=base["primary"], primary_us=base["time_us"], roofline_us=base.get("roofline_us"),
                      cache=base.get("cache"), min_bytes=checker.min_bytes)
        ev_ = checker.evaluator
        rows = []
        for g in genomes(ev_.template, backend):
            kernel = ev_.template.render(g)
            [ev] = ev_.evaluate_sources([kernel])
            row = {"genome": json.loads(g.to_json()), "status": ev.status, "cause": ev.cause or None,
                   "time_us": ev.time_us, "spread_us": ev.time_spread_us, "max_abs_err": ev.max_abs_err,
                   "speedup_vs_primary": getattr(ev, "speedup", None),
                   "pair_baseline": getattr(ev, "pair_baseline", None)}
            if ev.ok and ev.time_us:
                row["roofline_share"] = (base.get("roofline_us") or 0.0) / ev.time_us
                row["vs_fastest_sdpa"] = _fastest_sdpa(result["baselines"]) / ev.time_us \
                    if _fastest_sdpa(result["baselines"]) else None
            rows.append(row)
        result["kernels"] = rows
    result["seconds"] = round(time.time() - t0, 1)
    return result


def _fastest_sdpa(baselines: dict) -> float | None:
    times = [b["time_us"] for n, b in baselines.items() if n.startswith("sdpa_") and b["verified"] and b["time_us"]]
    return min(times) if times else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="cuda,triton")
    ap.add_argument("--contexts", default="1024,8192")
    ap.add_argument("--queries", default="1,5", help="K + 1 for K drafted tokens")
    ap.add_argument("--cache", choices=("cold", "hot"), default="cold")
    ap.add_argument("--budget-s", type=float, default=280.0, help="start no problem after this many seconds")
    ap.add_argument("--second-method", action="store_true", help="also time passing kernels by the second method")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from core.backends import availability

    try:
        contexts = [int(c) for c in args.contexts.split(",")]
        queries = [int(q) for q in args.queries.split(",")]
    except ValueError:
        print("--contexts and --queries take integers separated by commas", file=sys.stderr)
        return 2
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:
        print(f"flashinfer: not importable ({type(exc).__name__}: {exc}); its baseline is skipped", flush=True)
    t0, results = time.time(), []
    runs_dir = Path(tempfile.mkdtemp(prefix="abebot-attention-check-"))
    backends = []
    for backend in args.backends.split(","):
        why = availability(backend)
        if why:
            print(f"{backend}: unavailable ({why}); skipped", flush=True)
        else:
            backends.append(backend)
    # the longest context and one query token first: the goal is at 8k keys, batch 1
    order = sorted(((c, q) for c in contexts for q in queries), key=lambda cq: (cq[1], -cq[0]))
    for context, q in order:
        for backend in backends:
            problem = {**HEADS, "context": context, "queries": q, "cache": args.cache}
            if time.time() - t0 > args.budget_s:
                print(f"{backend} {problem}: skipped, past the {args.budget_s:.0f} s budget", flush=True)
                continue
            try:
                res = check_problem(backend, problem, runs_dir, args.second_method)
            except Exception as exc:  # one problem's failure does not hide the others
                res = {"backend": backend, "problem": problem, "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(res), flush=True)
            results.append(res)
    summary = {"summary": [{"backend": r["backend"], "context": r["problem"]["context"],
                            "queries": r["problem"]["queries"], "primary": r.get("primary"),
                            "primary_us": r.get("primary_us"),
                            "best_us": min((k["time_us"] for k in r.get("kernels", []) if k["status"] == "ok"),
                                           default=None),
                            "error": r.get("error")} for r in results],
               "seconds": round(time.time() - t0, 1)}
    print(json.dumps(summary), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results + [summary], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
