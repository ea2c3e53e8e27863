"""CUDA C SiLU-and-multiply template (header-free: bf16/fp16 travel as 16-bit integers with PTX
conversions, so NVRTC needs no includes and ``nvcc -ptx`` checks the same text).

Every thread handles ``items`` vectors of ``vec`` elements per step of a strided loop; the
computation is in float32 and rounded once to the output dtype.

* parallel_config -- threads per block; one block per group of ``rows_per_block`` rows (vLLM's
  layout: a block per token), a persistent grid of ``waves`` blocks per SM looping over row
  groups, or a flat grid-stride loop over all tokens x hidden elements (vectorised whatever the
  hidden size, since the tensors are contiguous);
* memory_pattern -- elements per load (16-byte ``v4`` down to scalar; rows not aligned to it run
  a scalar twin), load cache hint (plain, non-coherent ``.nc`` as ``__ldg``, streaming ``.cs``,
  L1 evict-first, ``.nc`` without L1 allocation), store hint, store width (``vec`` or narrower);
* register_allocation -- vectors in flight per thread, ``#pragma unroll`` of the step loop,
  accurate ``expf`` or ``__expf`` (ex2.approx), IEEE division, ``__fdividef`` or ``__frcp_rn``;
* instruction_sequence -- the order of load gate, load up, SiLU, multiply, store (all items of a
  step per token: SiLU before loading up overlaps the exp with up's latency).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.template import Template

TOKENS = ("LOAD_GATE", "LOAD_UP", "SILU", "MUL", "STORE")
BEFORE = (("LOAD_GATE", "SILU"), ("SILU", "MUL"), ("LOAD_UP", "MUL"), ("MUL", "STORE"))
LOAD_HINTS = ("", ".nc", ".cs", ".L1::evict_first", ".nc.L1::no_allocate")
STORE_HINTS = ("", ".cs", ".L1::no_allocate")
MAX_FLOATS = 64  # gate and up floats per thread in flight (out reuses up's); beyond this a step spills
THREADS_PER_SM = 2048  # resident threads per SM on sm_80/sm_90: the flat grid's size per wave


class CudaSiluMulTemplate(Template):
    """The CUDA template of :class:`~core.workloads.silu_mul.SiluMulWorkload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        widths = tuple(v for v in (1, 2, 4, 8) if v * elt <= 16)
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512, 1024), "threads per block"),
                ChoiceGene("rows_per_block", (1, 2, 4, 8), "rows a block handles (rows and persistent schedules)"),
                ChoiceGene("schedule", ("rows", "persistent", "flat"),
                           "a block per row group, a persistent grid over row groups, or a grid-stride loop over all elements"),
                ChoiceGene("waves", (1, 2, 4, 8), "blocks per SM (persistent) or full-occupancy waves (flat) of the grid"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", widths, "elements per load (16 bytes at most)"),
                ChoiceGene("load", LOAD_HINTS, "load cache hint"),
                ChoiceGene("store", STORE_HINTS, "store cache hint"),
                ChoiceGene("store_vec", widths, "elements per store (at most vec)"),
            ),
            "register_allocation": (
                MapGene("regs", (("items", (1, 2, 4, 8)), ("unroll", (1, 2, 4)),
                                 ("exp", ("expf", "__expf")), ("div", ("ieee", "__fdividef", "rcp"))),
                        "vectors in flight per thread, step-loop unroll, exponential, division"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, (), BEFORE, "order of a step's operations"),),
        }

        def fits(g: Genome) -> str | None:
            m = g["memory_pattern"]
            if m["store_vec"] > m["vec"]:
                return f"store_vec {m['store_vec']} wider than the loads ({m['vec']})"
            if _floats(g) > MAX_FLOATS:
                return f"{_floats(g)} floats in flight per thread (> {MAX_FLOATS})"
            return None

        # vLLM's layout (a 1024-thread block per token, 16-byte accesses) and a grid-stride loop over
        # the flat tensors; both with __expf and __fdividef: on an H200 (4096 x 14336) 82.7 / 83.4 us
        # in bf16 and 164.6 / 165.5 in fp32 (torch.compile: 82.0, 162.6), where the first with
        # accurate expf and IEEE division took 114 us in bf16.
        fast = {"items": 1, "unroll": 1, "exp": "__expf", "div": "__fdividef"}
        seeds = ({"parallel_config": {"threads": 1024, "rows_per_block": 1, "schedule": "rows", "waves": 1},
                  "memory_pattern": {"vec": 16 // elt, "load": "", "store": "", "store_vec": 16 // elt},
                  "register_allocation": {"regs": fast}, "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"threads": 256, "rows_per_block": 1, "schedule": "flat", "waves": 8},
                  "memory_pattern": {"vec": 16 // elt, "load": ".nc", "store": "", "store_vec": 16 // elt},
                  "register_allocation": {"regs": fast}, "instruction_sequence": {"body": TOKENS}})
        return GeneSpace(groups, (fits,), seeds, canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        p, m, r = genome["parallel_config"], genome["memory_pattern"], genome["register_allocation"]["regs"]
        launch = {"threads": p["threads"], "rows_per_block": p["rows_per_block"], "schedule": p["schedule"],
                  "waves": p["waves"], "per_block": p["threads"] * r["items"] * m["vec"]}
        # __launch_bounds__(THREADS) caps ptxas at 64K / THREADS registers (spilling beyond it)
        resources = {"threads": p["threads"], "shared_bytes": 0,
                     "registers": min(255, 65536 // p["threads"], 24 + _floats(genome))}
        return KernelSource("cuda", render_source(genome, self.problem["dtype"]), "abebot_silu_mul",
                            ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        tokens, hidden = shape["tokens"], shape["hidden"]
        if lp["schedule"] == "flat":
            blocks = min(-(-tokens * hidden // lp["per_block"]),
                         self.device.multiprocessors * lp["waves"] * max(1, THREADS_PER_SM // lp["threads"]))
        else:
            blocks = -(-tokens // lp["rows_per_block"])
            if lp["schedule"] == "persistent":
                blocks = min(blocks, self.device.multiprocessors * lp["waves"])
        return kernel.bind((max(1, blocks), 1, 1), (lp["threads"], 1, 1), (t["gate"], t["up"], t["out"], tokens, hidden))


TEMPLATE = CudaSiluMulTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _waves_sized_grids_only(g: Genome) -> Genome:
    # waves sizes the persistent and flat grids; a block per row group launches one block per group.
    if g["parallel_config"]["schedule"] == "rows":
        g = with_gene(g, "parallel_config", "waves", 1)
    return g


def _row_groups_only(g: Genome) -> Genome:
    # The flat grid-stride loop walks all tokens x hidden elements: there are no row groups.
    if g["parallel_config"]["schedule"] == "flat":
        g = with_gene(g, "parallel_config", "rows_per_block", 1)
    return g


CANONICALISERS = (_waves_sized_grids_only, _row_groups_only)


def _floats(g: Genome) -> int:
    """Floats a thread holds at once: gate and up of every item, of ``unroll`` steps scheduled together."""
    r = g["register_allocation"]["regs"]
    return 2 * r["items"] * g["memory_pattern"]["vec"] * r["unroll"]

_DIV = {"ieee": "g / d", "__fdividef": "__fdividef(g, d)", "rcp": "g * __frcp_rn(d)"}

_STEPS = {
    "LOAD_GATE": """
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) if (base + it * span < n) load_vec<V>(g + base + it * span, gv[it]);""",
    "LOAD_UP": """
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) if (base + it * span < n) load_vec<V>(u + base + it * span, uv[it]);""",
    "SILU": """
#pragma unroll
        for (int it = 0; it < ITEMS; ++it)
#pragma unroll
            for (int e = 0; e < V; ++e) gv[it][e] = silu(gv[it][e]);""",
    "MUL": """
#pragma unroll
        for (int it = 0; it < ITEMS; ++it)
#pragma unroll
            for (int e = 0; e < V; ++e) uv[it][e] *= gv[it][e];""",
    "STORE": """
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) if (base + it * span < n) {
#pragma unroll
            for (int k = 0; k < V; k += SV) store_vec<SV>(o + base + it * span + k, uv[it] + k);
        }""",
}


def render_source(g: Genome, dtype: str) -> str:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    ld, st = m["load"], m["store"]
    exp = "expf" if r["exp"] == "expf" else "__expf"
    steps = "".join(_STEPS[tok] for tok in g["instruction_sequence"]["body"])
    if p["schedule"] == "flat":
        main = """    const long long n = (long long)tokens * hidden;
    const long long tid = (long long)blockIdx.x * THREADS + threadIdx.x, nthreads = (long long)gridDim.x * THREADS;
    if (aligned(gate, up, out)) {
        const long long nv = n - n % VEC;  // the vector part; the last n % VEC elements run scalar
        span_run<VEC>(gate, up, out, nv, tid, nthreads);
        span_run<1>(gate + nv, up + nv, out + nv, n - nv, tid, nthreads);
    } else {
        span_run<1>(gate, up, out, n, tid, nthreads);
    }"""
    else:
        loop = ("for (int rb = blockIdx.x; rb < (tokens + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK; rb += gridDim.x)"
                if p["schedule"] == "persistent" else "for (int rb = blockIdx.x; rb < blockIdx.x + 1; ++rb)")
        main = f"""    // rows start on the vector grid only when hidden is a multiple of VEC: else the scalar twin runs
    const bool vec_ok = hidden % VEC == 0 && aligned(gate, up, out);
    {loop} {{
        for (int i = 0; i < ROWS_PER_BLOCK; ++i) {{
            const long long row = (long long)rb * ROWS_PER_BLOCK + i;
            if (row >= tokens) break;
            const long long o = row * hidden;
            if (vec_ok) span_run<VEC>(gate + o, up + o, out + o, hidden, threadIdx.x, THREADS);
            else span_run<1>(gate + o, up + o, out + o, hidden, threadIdx.x, THREADS);
        }}
    }}"""
    # Only what the schedule reads: rows per block (row groups), waves (grids sized per SM: set at
    # launch, recorded here so that a grid change changes the source).
    schedule = "" if p["schedule"] == "flat" else f"#define ROWS_PER_BLOCK {p['rows_per_block']}\n"
    schedule += "" if p["schedule"] == "rows" else f"#define WAVES {p['waves']}  // grid size: set at launch, recorded here\n"
    return f"""// AbeBot generated CUDA SiLU-and-multiply ({dtype})
typedef {T} T;
#define THREADS {p['threads']}
{schedule}#define VEC {m['vec']}
#define STORE_VEC {m['store_vec']}
#define ITEMS {r['items']}
#define ELT {dtype_bytes(dtype)}

static __device__ __forceinline__ float to_f(T h) {{ {to_f} }}
static __device__ __forceinline__ T from_f(float f) {{ {from_f} }}
static __device__ __forceinline__ float silu(float g) {{ const float d = 1.0f + {exp}(-g); return {_DIV[r['div']]}; }}
static __device__ __forceinline__ bool aligned(const void *a, const void *b, const void *c) {{
    return (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) % (VEC * ELT)) == 0;
}}

// V elements of T -> V floats through one 2/4/8/16-byte load with the genome's cache hint
template <int V> static __device__ __forceinline__ void load_vec(const T *p, float *o) {{
    constexpr int BYTES = V * ELT;
    if constexpr (BYTES == 2) {{
        unsigned short h;
        asm volatile("ld.global{ld}.u16 %0, [%1];" : "=h"(h) : "l"(p));
        o[0] = to_f((T)h);
    }} else {{
        unsigned w[BYTES / 4];
        if constexpr (BYTES == 16) asm volatile("ld.global{ld}.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
        else if constexpr (BYTES == 8) asm volatile("ld.global{ld}.v2.u32 {{%0,%1}}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
        else asm volatile("ld.global{ld}.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {{
            if constexpr (ELT == 4) o[i] = __uint_as_float(w[i]);
            else {{ o[2 * i] = to_f((T)(w[i] & 0xffffu)); o[2 * i + 1] = to_f((T)(w[i] >> 16)); }}
        }}
    }}
}}
// V floats -> V elements of T through one store with the genome's cache hint
template <int V> static __device__ __forceinline__ void store_vec(T *p, const float *v) {{
    constexpr int BYTES = V * ELT;
    if constexpr (BYTES == 2) {{
        const unsigned short h = (unsigned short)from_f(v[0]);
        asm volatile("st.global{st}.u16 [%0], %1;" :: "l"(p), "h"(h) : "memory");
    }} else {{
        unsigned w[BYTES / 4];
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {{
            if constexpr (ELT == 4) w[i] = __float_as_uint(v[i]);
            else w[i] = (unsigned)(unsigned short)from_f(v[2 * i]) | ((unsigned)(unsigned short)from_f(v[2 * i + 1]) << 16);
        }}
        if constexpr (BYTES == 16) asm volatile("st.global{st}.v4.u32 [%0], {{%1,%2,%3,%4}};" :: "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
        else if constexpr (BYTES == 8) asm volatile("st.global{st}.v2.u32 [%0], {{%1,%2}};" :: "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
        else asm volatile("st.global{st}.u32 [%0], %1;" :: "l"(p), "r"(w[0]) : "memory");
    }}
}}

// elements [0, n) of one span, V at a time: thread tid of nthreads takes vectors tid, tid + nthreads, ...
// ITEMS of them per step, in flight together
template <int V>
static __device__ __forceinline__ void span_run(const T *__restrict__ g, const T *__restrict__ u, T *__restrict__ o,
                                                long long n, long long tid, long long nthreads) {{
    constexpr int SV = STORE_VEC < V ? STORE_VEC : V;
    const long long span = nthreads * V;
#pragma unroll {r['unroll']}
    for (long long base = tid * V; base < n; base += span * ITEMS) {{
        float gv[ITEMS][V], uv[ITEMS][V];{steps}
    }}
}}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_silu_mul(const T *__restrict__ gate, const T *__restrict__ up, T *__restrict__ out, int tokens, int hidden) {{
{main}
}}
"""
