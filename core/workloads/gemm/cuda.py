"""CUDA C GEMM template (header-free; NVRTC or ``nvcc -ptx``), bounds-safe for any M, N, K.

Genes and what they change in the code:

* parallel_config -- block tile BM x BN x BK, warp grid WARPS_M x WARPS_N (threads), GROUP_M
  rasterisation of blocks, ``__launch_bounds__`` minimum blocks per SM (a register cap);
* memory_pattern -- global load vector width, shared-memory layout (plain, padded rows, or an
  XOR swizzle of 16-byte chunks), pipelining depth (stages of the shared-memory ring), and
  ``cp.async`` copies vs loads through registers;
* register_allocation -- tensor-core path (``ldmatrix`` + ``mma.sync`` m16n8k16, bf16/fp16) vs
  FFMA path (thread tile in registers), the lane layout and the contiguous or strided ownership
  of the FFMA thread tile, unrolling of the k loop;
* instruction_sequence -- the order of the main loop's stages (issue next tile, wait+barrier,
  math, optional extra barrier). Whatever the order, the renderer inserts the barrier a ring
  slot needs before it is overwritten and derives the ``cp.async.wait_group`` depth, so every
  order is correct and only its overlap changes.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable

from core.backends.base import KernelSource
from core.backends.cuda import SCALAR_TYPES
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.template import Template
from core.backends.arrays import dtype_bytes

LOOP = ("LOAD", "WAIT", "MATH")


def _derived(g: Genome, dtype: str) -> dict:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    elt = dtype_bytes(dtype)
    wm, wn = p["warps_m"], p["warps_n"]
    d = {"elt": elt, "threads": 32 * wm * wn, "wtm": p["block_m"] // wm, "wtn": p["block_n"] // wn}
    lm, ln = (4, 8) if r["lanes"] == "4x8" else (8, 4)
    d.update(lm=lm, ln=ln, tm=d["wtm"] // lm, tn=d["wtn"] // ln)
    ch = 16 // elt
    pad = ch if m["smem_layout"] == "pad" else 0
    d.update(ch=ch, lda=p["block_k"] + pad, ldb=p["block_n"] + pad)
    d["smem"] = m["stages"] * (p["block_m"] * d["lda"] + p["block_k"] * d["ldb"]) * elt
    d["acc"] = (d["wtm"] // 16) * (d["wtn"] // 8) * 4 if r["math"] == "mma" else d["tm"] * d["tn"]
    return d


class CudaGemmTemplate(Template):
    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        dtype = self.problem["dtype"]
        elt = dtype_bytes(dtype)
        maths = ("mma", "ffma") if dtype != "float32" else ("ffma",)  # fp32 stays exact: no TF32
        groups = {
            "parallel_config": (
                ChoiceGene("block_m", (32, 64, 128, 256), "rows of C per block"),
                ChoiceGene("block_n", (32, 64, 128, 256), "columns of C per block"),
                ChoiceGene("block_k", (16, 32, 64), "K depth of a shared-memory tile"),
                ChoiceGene("warps_m", (1, 2, 4), "warps along M"),
                ChoiceGene("warps_n", (1, 2, 4), "warps along N"),
                ChoiceGene("group_m", (1, 8), "GROUP_M rasterisation of blocks (L2 reuse)"),
                ChoiceGene("min_blocks", (1, 2), "__launch_bounds__ minimum resident blocks (caps registers)"),
            ),
            "memory_pattern": (
                ChoiceGene("vec", tuple(v for v in (1, 2, 4, 8) if v * elt <= 16), "elements per global load"),
                ChoiceGene("smem_layout", ("plain", "pad", "xor"), "shared tiles: plain rows, rows padded 16 B, XOR-swizzled chunks"),
                ChoiceGene("stages", (2, 3, 4), "shared-memory ring depth (tiles in flight)"),
                ChoiceGene("copy", ("async", "sync"), "cp.async global->shared, or loads through registers"),
            ),
            "register_allocation": (
                MapGene("regs", (("math", maths), ("lanes", ("4x8", "8x4")), ("assign", ("contiguous", "strided")),
                                 ("unroll", (1, 2, 0))),
                        "math path, FFMA lane layout and thread-tile ownership, k-loop unroll (0 = full)"),
            ),
            "instruction_sequence": (LOOP_GENE,),
        }
        smem_limit = self.device.shared_mem_per_block or 232448

        def structure(g: Genome) -> str | None:
            p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
            d = _derived(g, dtype)
            if d["threads"] > 1024:
                return "more than 1024 threads"
            if p["block_m"] % p["warps_m"] or p["block_n"] % p["warps_n"]:
                return "tile not divisible by the warp grid"
            if r["math"] == "mma" and (d["wtm"] % 16 or d["wtn"] % 16):
                return f"mma warp tile {d['wtm']}x{d['wtn']} not a multiple of 16x16"
            if r["math"] == "ffma" and (d["wtm"] % d["lm"] or d["wtn"] % d["ln"]):
                return "ffma warp tile not divisible by the lane layout"
            if d["acc"] > 128:
                return f"{d['acc']} accumulators per thread (> 128)"
            if m["vec"] > p["block_k"] or m["vec"] > p["block_n"]:
                return "vector wider than a tile row"
            if m["copy"] == "async" and m["vec"] * elt < 4:
                return "cp.async copies 4, 8 or 16 bytes"
            if d["smem"] > smem_limit:
                return f"shared memory {d['smem']} B > {smem_limit} B"
            return None

        seed = {"parallel_config": {"block_m": 128, "block_n": 128, "block_k": 32, "warps_m": 2, "warps_n": 2,
                                    "group_m": 8, "min_blocks": 1},
                "memory_pattern": {"vec": 8 if elt == 2 else 4, "smem_layout": "pad", "stages": 3, "copy": "async"},
                "register_allocation": {"regs": {"math": maths[0], "lanes": "4x8", "assign": "strided", "unroll": 0}},
                "instruction_sequence": {"loop": ("WAIT", "MATH", "LOAD")}}
        return GeneSpace(groups, (structure,), (seed,), canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        dtype = self.problem["dtype"]
        d = _derived(genome, dtype)
        source = render_source(genome, dtype)
        launch = {"block_m": genome.get("parallel_config", "block_m"), "block_n": genome.get("parallel_config", "block_n"),
                  "threads": d["threads"], "dynamic_shared_bytes": d["smem"]}
        resources = {"threads": d["threads"], "shared_bytes": d["smem"], "registers": min(255, d["acc"] + 40)}
        return KernelSource("cuda", source, "abebot_gemm", ("-std=c++17",), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        m, n, k = shape["m"], shape["n"], shape["k"]
        tiles = -(-m // lp["block_m"]) * -(-n // lp["block_n"])
        return kernel.bind((tiles, 1, 1), (lp["threads"], 1, 1), (t["a"], t["b"], t["c"], m, n, k), lp["dynamic_shared_bytes"])


LOOP_GENE = SequenceGene("loop", LOOP, ("SYNC",), (("WAIT", "MATH"),), "main-loop stage order; SYNC is an extra barrier")
# Every legal main-loop order, shortest first: the canonical order of a loop is the first that renders it.
_ORDERS = sorted((o for n in (3, 4) for o in itertools.permutations(LOOP + ("SYNC",), n) if LOOP_GENE.validate(o) is None),
                 key=lambda o: (len(o), [(LOOP + ("SYNC",)).index(t) for t in o]))


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _mma_lanes(g: Genome) -> Genome:
    # The tensor-core path takes its fragments with ldmatrix in the mma.sync layout: the FFMA lane
    # layout (LM x LN) and thread-tile ownership (STRIDED) are only read on the FFMA path.
    if g["register_allocation"]["regs"]["math"] == "mma":
        g = with_gene(g, "register_allocation", "regs", "4x8", key="lanes")
        g = with_gene(g, "register_allocation", "regs", "strided", key="assign")
    return g


def _short_k_loop(g: Genome) -> Genome:
    # compute_tile's k loop runs BK/16 steps on the tensor-core path: one step is the same loop
    # whatever the unroll, and unrolling 2 of 2 steps is the full unroll (0).
    r = g["register_allocation"]["regs"]
    steps = g["parallel_config"]["block_k"] // 16 if r["math"] == "mma" else g["parallel_config"]["block_k"]
    if steps == 1 or (steps == 2 and r["unroll"] == 2):
        g = with_gene(g, "register_allocation", "regs", 0, key="unroll")
    return g


def _loop_order(g: Genome) -> Genome:
    # Orders that render the same main loop are one order: a SYNC right before a LOAD whose ring slot
    # the previous MATH read is the barrier the renderer writes there anyway, and with synchronous
    # copies WAIT is a bare barrier, interchangeable with SYNC.
    copy_async = g["memory_pattern"]["copy"] == "async"
    body = _loop_body(g["instruction_sequence"]["loop"], copy_async)
    first = next(o for o in _ORDERS if _loop_body(o, copy_async) == body)
    return with_gene(g, "instruction_sequence", "loop", first)


CANONICALISERS = (_mma_lanes, _short_k_loop, _loop_order)



MMA_TYPES = {"bfloat16": "bf16", "float16": "f16", "float32": ""}  # the mma.sync operand type


def _loop_body(seq: tuple, copy_async: bool) -> list[str]:
    """Main-loop statements in the genome's order, plus the barriers correctness needs."""
    pos = {t: i for i, t in enumerate(seq)}
    n = len(seq)
    # Is there a barrier on the way from MATH (iteration kt-1) round to LOAD (iteration kt)?
    between = [seq[(pos["MATH"] + j) % n] for j in range(1, (pos["LOAD"] - pos["MATH"]) % n)]
    guard = not any(t in ("WAIT", "SYNC") for t in between)
    pending = "STAGES - 1" if pos["LOAD"] < pos["WAIT"] else "STAGES - 2"
    out = []
    for tok in seq:
        if tok == "LOAD":
            if guard:  # the slot LOAD overwrites was read by the previous MATH (the same statement as SYNC)
                out.append("__syncthreads();")
            out.append("{ int nt = kt + STAGES - 1; if (nt < KT) load_tile(A, B, sA, sB, nt % STAGES, nt, m0, n0, M, N, K); cp_commit(); }")
        elif tok == "WAIT":
            out.append(f"cp_wait<{pending}>(); __syncthreads();" if copy_async else "__syncthreads();")
        elif tok == "MATH":
            out.append("compute_tile(sA + (kt % STAGES) * A_STAGE, sB + (kt % STAGES) * B_STAGE, acc);")
        elif tok == "SYNC":
            out.append("__syncthreads();")
    return out


