"""CUDA C RMSNorm + W4A16 template (header-free: bf16/fp16 travel as 16-bit integers).

A block is ``threads / ksplit`` column threads by ``ksplit`` K lanes, over ``rows_per_block`` rows
of x (grid: column tiles x row tiles). Every block computes its rows' ``1 / sqrt(mean(x^2) + eps)``
itself from x (a few KB, read from L2: that recomputation is the fusion), with all its threads and
a warp-shuffle reduction. A column thread owns ``vec`` adjacent columns; its K lane takes every
``ksplit``-th word of the column's ``16 k_groups`` words and streams them ``batch`` at a time: the
batch's word loads (``vec`` words in one coalesced access, 16 bytes at vec 4) are all issued before
its math, with the 8 x values of each word times gamma (and 1/rms, when applied at the load). The
K lanes add up through shared memory; accumulation is in float32. A batch past the end of K
re-reads the lane's last word with x zeroed; N not a multiple of ``vec``, or misaligned words, run
column by column.

* parallel_config -- threads per block, K lanes per column (split-K inside the block), rows per block;
* memory_pattern -- columns per thread (words per access), cache hints of the word and x loads,
  an L2 prefetch of the first batch of words issued before the norm;
* register_allocation -- words in flight per thread (the batch), the scale on each weight or on
  a word's 8-term partial sum;
* instruction_sequence -- the order of a word's 8 values, words or x loaded first, the
  dequantisation (``cvt``, or the magic number ``0x4B000000 | q`` read as a float, 2^23 + q), and
  1/rms on x as it is loaded (norm before the loop) or on the finished sums (norm after it).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene
from core.workloads.template import Template

NIBBLES = tuple(f"N{b}" for b in range(8))
MAX_FLOATS = 128  # words, scales, x values and accumulators per thread
SMEM_LIMIT = 48 * 1024  # static shared memory of the K-lane reduction


class CudaRmsNormW4A16Template(Template):
    """The CUDA template of :class:`~core.workloads.rmsnorm_w4a16.RmsNormW4A16Workload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512), "threads per block"),
                ChoiceGene("ksplit", (1, 2, 4, 8, 16), "K lanes per column thread (split-K inside the block)"),
                ChoiceGene("rows_per_block", (1, 2, 4), "rows of x a block multiplies"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", (1, 2, 4), "columns per thread: words per access"),
                ChoiceGene("w_load", ("", ".nc", ".cs", ".L1::no_allocate", ".nc.L1::no_allocate"), "cache hint of the word loads"),
                ChoiceGene("x_load", ("", ".nc", ".L1::evict_last"), "cache hint of the x and gamma loads"),
                ChoiceGene("prefetch", ("none", "l2"), "prefetch the first batch of words into L2 before the norm"),
            ),
            "register_allocation": (
                MapGene("regs", (("batch", (1, 2, 4, 8)), ("scale", ("word", "weight"))),
                        "word loads in flight per thread before the math; scale per word's partial sum or per weight"),
            ),
            "instruction_sequence": (
                SequenceGene("nibbles", NIBBLES, (), (), "the order of a word's 8 values"),
                ChoiceGene("first", ("words", "x"), "which loads of a batch come first"),
                ChoiceGene("dequant", ("cvt", "magic"), "integer to float by cvt, or by the 2^23 magic number"),
                ChoiceGene("norm", ("load", "store"), "1/rms on x as loaded (norm first) or on the sums (norm last)"),
            ),
        }

        def fits(g: Genome) -> str | None:
            p = g["parallel_config"]
            if p["threads"] // p["ksplit"] < 4:
                return "fewer than 4 column threads per block"
            if _floats(g) > MAX_FLOATS:
                return f"{_floats(g)} registers of data per thread (> {MAX_FLOATS})"
            if _shared(g) > SMEM_LIMIT:
                return "the K-lane reduction does not fit in 48 KB of shared memory"
            return None

        # M = 1 at N = 10240: 64 columns per block -> 160 blocks of 512 threads, 4 x 8 B in flight each
        seeds = ({"parallel_config": {"threads": 512, "ksplit": 16, "rows_per_block": 1},
                  "memory_pattern": {"vec": 2, "w_load": ".nc.L1::no_allocate", "x_load": "", "prefetch": "l2"},
                  "register_allocation": {"regs": {"batch": 4, "scale": "word"}},
                  "instruction_sequence": {"nibbles": NIBBLES, "first": "words", "dequant": "magic", "norm": "store"}},
                 {"parallel_config": {"threads": 256, "ksplit": 4, "rows_per_block": 4},
                  "memory_pattern": {"vec": 4, "w_load": ".nc", "x_load": ".nc", "prefetch": "none"},
                  "register_allocation": {"regs": {"batch": 2, "scale": "weight"}},
                  "instruction_sequence": {"nibbles": NIBBLES, "first": "x", "dequant": "cvt", "norm": "load"}})
        return GeneSpace(groups, (fits,), seeds)

    def render(self, genome: Genome) -> KernelSource:
        p, v = genome["parallel_config"], genome["memory_pattern"]["vec"]
        launch = {"threads": p["threads"], "col_threads": p["threads"] // p["ksplit"], "vec": v,
                  "rows_per_block": p["rows_per_block"]}
        resources = {"threads": p["threads"], "shared_bytes": _shared(genome),
                     "registers": min(255, 65536 // p["threads"], 40 + _floats(genome))}
        return KernelSource("cuda", render_source(genome, self.problem), "abebot_rmsnorm_w4a16", ("-std=c++17",),
                            launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        m, n = shape["m"], shape["n"]
        grid = (-(-(-(-n // lp["vec"])) // lp["col_threads"]), -(-m // lp["rows_per_block"]), 1)
        return kernel.bind(grid, (lp["threads"], 1, 1), (t["x"], t["gamma"], t["qweight"], t["scales"], t["y"], m, n,
                                                         shape["k_groups"], float(self.problem["eps"])))


TEMPLATE = CudaRmsNormW4A16Template


def _floats(g: Genome) -> int:
    """Per thread: a batch's words, scales and x values of every row, and the accumulators."""
    rows, v = g["parallel_config"]["rows_per_block"], g["memory_pattern"]["vec"]
    b = g["register_allocation"]["regs"]["batch"]
    return b * (2 * v + 8 * rows) + rows * v


def _shared(g: Genome) -> int:
    p, v = g["parallel_config"], g["memory_pattern"]["vec"]
    red = 4 * p["threads"] * p["rows_per_block"] * v if p["ksplit"] > 1 else 0
    return red + 4 * (p["threads"] // 32 + 1) * p["rows_per_block"]


def _load(hint: str, what: str) -> str:
    """A 4/8/16-byte load of ``what`` into ``u`` by byte count, with ``hint``."""
    return f"""    if constexpr (BYTES == 16) asm volatile("ld.global{hint}.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"({what}));
    else if constexpr (BYTES == 8) asm volatile("ld.global{hint}.v2.u32 {{%0,%1}}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"({what}));
    else asm volatile("ld.global{hint}.u32 %0, [%1];" : "=r"(u[0]) : "l"({what}));"""


def render_source(g: Genome, problem: dict) -> str:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    seq = g["instruction_sequence"]
    dtype = problem["dtype"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    per_word = r["scale"] == "word"
    at_load = seq["norm"] == "load"
    deq = "__int_as_float(0x4B000000 | q) - 8388616.f" if seq["dequant"] == "magic" else "(float)q - 8.f"
    steps = "".join(f"""
            {{  // value {tok[1]} of each word
                const float xb[MT] = {{{', '.join(f'xv[u][{a}][{tok[1]}]' for a in range(p['rows_per_block']))}}};
#pragma unroll
                for (int e = 0; e < V; ++e) {{
                    const unsigned q = (w[u][e] >> {4 * int(tok[1])}) & 15u;
                    const float d = ({deq}){'' if per_word else ' * s[u][e]'};
#pragma unroll
                    for (int a = 0; a < MT; ++a) part[a][e] += xb[a] * d;
                }}
            }}""" for tok in seq["nibbles"])
    load_w = """#pragma unroll
        for (int u = 0; u < BATCH; ++u) load_words<V>(qw + (long long)kw[u] * N + c, w[u]);"""
    load_x = """#pragma unroll
        for (int u = 0; u < BATCH; ++u) {
            float gv[8];
            load_x8(gamma + kw[u] * 8, gv);
#pragma unroll
            for (int a = 0; a < MT; ++a) {
                load_x8(x + (long long)(m0 + a < M ? m0 + a : m0) * K + kw[u] * 8, xv[u][a]);
#pragma unroll
                for (int b = 0; b < 8; ++b) xv[u][a][b] *= gv[b] * f[u][a];
            }
        }"""
    loads = f"{load_w}\n{load_x}" if seq["first"] == "words" else f"{load_x}\n{load_w}"
    prefetch = ("""
    if (c0 < N) {  // the first batch of this thread's words on its way to L2 while the norm runs
        for (int j = 0; j < BATCH && j < L; ++j)
            asm volatile("prefetch.global.L2 [%0];" :: "l"(qw + (long long)(ks + j * KSPLIT) * N + c0));
    }""" if m["prefetch"] == "l2" else "")
    reduce = ("""
    // the K lanes add up through shared memory; lane 0 stores
    __shared__ float red[THREADS * MT * VEC];
#pragma unroll
    for (int a = 0; a < MT; ++a)
#pragma unroll
        for (int e = 0; e < VEC; ++e) red[(threadIdx.x * MT + a) * VEC + e] = acc[a][e];
    __syncthreads();
    if (ks != 0) return;
    for (int l = 1; l < KSPLIT; ++l)
#pragma unroll
        for (int a = 0; a < MT; ++a)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[a][e] += red[((l * TC + tc) * MT + a) * VEC + e];""" if p["ksplit"] > 1 else "")
    norm = "    block_inv(x, M, K, m0, eps, inv);"
    gemv = """    if (c0 < N) {
        if (vec_ok) run<VEC>(x, gamma, qw, sc, M, N, G, m0, c0, ks, L, inv, acc);
        else {
            for (int e = 0; e < VEC && c0 + e < N; ++e) {  // one column at a time, each into its slot of acc
                float one[MT][VEC] = {};
                run<1>(x, gamma, qw, sc, M, N, G, m0, c0 + e, ks, L, inv, one);
#pragma unroll
                for (int a = 0; a < MT; ++a) acc[a][e] = one[a][0];
            }
        }
    }"""
    body = f"{norm}\n{gemv}" if at_load else f"{gemv}\n{norm}"
    return f"""// AbeBot generated CUDA RMSNorm + W4A16 ({dtype}): y = (x / rms(x) * gamma) . ((q - 8) * s)
typedef {T} T;
#define THREADS {p['threads']}
#define KSPLIT {p['ksplit']}
#define TC (THREADS / KSPLIT)
#define MT {p['rows_per_block']}
#define VEC {m['vec']}
#define BATCH {r['batch']}
#define ELT {dtype_bytes(dtype)}
#define NORM_AT_LOAD {int(at_load)}

static __device__ __forceinline__ float to_f(T h) {{ {to_f} }}
static __device__ __forceinline__ T from_f(float f) {{ {from_f} }}

// V adjacent words of one row of qweight
template <int V> static __device__ __forceinline__ void load_words(const int *p, unsigned *u) {{
    constexpr int BYTES = 4 * V;
{_load(m["w_load"], "p")}
}}
// 8 consecutive values of x or gamma (16 bytes for 16-bit types, twice that for float)
static __device__ __forceinline__ void load_x8(const T *p, float *o) {{
    constexpr int BYTES = 16;
#pragma unroll
    for (int h = 0; h < 8 * ELT / 16; ++h) {{
        unsigned u[4];
{_load(m["x_load"], "p + h * 16 / ELT")}
#pragma unroll
        for (int i = 0; i < 4; ++i) {{
            if constexpr (ELT == 4) o[h * 4 + i] = __uint_as_float(u[i]);
            else {{ o[2 * i] = to_f((T)(u[i] & 0xffffu)); o[2 * i + 1] = to_f((T)(u[i] >> 16)); }}
        }}
    }}
}}

// 1 / sqrt(mean(x^2) + eps) of rows [m0, m0 + MT), every thread of the block, into inv (shared)
static __device__ __forceinline__ void block_inv(const T *__restrict__ x, int M, long long K, int m0, float eps, float *inv) {{
    __shared__ float part[THREADS / 32][MT];
    float ss[MT] = {{}};
    for (long long k = threadIdx.x * 8; k < K; k += THREADS * 8) {{
#pragma unroll
        for (int a = 0; a < MT; ++a) {{
            if (m0 + a >= M) continue;
            float v[8];
            load_x8(x + (m0 + a) * K + k, v);
#pragma unroll
            for (int i = 0; i < 8; ++i) ss[a] += v[i] * v[i];
        }}
    }}
#pragma unroll
    for (int a = 0; a < MT; ++a) {{
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss[a] += __shfl_xor_sync(0xffffffffu, ss[a], o);
        if (threadIdx.x % 32 == 0) part[threadIdx.x / 32][a] = ss[a];
    }}
    __syncthreads();
    if (threadIdx.x < MT) {{
        float t = 0.f;
        for (int w = 0; w < THREADS / 32; ++w) t += part[w][threadIdx.x];
        inv[threadIdx.x] = rsqrtf(t / (float)K + eps);
    }}
    __syncthreads();
}}

// columns [c, c + V) of rows [m0, m0 + MT): this K lane's words ks, ks + KSPLIT, ... (L of them)
template <int V>
static __device__ __forceinline__ void run(const T *__restrict__ x, const T *__restrict__ gamma, const int *__restrict__ qw,
                                           const T *__restrict__ sc, int M, int N, int G, int m0, int c, int ks, int L,
                                           const float *inv, float (*acc)[VEC]) {{
    const long long K = (long long)G * 128;
    for (int j0 = 0; j0 < L; j0 += BATCH) {{
        int kw[BATCH];
        float f[BATCH][MT];  // what x is multiplied by besides gamma: 1/rms (or 1), 0 past the lane's last word
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {{
            const bool live = j0 + u < L;
            kw[u] = ks + (live ? j0 + u : L - 1) * KSPLIT;
#pragma unroll
            for (int a = 0; a < MT; ++a) f[u][a] = live ? (NORM_AT_LOAD ? inv[a] : 1.f) : 0.f;
        }}
        unsigned w[BATCH][V];
        float xv[BATCH][MT][8], s[BATCH][V];
{loads}
#pragma unroll
        for (int u = 0; u < BATCH; ++u)
#pragma unroll
            for (int e = 0; e < V; ++e) s[u][e] = to_f(sc[(long long)(kw[u] >> 4) * N + c + e]);
#pragma unroll
        for (int u = 0; u < BATCH; ++u) {{
            float part[MT][V] = {{}};{steps}
#pragma unroll
            for (int a = 0; a < MT; ++a)
#pragma unroll
                for (int e = 0; e < V; ++e) acc[a][e] += part[a][e]{' * s[u][e]' if per_word else ''};
        }}
    }}
}}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_rmsnorm_w4a16(const T *__restrict__ x, const T *__restrict__ gamma, const int *__restrict__ qw,
                     const T *__restrict__ sc, T *__restrict__ y, int M, int N, int G, float eps) {{
    __shared__ float inv[MT];
    const int tc = threadIdx.x % TC, ks = threadIdx.x / TC;
    const int c0 = (blockIdx.x * TC + tc) * VEC, m0 = blockIdx.y * MT;
    const long long K = (long long)G * 128;
    const int L = 16 * G / KSPLIT;  // this lane's words per column (KSPLIT divides 16)
    float acc[MT][VEC] = {{}};
    const bool vec_ok = N % VEC == 0 && ((unsigned long long)qw % (4 * VEC)) == 0;  // else column by column{prefetch}
{body}{reduce}
    if (c0 >= N) return;
#pragma unroll
    for (int a = 0; a < MT; ++a)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
            if (m0 + a < M && c0 + e < N) y[(long long)(m0 + a) * N + c0 + e] = from_f(acc[a][e]{'' if at_load else ' * inv[a]'});
}}
"""
