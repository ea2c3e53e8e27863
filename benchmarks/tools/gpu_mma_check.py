#!/usr/bin/env python3
"""On the GPU: the W4A16 tensor-core path's variants, each launched again and again on several cases.

For every variant (blocks along K 1 or 4, x fragments first or at each step, pipelined in registers,
not at all, or through a cp.async ring of 3 or 8 chunks) of the mma seeds: render, compile, then three rounds over three cases of one shape, every launch on
freshly poisoned outputs and checked against the float64 reference. A variant whose first launch
is right and a later one wrong leaves state behind (the split-K counters); one that crashes writes
out of bounds.

    python3 -m benchmarks.tools.gpu_mma_check '{"m": 16, "n": 1024, "k_groups": 16}'
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from core.evaluation.protocol import Protocol  # noqa: E402
from core.genome import Genome  # noqa: E402
from core.workloads.w4a16 import cuda, cuda_genes  # noqa: E402


def variants(norm: str | None) -> list[Genome]:
    out = []
    for seed in cuda_genes.MMA_SEEDS[:2]:
        for kb in (1, 4):
            for first in ("x", "words"):
                for pipeline in ("next", "off", "ring3", "ring8"):  # ringS: S chunks through shared memory
                    d = json.loads(json.dumps(seed))
                    d["parallel_config"]["kblocks"] = kb
                    d["instruction_sequence"]["first"] = first
                    d["register_allocation"]["pipeline"] = "off" if pipeline.startswith("ring") else pipeline
                    d["memory_pattern"]["stages"] = int(pipeline[4:]) if pipeline.startswith("ring") else 0
                    if norm:
                        d["instruction_sequence"]["norm"] = norm
                    g = Genome.from_json(d)
                    if cuda_genes.fits(g) is None:  # (the GA never renders one that does not fit)
                        out.append(g)
    return out


def main() -> int:
    problem = {"m": 16, "n": 1024, "k_groups": 16, "dtype": "bfloat16", "zero_points": False,
               **json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}")}
    workload = sys.argv[2] if len(sys.argv) > 2 else "w4a16"
    proto = Protocol({"backend": "cuda", "device": 0, "workload": workload, "problem": problem})
    h, rt = proto.harness, proto.runtime
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for g in variants(None) if workload == "w4a16" else variants("load") + variants("store"):
            ks = cuda.cuda_mma.shape_of(g)
            label = (f"{g['instruction_sequence'].get('norm', '')} wk{ks['wk']} wn{ks['wn']} nt{ks['nt']} kb{ks['kb']} first={g['instruction_sequence']['first']} "
                     f"pipe={g['register_allocation']['pipeline']} stages={g['memory_pattern']['stages']} B={g['register_allocation']['batch']}")
            try:
                kernel = rt.load(proto.backend.compile(proto.template.render(g), Path(tmp)))
                cases = [h.make_case(proto.main, s) for s in range(3)]
                for c in cases:
                    h.prepare(kernel, c)
                verdicts = []
                for _ in range(3):
                    for c in cases:
                        h.reset_outputs(c)
                        h.launch(kernel, c)
                        rt.synchronize()
                        chk = h.check(c)
                        verdicts.append("ok" if chk.ok else f"BAD({chk.detail[:60]})")
            except Exception as exc:  # noqa: BLE001 - report and go on
                verdicts = [f"CRASH {type(exc).__name__}: {str(exc)[:120]}"]
            ok = all(v == "ok" for v in verdicts)
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} {label}: {' '.join(verdicts) if not ok else ''}", flush=True)
            if verdicts and verdicts[0].startswith("CRASH"):
                break  # the context is gone
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
