#!/usr/bin/env python3
"""One genome and its one-gene variants, each checked and timed side by side, or one genome
launched again and again for a profiler.

Each variant is rendered, compiled and bound exactly as the GA does (the workload's harness: the
repack once, then ``bind``); its first launch is checked against the float64 reference and a wrong
one is reported as such, never timed. Times are ``triton.testing.do_bench`` medians (rep 200 ms, on
a GPU), with the harness's baselines timed in the same process, and the bytes the workload must
move over the time give the share of the measured copy roofline.

With ``--rounds N`` the variants go through the GA's own protocol instead (any backend, the CPU's
included): one sandboxed evaluator (``core.tools.check.Checker``, holding the device lock as ``core
check`` does) verifies each on every shape and times it as the GA does (CUDA graphs for launches
too short for events, poisoned and permuted inputs, checked timed launches); each round times the
baselines again and then every variant, in a shuffled order, and the table gives the median over
the rounds, the spread (slowest - fastest round) and the ratio to the fastest baseline. Events miss
what a launch-bound kernel costs inside a graph; this mode is for those.

    python3 -m benchmarks.tools.gpu_kernel_sweep w4a16 '{"m":16}' GENOME_JSON \\
        --vary 'register_allocation.batch=1,2,4' --vary 'parallel_config.kblocks=2,4,8'
    ncu --clock-control none -k regex:kernel -s 3 -c 1 python3 -m benchmarks.tools.gpu_kernel_sweep \\
        w4a16 '{"m":16}' GENOME_JSON --launches 5
    python3 -m benchmarks.tools.gpu_kernel_sweep rmsnorm '{"rows":64,"residual":true}' GENOME_JSON \\
        --vary 'parallel_config.split=1,2,8' --rounds 5

``--vary`` takes one gene (``group.gene`` or ``group.regs.key``) and its values (JSON each, or bare
strings); each ``--vary`` is swept alone around the base genome, and ``--grid`` sweeps them all
together instead.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from core.evaluation.protocol import Protocol  # noqa: E402
from core.workloads import get_workload  # noqa: E402


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _values(text: str) -> list:
    """A ``--vary`` value list: JSON values separated by commas (lists included, as a body's
    ``["LOAD_X","REDUCE"]``), or else bare strings split at the commas."""
    try:
        return json.loads(f"[{text}]")
    except json.JSONDecodeError:
        return [_value(v) for v in text.split(",")]


def _set(d: dict, path: str, value) -> dict:
    out = json.loads(json.dumps(d))
    *keys, last = path.split(".")
    node = out
    for k in keys:
        node = node[k]
    node[last] = value
    return out


def variants(base: dict, vary: list[str], grid: bool) -> list[tuple[str, dict]]:
    """(label, genome dict): the base first, then each gene's values alone, or every combination."""
    axes = [(path, _values(values)) for path, values in (s.split("=", 1) for s in vary)]
    out = [("base", base)]
    if grid and axes:
        for combo in itertools.product(*(vals for _, vals in axes)):
            d = base
            for (path, _), v in zip(axes, combo):
                d = _set(d, path, v)
            out.append((" ".join(f"{p.split('.')[-1]}={v}" for (p, _), v in zip(axes, combo)), d))
    else:
        for path, vals in axes:
            out += [(f"{path.split('.')[-1]}={v}", _set(base, path, v)) for v in vals]
    return out


def genomes(space, args) -> list[tuple[str, object]]:
    """(label, canonical genome) of each variant that is legal and not the same kernel as an earlier
    one; the others are reported and left out."""
    out, seen = [], set()
    for label, d in variants(json.loads(args.genome), args.vary, args.grid):
        try:
            g = space.canonical(space.from_json(d))
            why = space.validate(g)
        except ValueError as exc:
            g, why = None, str(exc)
        if why or g is None or g.hash in seen:
            print(f"skip {label}: {why or 'the same kernel as an earlier variant'}", flush=True)
            continue
        seen.add(g.hash)
        out.append((label, g))
    return out