def render_source(g: Genome, dtype: str) -> str:
    p, m, r = g["parallel_config"], g["memory_pattern"], g["register_allocation"]["regs"]
    d = _derived(g, dtype)
    (T, to_f, from_f), mma_t = SCALAR_TYPES[dtype], MMA_TYPES[dtype]
    unroll = {0: "#pragma unroll", 1: "#pragma unroll 1", 2: "#pragma unroll 2"}[r["unroll"]]
    body = "\n        ".join(_loop_body(g["instruction_sequence"]["loop"], m["copy"] == "async"))
    nch_a = max(1, min(p["block_k"] // d["ch"], 8))
    nch_b = max(1, min(p["block_n"] // d["ch"], 8))
    return f"""// AbeBot generated CUDA GEMM ({dtype})
typedef {T} T;
#define BM {p['block_m']}
#define BN {p['block_n']}
#define BK {p['block_k']}
#define WARPS_M {p['warps_m']}
#define WARPS_N {p['warps_n']}
#define THREADS {d['threads']}
#define GROUP_M {p['group_m']}
#define MIN_BLOCKS {p['min_blocks']}
#define VEC {m['vec']}
#define STAGES {m['stages']}
#define COPY_ASYNC {int(m['copy'] == 'async')}
#define SWIZZLE {int(m['smem_layout'] == 'xor')}
#define LDA {d['lda']}
#define LDB {d['ldb']}
#define CH {d['ch']}
#define NCH_A {nch_a}
#define NCH_B {nch_b}
#define A_STAGE (BM * LDA)
#define B_STAGE (BK * LDB)
#define WTM (BM / WARPS_M)
#define WTN (BN / WARPS_N)
#define USE_MMA {int(r['math'] == 'mma')}
#define LM {d['lm']}
#define LN {d['ln']}
#define TM (WTM / LM)
#define TN (WTN / LN)
#define STRIDED {int(r['assign'] == 'strided')}

static __device__ __forceinline__ float to_f(T h) {{ {to_f} }}
static __device__ __forceinline__ T from_f(float f) {{ {from_f} }}

// element (r, c) of a shared tile with leading dimension LD: padded rows or XOR-swizzled 16-byte chunks
#if SWIZZLE
#define A_IDX(r, c) ((r) * LDA + ((((c) / CH) ^ ((r) % NCH_A)) * CH) + ((c) % CH))
#define B_IDX(r, c) ((r) * LDB + ((((c) / CH) ^ ((r) % NCH_B)) * CH) + ((c) % CH))
#else
#define A_IDX(r, c) ((r) * LDA + (c))
#define B_IDX(r, c) ((r) * LDB + (c))
#endif

static __device__ __forceinline__ unsigned smem_u32(const void *p) {{
    unsigned a; asm("{{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }}" : "=r"(a) : "l"(p)); return a;
}}
static __device__ __forceinline__ void cp_commit() {{
#if COPY_ASYNC
    asm volatile("cp.async.commit_group;\\n" ::);
#endif
}}
template <int N> static __device__ __forceinline__ void cp_wait() {{
#if COPY_ASYNC
    asm volatile("cp.async.wait_group %0;\\n" :: "n"(N < 0 ? 0 : N));
#endif
}}

// one VEC-wide copy global -> shared; falls back to guarded element copies at edges / misalignment
static __device__ __forceinline__ void copy_vec(T *dst, const T *src, bool full, int valid) {{
    if (full) {{
#if COPY_ASYNC
        asm volatile("cp.async.{'cg' if m['vec'] * d['elt'] == 16 else 'ca'}.shared.global [%0], [%1], %2;\\n"
                     :: "r"(smem_u32(dst)), "l"(src), "n"(VEC * (int)sizeof(T)));
#else
#if VEC * {d['elt']} == 16
        *(uint4 *)dst = __ldg((const uint4 *)src);
#elif VEC * {d['elt']} == 8
        *(uint2 *)dst = __ldg((const uint2 *)src);
#elif VEC * {d['elt']} == 4
        *(unsigned *)dst = __ldg((const unsigned *)src);
#else
        *dst = *src;
#endif
#endif
    }} else {{
#pragma unroll
        for (int e = 0; e < VEC; ++e) dst[e] = e < valid ? src[e] : from_f(0.f);
    }}
}}

static __device__ __forceinline__ void load_tile(const T *__restrict__ A, const T *__restrict__ B, T *sA, T *sB,
                                                 int slot, int kt, int m0, int n0, int M, int N, int K) {{
    T *a = sA + slot * A_STAGE, *b = sB + slot * B_STAGE;
    const int k0 = kt * BK;
#pragma unroll
    for (int v = threadIdx.x; v < BM * BK / VEC; v += THREADS) {{
        int r = v / (BK / VEC), c = (v % (BK / VEC)) * VEC;
        int gr = m0 + r, gc = k0 + c;
        int valid = gr < M ? min(VEC, K - gc) : 0;
        copy_vec(a + A_IDX(r, c), A + (long long)min(gr, M - 1) * K + min(gc, K - 1), valid == VEC && (K % VEC) == 0, valid);
    }}
#pragma unroll
    for (int v = threadIdx.x; v < BK * BN / VEC; v += THREADS) {{
        int r = v / (BN / VEC), c = (v % (BN / VEC)) * VEC;
        int gr = k0 + r, gc = n0 + c;
        int valid = gr < K ? min(VEC, N - gc) : 0;
        copy_vec(b + B_IDX(r, c), B + (long long)min(gr, K - 1) * N + min(gc, N - 1), valid == VEC && (N % VEC) == 0, valid);
    }}
}}

#if USE_MMA
#define MI (WTM / 16)
#define NI (WTN / 8)
typedef float Acc[MI][NI][4];
static __device__ __forceinline__ void init_acc(Acc &acc) {{
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}}
static __device__ __forceinline__ void compute_tile(const T *a, const T *b, Acc &acc) {{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    {unroll}
    for (int kk = 0; kk < BK; kk += 16) {{
        unsigned af[MI][4], bfr[NI][2];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {{
            int row = wm * WTM + mi * 16 + (lane % 16), col = kk + (lane / 16) * 8;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0,%1,%2,%3}}, [%4];\\n"
                         : "=r"(af[mi][0]), "=r"(af[mi][1]), "=r"(af[mi][2]), "=r"(af[mi][3]) : "r"(smem_u32(a + A_IDX(row, col))));
        }}
#pragma unroll
        for (int ni = 0; ni < NI; ni += 2) {{
            int row = kk + (lane % 8) + ((lane / 8) % 2) * 8, col = wn * WTN + ni * 8 + (lane / 16) * 8;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{%0,%1,%2,%3}}, [%4];\\n"
                         : "=r"(bfr[ni][0]), "=r"(bfr[ni][1]), "=r"(bfr[ni + 1][0]), "=r"(bfr[ni + 1][1]) : "r"(smem_u32(b + B_IDX(row, col))));
        }}
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{mma_t}.{mma_t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\\n"
                             : "+f"(acc[mi][ni][0]), "+f"(acc[mi][ni][1]), "+f"(acc[mi][ni][2]), "+f"(acc[mi][ni][3])
                             : "r"(af[mi][0]), "r"(af[mi][1]), "r"(af[mi][2]), "r"(af[mi][3]), "r"(bfr[ni][0]), "r"(bfr[ni][1]));
    }}
}}
static __device__ __forceinline__ void store_c(T *C, Acc &acc, int m0, int n0, int M, int N) {{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {{
                int row = m0 + wm * WTM + mi * 16 + lane / 4 + h * 8, col = n0 + wn * WTN + ni * 8 + (lane % 4) * 2;
                if (row >= M) continue;
                T *dst = C + (long long)row * N + col;
                if (col + 1 < N && (N % 2) == 0 && sizeof(T) == 2) {{
                    unsigned lo = from_f(acc[mi][ni][2 * h]), hi = from_f(acc[mi][ni][2 * h + 1]);
                    *(unsigned *)dst = lo | (hi << 16);
                }} else {{
                    if (col < N) dst[0] = from_f(acc[mi][ni][2 * h]);
                    if (col + 1 < N) dst[1] = from_f(acc[mi][ni][2 * h + 1]);
                }}
            }}
}}
#else
typedef float Acc[TM][TN];
static __device__ __forceinline__ void init_acc(Acc &acc) {{
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
}}
// thread tile row i / column j of this thread inside the block tile
#if STRIDED
#define ROW_OF(i) (wm * WTM + (i) * LM + lm)
#define COL_OF(j) (wn * WTN + (j) * LN + ln)
#else
#define ROW_OF(i) (wm * WTM + lm * TM + (i))
#define COL_OF(j) (wn * WTN + ln * TN + (j))
#endif
static __device__ __forceinline__ void compute_tile(const T *a, const T *b, Acc &acc) {{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N, lm = lane / LN, ln = lane % LN;
    {unroll}
    for (int kk = 0; kk < BK; ++kk) {{
        float av[TM], bv[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) av[i] = to_f(a[A_IDX(ROW_OF(i), kk)]);
#pragma unroll
        for (int j = 0; j < TN; ++j) bv[j] = to_f(b[B_IDX(kk, COL_OF(j))]);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }}
}}
static __device__ __forceinline__ void store_c(T *C, Acc &acc, int m0, int n0, int M, int N) {{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N, lm = lane / LN, ln = lane % LN;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {{
            int row = m0 + ROW_OF(i), col = n0 + COL_OF(j);
            if (row < M && col < N) C[(long long)row * N + col] = from_f(acc[i][j]);
        }}
}}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
abebot_gemm(const T *__restrict__ A, const T *__restrict__ B, T *__restrict__ C, int M, int N, int K) {{
    extern __shared__ __align__(16) unsigned char smem[];
    T *sA = (T *)smem, *sB = sA + STAGES * A_STAGE;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x, width = GROUP_M * tiles_n, group = pid / width;
    const int first_m = group * GROUP_M, size_m = min(tiles_m - first_m, GROUP_M);
    const int m0 = (first_m + (pid % width) % size_m) * BM, n0 = ((pid % width) / size_m) * BN;
    const int KT = (K + BK - 1) / BK;
    Acc acc;
    init_acc(acc);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {{
        if (s < KT) load_tile(A, B, sA, sB, s, s, m0, n0, M, N, K);
        cp_commit();
    }}
    for (int kt = 0; kt < KT; ++kt) {{
        {body}
    }}
    cp_wait<0>();
    store_c(C, acc, m0, n0, M, N);
}}
"""


TEMPLATE = CudaGemmTemplate
