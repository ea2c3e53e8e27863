#!/usr/bin/env python3
"""Kernels and baselines timed several ways side by side, to see what the protocol's graph timing
credits to a kernel (written for the 16-row RMSNorm of session 12, where kernels with streaming
cache hints timed below an empty launch).

- ``b1``: as the GA timed a candidate until session 13 (``time_graph``): a graph of 20 launches,
  each right after its preparation (outputs poisoned, inputs permuted), less a graph of the
  preparations alone.
- ``auto``: the protocol now (``replay_chain``, where ``timing.graph_block`` allows): the
  preparations of as many cases as fit in a quarter of the L2 replayed untimed, then a graph of
  launches on them, less a graph of the first launch alone (prepared the same way), per further
  launch. (Call 49 ran this script with blocks of (preparations, launches) less the preparations
  instead, and with ``b20``, one block of all 20.)
- ``launches``: the preparations of 20 cases (or all, if fewer) replayed first, untimed, then a
  graph of the launches alone, timed with events around its replay: no preparation is timed, but
  the graph's own launch is, and at 64 rows the 20 cases overflow the L2.

Subjects: the genomes, the baselines, and empty kernels (``--empty 256,512``: the stand-in of
``gpu_rmsnorm_floor.py`` that returns at once, one block of that many threads a row), which bound
from below what any kernel of that launch can take. Rounds interleave everything in a shuffled
order. Real kernels are checked after every timing (the last launch on every case against its
permuted reference), as in the GA. Usage (on a GPU):

    python3 -m benchmarks.tools.gpu_timing_modes rmsnorm '{"rows":16,"residual":true}' GENOME_JSON [...] --rounds 5 --empty 256
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from core.backends.torch_runtime import GRAPH_CALLS, capture_chain  # noqa: E402
from core.evaluation.checks import LaunchChecks  # noqa: E402
from core.evaluation.protocol import Protocol  # noqa: E402
from core.workloads import get_workload  # noqa: E402
from benchmarks.tools.gpu_rmsnorm_floor import stand_in  # noqa: E402

MODES = ("b1", "auto", "launches")
REPS = 50  # replays of the launch graph per timing


def launches_only(launch, cases: list, checks: LaunchChecks) -> float:
    """Seconds per launch of a graph of launches on cases prepared (untimed) before each replay."""
    import torch

    calls = min(GRAPH_CALLS, len(cases))
    prep, _one, run, _calls = capture_chain(lambda i: launch(cases[i]), checks.before, calls)
    pairs = []
    for _ in range(REPS):
        prep.replay()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run.replay()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e-3 / calls


def time_one(proto: Protocol, mode: str, launch, kernel, checked: bool, rng: random.Random) -> float:
    """Microseconds per launch of ``launch`` (a callable on a case) timed by ``mode``; ``kernel`` (None
    for a baseline) is bound to every case first and, if ``checked``, checked, as
    ``Protocol._benchmark`` does."""
    cases = proto._timing_cases(rng)
    auto_block = proto.runtime.graph_block
    for c in cases if kernel is not None else ():
        proto.harness.prepare(kernel, c)
    checks = LaunchChecks(proto.harness, cases, rng.getrandbits(31), check=checked)
    if mode == "launches":
        seconds = launches_only(launch, cases, checks)
    else:
        proto.runtime.graph_block = 1 if mode == "b1" else auto_block
        seconds = statistics.median(proto._time(launch, cases, checks))
        proto.runtime.graph_block = auto_block
    if checked and not (verdict := checks.verify()).ok:
        raise SystemExit(f"a kernel failed its timed launches ({mode}): {verdict.cause} {verdict.detail}")
    proto.runtime.forget()
    return seconds * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("problem", help="problem JSON, over the workload's defaults")
    ap.add_argument("genomes", nargs="+", help="genome JSON, one per kernel")
    ap.add_argument("--baselines", default="", help="comma-separated baseline names (default: all)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--empty", default="", help="comma-separated thread counts of empty stand-in kernels (bf16 x 8192 RMSNorm)")
    args = ap.parse_args()
    problem = get_workload(args.workload).validate_problem(json.loads(args.problem), args.backend)
    proto = Protocol({"backend": args.backend, "device": 0, "workload": args.workload, "problem": problem})
    h, space = proto.harness, proto.template.gene_space()
    subjects: dict[str, tuple] = {}  # label -> (launch on a case, kernel or None for a baseline, checked)
    with tempfile.TemporaryDirectory() as tmp:
        for n, text in enumerate(args.genomes):
            g = space.canonical(space.from_json(text))
            kernel = proto.runtime.load(proto.backend.compile(proto.template.render(g), Path(tmp)))
            subjects[f"genome {n + 1}"] = ((lambda c, k=kernel: h.launch(k, c)), kernel, True)
            print(f"genome {n + 1}: {g.to_json()}", flush=True)
        wanted = [b for b in args.baselines.split(",") if b]
        for name, fn in h.baselines().items():
            if not wanted or name in wanted:
                fn(h.make_case(proto.main, 0))  # compiled (torch.compile) before any timing
                subjects[name] = (fn, None, False)
        for threads in (int(t) for t in args.empty.split(",") if t):
            kernel = proto.runtime.load(proto.backend.compile(stand_in(0, 1, threads), Path(tmp)))
            subjects[f"empty {threads}"] = ((lambda c, k=kernel: h.launch(k, c)), kernel, False)
        proto.runtime.synchronize()
        keys = [(label, mode) for label in subjects for mode in MODES]
        times: dict[tuple, list[float]] = {k: [] for k in keys}
        for r in range(args.rounds):
            rng = random.Random(r)
            for label, mode in rng.sample(keys, len(keys)):
                times[(label, mode)].append(time_one(proto, mode, *subjects[label], rng))
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(f"\n{args.workload} {args.problem}: medians of {args.rounds} rounds, us per launch (spread = slowest - fastest round)")
    print(f"graph block (auto): {proto.runtime.graph_block}, cases in rotation: {len(proto._timing_cases(random.Random(0)))}")
    print(f"{'kernel':28s}" + "".join(f"{m:>24s}" for m in MODES))
    for label in subjects:
        cells = [times[(label, m)] for m in MODES]
        print(f"{label:28s}" + "".join(f"{statistics.median(v):14.2f} ± {max(v) - min(v):5.2f}  " for v in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
