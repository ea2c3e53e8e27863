#!/usr/bin/env python3
"""RMSNorm + residual at decode sizes, taken apart under the GA's own timing protocol: how much of
a champion's time any kernel of its launch shape pays, how much the data it must move costs, and
how much is the reduction, beside torch.compile, all timed in the same process in interleaved rounds.

Stand-ins (bf16, cols 8192, a block of 1024 threads a row with one 16-byte vector a thread, the
champion's launch, unless named with 512 or 256 threads; loads and stores in program order, as the
template issues them), timed exactly as
a candidate is (the protocol's cases, poisoned and permuted before every launch, CUDA graphs where
events cannot see the launch cost) but not checked, since they truncate instead of rounding:

- ``empty``: returns at once: what the protocol charges for launching that grid;
- ``add``: residual = x + residual, out = the sum: every byte of x and the residual, no reduction;
- ``add_w``: the same times the weight, loaded first or after the residual's store;
- ``warp_norm``: normalised by each warp's own sum of squares (five shuffles, no barrier);
- ``block_norm``: by the block's (the warp totals through shared memory and one barrier, then five
  shuffles: the template's ``all_warps``), a real RMSNorm + residual written by hand, with the weight
  loaded first, after the residual's store, or after the reduction (and one declaring 4100 bytes
  of shared memory, as the template's reduction buffer does).

The real kernels are checked on every timed launch, as in the GA. The difference between a real
kernel and ``add_w`` is what the reduction and its barrier cost; ``add`` against ``empty`` is the
data's cost. Usage (on a GPU):

    python3 -m benchmarks.tools.gpu_rmsnorm_floor --rows 1,64 --rounds 7 GENOME_JSON [GENOME_JSON ...]
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

from core.backends.base import KernelSource  # noqa: E402
from core.evaluation.checks import LaunchChecks  # noqa: E402
from core.evaluation.protocol import Protocol  # noqa: E402
from core.workloads import get_workload  # noqa: E402

STAND_IN = r"""
typedef unsigned short T;  // bf16 bits (NVRTC has no headers here): the sums truncate, nothing checks them
#if MODE > 0
// loads and stores as the template issues them: in program order, a store after the loads before it
static __device__ __forceinline__ uint4 ldg(const T *p) {
    uint4 u;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));
    return u;
}
static __device__ __forceinline__ void stg(T *p, uint4 u) {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w) : "memory");
}
static __device__ __forceinline__ unsigned add2(unsigned a, unsigned b, bool mul) {
    float lo = __uint_as_float(a << 16), hi = __uint_as_float(a & 0xffff0000u);
    float blo = __uint_as_float(b << 16), bhi = __uint_as_float(b & 0xffff0000u);
    lo = mul ? lo * blo : lo + blo;
    hi = mul ? hi * bhi : hi + bhi;
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}
static __device__ __forceinline__ float sq2(unsigned a) {
    const float lo = __uint_as_float(a << 16), hi = __uint_as_float(a & 0xffff0000u);
    return lo * lo + hi * hi;
}
static __device__ __forceinline__ unsigned scale2(unsigned a, unsigned w, float r) {
    const float lo = __uint_as_float(a << 16) * r * __uint_as_float(w << 16);
    const float hi = __uint_as_float(a & 0xffff0000u) * r * __uint_as_float(w & 0xffff0000u);
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}
static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
#endif
#define ITEMS (8192 / (THREADS * 8))  // 16-byte vectors a thread
extern "C" __global__ void __launch_bounds__(THREADS)
abebot_rmsnorm(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out, int rows, int cols, float eps) {
#if MODE > 0
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const size_t i = (size_t)row * cols + threadIdx.x * 8;
        uint4 a[ITEMS], b[ITEMS], v[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            v[k] = make_uint4(0u, 0u, 0u, 0u);
            if (MODE > 1 && W_AT == 0) v[k] = ldg(w + threadIdx.x * 8 + k * THREADS * 8);
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) { a[k] = ldg(x + i + k * THREADS * 8); b[k] = ldg(res + i + k * THREADS * 8); }
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            b[k] = make_uint4(add2(a[k].x, b[k].x, false), add2(a[k].y, b[k].y, false), add2(a[k].z, b[k].z, false), add2(a[k].w, b[k].w, false));
            stg(res + i + k * THREADS * 8, b[k]);
            ss += sq2(b[k].x) + sq2(b[k].y) + sq2(b[k].z) + sq2(b[k].w);
        }
#pragma unroll
        for (int k = 0; k < ITEMS; ++k)
            if (MODE > 1 && W_AT == 1) v[k] = ldg(w + threadIdx.x * 8 + k * THREADS * 8);
        float r = 1.f;
#if MODE > 2
        ss = warp_sum(ss);
#if MODE > 3
        __shared__ float red[RED_FLOATS];
        if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = ss;
        __syncthreads();
        ss = warp_sum(threadIdx.x % 32 < THREADS / 32 ? red[threadIdx.x % 32] : 0.f);
        if (row + gridDim.x < rows) __syncthreads();  // red is reused by the next row
#endif
#pragma unroll
        for (int k = 0; k < ITEMS; ++k)
            if (W_AT == 2) v[k] = ldg(w + threadIdx.x * 8 + k * THREADS * 8);
        r = rsqrtf(ss / cols + eps);
