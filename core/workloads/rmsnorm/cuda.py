"""CUDA C RMSNorm template (header-free), optionally fused with the residual add (vLLM's
``fused_add_rms_norm``: the sum x + residual is written back into ``residual``).

* parallel_config -- threads per block, rows per block (a group, normalised together: its loads in
  flight at once, its sums in one reduction), one block per group or a persistent grid of
  ``waves`` blocks per SM; on sm_90 and later, a group split over the ``split`` blocks of a thread
  block cluster, each on its own SM with a slice of every row, their partial sums meeting in
  distributed shared memory (a decode-sized row is otherwise read and written by one SM alone);
* memory_pattern -- vector width of loads/stores (a scalar twin runs when a row is not aligned to
  it), load cache hint (plain, non-coherent ``.nc``, streaming ``.cs``), streaming store;
* register_allocation -- where the row waits between the reduction and the output: registers
  (one read of x), shared memory, or a second read from global; warp-shuffle or shared-memory
  tree reduction, or every warp summing the warp totals itself after one barrier;
* instruction_sequence -- order of load x, load w, reduce, store (w may be fetched before the
  reduction to overlap its latency, or after it to save registers).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES, hopper_features
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.template import Template
from core.backends.arrays import dtype_bytes
from core.workloads.rmsnorm.cuda_cluster import CLUSTER_ROW, CLUSTER_SUM

TOKENS = ("LOAD_X", "LOAD_W", "REDUCE", "STORE")
MAX_ITEMS = 64  # floats of the row group per thread held in registers, beyond that the rows spill
SMEM_ROW_BYTES = 40 * 1024  # the rows' static shared memory, leaving room under 48 KB for the reduction


def _cols_max(problem: dict) -> int:
    return max(problem["cols"], 1031)


class CudaRmsNormTemplate(Template):
    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        cols = _cols_max(self.problem)
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512, 1024), "threads per block"),
                ChoiceGene("rows_per_block", (1, 2, 4), "consecutive rows a block normalises together (a group)"),
                ChoiceGene("schedule", ("rows", "persistent"), "a block per row group, or a persistent grid"),
                ChoiceGene("waves", (1, 2, 4, 8), "blocks per SM of the persistent grid"),
                ChoiceGene("split", (1, 2, 4, 8) if hopper_features(self.device.arch) else (1,),
                           "blocks of a cluster sharing a row group, a slice each (sm_90 on)", legacy=1),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per load/store"),
                ChoiceGene("load", ("", ".nc", ".cs"), "load cache hint: plain, non-coherent, streaming"),
                ChoiceGene("store", ("", ".cs"), "store cache hint: plain or streaming"),
            ),
            "register_allocation": (
                MapGene("regs", (("row", ("registers", "smem", "reread")), ("reduce", ("shuffle", "smem", "all_warps"))),
                        "where the row waits for its norm; how the block sums"),
            ),
            "instruction_sequence": (
                SequenceGene("body", TOKENS, (), (("LOAD_X", "REDUCE"), ("REDUCE", "STORE"), ("LOAD_W", "STORE")),
                             "order of the row's steps"),
            ),
        }

        def fits(g: Genome) -> str | None:
            p, r = g["parallel_config"], g["register_allocation"]["regs"]
            split, group = p["split"], p["rows_per_block"]
            if split > 1 and p["schedule"] != "rows":
                return "a row group split over a cluster takes a cluster of its own: no persistent grid"
            per_thread = group * -(-cols // (split * p["threads"]))
            if r["row"] == "registers" and per_thread > MAX_ITEMS:
                return f"{per_thread} row elements per thread in registers (> {MAX_ITEMS})"
            if r["row"] == "smem" and 4 * srow_floats(g, self.problem) > SMEM_ROW_BYTES:
                return f"the row group's slices do not fit in {SMEM_ROW_BYTES // 1024} KB of static shared memory"
            return None

        seed = {"parallel_config": {"threads": 1024, "rows_per_block": 1, "schedule": "rows", "waves": 1, "split": 1},
                "memory_pattern": {"vec": 16 // elt, "load": "", "store": ""},
                "register_allocation": {"regs": {"row": "registers", "reduce": "shuffle"}},
                "instruction_sequence": {"body": ("LOAD_X", "LOAD_W", "REDUCE", "STORE")}}
        seeds = [seed]
        if hopper_features(self.device.arch):  # decode rows over a cluster: one row over 8 SMs or 2, 4 rows over 8
            seeds += [{**seed, "parallel_config": {**seed["parallel_config"], "threads": threads, "split": split,
                                                   "rows_per_block": group}}
                      for threads, split, group in ((128, 8, 1), (512, 2, 1), (256, 8, 4))]
        return GeneSpace(groups, (fits,), tuple(seeds), canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        source = render_source(genome, self.problem)
        threads = p["threads"]
        row = genome["register_allocation"]["regs"]["row"]
        group = p["rows_per_block"]
        shared = 4 * red_floats(p) + (4 * srow_floats(genome, self.problem) if row == "smem" else 0)
        shared += 4 * group * p["split"] if p["split"] > 1 else 0
        per_thread = group * -(-_cols_max(self.problem) // (threads * p["split"]))
        launch = {"threads": threads, "rows_per_block": p["rows_per_block"], "persistent": p["schedule"] == "persistent",
                  "waves": p["waves"], "split": p["split"]}
        resources = {"threads": threads, "shared_bytes": shared,
                     "registers": min(255, 32 + (2 * per_thread if row == "registers" else 8))}
        return KernelSource("cuda", source, "abebot_rmsnorm", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        rows, cols = shape["rows"], shape["cols"]
        blocks = -(-rows // lp["rows_per_block"])
        if lp["persistent"]:
            blocks = min(blocks, self.device.multiprocessors * lp["waves"])
        blocks *= lp["split"]  # a cluster of ``split`` blocks per row group (the kernel's __cluster_dims__)
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
    """The templated row-group function's steps, in the genome's order: every step covers all the
    group's rows, so their loads are in flight together and their sums meet in one reduction."""
    steps = {
        "LOAD_X": """
    // LOAD_X: x (+ residual, written back) of every row of the group into the row cache; sums of
    // squares on the fly. Every load is issued before the first sum is stored: a store is ordered
    // after the loads before it, so one row (or vector) at a time would wait for memory each.
    float xs[ROWS_PER_BLOCK][ITEMS][V], rs[ROWS_PER_BLOCK][ITEMS][V];
#pragma unroll
    for (int r = 0; r < ROWS_PER_BLOCK; ++r) {
        const long long ro = (long long)r * cols;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int c = (it * THREADS + threadIdx.x) * V;
            if ((r == 0 || r < nrows) && (FULL || c < n)) {
                load_vec<V>(x + ro + c, xs[r][it]);
                if (HAS_RES) load_vec<V>(res + ro + c, rs[r][it]);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) xs[r][it][e] = rs[r][it][e] = 0.f;
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ROWS_PER_BLOCK; ++r) {
        const long long ro = (long long)r * cols;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int c = (it * THREADS + threadIdx.x) * V;
            if (HAS_RES) {
#pragma unroll
                for (int e = 0; e < V; ++e) xs[r][it][e] += rs[r][it][e];
                if ((r == 0 || r < nrows) && (FULL || c < n)) store_vec<V>(res + ro + c, xs[r][it]);
            }
#pragma unroll
            for (int e = 0; e < V; ++e) { ss[r] += xs[r][it][e] * xs[r][it][e]; KEEP(r, it, e, xs[r][it][e]); }
        }
    }""",
        "LOAD_W": """
    // LOAD_W: the weight slice this thread needs (the same for every row), into registers
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const int c = (it * THREADS + threadIdx.x) * V;
        if (FULL || c < n) load_vec<V>(w + c, wv[it]);
    }""",
        "REDUCE": """
    // REDUCE: row-wide sums of squares (the block's, or the cluster's) -> 1 / rms
    row_sums<ROWS_PER_BLOCK>(ss, red);
#pragma unroll
    for (int r = 0; r < ROWS_PER_BLOCK; ++r) ss[r] = rsqrtf(ss[r] / cols + eps);""",
        "STORE": """
    // STORE: out = x * rstd * w
#pragma unroll
    for (int r = 0; r < ROWS_PER_BLOCK; ++r) {
        const long long ro = (long long)r * cols;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int c = (it * THREADS + threadIdx.x) * V;
            if ((r == 0 || r < nrows) && (FULL || c < n)) {
                float xv[V], ov[V];
                FETCH(r, it, c, xv);
#pragma unroll
                for (int e = 0; e < V; ++e) ov[e] = xv[e] * ss[r] * wv[it][e];
                store_vec_out<V>(out + ro + c, ov);
            }
        }
    }""",
    }
    keep = {"registers": "#define KEEP(r, it, e, v) row[r][it][e] = (v)\n"
                         "#define FETCH(r, it, c, xv) for (int e = 0; e < V; ++e) xv[e] = row[r][it][e]",
            "smem": "#define KEEP(r, it, e, v) srow[(r) * SLICE + (it * THREADS + threadIdx.x) * V + (e)] = (v)\n"
                    "#define FETCH(r, it, c, xv) for (int e = 0; e < V; ++e) xv[e] = srow[(r) * SLICE + (c) + e]",
            "reread": "#define KEEP(r, it, e, v) (void)0\n#define FETCH(r, it, c, xv) "
                      "if (HAS_RES) load_vec<V, false>(res + ro + (c), xv); else load_vec<V>(x + ro + (c), xv)"}[mode]
    pre = "    float row[ROWS_PER_BLOCK][ITEMS][V];\n" if mode == "registers" else ""
    code = "".join(steps[t] for t in body)
    return f"""{keep}
// rows [0, nrows) of a group, ``cols`` apart; of each, the n columns of this block's slice
// (FULL: the slice is exactly ITEMS vectors a thread, so no column needs a bound check; a group
// always has its row 0, so that row's checks fold away too)
template <int V, bool FULL>
static __device__ __forceinline__ void row_norm(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out,
                                                int n, int cols, int nrows, float eps, float *red, float *srow) {{
    constexpr int ITEMS = (COLS_MAX + SPLIT * THREADS * V - 1) / (SPLIT * THREADS * V);
    constexpr int SLICE = ITEMS * THREADS * V;  // a row's place in srow
    (void)SLICE;
{pre}    float wv[ITEMS][V];
    float ss[ROWS_PER_BLOCK];
#pragma unroll
    for (int r = 0; r < ROWS_PER_BLOCK; ++r) ss[r] = 0.f;
{code}
    if (PERSISTENT) __syncthreads();  // red and srow are reused by the block's next group
}}
#undef KEEP
#undef FETCH
"""


