"""CUDA C RMSNorm template (header-free), optionally fused with the residual add (vLLM's
``fused_add_rms_norm``: the sum x + residual is written back into ``residual``).

* parallel_config -- threads per block, rows per block, one block per row group or a persistent
  grid of ``waves`` blocks per SM;
* memory_pattern -- vector width of loads/stores (a scalar twin runs when a row is not aligned to
  it), load cache hint (plain, non-coherent ``.nc``, streaming ``.cs``), streaming store;
* register_allocation -- where the row waits between the reduction and the output: registers
  (one read of x), shared memory, or a second read from global; warp-shuffle or shared-memory
  tree reduction;
* instruction_sequence -- order of load x, load w, reduce, store (w may be fetched before the
  reduction to overlap its latency, or after it to save registers).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.template import Template
from core.backends.arrays import dtype_bytes

TOKENS = ("LOAD_X", "LOAD_W", "REDUCE", "STORE")
MAX_ITEMS = 64  # floats of the row per thread held in registers, beyond that the row spills


def _cols_max(problem: dict) -> int:
    return max(problem["cols"], 1031)


class CudaRmsNormTemplate(Template):
    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        cols = _cols_max(self.problem)
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512, 1024), "threads per block (one row at a time)"),
                ChoiceGene("rows_per_block", (1, 2, 4), "consecutive rows a block normalises"),
                ChoiceGene("schedule", ("rows", "persistent"), "a block per row group, or a persistent grid"),
                ChoiceGene("waves", (1, 2, 4, 8), "blocks per SM of the persistent grid"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per load/store"),
                ChoiceGene("load", ("", ".nc", ".cs"), "load cache hint: plain, non-coherent, streaming"),
                ChoiceGene("store", ("", ".cs"), "store cache hint: plain or streaming"),
            ),
            "register_allocation": (
                MapGene("regs", (("row", ("registers", "smem", "reread")), ("reduce", ("shuffle", "smem"))),
                        "where the row waits for its norm; how the block sums"),
            ),
            "instruction_sequence": (
                SequenceGene("body", TOKENS, (), (("LOAD_X", "REDUCE"), ("REDUCE", "STORE"), ("LOAD_W", "STORE")),
                             "order of the row's steps"),
            ),
        }

        def fits(g: Genome) -> str | None:
            p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
            items = -(-cols // (p["threads"] * m["vec"])) * m["vec"]
            if r["row"] == "registers" and -(-cols // p["threads"]) > MAX_ITEMS:
                return f"{-(-cols // p['threads'])} row elements per thread in registers (> {MAX_ITEMS})"
            if r["row"] == "smem" and cols * 4 > 48 * 1024:
                return "row does not fit in 48 KB of static shared memory"
            if items < 1:
                return "no work per thread"
            return None

        seed = {"parallel_config": {"threads": 1024, "rows_per_block": 1, "schedule": "rows", "waves": 1},
                "memory_pattern": {"vec": 16 // elt, "load": "", "store": ""},
                "register_allocation": {"regs": {"row": "registers", "reduce": "shuffle"}},
                "instruction_sequence": {"body": ("LOAD_X", "LOAD_W", "REDUCE", "STORE")}}
        return GeneSpace(groups, (fits,), (seed,), canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        source = render_source(genome, self.problem)
        threads = p["threads"]
        row = genome["register_allocation"]["regs"]["row"]
        shared = 4 * threads + (4 * _cols_max(self.problem) if row == "smem" else 0)
        per_thread = -(-_cols_max(self.problem) // threads)
        launch = {"threads": threads, "rows_per_block": p["rows_per_block"], "persistent": p["schedule"] == "persistent",
                  "waves": p["waves"]}
        resources = {"threads": threads, "shared_bytes": shared,
                     "registers": min(255, 32 + (2 * per_thread if row == "registers" else 8))}
        return KernelSource("cuda", source, "abebot_rmsnorm", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        rows, cols = shape["rows"], shape["cols"]
        blocks = -(-rows // lp["rows_per_block"])
        if lp["persistent"]:
            blocks = min(blocks, self.device.multiprocessors * lp["waves"])
        res = t["residual"] if self.problem["residual"] else t["x"]
        return kernel.bind((blocks, 1, 1), (lp["threads"], 1, 1),
                           (t["x"], t["w"], res, t["out"], rows, cols, float(self.problem["eps"])))



# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _waves_persistent_only(g: Genome) -> Genome:
    # waves sizes the persistent grid (blocks per SM); a block per row group launches one block
    # per group whatever it says.
    if g["parallel_config"]["schedule"] != "persistent":
        g = with_gene(g, "parallel_config", "waves", 1)
    return g


CANONICALISERS = (_waves_persistent_only,)




def _row_body(body: tuple, mode: str) -> str:
    """The templated per-row function's steps, in the genome's order."""
    steps = {
        "LOAD_X": """
    // LOAD_X: x (+ residual, written back) into the row cache; sum of squares on the fly
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const int c = (it * THREADS + threadIdx.x) * V;
        float xv[V];
        if (c < cols) {
            load_vec<V>(x + c, xv);
            if (HAS_RES) { float rv[V]; load_vec<V>(res + c, rv);
#pragma unroll
                for (int e = 0; e < V; ++e) xv[e] += rv[e];
                store_vec<V>(res + c, xv); }
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e) xv[e] = 0.f;
        }