#endif
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            if (MODE == 2) b[k] = make_uint4(add2(b[k].x, v[k].x, true), add2(b[k].y, v[k].y, true), add2(b[k].z, v[k].z, true), add2(b[k].w, v[k].w, true));
            if (MODE > 2) b[k] = make_uint4(scale2(b[k].x, v[k].x, r), scale2(b[k].y, v[k].y, r), scale2(b[k].z, v[k].z, r), scale2(b[k].w, v[k].w, r));
            stg(out + i + k * THREADS * 8, b[k]);
        }
    }
#endif
}
"""
# name: (MODE, W_AT, THREADS[, RED_FLOATS]): what the kernel does, where it loads the weight (0 first,
# 1 after the residual's store, 2 after the reduction), the block (one row a block: 8192 / THREADS / 8
# vectors a thread), and the floats of shared memory it declares (32 unless given)
STAND_INS = {"empty": (0, 1, 1024), "add": (1, 1, 1024), "add_w first": (2, 0, 1024), "add_w after_store": (2, 1, 1024),
             "warp_norm": (3, 1, 1024), "block_norm w_first": (4, 0, 1024), "block_norm w_after_reduce": (4, 2, 1024),
             "empty 512": (0, 1, 512), "add 512": (1, 1, 512), "block_norm w_after_reduce 512": (4, 2, 512),
             "empty 256": (0, 1, 256), "add 256": (1, 1, 256), "block_norm w_after_reduce 256": (4, 2, 256),
             "block_norm w_after_reduce smem 4100 B": (4, 2, 1024, 1025)}
LAUNCH = {"threads": 1024, "rows_per_block": 1, "persistent": False, "waves": 1, "split": 1}


def stand_in(mode: int, w_at: int, threads: int, red_floats: int = 32) -> KernelSource:
    defines = f"#define MODE {mode}\n#define W_AT {w_at}\n#define THREADS {threads}\n#define RED_FLOATS {red_floats}\n"
    return KernelSource("cuda", defines + STAND_IN, "abebot_rmsnorm", ("-std=c++17",), {**LAUNCH, "threads": threads},
                        {"threads": threads, "shared_bytes": 0, "registers": 32})


def time_once(proto: Protocol, kernel, checked: bool, rng: random.Random) -> float:
    """One candidate's timing stage as ``Protocol._benchmark`` runs it, in microseconds."""
    cases = proto._timing_cases(rng)
    for c in cases:
        proto.harness.prepare(kernel, c)
    checks = LaunchChecks(proto.harness, cases, rng.getrandbits(31), check=checked)
    times = proto._time(lambda c: proto.harness.launch(kernel, c), cases, checks)
    if checked and not (verdict := checks.verify()).ok:
        raise SystemExit(f"a real kernel failed its timed launches: {verdict.cause} {verdict.detail}")
    return statistics.median(times) * 1e6


def time_baseline(proto: Protocol, fn, rng: random.Random) -> float:
    cases = proto._timing_cases(rng)
    checks = LaunchChecks(proto.harness, cases, rng.getrandbits(31), check=False)
    return statistics.median(proto._time(fn, cases, checks)) * 1e6


def one_problem(rows: int, genomes: list[str], rounds: int, baseline: str, tmp: Path) -> None:
    problem = get_workload("rmsnorm").validate_problem({"rows": rows, "residual": True}, "cuda")
    if problem["dtype"] != "bfloat16" or problem["cols"] != 8192:
        raise SystemExit("the stand-ins are written for bf16 rows of 8192")
    proto = Protocol({"backend": "cuda", "device": 0, "workload": "rmsnorm", "problem": problem})
    space, rt = proto.template.gene_space(), proto.runtime
    kernels = {name: (rt.load(proto.backend.compile(stand_in(*how), tmp)), False) for name, how in STAND_INS.items()}
    for text in genomes:
        g = space.canonical(space.from_json(text))
        p = g["parallel_config"]
        label = f"genome split={p['split']} threads={p['threads']} " + "".join(t.split("_")[-1][0] for t in g["instruction_sequence"]["body"])
        kernels[label] = (rt.load(proto.backend.compile(proto.template.render(g), tmp)), True)
    fn = proto.harness.baselines()[baseline]
    case = proto.harness.make_case(proto.main, 0)
    fn(case)  # torch.compile compiles at its first call, never in a timed one
    rt.synchronize()
    times: dict[str, list[float]] = {name: [] for name in [*kernels, baseline]}
    for r in range(rounds):
        rng = random.Random(r)
        for name in rng.sample(list(times), len(times)):
            if name == baseline:
                times[name].append(time_baseline(proto, fn, rng))
            else:
                times[name].append(time_once(proto, *kernels[name], rng))
        print(f"rows {rows} round {r + 1}/{rounds}: " + ", ".join(f"{n} {v[-1]:.2f}" for n, v in times.items()), flush=True)
    base = statistics.median(times[baseline])
    print(f"\nrmsnorm + residual, {rows} x 8192 bf16: medians of {rounds} rounds (us), spread = slowest - fastest round")
    print(f"{'kernel':40s} {'median':>8s} {'spread':>8s} {'vs ' + baseline:>26s}")
    for name, v in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
        m = statistics.median(v)
        print(f"{name:40s} {m:8.2f} {max(v) - min(v):8.2f} {base / m:25.3f}x")
    print(flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("genomes", nargs="*", help="real kernels (genome JSON) timed beside the stand-ins")
    ap.add_argument("--rows", default="1,64")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--baseline", default="vllm_native_compile")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for rows in (int(r) for r in args.rows.split(",")):
            one_problem(rows, args.genomes, args.rounds, args.baseline, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
