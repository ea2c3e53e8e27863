"""The tensor-core path of the CUDA W4A16 template (``instruction_sequence.math = mma``).

At M = 16 the float32 FMAs of the GEMV path run out of issue slots (16 x 2 x K x N flops), so
this path multiplies with ``mma.sync.m16n8k16`` (bf16 or fp16 in, float32 accumulators): x is the
16 x 16 A fragment (rows past M are zeros), the dequantised weights the 16 x 8 B fragments.

The weights are repacked once (:func:`repack`, through :meth:`Template.repack`, timed apart and
counted as memory) so that one 16-byte load gives a lane exactly the B fragments it needs: for
K in steps of 32 and N in blocks of 32 columns, ``packed[nb, ks, lane, j]`` (int32) holds, for
lane ``l = 4 g + t`` and column ``32 nb + 8 j + g``, the 8 values at ``k = 32 ks + 8 t + 4 s + 2 h
+ i`` (s, h, i in {0, 1}) with value (s, h, i) in bits ``4 (2 s + h) + 16 i``: the mma of step s
takes them as its k = 2 t + 8 h + i. A dot product does not care in which order its k come, so K
is permuted inside each step of 32, the same way for x: a lane's x fragments of a step are then the
8 adjacent values at ``32 ks + 8 t`` of its two rows, one 16-byte load each (not eight 4-byte
ones). ``(word >> 4 p) & 0x000F000F`` is a pair of values, low and high half, as the fragment
wants them, and lop3 with the 16-bit type's magic exponent makes them ``magic + q`` in one instruction
(FasterTransformer's and Marlin's trick); a subtraction of ``magic + z`` gives ``q - z`` exactly.
A warp's loads of one step are 512 contiguous bytes, and its steps are contiguous along K.

A block is ``WK x WN`` warps: ``WN`` side by side along N (they read the same x, from L1), ``WK``
splitting K by chunks of ``batch`` steps, added up through shared memory in a fixed order
(deterministic), and ``kblocks`` blocks split K the same way. Genes, as this path reads them:

* parallel_config -- threads (warps = threads / 32), ksplit (warps along K, at most the warps),
  kblocks (blocks along K: each writes its partial tile to a workspace, and the last of a tile to
  finish, by a counter it resets for the next launch, adds them up in block order);
* memory_pattern -- vec (4 vec n8 tiles a warp: 32 vec columns), the cache hints of both loads;
  stages: 0 loads the words into registers; S > 0 keeps S chunks in flight through a ring in
  dynamic shared memory filled by ``cp.async`` (with the x rows too when they come first and no
  norm is fused; :mod:`cuda_ring`), so the bytes in flight no longer cost registers (Marlin's reason
  for its pipeline);
* register_allocation -- batch (K steps of 32 loaded before their math), pipeline (the next chunk's
  loads issued before this chunk's math; the ring replaces it), min_blocks (``__launch_bounds__``), scale: ``word`` multiplies each group's float32 partial
  sums by the scale (exact; twice the accumulators), ``weight`` scales the weights in the 16-bit
  type before the mma (one rounding per weight, as Marlin does); unroll;
* instruction_sequence -- first: the chunk's x fragments loaded with its words, or at each step.

``rows_per_block``, ``nibbles`` and ``dequant`` do not apply here: :func:`canonical` fixes them.
"""
from __future__ import annotations

from typing import Any

from core.backends.cuda import SCALAR_TYPES
from core.genome import Genome, with_gene
from core.workloads.w4a16 import cuda_ring

PACKED = "qweight_mma"  # the repacked words' name in bind()'s tensors
MAX_REGS = 168  # accumulators, words in flight and x fragments per thread
SMEM_LIMIT = 48 * 1024
TYPES = ("bfloat16", "float16")  # the activations mma.sync takes here
# per type: the magic (lop3 with 0x000F000F makes magic + q in each half), magic's value, the mma's
# type, the float pair conversion and the pair (1, 1)
TYPE = {"bfloat16": ("0x43004300u", 128, "bf16", "cvt.rn.bf16x2.f32", "0x3F803F80u"),
         "float16": ("0x64006400u", 1024, "f16", "cvt.rn.f16x2.f32", "0x3C003C00u")}