# Row indices are int (rows <= 2^20), offsets 64-bit: every warp issues these instructions before
# its first load, and in a launch-bound kernel each one counts.
ROW_GROUP = """ {
        const int row0 = rb * ROWS_PER_BLOCK;
        if (row0 < rows) {
            const int nrows = min(ROWS_PER_BLOCK, rows - row0);
            const long long o = (long long)row0 * cols;
            if (aligned && FULL_FIT && cols == COLS_MAX) row_norm<VEC, FULL_FIT>(x + o, w, res + o, out + o, cols, cols, nrows, eps, red, srow);
            else if (aligned) row_norm<VEC, false>(x + o, w, res + o, out + o, cols, cols, nrows, eps, red, srow);
            else for (int i = 0; i < nrows; ++i) row_norm_scalar(x + o + (long long)i * cols, w, res + o + (long long)i * cols, out + o + (long long)i * cols, cols, eps, red);
        }
    }"""


def red_floats(p: dict) -> int:
    """Floats of the block reduction's shared buffer: a tree's one per thread, or 32 warp totals
    and a result for each row of the group."""
    return max(p["threads"] + 1, 33 * p["rows_per_block"])


def full_fit(g: Genome, problem: dict) -> bool:
    """Whether a row of the problem's widest shape is exactly whole vectors of every thread of the
    cluster: then the kernel has a second vector path for such rows, without bound checks."""
    p = g["parallel_config"]
    return _cols_max(problem) % (p["split"] * p["threads"] * g["memory_pattern"]["vec"]) == 0


