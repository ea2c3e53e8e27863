#!/usr/bin/env python3
"""Where the two timing methods part: one library call timed under four cache conditions in one
process, to tell what the protocol's cold timing and the second method's chain each measure.

Issue 27's two ratios outside 3% were both against a baseline 3-6x slower than the kernel: cuBLAS
at gate_up M=1 (219 us after the protocol's preparation, 204 us in the chain) and torch's int4
kernel at down M=16. This times those baselines (plain torch, no AbeBot code) as:

* ``chain``: a CUDA graph of back-to-back launches rotating over copies whose bytes exceed 2.5x the
  L2 (the second method: :mod:`core.evaluation.crosscheck`), less a one-launch graph;
* ``evict``: a graph of (a read of a scratch buffer 2x the L2; launch) pairs less a graph of the
  reads alone (the protocol's cold policy, without its input rewrite);
* ``prep``: as ``evict`` with the protocol's rewrite of the activations and the quantised weights
  from pristine copies before the read (the protocol's full preparation);
* ``norm``: a graph of (a one-row RMSNorm; launch) pairs over the rotated copies, less the norms
  alone: what precedes a projection in a model.

    python3 -m benchmarks.tools.cold_conditions [--reps 20]

Prints one JSON object: per (shape, library path, condition) the median us and IQR.
"""
from __future__ import annotations

import argparse
import json
import statistics

SHAPES = {"gate_up_m1": (1, 57344, 8192), "down_m16": (16, 8192, 28672), "qkv_m1": (1, 10240, 8192)}
CALLS = 16  # launches per graph


def _replay_us(graph, reps: int) -> list[float]:
    import torch

    out = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e3)
    return out


def _capture(steps):
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for step in steps:
            step()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for step in steps:
            step()
    return g


def per_launch(with_launch, alone, reps: int) -> list[float]:
    """Per-launch us of graph(with_launch) less graph(alone), replays interleaved."""
    g_full, g_base = _capture(with_launch), (_capture(alone) if alone else None)
    full, base = [], []
    for _ in range(reps):
        full += _replay_us(g_full, 1)
        if g_base is not None:
            base += _replay_us(g_base, 1)
    b = statistics.median(base) if base else 0.0
    return [(f - b) / CALLS for f in full]


def main() -> None:
    import torch

    from core.workloads.w4a16 import int4pack

    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    scratch = torch.empty(2 * l2 // 4, dtype=torch.float32, device=dev)
    sink = torch.empty((), dtype=torch.float32, device=dev)
    evict = lambda: torch.sum(scratch, dim=0, out=sink)  # noqa: E731  (a read, as the protocol's)
    hidden = torch.randn(1, 8192, dtype=torch.bfloat16, device=dev)
    gamma = torch.randn(8192, dtype=torch.bfloat16, device=dev)
    norm = lambda: torch.nn.functional.rms_norm(hidden, (8192,), gamma, 1e-5)  # noqa: E731
    out: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "l2_bytes": l2, "results": {}}
    for name, (m, n, k) in SHAPES.items():
        g = k // 128
        qweight = torch.randint(-2**31, 2**31 - 1, (g, 16, n), dtype=torch.int32, device=dev)
        scales = (torch.rand(g, n, device=dev) * 0.01).to(torch.bfloat16)
        x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
        pristine = (qweight.clone(), scales.clone(), x.clone())
        from core.workloads.w4a16 import _torch_dequant

        w_bf16 = _torch_dequant({"qweight": qweight, "scales": scales})
        packed, table = int4pack(qweight, scales)
        paths = {"cublas_dequantized": (w_bf16.numel() * 2, lambda w, xx: torch.matmul(xx, w)),
                 "torch_int4pack_mm": (packed.numel() * packed.element_size(),
                                       lambda w, xx: torch._weight_int4pack_mm(xx, w[0], 128, w[1]))}
        for path, (nbytes, call) in paths.items():
            copies = max(2, -(-int(2.5 * l2) // nbytes))
            if path == "cublas_dequantized":
                ws = [w_bf16] + [w_bf16.clone() for _ in range(copies - 1)]
            else:
                ws = [(packed, table)] + [(packed.clone(), table.clone()) for _ in range(copies - 1)]
            xs = [x.clone() for _ in range(copies)]
            launch = [(lambda i: (lambda: call(ws[i % copies], xs[i % copies])))(i) for i in range(CALLS)]
            restore = [(lambda i: (lambda: (qweight.copy_(pristine[0]), scales.copy_(pristine[1]),
                                            xs[i % copies].copy_(pristine[2]))))(i) for i in range(CALLS)]
            conds = {
                "chain": per_launch(launch, launch[:1], args.reps),
                "evict": per_launch([s for f in launch for s in (evict, f)], [evict] * CALLS, args.reps),
                "prep": per_launch([s for r, f in zip(restore, launch) for s in (r, evict, f)],
                                   [s for r in restore for s in (r, evict)], args.reps),
                "norm": per_launch([s for f in launch for s in (norm, f)], [norm] * CALLS, args.reps),
            }
            # chain: (T(16) - T(1)) / 16 under-counts by one launch: rescale to (T16 - T1) / 15
            conds["chain"] = [t * CALLS / (CALLS - 1) for t in conds["chain"]]
            out["results"][f"{name}/{path}"] = {
                c: {"median_us": round(statistics.median(v), 2),
                    "iqr_us": round(statistics.quantiles(v, n=4)[2] - statistics.quantiles(v, n=4)[0], 2)}
                for c, v in conds.items()} | {"copies": copies, "weight_bytes": nbytes}
            del ws, xs
            torch.cuda.empty_cache()
        print(json.dumps({name: {p: out["results"][f"{name}/{p}"] for p in paths}}), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