def shape_of(g: Genome) -> dict:
    """Warps, warps along K and N, n8 tiles a warp and the block's columns of genome ``g``."""
    warps = g["parallel_config"]["threads"] // 32
    wk = min(g["parallel_config"]["ksplit"], warps)
    nt = 4 * g["memory_pattern"]["vec"]
    return {"warps": warps, "wk": wk, "wn": warps // wk, "nt": nt, "cols": warps // wk * 8 * nt,
            "kb": g["parallel_config"]["kblocks"]}


def canonical(g: Genome) -> Genome:
    """Genes this path does not read set to one value (so equal kernels are equal genomes)."""
    if g["instruction_sequence"]["math"] == "fma":
        return with_gene(with_gene(g, "parallel_config", "kblocks", 1), "memory_pattern", "stages", 0)
    if g["instruction_sequence"]["math"] != "mma":
        return g
    warps = g["parallel_config"]["threads"] // 32
    g = with_gene(g, "memory_pattern", "layout", "gptq")  # (its own repacked layout)
    if g["memory_pattern"]["stages"]:  # the ring is the pipeline, and cp.async its loads' only hint
        g = with_gene(with_gene(g, "register_allocation", "pipeline", "off"), "memory_pattern", "w_load", "")
        if cuda_ring.x_in_ring(g):
            g = with_gene(g, "memory_pattern", "x_load", "")
    g = with_gene(g, "parallel_config", "ksplit", min(g["parallel_config"]["ksplit"], warps))
    g = with_gene(g, "parallel_config", "rows_per_block", 1)  # (16 rows: the mma's)
    g = with_gene(g, "instruction_sequence", "nibbles", tuple(f"N{b}" for b in range(8)))
    return with_gene(g, "instruction_sequence", "dequant", "half2")


def registers(g: Genome) -> int:
    """32-bit registers of accumulators, words in flight and x fragments."""
    s, ra = shape_of(g), g["register_allocation"]
    acc = 4 * s["nt"] * (2 if ra["regs"]["scale"] == "word" else 1)
    words = s["nt"] * ra["batch"] * (2 if ra["pipeline"] == "next" else 1)
    frags = 8 * (ra["batch"] * (2 if ra["pipeline"] == "next" else 1) if g["instruction_sequence"]["first"] == "x" else 1)
    return acc + words + frags


def shared_bytes(g: Genome) -> int:
    """Static shared memory: the K warps' partial sums (every warp but the first of each column of
    warps), and the split-K flag with blocks along K (ptxas refuses a byte over 48 KB)."""
    s = shape_of(g)
    return (s["wk"] - 1) * s["wn"] * s["nt"] * 4 * 32 * 4 + (4 if s["kb"] > 1 else 0)


def fits(g: Genome) -> str | None:
    """Why the mma kernel of ``g`` cannot run, or None."""
    if cuda_ring.ring_bytes(g) > cuda_ring.RING_LIMIT:
        return f"a cp.async ring of {cuda_ring.ring_bytes(g)} B (> {cuda_ring.RING_LIMIT})"
    if registers(g) > MAX_REGS:
        return f"{registers(g)} registers of accumulators, words and fragments (> {MAX_REGS})"
    if shared_bytes(g) > SMEM_LIMIT:
        return f"{shared_bytes(g)} B of static shared memory, the K warps' reduction with its flags (> {SMEM_LIMIT})"
    return None


def launch(g: Genome, problem: dict | None = None) -> dict:
    """What :meth:`bind` and :meth:`repack` read: the block, its columns, the tile width (16 rows
    whatever the ``problem``)."""
    s = shape_of(g)
    return {"math": "mma", "threads": 32 * s["warps"], "cols": s["cols"], "kblocks": s["kb"], "rows_per_block": 16,
            "dynamic_shared_bytes": cuda_ring.ring_bytes(g)}