def srow_floats(g: Genome, problem: dict) -> int:
    """Floats of shared memory that hold the row group's slices (``row = smem``)."""
    p, vec = g["parallel_config"], g["memory_pattern"]["vec"]
    per_block = p["split"] * p["threads"] * vec
    return p["rows_per_block"] * -(-_cols_max(problem) // per_block) * p["threads"] * vec


def render_source(g: Genome, problem: dict) -> str:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    dtype = problem["dtype"]
    elt = dtype_bytes(dtype)
    T, to_f, from_f = SCALAR_TYPES[dtype]
    cols_max = _cols_max(problem)
    ld, st = m["load"], m["store"]
    reduce_fn = {"shuffle": """
#pragma unroll
    for (int r = 0; r < N; ++r) {
        for (int o = 16; o > 0; o >>= 1) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
        if (threadIdx.x % 32 == 0) red[r * 32 + threadIdx.x / 32] = s[r];
    }
    __syncthreads();
    if (threadIdx.x < 32) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
            float t = threadIdx.x < THREADS / 32 ? red[r * 32 + threadIdx.x] : 0.f;
            for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
            if (threadIdx.x == 0) red[N * 32 + r] = t;
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < N; ++r) s[r] = red[N * 32 + r];""", "all_warps": """
    // one barrier: every warp sums the warp totals itself (the same butterfly everywhere, so every
    // thread holds the same bits)
#pragma unroll
    for (int r = 0; r < N; ++r) {
        for (int o = 16; o > 0; o >>= 1) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
        if (threadIdx.x % 32 == 0) red[r * 32 + threadIdx.x / 32] = s[r];
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float t = threadIdx.x % 32 < THREADS / 32 ? red[r * 32 + threadIdx.x % 32] : 0.f;
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
        s[r] = t;
    }""", "smem": """
#pragma unroll
    for (int r = 0; r < N; ++r) {
        red[threadIdx.x] = s[r];
        __syncthreads();
        for (int st = THREADS / 2; st > 0; st >>= 1) {
            if (threadIdx.x < st) red[threadIdx.x] += red[threadIdx.x + st];
            __syncthreads();
        }
        s[r] = red[0];
        if (N > 1) __syncthreads();  // red is rewritten for the next row
    }"""}[r["reduce"]]
    rows_loop = ("for (int rb = blockIdx.x; rb < (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK; rb += gridDim.x)" if p["schedule"] == "persistent"
                 else "const int rb = blockIdx.x;")
    # the grid is set at launch: what sizes it is recorded here, so a grid change changes the source
    waves = f"#define WAVES {p['waves']}  // blocks per SM of the persistent grid\n" if p["schedule"] == "persistent" else ""
    return f"""// AbeBot generated CUDA RMSNorm ({dtype}, residual={problem['residual']})
typedef {T} T;
#define THREADS {p['threads']}
#define ROWS_PER_BLOCK {p['rows_per_block']}
{waves}#define SPLIT {p['split']}  // blocks of a cluster sharing a row group
#define PERSISTENT {int(p['schedule'] == 'persistent')}  // a block goes on to further row groups
#define RED {red_floats(p)}  // floats of the block reduction's shared memory
#define VEC {m['vec']}
#define COLS_MAX {cols_max}
#define FULL_FIT {int(full_fit(g, problem))}  // a row of COLS_MAX is whole vectors of every thread
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

// the block's totals of N values, in place, in every thread
template <int N> static __device__ __forceinline__ void block_sums(float (&s)[N], float *red) {{{reduce_fn}
}}
{CLUSTER_SUM if p['split'] > 1 else "#define row_sums block_sums"}
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
    float sum[1] = {{ss}};
    block_sums<1>(sum, red);
    const float rstd = rsqrtf(sum[0] / cols + eps);
    for (int c = threadIdx.x; c < cols; c += THREADS) {{
        const float v = HAS_RES ? to_f(res[c]) : to_f(x[c]);
        out[c] = from_f(v * rstd * to_f(w[c]));
    }}
    __syncthreads();
}}

extern "C" __global__ void __launch_bounds__(THREADS){" __cluster_dims__(SPLIT, 1, 1)" if p['split'] > 1 else ""}
abebot_rmsnorm(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out, int rows, int cols, float eps) {{
    __shared__ float red[RED];
    {f"__shared__ float srow[{srow_floats(g, problem)}];" if r["row"] == "smem" else "float *srow = nullptr;"}
    const bool aligned = cols % VEC == 0;  // else rows start off the vector grid: run the scalar twin
{CLUSTER_ROW if p['split'] > 1 else '    ' + rows_loop + ROW_GROUP}
}}
"""


TEMPLATE = CudaRmsNormTemplate
