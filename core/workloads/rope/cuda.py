"""CUDA C RoPE template (header-free: bf16/fp16 travel as 16-bit integers with PTX conversions).

A block rotates the heads of one token at a time (query heads, then key heads, as one index space),
``vec`` pairs per access: a work item is ``vec`` elements of x1, the matching ``vec`` of x2, and the
token's ``vec`` cos and sin values; the rotation is computed in float32 and rounded once. A token
whose half width is not a multiple of ``vec`` (or a misaligned tensor) runs a scalar twin.

* parallel_config -- threads per block; a block per group of ``tokens_per_block`` tokens, a
  persistent grid of ``waves`` blocks per SM looping over token groups, or a 2-D grid of
  (token, group of ``heads_per_block`` heads), which spreads a decode step of one token over the GPU;
* memory_pattern -- elements per access (16 bytes down to one element), cache hints on the x loads
  (plain, streaming ``.cs``, no L1 allocation; never ``.nc``, since x is written), on the cos/sin
  loads (plain, non-coherent ``.nc``, L1 evict-last) and on the stores, and whether the token's cos
  and sin are first staged in shared memory as floats;
* register_allocation -- work items in flight per thread, ``#pragma unroll`` of the step loop;
* instruction_sequence -- the order of the three loads of a step (x1, x2, cos/sin) before the
  rotation and the store.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.template import Template

TOKENS = ("LOAD_X1", "LOAD_X2", "LOAD_CS", "ROTATE", "STORE")
BEFORE = (("LOAD_X1", "ROTATE"), ("LOAD_X2", "ROTATE"), ("LOAD_CS", "ROTATE"), ("ROTATE", "STORE"))
MAX_FLOATS = 96  # x1, x2, cos, sin floats per thread in flight; beyond this a step spills


def _half_max(problem: dict) -> int:
    """The widest half a verification shape has (the spec's odd shape uses 33)."""
    return max(problem["half_dim"], 33)


class CudaRopeTemplate(Template):
    """The CUDA template of :class:`~core.workloads.rope.RopeWorkload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512, 1024), "threads per block"),
                ChoiceGene("schedule", ("tokens", "persistent", "head_split"),
                           "a block per token group, a persistent grid over token groups, or (token, head group) blocks"),
                ChoiceGene("tokens_per_block", (1, 2, 4, 8), "tokens a block rotates (tokens, persistent)"),
                ChoiceGene("heads_per_block", (1, 2, 4, 8, 16), "heads of one token a block rotates (head_split)"),
                ChoiceGene("waves", (1, 2, 4, 8), "blocks per SM of the persistent grid"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per access (16 bytes at most)"),
                ChoiceGene("x_load", ("", ".cs", ".L1::no_allocate"), "cache hint of the q/k loads"),
                ChoiceGene("cs_load", ("", ".nc", ".L1::evict_last"), "cache hint of the cos/sin loads"),
                ChoiceGene("store", ("", ".cs"), "cache hint of the q/k stores"),
                ChoiceGene("cs_stage", ("global", "shared"), "cos/sin read from the cache, or staged as floats in shared memory"),
            ),
            "register_allocation": (
                MapGene("regs", (("items", (1, 2, 4)), ("unroll", (1, 2, 4))), "work items in flight per thread, step-loop unroll"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, (), BEFORE, "order of a step's operations"),),
        }

        def fits(g: Genome) -> str | None:
            if _floats(g) > MAX_FLOATS:
                return f"{_floats(g)} floats in flight per thread (> {MAX_FLOATS})"
            return None

        wide = 16 // elt
        seeds = ({"parallel_config": {"threads": 256, "schedule": "tokens", "tokens_per_block": 1, "heads_per_block": 1, "waves": 1},
                  "memory_pattern": {"vec": wide, "x_load": "", "cs_load": "", "store": "", "cs_stage": "global"},
                  "register_allocation": {"regs": {"items": 1, "unroll": 1}}, "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"threads": 128, "schedule": "head_split", "tokens_per_block": 1, "heads_per_block": 8, "waves": 1},
                  "memory_pattern": {"vec": wide, "x_load": ".cs", "cs_load": ".nc", "store": ".cs", "cs_stage": "global"},
                  "register_allocation": {"regs": {"items": 1, "unroll": 1}}, "instruction_sequence": {"body": TOKENS}})
        return GeneSpace(groups, (fits,), seeds, canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        p, m = genome["parallel_config"], genome["memory_pattern"]
        launch = {"threads": p["threads"], "schedule": p["schedule"], "tokens_per_block": p["tokens_per_block"],
                  "heads_per_block": p["heads_per_block"], "waves": p["waves"]}
        shared = 8 * _half_max(self.problem) if m["cs_stage"] == "shared" else 0
        resources = {"threads": p["threads"], "shared_bytes": shared,
                     "registers": min(255, 65536 // p["threads"], 32 + _floats(genome))}
        return KernelSource("cuda", render_source(genome, self.problem), "abebot_rope", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        tokens = shape["tokens"]
        if lp["schedule"] == "head_split":
            grid = (tokens, -(-(shape["q_heads"] + shape["kv_heads"]) // lp["heads_per_block"]), 1)
        else:
            blocks = -(-tokens // lp["tokens_per_block"])
            if lp["schedule"] == "persistent":
                blocks = min(blocks, self.device.multiprocessors * lp["waves"])
            grid = (blocks, 1, 1)
        return kernel.bind(grid, (lp["threads"], 1, 1), (t["positions"], t["cos_sin_cache"], t["q"], t["k"], tokens,
                                                         shape["q_heads"], shape["kv_heads"], shape["half_dim"]))


TEMPLATE = CudaRopeTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _per_schedule(g: Genome) -> Genome:
    # head_split blocks take one token and a head group; the others take token groups of all heads;
    # waves sizes only the persistent grid.
    s = g["parallel_config"]["schedule"]
    if s == "head_split":
        g = with_gene(g, "parallel_config", "tokens_per_block", 1)
    else:
        g = with_gene(g, "parallel_config", "heads_per_block", 1)
    if s != "persistent":
        g = with_gene(g, "parallel_config", "waves", 1)
    return g


CANONICALISERS = (_per_schedule,)


def _floats(g: Genome) -> int:
    """Floats a thread holds at once: x1, x2, cos and sin of every item, of the unrolled steps."""
    r = g["register_allocation"]["regs"]
    return 4 * r["items"] * g["memory_pattern"]["vec"] * r["unroll"]


_STEPS = {
    "LOAD_X1": """
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) if (ok[i]) load_vec<V, 0>(xp[i] + j[i], a[i]);""",
    "LOAD_X2": """
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) if (ok[i]) load_vec<V, 0>(xp[i] + H + j[i], b[i]);""",
    "LOAD_CS": """
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) if (ok[i]) load_cs<V>(cs, scs, H, j[i], c[i], s[i]);""",
    "ROTATE": """