def grid(lp: dict, m: int, n: int) -> tuple[int, int, int]:
    return (-(-n // lp["cols"]), -(-m // 16), lp["kblocks"])


def workspace(lp: dict, m: int, n: int) -> tuple[int, int]:
    """Floats of the blocks' partial tiles and ints of the tile counters (0, 0 with one block along K)."""
    if lp["kblocks"] == 1:
        return 0, 0
    gx, gy, kb = grid(lp, m, n)
    return kb * gx * gy * lp["cols"] * 16, gx * gy


def array_library(a: Any) -> tuple[Any, bool]:
    """The module of array ``a`` (torch on a GPU, numpy in the tests) and whether it is torch."""
    if type(a).__module__.startswith("torch"):
        import torch

        return torch, True
    import numpy

    return numpy, False


def repack(qweight: Any, cols: int) -> Any:
    """GPTQ words (k_groups, 16, n) in the mma layout of the module docstring, N padded with zero
    words to a multiple of ``cols``: int32 (n_pad / 32, K / 32, 32, 4), in the input's library
    (torch on a GPU, numpy in the tests)."""
    g, _, n = qweight.shape
    k, npad = 128 * g, -(-n // cols) * cols
    lib, torch_like = array_library(qweight)
    dev = {"device": qweight.device} if torch_like else {}
    ar = lambda m: lib.arange(m, dtype=qweight.dtype, **dev)  # noqa: E731
    q = ((qweight.reshape(16 * g, 1, n) >> (ar(8).reshape(1, 8, 1) * 4)) & 15).reshape(k, n)  # k = 8 r + b
    if npad != n:
        pad = lib.zeros((k, npad - n), dtype=q.dtype, **dev)
        q = lib.cat((q, pad), 1) if torch_like else lib.concatenate((q, pad), 1)
    # k = 32 ks + 8 t + 4 s + 2 h + i and n = 32 nb + 8 j + g  ->  (nb, ks, g, t, j, s, h, i)
    q = q.reshape(k // 32, 4, 2, 2, 2, npad // 32, 4, 8)
    order = (5, 0, 7, 1, 6, 2, 3, 4)
    q = (q.permute(*order) if torch_like else q.transpose(order)).reshape(npad // 32, k // 32, 8, 4, 4, 4, 2)
    q = q << (ar(4).reshape(4, 1) * 4 + ar(2) * 16)  # value (s, h, i) to bits 4 (2 s + h) + 16 i
    if torch_like:
        return q.sum(dim=(5, 6), dtype=qweight.dtype).reshape(npad // 32, k // 32, 32, 4).contiguous()
    return lib.ascontiguousarray(q.sum(axis=(5, 6), dtype=qweight.dtype).reshape(npad // 32, k // 32, 32, 4))


def ld(hint: str, width: str, out: str, ptr: str) -> str:
    """Inline PTX: a 16-byte (``v4``) or 4-byte load of ``ptr`` into ``out`` with cache hint ``hint``."""
    if width == "v4":
        return (f'asm volatile("ld.global{hint}.v4.u32 {{%0,%1,%2,%3}}, [%4];" : "=r"({out}.x), "=r"({out}.y), '
                f'"=r"({out}.z), "=r"({out}.w) : "l"({ptr}));')
    return f'asm volatile("ld.global{hint}.u32 %0, [%1];" : "=r"({out}) : "l"({ptr}));'


def render_source(g: Genome, problem: dict, norm: str | None, prologue: str, entry: str, norm_call: str,
                  bounds: str) -> str:
    """The mma kernel of genome ``g`` (16-bit activations). ``prologue``, ``entry``, ``norm_call`` and
    ``bounds`` come from the CUDA template (the kernel's parameters; with a fused RMSNorm, the 1 / rms
    of the block's rows; its ``__launch_bounds__``): with ``norm``, x is multiplied by gamma, and by
    1 / rms at load or on the sums."""
    s, m, ra = shape_of(g), g["memory_pattern"], g["register_allocation"]
    dtype = problem["dtype"]
    T, base = SCALAR_TYPES[dtype][0], TYPE[dtype][1]
    before = ra["regs"]["scale"] == "weight"
    x_first = g["instruction_sequence"]["first"] == "x"
    prefetch = ra["pipeline"] == "next"
    if problem.get("zero_points"):
        c2 = (f"const float z = (float)zp[(long long)grp * N + min(col, N - 1)];\n"
              f"                const unsigned c2 = pack2({base}.f + z, {base}.f + z);")
        c2_once = ""
    else:
        c2, c2_once = "", f"\n    const unsigned c2 = pack2({base + 8}.f, {base + 8}.f);"
    stages, x_ring = m["stages"], cuda_ring.x_in_ring(g) and not norm  # (the norm goes on x as it is loaded)
    load = _load_chunk(m["w_load"], norm, x_first and not x_ring, words=not stages)
    if x_first:
        frag_at = "            const unsigned *fr = xf[u];"
    else:
        frag_at = ("            const long long k = (long long)ks * 32;\n            unsigned fr[8];\n"
                   + _frag_lines("            ", "fr", norm).rstrip("\n"))
    bufs = "uint4 {w}[B][NB4];" + (" unsigned {x}[B][8];" if x_first else "")
    if stages:  # the ring: the chunk's words from shared memory, the chunk S ahead issued after its math
        before_loop = cuda_ring.START
        top = ("        " + bufs.format(w="w", x="xf") + "\n        cp_async_wait<S - 1>();\n" + cuda_ring.READ
               + (cuda_ring.READ_X if x_ring else "") + load.format(w="w", x="xf", start="s0"))
        bottom = cuda_ring.NEXT
    elif prefetch:
        before_loop = "    " + bufs.format(w="w", x="xf") + "\n" + load.format(w="w", x="xf", start="first * B")
        top = "        " + bufs.format(w="nxt", x="xn") + "\n" + load.format(w="nxt", x="xn", start="s0 + stride * B")
        bottom = _COPY + ("\n#pragma unroll\n        for (int u = 0; u < B; ++u)\n#pragma unroll\n"
                          "            for (int i = 0; i < 8; ++i) xf[u][i] = xn[u][i];" if x_first else "")
    else:
        before_loop, bottom = "", ""
        top = "        " + bufs.format(w="w", x="xf") + "\n" + load.format(w="w", x="xf", start="s0")
    scale = ("                const T sv = sc[(long long)grp * N + min(col, N - 1)];\n"
             "                const unsigned s2 = (unsigned)sv | ((unsigned)sv << 16);\n") if before else ""
    b = (lambda p: f"mul2(dq(wv, {p}, c2), s2)") if before else (lambda p: f"dq(wv, {p}, c2)")
    target = "acc[j]" if before else "part[j]"
    entry = entry.replace(") {", ", float *__restrict__ ws, int *__restrict__ cnt) {", 1)
    return f"""// AbeBot generated CUDA {"RMSNorm + " if norm else ""}W4A16 on tensor cores ({dtype}, zero points: {problem.get('zero_points', False)})
typedef {T} T;
#define THREADS {32 * s['warps']}
#define WK {s['wk']}
#define WN {s['wn']}
#define NT {s['nt']}
#define NB4 (NT / 4)
#define B {ra['batch']}
#define KB {s['kb']}
#define MT 16
#define ELT 2
#define S {stages}
#define XR {2 if x_ring else 0}

{helpers(dtype, m['x_load'])}
{prologue}
extern "C" __global__ void {bounds}
{entry}
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wk = warp % WK, wn = warp / WK;
    const int g = lane >> 2, t = lane & 3, m0 = blockIdx.y * 16, KS = G * 4;
    const int nb0 = (blockIdx.x * WN + wn) * NB4, n0 = nb0 * 32;
    const uint4 *wp = (const uint4 *)qw + (long long)nb0 * KS * 32 + lane;
    const bool ok[2] = {{m0 + g < M, m0 + g + 8 < M}};
    const T *xr[2] = {{x + (long long)(ok[0] ? m0 + g : 0) * G * 128 + 8 * t, x + (long long)(ok[1] ? m0 + g + 8 : 0) * G * 128 + 8 * t}};{c2_once}{chr(10) + "    const T *gr = gm + 8 * t;" if norm else ""}
    float acc[NT][4] = {{}};{"" if before else chr(10) + "    float part[NT][4] = {};"}
    const int chunks = (KS + B - 1) / B, first = blockIdx.z * WK + wk, stride = WK * KB;
{before_loop}#pragma unroll {ra['regs']['unroll']}
    for (int c = first; c < chunks; c += stride) {{
        const int s0 = c * B;
{top}#pragma unroll
        for (int u = 0; u < B; ++u) {{
            const int ks = s0 + u;
            if (ks >= KS) break;
            const int grp = ks >> 2;
{frag_at}
#pragma unroll
            for (int j = 0; j < NT; ++j) {{
                const int col = n0 + 8 * j + g;
                {c2}
                const uint4 &q = w[u][j / 4];
                const unsigned wv = j % 4 == 0 ? q.x : j % 4 == 1 ? q.y : j % 4 == 2 ? q.z : q.w;
{scale}                mma({target}, fr, {b(0)}, {b(1)});
                mma({target}, fr + 4, {b(2)}, {b(3)});
            }}
{"" if before else _FLUSH}
        }}{bottom}
    }}{norm_call if norm == "store" else ""}
{REDUCE_WK}
#if KB > 1
{SPLIT_K}
#endif
    if (wk != 0) return;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {{
            const int row = m0 + g + 8 * (r / 2), col = n0 + 8 * j + 2 * t + r % 2;
            if (row < M && col < N) y[(long long)row * N + col] = from_f(acc[j][r]{" * inv[row - m0]" if norm == "store" else ""});
        }}
}}
"""


def helpers(dtype: str, x_load: str) -> str:
    """The device functions of both tensor-core kernels (this one and :mod:`cuda_mma_w`): 16-bit
    conversions, the pair arithmetic, ``mma``, the x loads, ``cp.async`` and the lop3 dequantisation
    ``dq``, for activations of ``dtype`` and x loads with cache hint ``x_load``."""
    _, to_f, from_f = SCALAR_TYPES[dtype]
    magic, _, mma_t, cvt2, one = TYPE[dtype]
    return f"""static __device__ __forceinline__ float to_f(T h) {{ {to_f} }}
static __device__ __forceinline__ T from_f(float f) {{ {from_f} }}
static __device__ __forceinline__ unsigned pack2(float lo, float hi) {{
    unsigned r; asm("{cvt2} %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }}
static __device__ __forceinline__ unsigned lop3_and_or(unsigned a, unsigned b, unsigned c) {{
    unsigned r; asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }}
// a - b as (-b) * 1 + a, and a * b as a * b + (-0): fma.{mma_t}x2 exists since sm_80
static __device__ __forceinline__ unsigned sub2(unsigned a, unsigned b) {{
    unsigned r; asm("fma.rn.{mma_t}x2 %0, %1, %2, %3;" : "=r"(r) : "r"(b ^ 0x80008000u), "r"({one}), "r"(a)); return r; }}
static __device__ __forceinline__ unsigned mul2(unsigned a, unsigned b) {{
    unsigned r; asm("fma.rn.{mma_t}x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u)); return r; }}
static __device__ __forceinline__ void mma(float *d, const unsigned *a, unsigned b0, unsigned b1) {{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.{mma_t}.{mma_t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)); }}
// 8 adjacent x values of one row as 4 pairs (0 past M); with a fused RMSNorm, times gamma and a scale
static __device__ __forceinline__ unsigned times(unsigned u, unsigned gv, float scale) {{
    return pack2(to_f((T)(u & 0xffffu)) * to_f((T)(gv & 0xffffu)) * scale, to_f((T)(u >> 16)) * to_f((T)(gv >> 16)) * scale);
}}
static __device__ __forceinline__ uint4 x_row8(const T *p, const T *gp, float scale, bool ok) {{
    uint4 u = make_uint4(0u, 0u, 0u, 0u);
    if (!ok) return u;
    {ld(x_load, "v4", "u", "p")}
    if (!gp) return u;
    const uint4 gv = *(const uint4 *)gp;
    return make_uint4(times(u.x, gv.x, scale), times(u.y, gv.y, scale), times(u.z, gv.z, scale), times(u.w, gv.w, scale));
}}
// 16 bytes global -> shared without registers (L1 bypassed), and the wait for all but the n newest groups
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok = true) {{  // zeros if !ok
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(ok ? 16 : 0));
}}
template <int n> static __device__ __forceinline__ void cp_async_wait() {{
    asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory");
}}
// values (lo, hi) of pair p of a word, minus (magic + z)
static __device__ __forceinline__ unsigned dq(unsigned w, int p, unsigned c2) {{
    return sub2(lop3_and_or(w >> (4 * p), 0x000F000Fu, {magic}), c2);
}}"""


# The K warps' sums (acc[NT][4] of every warp but the first of each column of warps), added in a
# fixed order through shared memory (deterministic); every thread reaches the barrier.
REDUCE_WK = """#if WK > 1
    // the K warps' sums, added in a fixed order (deterministic); every thread reaches the barrier
    __shared__ float red[(WK - 1) * WN * NT * 4 * 32];
    if (wk > 0)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) red[((((wk - 1) * WN + wn) * NT + j) * 4 + r) * 32 + lane] = acc[j][r];
    __syncthreads();
    if (wk == 0)
        for (int l = 1; l < WK; ++l)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[j][r] += red[((((l - 1) * WN + wn) * NT + j) * 4 + r) * 32 + lane];
#endif"""


def _load_chunk(hint: str, norm: str | None, x_first: bool, words: bool = True) -> str:
    """The loads of a chunk's B steps into ``{w}`` (unless the ring holds them: ``words`` False) and
    its x fragments into ``{x}`` when they come first; a step past the end loads the last one,
    never used."""
    def esc(text: str) -> str:
        return text.replace("{", "{{").replace("}", "}}")

    frags = ("                const long long k = (long long)min({start} + u, KS - 1) * 32;\n"
             + esc(_frag_lines("                ", "XF[u]", norm)).replace("XF", "{x}")) if x_first else ""
    word_loads = ("""#pragma unroll
            for (int i = 0; i < NB4; ++i) {{
                const uint4 *p = wp + ((long long)i * KS + min({start} + u, KS - 1)) * 32;
                """ + esc(ld(hint, "v4", "DST[u][i]", "p")).replace("DST", "{w}") + "\n            }}\n") if words else ""
    if not (word_loads or frags):
        return ""
    return """#pragma unroll
        for (int u = 0; u < B; ++u) {{
""" + word_loads + frags + "        }}\n"


def _frag_lines(indent: str, dst: str, norm: str | None) -> str:
    """The A fragments of one K step of 32 (K permuted as the module docstring says): ``dst[0..3]``
    for the first mma, ``dst[4..7]`` for the second; even registers hold row g, odd ones row g + 8."""
    gamma = "gr + k" if norm else "nullptr"
    scale = ("inv[g]", "inv[g + 8]") if norm == "load" else ("1.f", "1.f")
    regs = " ".join(f"{dst}[{2 * p + r}] = x{r}.{'xyzw'[p]};" for p in range(4) for r in range(2))
    return (f"{indent}{{ const uint4 x0 = x_row8(xr[0] + k, {gamma}, {scale[0]}, ok[0]), "
            f"x1 = x_row8(xr[1] + k, {gamma}, {scale[1]}, ok[1]);\n{indent}  {regs} }}\n")


# A group's float32 partial sums times its scales, at the group's end or the chunk's.
_FLUSH = """            if ((u & 3) == 3 || u == B - 1 || ks == KS - 1) {
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    const int col = n0 + 8 * j + 2 * t;
                    const float s_lo = col < N ? to_f(sc[(long long)grp * N + col]) : 0.f;
                    const float s_hi = col + 1 < N ? to_f(sc[(long long)grp * N + col + 1]) : 0.f;
                    acc[j][0] += part[j][0] * s_lo; acc[j][1] += part[j][1] * s_hi;
                    acc[j][2] += part[j][2] * s_lo; acc[j][3] += part[j][3] * s_hi;
                    part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.f;
                }
            }"""

# Blocks along K: each writes its partial tile to the workspace; the last to finish (a counter per
# tile, reset for the next launch) adds all of them in block order -- deterministic, no float atomics.
SPLIT_K = """    __shared__ int last;
    const long long tile = (long long)blockIdx.y * gridDim.x + blockIdx.x, tiles = (long long)gridDim.x * gridDim.y;
    if (wk == 0)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) ws[(((blockIdx.z * tiles + tile) * WN + wn) * NT * 4 + j * 4 + r) * 32 + lane] = acc[j][r];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(cnt + tile, 1) == KB - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (wk == 0)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                float v = 0.f;
                for (int z = 0; z < KB; ++z) v += __ldcg(ws + (((z * tiles + tile) * WN + wn) * NT * 4 + j * 4 + r) * 32 + lane);
                acc[j][r] = v;
            }
    if (threadIdx.x == 0) cnt[tile] = 0;"""

_COPY = """
#pragma unroll
        for (int u = 0; u < B; ++u)
#pragma unroll
            for (int i = 0; i < NB4; ++i) w[u][i] = nxt[u][i];"""