def protocol_sweep(args) -> int:
    """``--rounds``: every variant and baseline through the GA's protocol, rounds interleaved."""
    from core.tools.check import Checker, device_lock

    hold_device, _busy = device_lock()
    runs = Path(args.runs_dir)
    with hold_device(runs, args.backend, 0, "gpu_kernel_sweep"), \
            Checker(args.workload, args.backend, json.loads(args.problem), runs_dir=runs) as checker:
        template = checker.evaluator.template
        chosen = dict(genomes(template.gene_space(), args))
        kernels = [(label, template.render(g)) for label, g in chosen.items()]
        times: dict[str, list[float]] = {label: [] for label, _ in kernels}
        failed: dict[str, str] = {}
        baselines: dict[str, list[float]] = {}
        for r in range(args.rounds):
            record = checker.baseline if r == 0 else checker.evaluator.remeasure_baselines(every=True)
            for name, b in record["baselines"].items():
                if b.get("time_us") is not None and b.get("verified"):
                    baselines.setdefault(name, []).append(b["time_us"])
            order = random.Random(r).sample(kernels, len(kernels))
            for (label, _), ev in zip(order, checker.evaluator.evaluate_sources([k for _, k in order])):
                if ev.ok:
                    times[label].append(ev.time_us)
                else:
                    failed[label] = f"{ev.status}: {ev.cause}"[:120]
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{label} {times[label][-1]:.2f} us" for label, _ in kernels
                                                              if label not in failed), flush=True)
    fastest = min(statistics.median(v) for v in baselines.values())
    print(f"\n{args.workload} {args.backend} {args.problem}: medians of {args.rounds} rounds, spread = slowest - fastest round")
    print(f"{'kernel':40s} {'median us':>10s} {'spread us':>10s} {'vs fastest baseline':>20s}")
    rows = [(label, v, "") for label, v in times.items() if label not in failed]
    rows += [(name, v, " (baseline)") for name, v in baselines.items()]
    for label, v, what in sorted(rows, key=lambda row: statistics.median(row[1])):
        median = statistics.median(v)
        print(f"{label:40s} {median:10.2f} {max(v) - min(v):10.2f} {fastest / median:19.3f}x{what}")
    for label, why in failed.items():
        print(f"{label:40s} FAILED {why}")
    best = min((row for row in rows if not row[2]), key=lambda row: statistics.median(row[1]), default=None)
    if best:
        print("best genome:", chosen[best[0]].to_json())
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("problem", help="problem JSON, over the workload's defaults")
    ap.add_argument("genome", help="the base genome, JSON")
    ap.add_argument("--vary", action="append", default=[], metavar="GENE=V1,V2")
    ap.add_argument("--grid", action="store_true", help="every combination of the --vary values")
    ap.add_argument("--launches", type=int, default=0, help="launch the base this many times, untimed (for ncu)")
    ap.add_argument("--rounds", type=int, default=0, help="time through the GA's protocol, this many interleaved rounds")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--runs-dir", default="runs", help="with --rounds: whose device lock and compile cache to use")
    args = ap.parse_args()
    if args.rounds:
        return protocol_sweep(args)
    problem = get_workload(args.workload).validate_problem(json.loads(args.problem), args.backend)
    proto = Protocol({"backend": args.backend, "device": 0, "workload": args.workload, "problem": problem})
    h, rt, problem = proto.harness, proto.runtime, proto.main
    case = h.make_case(problem, 0)
    space = proto.template.gene_space()
    with tempfile.TemporaryDirectory() as tmp:
        if args.launches:
            g = space.canonical(space.from_json(args.genome))
            kernel = rt.load(proto.backend.compile(proto.template.render(g), Path(tmp)))
            for _ in range(args.launches):
                h.launch(kernel, case)
            rt.synchronize()
            print("check:", "ok" if h.check(case).ok else "WRONG")
            return 0
        import torch
        from triton.testing import do_bench

        min_bytes = proto.workload.min_bytes(problem, proto.problem)
        rows = []
        for name, fn in h.baselines().items():
            try:
                rows.append((name, do_bench(lambda fn=fn: fn(case), rep=200, return_mode="median") * 1e3, "baseline"))
            except Exception as exc:  # noqa: BLE001 - a baseline that does not take this problem (int4pack: bf16 only)
                print(f"baseline {name} not run: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
        for label, g in genomes(space, args):
            try:
                kernel = rt.load(proto.backend.compile(proto.template.render(g), Path(tmp)))
                h.reset_outputs(case)
                fn = h.prepare(kernel, case)
                fn()
                torch.cuda.synchronize()
                chk = h.check(case)
                if not chk.ok:
                    print(f"WRONG {label}: {chk.detail[:100]}", flush=True)
                    continue
                rows.append((label, do_bench(fn, rep=200, return_mode="median") * 1e3, g.to_json()))
                print(f"{label:40s} {rows[-1][1]:9.2f} us", flush=True)
            except Exception as exc:  # noqa: BLE001 - report and go on
                print(f"FAIL {label}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
                if "illegal" in str(exc).lower() or "launch failure" in str(exc).lower():
                    break  # the context is gone
        best = min((r for r in rows if r[2] != "baseline"), key=lambda r: r[1], default=None)
        print(f"\n{torch.cuda.get_device_name()} {args.workload} {problem}")
        for label, us, what in sorted(rows, key=lambda r: r[1]):
            extra = f"  {min_bytes / (us * 1e-6) / 1e12:5.2f} TB/s" if min_bytes else ""
            print(f"{label:40s} {us:9.2f} us{extra}{'  (baseline)' if what == 'baseline' else ''}")
        if best:
            print("best genome:", best[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
