"""The CUDA C attention_decode kernel run on the CPU: its rendered text compiled as C++ with a small
emulation of the CUDA built-ins it uses, one std::thread per CUDA thread (blocks one after another,
``__syncthreads`` a barrier, ``__shfl_xor_sync`` a warp exchange through memory), then checked
against the float64 reference on every verification shape, as the harness would.

What the emulation cannot show: PTX-level behaviour. The inline PTX is replaced by its plain
meaning -- ``cp.async`` by a synchronous copy (its commit/wait become no-ops, so the two-buffer
pipeline's timing hazards are not exercised), ``ex2.approx`` by ``exp2f``, ``cvt.rn.bf16.f32`` by
round-to-nearest-even -- and the memory model is the CPU's. Everything else, the indexing, the
splits, the online softmax, the shared-memory layout and padding, the last block's merge and its
ticket reset, is the kernel's own text. Skipped without g++ (C++20, for std::barrier).
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from core.backends.cuda import SCALAR_TYPES
from core.genome import Genome
from core.workloads import get_workload
from core.workloads.attention_decode import cuda
from tests.helpers import SIMULATED_GPU

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="g++ is needed to emulate the CUDA kernel")
WL = get_workload("attention_decode")
SMEM_BYTES = 1 << 20

PRELUDE = r"""
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
struct emu_dim3 { unsigned x, y, z; };
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 gridDim;
struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __align__(x) alignas(x)
alignas(16) static unsigned char emu_smem[SMEM_BYTES];
static std::barrier<> *emu_block;
static std::barrier<> *emu_warp[64];
static float emu_lanes[2048];
static inline void __syncthreads() { emu_block->arrive_and_wait(); }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::min;
template <class X> static inline X __ldcg(const X *p) { return *(const volatile X *)p; }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline float __shfl_xor_sync(unsigned, float v, int o) {
    const unsigned t = threadIdx.x, w = t / 32;
    emu_lanes[t] = v;
    emu_warp[w]->arrive_and_wait();
    const float r = emu_lanes[t ^ (unsigned)o];
    emu_warp[w]->arrive_and_wait();
    return r;
}
static inline unsigned short emu_bf16(float f) {
    unsigned u; std::memcpy(&u, &f, 4);
    return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""

LAUNCH = r"""
extern "C" void emu_launch(int gx, int gy, int gz, const T *q, const T *k, const T *v, T *out, float *wo, float *wml,
                           int *tickets, int queries, int kv_heads, int group, int d, int context, int split_len) {
    gridDim = {(unsigned)gx, (unsigned)gy, (unsigned)gz};
    std::barrier<> block(THREADS);
    emu_block = &block;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (int w = 0; w < THREADS / 32; ++w) { warps.emplace_back(new std::barrier<>(32)); emu_warp[w] = warps.back().get(); }
    for (int z = 0; z < gz; ++z) for (int y = 0; y < gy; ++y) for (int x = 0; x < gx; ++x) {
        std::memset(emu_smem, 0xff, sizeof emu_smem);  // NaN everywhere: a read of unwritten shared memory shows
        std::vector<std::thread> threads;
        for (int t = 0; t < THREADS; ++t)
            threads.emplace_back([=] {
                threadIdx = {(unsigned)t, 0u, 0u};
                blockIdx = {(unsigned)x, (unsigned)y, (unsigned)z};
                abebot_attention_decode(q, k, v, out, wo, wml, tickets, queries, kv_heads, group, d, context, split_len);
            });
        for (auto &th : threads) th.join();
    }
}
"""


def emulated_source(source: str, dtype: str) -> str:
    """The rendered kernel with its inline PTX replaced by plain C++ and the emulation around it."""
    src = source.replace("extern __shared__ __align__(16) unsigned char smem[];", "unsigned char *smem = emu_smem;")
    src = src.replace("__shared__ int last;", "static int last;")
    src = src.replace('asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));', "y = std::exp2(x);")
    src = re.sub(r'asm volatile\("cp\.async\.ca\.shared\.global \[%0\], \[%1\], %2;"\s*::\s*"r"\(\(unsigned\)'
                 r'__cvta_generic_to_shared\((.*?)\)\), "l"\((.*?)\),\s*"n"\((.*?)\)\);',
                 r"std::memcpy(\1, \2, \3);", src)
    src = re.sub(r'asm volatile\("cp\.async\.(commit_group|wait_group)[^;]*;"[^;]*;', ";", src)
    if dtype == "bfloat16":
        src = src.replace(SCALAR_TYPES["bfloat16"][2], "return emu_bf16(f);")
    assert "asm" not in src, "inline PTX left that the emulation does not replace"
    return PRELUDE.replace("SMEM_BYTES", str(SMEM_BYTES)) + src + LAUNCH


def build(source: str, dtype: str, folder: Path) -> ctypes.CDLL:
    text = emulated_source(source, dtype)
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    so = folder / f"{key}.so"
    if not so.exists():
        cpp = folder / f"{key}.cpp"
        cpp.write_text(text)
        out = subprocess.run([GXX, "-std=c++20", "-O1", "-w", "-shared", "-fPIC", "-pthread", str(cpp), "-o", str(so)],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]
    return ctypes.CDLL(str(so))


def _bf16(x: np.ndarray) -> np.ndarray:
    """float -> bf16 bits (round to nearest even), as uint16."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_bf16(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def run_case(lib: ctypes.CDLL, kernel, problem: dict, shape: dict, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(out, float64 reference, tickets after two launches) for one shape, bound as cuda.py binds it."""
    rng = np.random.default_rng(seed)
    t = {x.name: rng.standard_normal(x.shape(shape)) * (2.0 if x.name == "q" else 1.0) for x in WL.tensors(problem) if x.read}
    bf16 = problem["dtype"] == "bfloat16"
    dev = {n: _bf16(a) if bf16 else a.astype(np.float32) for n, a in t.items()}
    exact = {n: (_from_bf16(a) if bf16 else a).astype(np.float64) for n, a in dev.items()}
    ref = WL.reference(np, exact, shape)["out"]
    lp = kernel.launch
    assert cuda.shared_bytes_of(lp, problem, shape) <= SMEM_BYTES
    ns = cuda.splits_used(shape["context"], lp["splits"], lp["keys_per_tile"])
    floats, ints = cuda.workspace(lp, shape)
    rows = cuda.rows_total(lp, shape)
    wo = np.full(max(1, rows * shape["head_dim"]), np.nan, np.float32)
    wml = np.full(max(1, 2 * rows), np.nan, np.float32)
    tickets = np.zeros(max(1, ints), np.int32)
    out = np.full(ref.shape, 0xFFFF if bf16 else np.nan, np.uint16 if bf16 else np.float32)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    args = [ns, shape["kv_heads"] * lp["head_split"], shape["batch"], ptr(dev["q"]), ptr(dev["k_cache"]),
            ptr(dev["v_cache"]), ptr(out), ptr(wo), ptr(wml), ptr(tickets), shape["queries"], shape["kv_heads"],
            shape["group"], shape["head_dim"], shape["context"], cuda._split_len(shape["context"], lp)]
    for _ in range(2):  # the second launch finds the tickets the first one reset
        out[...] = 0xFFFF if bf16 else np.nan
        lib.emu_launch(*[a if not isinstance(a, int) else ctypes.c_int(a) for a in args])
    return (_from_bf16(out) if bf16 else out).astype(np.float64), ref, tickets


GENES = [  # (group, gene, value) changes to the fast seed, one genome each
    (),
    (("parallel_config", "splits", 4), ("instruction_sequence", "combine", "running"),
     ("register_allocation", "score_rows", 8)),
    (("parallel_config", "head_split", 2), ("register_allocation", "acc", "shared"), ("memory_pattern", "stages", 1)),
    (("parallel_config", "threads", 64), ("memory_pattern", "load", "plain"), ("memory_pattern", "vec_bytes", 8),
     ("memory_pattern", "keys_per_tile", 16), ("register_allocation", "score_rows", 2)),
    (("parallel_config", "head_split", 4), ("parallel_config", "splits", 64), ("instruction_sequence", "exp", "expf"),
     ("instruction_sequence", "rescale", "every_tile"), ("memory_pattern", "vec_bytes", 4)),
]


def _genomes(tpl) -> list[Genome]:
    space = tpl.gene_space()
    seeds = space.seed_genomes()
    out = [seeds[0]]
    for changes in GENES:
        raw = seeds[-1].to_dict()
        for group, gene, value in changes:
            raw[group][gene] = value
        g = space.canonical(Genome(raw))
        assert space.validate(g) is None, (changes, space.validate(g))
        out.append(g)
    return out


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_cuda_kernel_emulated_on_the_cpu_matches_the_reference_on_every_shape(dtype, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cuda-emulated")
    problem = WL.validate_problem({"dtype": dtype, "kv_heads": 2, "group": 4, "head_dim": 32, "context": 100}, "cuda")
    tpl = WL.template("cuda", problem, dataclasses.replace(SIMULATED_GPU, backend="cuda"))
    atol, rtol = WL.tolerances[dtype]
    failures = []
    kernels = [tpl.render(g) for g in _genomes(tpl)]
    with ThreadPoolExecutor(max_workers=2) as pool:  # the compiles, two at a time
        libs = list(pool.map(lambda k: build(k.source, dtype, folder), kernels))
    for kernel, lib in zip(kernels, libs):
        g = kernel.launch
        for seed, shape in enumerate(WL.shapes(problem)):
            out, ref, tickets = run_case(lib, kernel, problem, shape, seed)
            bad = ~np.isfinite(out) | (np.abs(out - ref) > atol + rtol * np.abs(ref))
            if bad.any() or tickets.any():
                failures.append(f"{g} on {shape}: {int(bad.sum())} of {bad.size} wrong, "
                                f"max err {np.nanmax(np.abs(out - ref)):.3g}, tickets {tickets.tolist()[:4]}")
    assert not failures, "\n".join(failures[:6])
