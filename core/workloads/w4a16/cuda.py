"""CUDA C W4A16 template (header-free: bf16/fp16 travel as 16-bit integers; GPTQ int32 words).

A block is ``threads / ksplit`` column threads by ``ksplit`` K lanes, over ``rows_per_block`` rows
of x (grid: column tiles x row tiles). A column thread owns ``vec`` adjacent columns: for each
group of 128 rows of K, its K lane takes every ``ksplit``-th of the group's 16 words, loads the
``vec`` words of its columns in one access (coalesced along N) and the 8 matching x values of each
row (one broadcast access), unpacks each value, subtracts the zero point and accumulates in float32;
the K lanes add up through shared memory. Columns when N is not a multiple of ``vec`` (or a
misaligned tensor) run one at a time.

* parallel_config -- threads per block, K lanes per column (split-K inside the block), rows per block;
* memory_pattern -- columns per thread (words per access), cache hints of the word loads (each
  word is read once: streaming, no L1 allocation, non-coherent) and of the x loads;
* register_allocation -- the scale on each weight or on a per-group partial sum, ``#pragma
  unroll`` of the word loop;
* instruction_sequence -- the order of a word's 8 values (unpack and accumulate; the order of the
  additions), whether the words or x are loaded first, and the dequantisation: ``cvt`` of the
  integer, or the magic-number trick (``0x4B000000 | q`` read as a float is 2^23 + q).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.template import Template

NIBBLES = tuple(f"N{b}" for b in range(8))
MAX_FLOATS = 96  # accumulators and x values per thread
SMEM_LIMIT = 48 * 1024  # static shared memory of the K-lane reduction


class CudaW4A16Template(Template):
    """The CUDA template of :class:`~core.workloads.w4a16.W4A16Workload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512), "threads per block"),
                ChoiceGene("ksplit", (1, 2, 4, 8, 16), "K lanes per column thread (they split a group's 16 words)"),
                ChoiceGene("rows_per_block", (1, 2, 4, 8), "rows of x a block multiplies"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", (1, 2, 4), "columns per thread: words per access"),
                ChoiceGene("w_load", ("", ".nc", ".cs", ".L1::no_allocate", ".nc.L1::no_allocate"), "cache hint of the word loads"),
                ChoiceGene("x_load", ("", ".nc", ".L1::evict_last"), "cache hint of the x loads"),
            ),
            "register_allocation": (
                MapGene("regs", (("scale", ("group", "weight")), ("unroll", (1, 2, 4))),
                        "scale per group partial sum or per weight; word-loop unroll"),
            ),
            "instruction_sequence": (
                SequenceGene("nibbles", NIBBLES, (), (), "the order of a word's 8 values"),
                ChoiceGene("first", ("words", "x"), "which loads of a word come first"),
                ChoiceGene("dequant", ("cvt", "magic"), "integer to float by cvt, or by the 2^23 magic number"),
            ),
        }

        def fits(g: Genome) -> str | None:
            p, v = g["parallel_config"], g["memory_pattern"]["vec"]
            if p["threads"] // p["ksplit"] < 4:
                return "fewer than 4 column threads per block"
            if _floats(g) > MAX_FLOATS:
                return f"{_floats(g)} floats per thread (> {MAX_FLOATS})"
            if p["ksplit"] > 1 and 4 * p["threads"] * p["rows_per_block"] * v > SMEM_LIMIT:
                return "the K-lane reduction does not fit in 48 KB of shared memory"
            return None

        # M = 1 at N = 8192: 64 columns per block -> 128 blocks for the H200's 132 SMs
        seeds = ({"parallel_config": {"threads": 256, "ksplit": 8, "rows_per_block": 1},
                  "memory_pattern": {"vec": 2, "w_load": ".nc", "x_load": ""},
                  "register_allocation": {"regs": {"scale": "group", "unroll": 1}},
                  "instruction_sequence": {"nibbles": NIBBLES, "first": "words", "dequant": "magic"}},
                 {"parallel_config": {"threads": 128, "ksplit": 1, "rows_per_block": 4},
                  "memory_pattern": {"vec": 2, "w_load": ".nc.L1::no_allocate", "x_load": ".nc"},
                  "register_allocation": {"regs": {"scale": "weight", "unroll": 2}},
                  "instruction_sequence": {"nibbles": NIBBLES, "first": "x", "dequant": "cvt"}})
        return GeneSpace(groups, (fits,), seeds, canonicalisers=(_one_word_per_lane,))

    def render(self, genome: Genome) -> KernelSource:
        p, v = genome["parallel_config"], genome["memory_pattern"]["vec"]
        launch = {"threads": p["threads"], "col_threads": p["threads"] // p["ksplit"], "vec": v,
                  "rows_per_block": p["rows_per_block"]}
        shared = 4 * p["threads"] * p["rows_per_block"] * v if p["ksplit"] > 1 else 0
        resources = {"threads": p["threads"], "shared_bytes": shared,
                     "registers": min(255, 65536 // p["threads"], 40 + _floats(genome))}
        return KernelSource("cuda", render_source(genome, self.problem), "abebot_w4a16", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        m, n = shape["m"], shape["n"]
        grid = (-(-(-(-n // lp["vec"])) // lp["col_threads"]), -(-m // lp["rows_per_block"]), 1)
        zeros = t["zeros"] if self.problem["zero_points"] else t["qweight"]  # (not read without zero points)
        return kernel.bind(grid, (lp["threads"], 1, 1), (t["x"], t["qweight"], t["scales"], zeros, t["y"], m, n,
                                                         shape["k_groups"]))


TEMPLATE = CudaW4A16Template


def _one_word_per_lane(g: Genome) -> Genome:
    # 16 K lanes take one of a group's 16 words each: the word loop runs once, nothing to unroll.
    if g["parallel_config"]["ksplit"] == 16:
        g = with_gene(g, "register_allocation", "regs", 1, key="unroll")
    return g


def _floats(g: Genome) -> int:
    """Accumulators (twice with a group partial sum), and the 8 x values of every row."""
    rows, v = g["parallel_config"]["rows_per_block"], g["memory_pattern"]["vec"]
    per_group = g["register_allocation"]["regs"]["scale"] == "group"
    return rows * v * (2 if per_group else 1) + 8 * rows


def _load(hint: str, what: str) -> str:
    """A 4/8/16-byte load of ``p`` into ``u`` by byte count, with ``hint``."""
    return f"""    if constexpr (BYTES == 16) asm volatile("ld.global{hint}.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"({what}));
    else if constexpr (BYTES == 8) asm volatile("ld.global{hint}.v2.u32 {{%0,%1}}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"({what}));
    else asm volatile("ld.global{hint}.u32 %0, [%1];" : "=r"(u[0]) : "l"({what}));"""


def render_source(g: Genome, problem: dict) -> str:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    seq = g["instruction_sequence"]
    dtype = problem["dtype"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    elt = dtype_bytes(dtype)
    group = r["scale"] == "group"
    dst = "gacc" if group else "acc"
    deq = ("__int_as_float(0x4B000000 | q) - 8388608.f" if seq["dequant"] == "magic" else "(float)q")
    steps = "".join(f"""
            {{  // value {tok[1]} of each word
#pragma unroll
                for (int e = 0; e < V; ++e) {{
                    const unsigned q = (w[e] >> {4 * int(tok[1])}) & 15u;
                    const float d = ({deq} - z[e]){'' if group else ' * s[e]'};
#pragma unroll
                    for (int a = 0; a < MT; ++a) {dst}[a][e] += xv[a][{tok[1]}] * d;
                }}
            }}""" for tok in seq["nibbles"])
    load_w = "            unsigned w[V]; load_words<V>(qw + (long long)kw * N + c, w);"
    load_x = ("            float xv[MT][8];\n#pragma unroll\n"
              "            for (int a = 0; a < MT; ++a) load_x8(x + (long long)(m0 + a < M ? m0 + a : m0) * K + kw * 8, xv[a]);")
    loads = f"{load_w}\n{load_x}" if seq["first"] == "words" else f"{load_x}\n{load_w}"
    zero = ("for (int e = 0; e < V; ++e) z[e] = (float)zp[(long long)g * N + c + e];" if problem["zero_points"]
            else "for (int e = 0; e < V; ++e) z[e] = 8.f;")
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
    return f"""// AbeBot generated CUDA W4A16 ({dtype}, zero points: {problem['zero_points']}): y = x . ((q - z) * s)
typedef {T} T;
#define THREADS {p['threads']}
#define KSPLIT {p['ksplit']}
#define TC (THREADS / KSPLIT)
#define MT {p['rows_per_block']}
#define VEC {m['vec']}
#define ELT {elt}

static __device__ __forceinline__ float to_f(T h) {{ {to_f} }}
static __device__ __forceinline__ T from_f(float f) {{ {from_f} }}

// V adjacent words of one row of qweight
template <int V> static __device__ __forceinline__ void load_words(const int *p, unsigned *u) {{
    constexpr int BYTES = 4 * V;
{_load(m["w_load"], "p")}
}}
// the 8 x values of one word's rows of K (16 bytes for 16-bit types, twice that for float)
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

// columns [c, c + V) of rows [m0, m0 + MT): this K lane's share of every group
template <int V>
static __device__ __forceinline__ void run(const T *__restrict__ x, const int *__restrict__ qw, const T *__restrict__ sc,
                                           const unsigned char *__restrict__ zp, int M, int N, int G, int m0, int c, int ks,
                                           float (*acc)[VEC]) {{
    const long long K = (long long)G * 128;
    for (int g = 0; g < G; ++g) {{
        float s[V], z[V];
#pragma unroll
        for (int e = 0; e < V; ++e) s[e] = to_f(sc[(long long)g * N + c + e]);
#pragma unroll
        {zero}
        {"float gacc[MT][VEC] = {};" if group else ""}
#pragma unroll {r['unroll']}
        for (int i = ks; i < 16; i += KSPLIT) {{
            const int kw = g * 16 + i;
{loads}{steps}
        }}
        {"for (int a = 0; a < MT; ++a) for (int e = 0; e < V; ++e) acc[a][e] += gacc[a][e] * s[e];" if group else ""}
    }}
}}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_w4a16(const T *__restrict__ x, const int *__restrict__ qw, const T *__restrict__ sc, const unsigned char *__restrict__ zp,
             T *__restrict__ y, int M, int N, int G) {{
    const int tc = threadIdx.x % TC, ks = threadIdx.x / TC;
    const int c0 = (blockIdx.x * TC + tc) * VEC, m0 = blockIdx.y * MT;
    float acc[MT][VEC] = {{}};
    const bool vec_ok = N % VEC == 0 && ((unsigned long long)qw % (4 * VEC)) == 0;  // else column by column
    if (c0 < N) {{
        if (vec_ok) run<VEC>(x, qw, sc, zp, M, N, G, m0, c0, ks, acc);
        else {{
            // one column at a time, each into its slot of acc
            for (int e = 0; e < VEC && c0 + e < N; ++e) {{
                float one[MT][VEC] = {{}};
                run<1>(x, qw, sc, zp, M, N, G, m0, c0 + e, ks, one);
#pragma unroll
                for (int a = 0; a < MT; ++a) acc[a][e] = one[a][0];
            }}
        }}
    }}{reduce}
    if (c0 >= N) return;
#pragma unroll
    for (int a = 0; a < MT; ++a)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
            if (m0 + a < M && c0 + e < N) y[(long long)(m0 + a) * N + c0 + e] = from_f(acc[a][e]);
}}
"""
