#!/usr/bin/env python3
"""One champion kernel timed under the protocol's cold preparation and under simpler ones, in one
process (no sandbox), to tell which part of the preparation the two methods disagree over.

For an entry of ``benchmarks/suites/cold_recheck_genomes.json`` (default ``down_m16``, where the kernel
timed 49.25 us in the protocol and 47.04 us by the chain in call 64), on the protocol's own timing cases:

* ``protocol``: graphs of (poison outputs, decoys, permuted inputs, L2 read; launch) less the
  preparations alone (the launcher's ``_side`` with its ``LaunchChecks``: what candidates get);
* ``evict``: the same with the L2 read as the only preparation;
* ``chain``: back-to-back launches over the cases, no preparation (the second method's way).

    python3 -m benchmarks.tools.kernel_conditions [--entry down_m16] [--reps 30]

Prints one JSON object: per condition the median and IQR of the per-launch us, over rounds taken in turn.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    from core.evaluation.checks import LaunchChecks
    from core.evaluation.harness import case_arrays
    from core.evaluation.launcher import LauncherServer
    from core.evaluation.protocol import Protocol
    from core.evaluation.timing import Side, rotation
    from core.workloads import get_workload

    ap = argparse.ArgumentParser()
    ap.add_argument("--entry", default="down_m16")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    entry = next(e for e in json.loads((ROOT / "benchmarks/suites/cold_recheck_genomes.json").read_text())
                 if e["name"] == args.entry)
    wl = get_workload(entry["workload"])
    problem = wl.validate_problem(dict(entry["problem"]), entry["backend"])
    proto = Protocol({"backend": entry["backend"], "workload": entry["workload"], "problem": problem,
                      "launcher": "inline"})
    space = proto.template.gene_space()
    genome = space.canonical(space.from_json(json.loads(entry["genome"])))
    artifact = proto.backend.compile(proto.template.render(genome), Path(tempfile.mkdtemp()))
    kernel = proto.runtime.load(artifact)
    h, rt = proto.harness, proto.runtime
    rng = random.Random(1)
    cases = [h.make_case(proto.main, rng.getrandbits(31)) for _ in range(proto.timing_cases)]
    for c in cases:
        h.prepare(kernel, c)
    launch = rotation(lambda c: h.launch(kernel, c), cases)
    checks = LaunchChecks(h, cases, 7)
    launcher = LauncherServer({}, {"cache": proto.cache, "graph_block": rt.graph_block,
                                   "timing_target_s": proto.timing_target_s}, runtime=rt, harness=h)
    full = launcher._side(lambda c: h.launch(kernel, c), cases, checks)  # what candidates get
    evict_only = Side(launch, lambda i: rt.evict(case_arrays(cases[i % len(cases)])))
    conds = {"protocol": lambda: rt.time(full.fn, args.reps, 0, before=full.before, method="graph"),
             "evict": lambda: rt.time(evict_only.fn, args.reps, 0, before=evict_only.before, method="graph"),
             "chain": lambda: rt.chain_times(launch, max(16, len(cases)), args.reps)}
    times: dict[str, list[float]] = {c: [] for c in conds}
    for _ in range(args.rounds):
        for name, timed in conds.items():
            times[name] += [t * 1e6 for t in timed()]
            rt.forget()
    out = {"entry": entry["name"], "cases": len(cases), "graph_block": rt.graph_block, "cache": proto.cache,
           "verdict": str(checks.verify()),
           "conditions": {c: {"median_us": round(statistics.median(v), 3),
                              "iqr_us": round(statistics.quantiles(v, n=4)[2] - statistics.quantiles(v, n=4)[0], 3)}
                          for c, v in times.items()}}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