#pragma unroll
        for (int e = 0; e < V; ++e) { ss += xv[e] * xv[e]; KEEP(it, e, xv[e]); }
    }""",
        "LOAD_W": """
    // LOAD_W: the weight slice this thread needs, into registers
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const int c = (it * THREADS + threadIdx.x) * V;
        if (c < cols) load_vec<V>(w + c, wv[it]);
    }""",
        "REDUCE": """
    // REDUCE: block-wide sum of squares -> 1 / rms
    const float rstd = rsqrtf(block_sum(ss, red) / cols + eps);""",
        "STORE": """
    // STORE: out = x * rstd * w
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const int c = (it * THREADS + threadIdx.x) * V;
        if (c < cols) {
            float xv[V], ov[V];
            FETCH(it, c, xv);
#pragma unroll
            for (int e = 0; e < V; ++e) ov[e] = xv[e] * rstd * wv[it][e];
            store_vec_out<V>(out + c, ov);
        }
    }""",
    }
    keep = {"registers": "#define KEEP(it, e, v) row[it][e] = (v)\n#define FETCH(it, c, xv) for (int e = 0; e < V; ++e) xv[e] = row[it][e]",
            "smem": "#define KEEP(it, e, v) srow[(it * THREADS + threadIdx.x) * V + (e)] = (v)\n"
                    "#define FETCH(it, c, xv) for (int e = 0; e < V; ++e) xv[e] = srow[(c) + e]",
            "reread": "#define KEEP(it, e, v) (void)0\n#define FETCH(it, c, xv) "
                      "if (HAS_RES) load_vec<V, false>(res + (c), xv); else load_vec<V>(x + (c), xv)"}[mode]
    pre = "    float row[ITEMS][V];\n" if mode == "registers" else ""
    code = "".join(steps[t] for t in body)
    return f"""{keep}
template <int V>
static __device__ __forceinline__ void row_norm(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out,
                                                int cols, float eps, float *red, float *srow) {{
    constexpr int ITEMS = (COLS_MAX + THREADS * V - 1) / (THREADS * V);
{pre}    float wv[ITEMS][V];
    float ss = 0.f;
{code}
    __syncthreads();  // red and srow are reused by the next row
}}
#undef KEEP
#undef FETCH
"""


def render_source(g: Genome, problem: dict) -> str:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    dtype = problem["dtype"]
    elt = dtype_bytes(dtype)
    T, to_f, from_f = SCALAR_TYPES[dtype]
    cols_max = _cols_max(problem)
    ld, st = m["load"], m["store"]
    reduce_fn = ("""
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < THREADS / 32 ? red[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) red[THREADS] = s;
    }
    __syncthreads();
    return red[THREADS];""" if r["reduce"] == "shuffle" else """
    red[threadIdx.x] = s;
    __syncthreads();
    for (int st = THREADS / 2; st > 0; st >>= 1) {
        if (threadIdx.x < st) red[threadIdx.x] += red[threadIdx.x + st];
        __syncthreads();
    }
    return red[0];""")
    rows_loop = ("for (int rb = blockIdx.x; rb < nblk; rb += gridDim.x)" if p["schedule"] == "persistent"
                 else "for (int rb = blockIdx.x; rb < blockIdx.x + 1; ++rb)")
    # the grid is set at launch: what sizes it is recorded here, so a grid change changes the source
    waves = f"#define WAVES {p['waves']}  // blocks per SM of the persistent grid\n" if p["schedule"] == "persistent" else ""
    return f"""// AbeBot generated CUDA RMSNorm ({dtype}, residual={problem['residual']})
typedef {T} T;
#define THREADS {p['threads']}
#define ROWS_PER_BLOCK {p['rows_per_block']}
{waves}#define VEC {m['vec']}
#define COLS_MAX {cols_max}
#define HAS_RES {int(bool(problem['residual']))}
#define ELT {elt}

static __device__ __forceinline__ float to_f(T h) {{ {to_f} }}
static __device__ __forceinline__ T from_f(float f) {{ {from_f} }}

