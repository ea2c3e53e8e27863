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
from core.workloads.kernel_files import fill, kernel_body, snippet
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
    """The mma kernel of genome ``g`` (16-bit activations, ``kernels/mma.cu``). ``prologue``, ``entry``,
    ``norm_call`` and ``bounds`` come from the CUDA template (the kernel's parameters; with a fused
    RMSNorm, the 1 / rms of the block's rows; its ``__launch_bounds__``): with ``norm``, x is
    multiplied by gamma, and by 1 / rms at load or on the sums."""
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
    return fill(kernel_body(__file__, "mma.cu"), **{name: str(v) for name, v in {
        "title": "RMSNorm + " if norm else "", "dtype": dtype, "zero_points": problem.get("zero_points", False),
        "T": T, "threads": 32 * s["warps"], "wk": s["wk"], "wn": s["wn"], "nt": s["nt"], "b": ra["batch"],
        "kb": s["kb"], "s": stages, "xr": 2 if x_ring else 0, "helpers": helpers(dtype, m["x_load"]),
        "prologue": prologue, "bounds": bounds, "entry": entry, "c2_once": c2_once,
        "gamma_decl": "\n    const T *gr = gm + 8 * t;" if norm else "",
        "part_decl": "" if before else "\n    float part[NT][4] = {};", "before_loop": before_loop,
        "unroll": ra["regs"]["unroll"], "top": top, "frag_at": frag_at, "c2": c2, "scale": scale, "target": target,
        "b0": b(0), "b1": b(1), "b2": b(2), "b3": b(3), "flush": "" if before else _FLUSH, "bottom": bottom,
        "norm_call": norm_call if norm == "store" else "", "reduce_wk": REDUCE_WK, "split_k": SPLIT_K,
        "inv_y": " * inv[row - m0]" if norm == "store" else ""}.items()})


def helpers(dtype: str, x_load: str) -> str:
    """The device functions of both tensor-core kernels (this one and :mod:`cuda_mma_w`): 16-bit
    conversions, the pair arithmetic, ``mma``, the x loads, ``cp.async`` and the lop3 dequantisation
    ``dq``, for activations of ``dtype`` and x loads with cache hint ``x_load``."""
    _, to_f, from_f = SCALAR_TYPES[dtype]
    magic, _, mma_t, cvt2, one = TYPE[dtype]
    return fill(snippet(__file__, "mma_helpers.cuh"), to_f=to_f, from_f=from_f, cvt2=cvt2, mma_t=mma_t, one=one,
                x_ld=ld(x_load, "v4", "u", "p"), magic=magic)


# The K warps' sums (acc[NT][4] of every warp but the first of each column of warps), added in a
# fixed order through shared memory (deterministic); every thread reaches the barrier.
REDUCE_WK = snippet(__file__, "reduce_wk.cuh")


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
_FLUSH = snippet(__file__, "mma_flush.cuh")

# Blocks along K: each writes its partial tile to the workspace; the last to finish (a counter per
# tile, reset for the next launch) adds all of them in block order -- deterministic, no float atomics.
SPLIT_K = snippet(__file__, "split_k.cuh")

_COPY = "\n" + snippet(__file__, "mma_copy.cuh")
