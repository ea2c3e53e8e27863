"""CUDA C gathered GEMV template (header-free: bf16/fp16 travel as 16-bit integers).

A *task* is a group of ``rows`` candidates of one token. A team of ``split`` warps takes a task:
its lanes stride over the hidden size, ``vec`` elements per access, each lane keeping one float32
partial sum per row; warp shuffles, then (split > 1) shared memory, add them up. A row group past
the last candidate computes on a valid row and stores nothing. Hidden sizes that are not a
multiple of ``vec`` (or a misaligned tensor) run a scalar twin.

* parallel_config -- threads per block, warps per task (split-K over the hidden size), a block per
  ``threads / 32 / split`` tasks or a persistent grid of ``waves`` blocks per SM;
* memory_pattern -- elements per access (16 bytes down to one element), cache hints on the W rows
  (plain, non-coherent, streaming, no L1 allocation: each row is read once) and on h (reused by
  every task of its token);
* register_allocation -- rows per task (h loaded once for all of them), ``#pragma unroll`` of the
  hidden loop;
* instruction_sequence -- the order of LOAD_H, LOAD_W and FMA, and an optional PREFETCH of the W
  rows' next chunk into L2.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.arrays import dtype_bytes
from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.template import Template

TOKENS = ("LOAD_H", "LOAD_W", "FMA")
BEFORE = (("LOAD_H", "FMA"), ("LOAD_W", "FMA"))
MAX_FLOATS = 80  # h and W floats per lane in flight, of the unrolled steps
WAVES = (1, 2, 4, 8)  # blocks per SM of a persistent grid


class CudaGatherGemvTemplate(Template):
    """The CUDA template of :class:`~core.workloads.gather_gemv.GatherGemvWorkload`."""

    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        elt = dtype_bytes(self.problem["dtype"])
        groups = {
            "parallel_config": (
                ChoiceGene("threads", (64, 128, 256, 512), "threads per block"),
                ChoiceGene("split", (1, 2, 4, 8), "warps sharing one task (split-K over the hidden size)"),
                ChoiceGene("schedule", ("tasks", "persistent"), "a block per group of tasks, or a persistent grid"),
                ChoiceGene("waves", WAVES, "blocks per SM of the persistent grid"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per access (16 bytes at most)"),
                ChoiceGene("w_load", ("", ".nc", ".cs", ".L1::no_allocate", ".nc.L1::no_allocate"), "cache hint of the W loads"),
                ChoiceGene("h_load", ("", ".nc", ".L1::evict_last"), "cache hint of the h loads"),
            ),
            "register_allocation": (
                MapGene("regs", (("rows", (1, 2, 4, 8)), ("unroll", (1, 2, 4))), "rows per task, hidden-loop unroll"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, ("PREFETCH",), BEFORE, "order of a step's operations"),),
        }

        def fits(g: Genome) -> str | None:
            p = g["parallel_config"]
            if p["split"] > p["threads"] // 32:
                return f"split {p['split']} warps > {p['threads'] // 32} warps per block"
            if _floats(g) > MAX_FLOATS:
                return f"{_floats(g)} floats in flight per lane (> {MAX_FLOATS})"
            return None

        wide = 16 // elt
        seeds = ({"parallel_config": {"threads": 256, "split": 1, "schedule": "tasks", "waves": 1},
                  "memory_pattern": {"vec": wide, "w_load": "", "h_load": ""},
                  "register_allocation": {"regs": {"rows": 1, "unroll": 1}}, "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"threads": 256, "split": 4, "schedule": "tasks", "waves": 1},
                  "memory_pattern": {"vec": wide, "w_load": ".nc.L1::no_allocate", "h_load": ".nc"},
                  "register_allocation": {"regs": {"rows": 2, "unroll": 2}}, "instruction_sequence": {"body": TOKENS}})
        return GeneSpace(groups, (fits,), seeds, canonicalisers=CANONICALISERS + (self._fewest_waves,))

    def _blocks(self, g: Genome, shape: dict) -> int:
        p = g["parallel_config"]
        tasks = shape["tokens"] * -(-shape["cands"] // g["register_allocation"]["regs"]["rows"])
        return -(-tasks // (p["threads"] // 32 // p["split"]))

    def _fewest_waves(self, g: Genome) -> Genome:
        # The persistent grid is min(blocks, SMs x waves) on every verification shape: the fewest
        # waves that give the same grids everywhere (a decode problem has fewer tasks than SMs).
        p = g["parallel_config"]
        if p["schedule"] != "persistent" or p["threads"] // 32 < p["split"]:
            return g
        blocks = [self._blocks(g, s) for s in self.workload.shapes(self.problem)]
        sms = self.device.multiprocessors
        grids = lambda w: [min(b, sms * w) for b in blocks]  # noqa: E731
        fewest = next(w for w in WAVES if grids(w) == grids(p["waves"]))
        return with_gene(g, "parallel_config", "waves", fewest)

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        rows = genome["register_allocation"]["regs"]["rows"]
        launch = {"threads": p["threads"], "teams": p["threads"] // 32 // p["split"], "rows": rows,
                  "schedule": p["schedule"], "waves": p["waves"]}
        resources = {"threads": p["threads"], "shared_bytes": 4 * (p["threads"] // 32) * rows if p["split"] > 1 else 0,
                     "registers": min(255, 65536 // p["threads"], 32 + _floats(genome) + rows)}
        return KernelSource("cuda", render_source(genome, self.problem["dtype"]), "abebot_gather_gemv", ("-std=c++17",),
                            launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        tasks = shape["tokens"] * -(-shape["cands"] // lp["rows"])
        blocks = -(-tasks // lp["teams"])
        if lp["schedule"] == "persistent":
            blocks = min(blocks, self.device.multiprocessors * lp["waves"])
        return kernel.bind((blocks, 1, 1), (lp["threads"], 1, 1), (t["h"], t["W"], t["ids"], t["logits"], shape["tokens"],
                                                                   shape["cands"], shape["vocab"], shape["hidden"]))


TEMPLATE = CudaGatherGemvTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _waves_persistent_only(g: Genome) -> Genome:
    # waves sizes the persistent grid; a block per task group launches one block per group.
    if g["parallel_config"]["schedule"] != "persistent":
        g = with_gene(g, "parallel_config", "waves", 1)
    return g


CANONICALISERS = (_waves_persistent_only,)


def _floats(g: Genome) -> int:
    r = g["register_allocation"]["regs"]
    return (1 + r["rows"]) * g["memory_pattern"]["vec"] * r["unroll"]


_STEPS = {
    "LOAD_H": "\n        float hv[V]; load_vec<V, 0>(hr + k, hv);",
    "LOAD_W": "\n        float wv[ROWS][V];\n#pragma unroll\n        for (int r = 0; r < ROWS; ++r) load_vec<V, 1>(wr[r] + k, wv[r]);",
    "FMA": "\n#pragma unroll\n        for (int r = 0; r < ROWS; ++r)\n#pragma unroll\n            for (int e = 0; e < V; ++e) acc[r] += hv[e] * wv[r][e];",
    "PREFETCH": ("\n#pragma unroll\n        for (int r = 0; r < ROWS; ++r) if (k + stride < K)"
                 " asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(wr[r] + k + stride));"),
}


def _load(hint: str) -> str:
    return f"""        if constexpr (BYTES == 2) {{ unsigned short h; asm volatile("ld.global{hint}.u16 %0, [%1];" : "=h"(h) : "l"(p)); w[0] = h; }}
        else if constexpr (BYTES == 16) asm volatile("ld.global{hint}.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
        else if constexpr (BYTES == 8) asm volatile("ld.global{hint}.v2.u32 {{%0,%1}}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
        else asm volatile("ld.global{hint}.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));"""


def render_source(g: Genome, dtype: str) -> str:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    T, to_f, from_f = SCALAR_TYPES[dtype]
    steps = "".join(_STEPS[tok] for tok in g["instruction_sequence"]["body"])
    split = p["split"]
    waves = f"#define WAVES {p['waves']}  // grid size: set at launch, recorded here\n" if p["schedule"] == "persistent" else ""
    loop = ("for (long long base = (long long)blockIdx.x * TEAMS; base < tasks; base += (long long)gridDim.x * TEAMS)"
            if p["schedule"] == "persistent" else "for (long long base = (long long)blockIdx.x * TEAMS; base < tasks; base = tasks)")
    combine = ("""
        // split-K: every warp's sums through shared memory (a uniform loop: every thread gets here)
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r) red[warp * ROWS + r] = acc[r];
        }
        __syncthreads();
        if (lane == 0 && part == 0) {
#pragma unroll
            for (int q = 1; q < SPLIT; ++q)
#pragma unroll
                for (int r = 0; r < ROWS; ++r) acc[r] += red[(warp + q) * ROWS + r];
        }
        __syncthreads();""" if split > 1 else "")
    return f"""// AbeBot generated CUDA gathered GEMV: logits[t, j] = h[t] . W[ids[t, j]] ({dtype})
typedef {T} T;
#define THREADS {p['threads']}
#define SPLIT {split}
#define TEAMS (THREADS / 32 / SPLIT)
{waves}#define VEC {m['vec']}
#define ROWS {r['rows']}
#define ELT {dtype_bytes(dtype)}

static __device__ __forceinline__ float to_f(T h) {{ {to_f} }}
static __device__ __forceinline__ T from_f(float f) {{ {from_f} }}

// V elements -> V floats through one load; WHICH 0 is h, 1 a row of W
template <int V, int WHICH> static __device__ __forceinline__ void load_vec(const T *p, float *o) {{
    constexpr int BYTES = V * ELT;
    unsigned w[BYTES >= 4 ? BYTES / 4 : 1];
    if constexpr (WHICH == 0) {{
{_load(m["h_load"])}
    }} else {{
{_load(m["w_load"])}
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

// this lane's partial sums of ROWS dot products: elements start, start + stride, ... (V at a time)
template <int V>
static __device__ __forceinline__ void dot_span(const T *__restrict__ hr, const T *const *wr, int K, int start, int stride,
                                                float *acc) {{
#pragma unroll {r['unroll']}
    for (int k = start; k < K; k += stride) {{{steps}
    }}
}}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_gather_gemv(const T *__restrict__ h, const T *__restrict__ W, const int *__restrict__ ids, T *__restrict__ logits,
                   int tokens, int cands, int vocab, int K) {{
    {"__shared__ float red[THREADS / 32 * ROWS];" if split > 1 else ""}
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, team = warp / SPLIT, part = warp % SPLIT;
    const int G = (cands + ROWS - 1) / ROWS;
    const long long tasks = (long long)tokens * G;
    const unsigned long long any = (unsigned long long)h | (unsigned long long)W;
    const bool vec_ok = K % VEC == 0 && any % (VEC * ELT) == 0;  // else the scalar twin
    (void)vocab; (void)part;
    {loop} {{
        const long long task = base + team;
        const bool active = task < tasks;
        const int t = active ? (int)(task / G) : 0, j0 = active ? (int)(task % G) * ROWS : 0;
        const T *wr[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)  // a row past the last candidate reads the first one and is not stored
            wr[r] = W + (long long)ids[(long long)t * cands + (j0 + r < cands ? j0 + r : j0)] * K;
        float acc[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
        const T *hr = h + (long long)t * K;
        if (active) {{
            if (vec_ok) dot_span<VEC>(hr, wr, K, (part * 32 + lane) * VEC, SPLIT * 32 * VEC, acc);
            else dot_span<1>(hr, wr, K, part * 32 + lane, SPLIT * 32, acc);
        }}
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
            for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);{combine}
        if (active && lane == 0 && part == 0) {{
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
                if (j0 + r < cands) logits[(long long)t * cands + j0 + r] = from_f(acc[r]);
        }}
    }}
}}
"""
