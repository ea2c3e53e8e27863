#!/usr/bin/env python3
"""Planted cheats on the GPU: hand-written CUDA C RMSNorm kernels (bf16) through ``core check``'s
Checker, which runs the same sandboxed protocol as evolution. An honest kernel must come out ``ok``;
each cheat must be rejected with the cause that names what it did.

    python3 -m benchmarks.tools.gpu_cheat_check --out $OUT [--rows 4096 --cols 8192]

Writes ``<out>/cheats.json`` and prints one line per kernel. The CPU suite (tests/cheats/*.c) also has
a kernel padded to just above a byte-only roofline: that cheat needs a compute-bound kernel (GEMM),
and is not repeated here for a memory-bound one.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


from core.tools.check import Checker  # noqa: E402

# The entry contract of rmsnorm x cuda (README, "Bring your own kernel"): bf16 as raw 16-bit words.
BASE = r"""
typedef unsigned short T;
__device__ __forceinline__ float ld(T h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ T st(float f) { unsigned u = __float_as_uint(f); u += 0x7fffu + ((u >> 16) & 1u); return (T)(u >> 16); }
__device__ __forceinline__ bool finite16(T h) { return (h & 0x7f80u) != 0x7f80u; }
__device__ T *prev_out;
__device__ unsigned calls;
__device__ const T *memo_x;
__device__ float memo_fp[256];  // per memo slot: the fingerprint of the inputs its output was computed from
__device__ unsigned memo_used[256];
__device__ T memo[4096 * 8192];  // the default problem's output, kept between launches
// Memo slots: as many outputs as fit, up to 256, so that cases launched in rotation each keep theirs.
__device__ __forceinline__ size_t memo_slots(int rows, int cols) { size_t k = sizeof(memo) / sizeof(T) / ((size_t)rows * cols); return k < 256 ? k : 256; }
__device__ __forceinline__ size_t memo_slot(float fp, size_t k) { return (__float_as_uint(fp) * 2654435761u) % k; }
__device__ float col0_sum(const T *x, int rows, int cols) { float f = 0.f; for (int i = 0; i < rows; ++i) f += ld(x[(size_t)i * cols]); return f; }
extern "C" __global__ void abebot_rmsnorm(const T *x, const T *w, T *res, T *out, int rows, int cols, float eps) {
  const int r = blockIdx.x;
  if (r >= rows) return;
  /*PROLOGUE*/
  const T *xr = x + (size_t)r * cols;
  T *orow = out + (size_t)r * cols;
  __shared__ float part[32];
  float s = 0.f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) { float v = ld(xr[j]); s += v * v; }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) part[0] = s;
  }
  __syncthreads();
  const float inv = rsqrtf(part[0] / cols + eps);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) orow[j] = st(/*VALUE*/ld(xr[j]) * inv * ld(w[j]));
  /*EPILOGUE*/
}
"""

CHEATS = {  # name -> (prologue, epilogue, the statuses that count as caught, a word the cause must hold)
    "honest": ("", "", ("ok",), ""),
    "skip_when_written": ("if (finite16(out[0]) && finite16(out[(size_t)rows * cols - 1])) return;", "",
                          ("wrong_result",), "timed launch"),
    "right_first_calls": ("if (calls >= 4) return;",
                          "if (r == 0 && threadIdx.x == 0) atomicAdd(&calls, 1u);", ("wrong_result", "unstable"), ""),
    "previous_output": (
        "T *p = prev_out; if (p != 0 && p != out) { for (int j = threadIdx.x; j < cols; j += blockDim.x) "
        "out[(size_t)r * cols + j] = p[(size_t)r * cols + j]; return; }",
        "if (r == 0 && threadIdx.x == 0) prev_out = out;", ("wrong_result", "unstable"), ""),
    "write_after_output": ("", "if (r == rows - 1 && threadIdx.x == 0) out[(size_t)rows * cols] = 0;",
                           ("wrong_result",), "out_of_bounds_write"),
    "write_before_output": ("", "if (r == 0 && threadIdx.x == 0) out[-1] = 0;", ("wrong_result",), "out_of_bounds_write"),
    "memo_by_address": (
        "if (memo_x == x && (size_t)rows * cols <= sizeof(memo) / sizeof(T)) { for (int j = threadIdx.x; j < cols; "
        "j += blockDim.x) out[(size_t)r * cols + j] = memo[(size_t)r * cols + j]; return; }",
        "if ((size_t)rows * cols <= sizeof(memo) / sizeof(T)) { for (int j = threadIdx.x; j < cols; j += blockDim.x) "
        "memo[(size_t)r * cols + j] = orow[j]; if (r == 0 && threadIdx.x == 0) memo_x = x; }", ("wrong_result",), ""),
    # a fingerprint a row permutation does not change (the sum of column 0), one memo slot per
    # fingerprint: the cases of a timing chain come back in rotation, each with a fresh permutation
    "memo_by_fingerprint": (
        "__shared__ float fp; if (threadIdx.x == 0) fp = col0_sum(x, rows, cols); __syncthreads(); "
        "const size_t k = memo_slots(rows, cols), slot = k ? memo_slot(fp, k) : 0; "
        "T *m = memo + slot * (size_t)rows * cols; "
        "if (k && memo_used[slot] && fp == memo_fp[slot]) { for (int j = threadIdx.x; j < cols; "
        "j += blockDim.x) out[(size_t)r * cols + j] = m[(size_t)r * cols + j]; return; }",
        "if (k) { for (int j = threadIdx.x; j < cols; j += blockDim.x) m[(size_t)r * cols + j] = orow[j]; "
        "if (r == 0 && threadIdx.x == 0) { memo_fp[slot] = fp; memo_used[slot] = 1u; } }", ("wrong_result",), ""),
}
# cheats in the arithmetic: the value stored (VALUE prefixes the honest expression)
VALUE_CHEATS = {
    # inputs rounded to 3 mantissa bits (fp8 e4m3-like): cheaper to move, wrong for bf16
    "lower_precision": ("__uint_as_float(__float_as_uint(ld(xr[j])) & 0xfff00000u) / ld(xr[j]) * ", ("wrong_result", "nan_output"), ""),
    # 5% off on launches whose clock is odd: some launches differ from others
    "nondeterministic": ("(1.f + 0.05f * (float)(clock() & 1)) * ", ("unstable", "wrong_result"), ""),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/abebot_cheats"))
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=8192)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    results = {}
    launch = {"threads": 256, "rows_per_block": 1, "persistent": False}
    problem = {"rows": args.rows, "cols": args.cols, "dtype": "bfloat16"}
    with Checker("rmsnorm", "cuda", problem, runs_dir=tempfile.mkdtemp(prefix="abebot-cheats-"),
                 timing_target_s=0.1) as checker:
        print(f"baseline {checker.baseline['primary']} {checker.baseline['time_us']:.2f} us, "
              f"floor {checker.baseline.get('floor_us')}", flush=True)
        every = {**CHEATS, **{n: ("", "", want, word, value) for n, (value, want, word) in VALUE_CHEATS.items()}}
        for name, (pro, epi, want, word, *value) in every.items():
            src = BASE.replace("/*PROLOGUE*/", pro).replace("/*EPILOGUE*/", epi).replace("/*VALUE*/", "".join(value))
            r = checker.check(src, launch=launch)
            caught = r["status"] in want and word in (r.get("cause") or "")
            results[name] = {"status": r["status"], "cause": r.get("cause"), "time_us": r.get("time_us"),
                             "as_expected": caught}
            print(f"{name:20s} {r['status']:14s} {'as expected' if caught else 'NOT AS EXPECTED'}  "
                  f"{(r.get('time_us') or 0):8.2f} us  {(r.get('cause') or '')[:150]}", flush=True)
    results["_seconds"] = round(time.time() - t0, 1)
    (args.out / "cheats.json").write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