// V elements of T <-> V floats through one 2/4/8/16-byte access with the genome's cache hints
// (HINT = false for data this kernel wrote: a non-coherent load could return the stale line)
template <int V, bool HINT = true> static __device__ __forceinline__ void load_vec(const T *p, float *o) {{
    constexpr int BYTES = V * ELT;
    if constexpr (BYTES == 2) {{
        unsigned short h;
        if constexpr (HINT) asm volatile("ld.global{ld}.u16 %0, [%1];" : "=h"(h) : "l"(p));
        else asm volatile("ld.global.u16 %0, [%1];" : "=h"(h) : "l"(p) : "memory");
        o[0] = to_f((T)h);
    }} else {{
        unsigned u[BYTES / 4];
        if constexpr (!HINT && BYTES == 16) asm volatile("ld.global.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(p) : "memory");
        else if constexpr (!HINT && BYTES == 8) asm volatile("ld.global.v2.u32 {{%0,%1}}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(p) : "memory");
        else if constexpr (!HINT) asm volatile("ld.global.u32 %0, [%1];" : "=r"(u[0]) : "l"(p) : "memory");
        else if constexpr (BYTES == 16) asm volatile("ld.global{ld}.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(p));
        else if constexpr (BYTES == 8) asm volatile("ld.global{ld}.v2.u32 {{%0,%1}}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(p));
        else asm volatile("ld.global{ld}.u32 %0, [%1];" : "=r"(u[0]) : "l"(p));
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {{
            if constexpr (ELT == 4) o[i] = __uint_as_float(u[i]);
            else {{ o[2 * i] = to_f((T)(u[i] & 0xffffu)); o[2 * i + 1] = to_f((T)(u[i] >> 16)); }}
        }}
    }}
}}
template <int V, bool OUT> static __device__ __forceinline__ void store_any(T *p, const float *v) {{
    constexpr int BYTES = V * ELT;
    if constexpr (BYTES == 2) {{
        unsigned short h = (unsigned short)from_f(v[0]);
        if constexpr (OUT) asm volatile("st.global{st}.u16 [%0], %1;" :: "l"(p), "h"(h) : "memory");
        else asm volatile("st.global.u16 [%0], %1;" :: "l"(p), "h"(h) : "memory");
    }} else {{
        unsigned u[BYTES / 4];
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {{
            if constexpr (ELT == 4) u[i] = __float_as_uint(v[i]);
            else u[i] = (unsigned)(unsigned short)from_f(v[2 * i]) | ((unsigned)(unsigned short)from_f(v[2 * i + 1]) << 16);
        }}
        if constexpr (BYTES == 16) {{
            if constexpr (OUT) asm volatile("st.global{st}.v4.u32 [%0], {{%1,%2,%3,%4}};" :: "l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3]) : "memory");
            else asm volatile("st.global.v4.u32 [%0], {{%1,%2,%3,%4}};" :: "l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3]) : "memory");
        }} else if constexpr (BYTES == 8) {{
            if constexpr (OUT) asm volatile("st.global{st}.v2.u32 [%0], {{%1,%2}};" :: "l"(p), "r"(u[0]), "r"(u[1]) : "memory");
            else asm volatile("st.global.v2.u32 [%0], {{%1,%2}};" :: "l"(p), "r"(u[0]), "r"(u[1]) : "memory");
        }} else {{
            if constexpr (OUT) asm volatile("st.global{st}.u32 [%0], %1;" :: "l"(p), "r"(u[0]) : "memory");
            else asm volatile("st.global.u32 [%0], %1;" :: "l"(p), "r"(u[0]) : "memory");
        }}
    }}
}}
template <int V> static __device__ __forceinline__ void store_vec(T *p, const float *v) {{ store_any<V, false>(p, v); }}
template <int V> static __device__ __forceinline__ void store_vec_out(T *p, const float *v) {{ store_any<V, true>(p, v); }}

static __device__ __forceinline__ float block_sum(float s, float *red) {{{reduce_fn}
}}
{_row_body(g["instruction_sequence"]["body"], r["row"])}
// rows not aligned to the vector width: scalar, two reads, few registers (so the fast path keeps its occupancy)
static __device__ __noinline__ void row_norm_scalar(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out,
                                                    int cols, float eps, float *red) {{
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += THREADS) {{
        float v = to_f(x[c]);
        if (HAS_RES) {{ v += to_f(res[c]); res[c] = from_f(v); }}
        ss += v * v;
    }}
    const float rstd = rsqrtf(block_sum(ss, red) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += THREADS) {{
        const float v = HAS_RES ? to_f(res[c]) : to_f(x[c]);
        out[c] = from_f(v * rstd * to_f(w[c]));
    }}
    __syncthreads();
}}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_rmsnorm(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out, int rows, int cols, float eps) {{
    __shared__ float red[THREADS + 1];
    {"__shared__ float srow[COLS_MAX];" if r["row"] == "smem" else "float *srow = nullptr;"}
    const int nblk = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    const bool aligned = cols % VEC == 0;  // else rows start off the vector grid: run the scalar twin
    {rows_loop} {{
        for (int i = 0; i < ROWS_PER_BLOCK; ++i) {{
            const long long row = (long long)rb * ROWS_PER_BLOCK + i;
            if (row >= rows) break;
            const long long o = row * cols;
            if (aligned) row_norm<VEC>(x + o, w, res + o, out + o, cols, eps, red, srow);
            else row_norm_scalar(x + o, w, res + o, out + o, cols, eps, red);
        }}
    }}
}}
"""


TEMPLATE = CudaRmsNormTemplate