#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float x1 = a[i][e], x2 = b[i][e];
                a[i][e] = x1 * c[i][e] - x2 * s[i][e];
                b[i][e] = x2 * c[i][e] + x1 * s[i][e];
            }""",
    "STORE": """
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) if (ok[i]) { store_vec<V>(xp[i] + j[i], a[i]); store_vec<V>(xp[i] + H + j[i], b[i]); }""",
}


def _access(kind: str, hint: str) -> str:
    """PTX of a 2/4/8/16-byte global load (kind "ld") or store ("st") with ``hint``, by byte count."""
    if kind == "ld":
        return f"""        if constexpr (BYTES == 2) {{ unsigned short h; asm volatile("ld.global{hint}.u16 %0, [%1];" : "=h"(h) : "l"(p)); w[0] = h; }}
        else if constexpr (BYTES == 16) asm volatile("ld.global{hint}.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
        else if constexpr (BYTES == 8) asm volatile("ld.global{hint}.v2.u32 {{%0,%1}}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
        else asm volatile("ld.global{hint}.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));"""
    return f"""        if constexpr (BYTES == 2) asm volatile("st.global{hint}.u16 [%0], %1;" :: "l"(p), "h"((unsigned short)w[0]) : "memory");
        else if constexpr (BYTES == 16) asm volatile("st.global{hint}.v4.u32 [%0], {{%1,%2,%3,%4}};" :: "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
        else if constexpr (BYTES == 8) asm volatile("st.global{hint}.v2.u32 [%0], {{%1,%2}};" :: "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
        else asm volatile("st.global{hint}.u32 [%0], %1;" :: "l"(p), "r"(w[0]) : "memory");"""


def _main(p: dict) -> str:
    """The block's loop over its tokens (and head range)."""
    run = """            const T *cs = cache + (long long)positions[t] * 2 * H;
            T *qt = q + (long long)t * nq * 2 * H, *kt = k + (long long)t * nk * 2 * H;
            if (vec_ok) token_run<VEC>(cs, qt, kt, nq, h_lo, h_hi, H, scs);
            else token_run<1>(cs, qt, kt, nq, h_lo, h_hi, H, scs);"""
    if p["schedule"] == "head_split":
        return f"""    const int t = blockIdx.x;
    const int h_lo = blockIdx.y * HEADS_PER_BLOCK, h_hi = h_lo + HEADS_PER_BLOCK < nq + nk ? h_lo + HEADS_PER_BLOCK : nq + nk;
    {{
{run}
    }}"""
    loop = ("for (int rb = blockIdx.x; rb < (tokens + TOKENS_PER_BLOCK - 1) / TOKENS_PER_BLOCK; rb += gridDim.x)"
            if p["schedule"] == "persistent" else "for (int rb = blockIdx.x; rb < blockIdx.x + 1; ++rb)")
    return f"""    const int h_lo = 0, h_hi = nq + nk;
    {loop} {{
        for (int i = 0; i < TOKENS_PER_BLOCK; ++i) {{
            const int t = rb * TOKENS_PER_BLOCK + i;
            if (t >= tokens) break;
{run}
        }}
    }}"""


def render_source(g: Genome, problem: dict) -> str:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    dtype = problem["dtype"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    shared = m["cs_stage"] == "shared"
    steps = "".join(_STEPS[tok] for tok in g["instruction_sequence"]["body"])
    sched = (f"#define HEADS_PER_BLOCK {p['heads_per_block']}\n" if p["schedule"] == "head_split"
             else f"#define TOKENS_PER_BLOCK {p['tokens_per_block']}\n")
    if p["schedule"] == "persistent":
        sched += f"#define WAVES {p['waves']}  // grid size: set at launch, recorded here\n"
    stage = ("""    // stage the token's cos and sin as floats (the previous token's readers are done)
    __syncthreads();
    for (int e = threadIdx.x; e < 2 * H; e += THREADS) { float f[1]; load_vec<1, 1>(cs + e, f); scs[e] = f[0]; }
    __syncthreads();
""" if shared else "")
    cs_from = ("""    // from shared memory (volatile, so the genome's order of the loads holds)
    const unsigned a = (unsigned)__cvta_generic_to_shared(scs + j);
#pragma unroll
    for (int e = 0; e < V; ++e) {
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(c[e]) : "r"(a + 4 * e));
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(s[e]) : "r"(a + 4 * (H + e)));
    }""" if shared else """    load_vec<V, 1>(cs + j, c);
    load_vec<V, 1>(cs + H + j, s);""")
    return f"""// AbeBot generated CUDA RoPE, NeoX style, in place ({dtype})
typedef {T} T;
#define THREADS {p['threads']}
{sched}#define VEC {m['vec']}
#define ITEMS {r['items']}
#define ELT {dtype_bytes(dtype)}
#define HALF_MAX {_half_max(problem)}

static __device__ __forceinline__ float to_f(T h) {{ {to_f} }}
static __device__ __forceinline__ T from_f(float f) {{ {from_f} }}

// V elements -> V floats through one load; WHICH 0 is q/k (x hint), 1 the cos/sin cache (cs hint)
template <int V, int WHICH> static __device__ __forceinline__ void load_vec(const T *p, float *o) {{
    constexpr int BYTES = V * ELT;
    unsigned w[BYTES >= 4 ? BYTES / 4 : 1];
    if constexpr (WHICH == 0) {{
{_access("ld", m["x_load"])}
    }} else {{
{_access("ld", m["cs_load"])}
    }}
    if constexpr (BYTES == 2) o[0] = to_f((T)w[0]);
    else {{
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {{
            if constexpr (ELT == 4) o[i] = __uint_as_float(w[i]);
            else {{ o[2 * i] = to_f((T)(w[i] & 0xffffu)); o[2 * i + 1] = to_f((T)(w[i] >> 16)); }}
        }}
    }}
}}
template <int V> static __device__ __forceinline__ void store_vec(T *p, const float *v) {{
    constexpr int BYTES = V * ELT;
    unsigned w[BYTES >= 4 ? BYTES / 4 : 1];
    if constexpr (BYTES == 2) w[0] = (unsigned short)from_f(v[0]);
    else {{
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {{
            if constexpr (ELT == 4) w[i] = __float_as_uint(v[i]);
            else w[i] = (unsigned)(unsigned short)from_f(v[2 * i]) | ((unsigned)(unsigned short)from_f(v[2 * i + 1]) << 16);
        }}
    }}
{_access("st", m["store"])}
}}
template <int V> static __device__ __forceinline__ void load_cs(const T *cs, const float *scs, int H, int j, float *c, float *s) {{
{cs_from}
}}

// heads [h_lo, h_hi) of one token (query heads, then key heads): (h_hi - h_lo) * H / V work items
template <int V>
static __device__ __forceinline__ void token_run(const T *__restrict__ cs, T *qt, T *kt, int nq, int h_lo, int h_hi, int H,
                                                 float *scs) {{
{stage}    const int nv = H / V, n = (h_hi - h_lo) * nv;
#pragma unroll {r['unroll']}
    for (int base = threadIdx.x; base < n; base += THREADS * ITEMS) {{
        float a[ITEMS][V], b[ITEMS][V], c[ITEMS][V], s[ITEMS][V];
        T *xp[ITEMS];
        int j[ITEMS];
        bool ok[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {{
            const int w = base + i * THREADS, h = h_lo + w / nv;
            ok[i] = w < n;
            j[i] = (w % nv) * V;
            xp[i] = h < nq ? qt + (long long)h * 2 * H : kt + (long long)(h - nq) * 2 * H;
        }}{steps}
    }}
}}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_rope(const int *__restrict__ positions, const T *__restrict__ cache, T *q, T *k, int tokens, int nq, int nk, int H) {{
    {"__shared__ __align__(16) float scs[2 * HALF_MAX];" if shared else "float *scs = nullptr;"}
    const unsigned long long any = (unsigned long long)cache | (unsigned long long)q | (unsigned long long)k;
    const bool vec_ok = H % VEC == 0 && any % (VEC * ELT) == 0;  // else the scalar twin
{_main(p)}
}}
"""
