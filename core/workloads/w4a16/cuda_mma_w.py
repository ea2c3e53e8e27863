"""The CUDA W4A16 template's second tensor-core path (``instruction_sequence.math = mma_w``): the
dequantised weights are mma's A operand and x its B operand, ``y^T = W^T x^T``.

Why a second path. Nsight Compute on the first one's M = 16 champion (``benchmarks/gpu_raw/
call21_profile``) showed it issuing 258 warp instructions per KB of weights, half of its issue slots,
with its x fragments copied into place before every mma (25 moves a step: the A fragment interleaves
rows g and g + 8 of x, which no 16-byte load gives), a 64-bit address and a scalar load for every
scale, and a multiply of every weight by its scale. Here:

* x is B: a lane's B fragments (row g of x, K pairs ``2t`` and ``2t + 8``) are adjacent in x once K
  is permuted inside each step of 32 as the first path does, so one 16-byte load is the fragments
  of two k16 steps, with no moves; 8 rows of x a tile, so M <= 8 needs one mma per tile, not two;
* the weights are A: one 32-bit word is a lane's whole A fragment of a 16 x 16 tile (8 values:
  columns ``g``, ``g + 8`` by K pairs ``2t``, ``2t + 8``), lop3 makes its four registers, and one
  16-byte load is four tiles (two k16 steps of 32 columns);
* the scales go on the float32 sums of each group (exact, no rounding of scaled weights), from a
  repacked copy that a lane reads as one 8-byte load per 32 columns and group;
* every warp streams one contiguous run of whole groups (its share of K), ``batch`` steps of words
  and x in flight in a ring of registers (the ring's slot is a compile-time index: the loop over a
  group's steps is unrolled).

Repacked words (:func:`repack`): ``packed[cb, ks, lane, j]`` (int32), for lane ``l = 4 g + t`` and
``j = 2 e + s``, holds the A fragment of columns ``32 cb + 16 e + (g, g + 8)`` and k16 step ``s`` of
K step ``ks``: value (r, i) at bits ``4 r + 16 i`` is column ``32 cb + 16 e + g + 8 (r & 1)`` and
``k = 32 ks + 8 t + 4 s + 2 (r >> 1) + i``. Scales: ``packed[cb, grp, g, 2 e + h]`` is the scale of
column ``32 cb + 16 e + 8 h + g``. Both are timed apart and counted as memory (``Template.repack``).

Genes, as this path reads them: threads, ksplit (warps along K), kblocks (blocks along K, added up
in block order as the first path does), vec (32-column blocks a warp), batch (steps of words in
flight), pipeline (``next``: x only two steps ahead, not ``batch``, so the words can go further ahead
in the same registers), stages (the ring instead), copy (what fills the ring: every lane's cp.async, or
bulk copies of chunks, :mod:`cuda_mma_w_bulk`, where ``batch`` cuts a group into slots), min_blocks, the
cache hints of both loads. The others are set to one value (:func:`canonical`).

With a fused RMSNorm (:mod:`core.workloads.rmsnorm_w4a16`, its ``norm`` gene ``load`` or ``store``),
every x fragment is multiplied by gamma as it is read (one 16-bit pair multiply, rounded once, as
the float product rounded to 16 bits would be), and the block's 1 / rms (:mod:`cuda_norm`) goes on
the finished sums: y = (1 / rms) (x gamma) W, exact since 1 / rms is one number a row. ``load``
computes it before the stream, once the ring's (or the register ring's) first loads are in flight,
in every block; ``store`` after it, only in the blocks that write y. ``stream`` is not offered: the
warps along N read the same x, and blocks along K see only their share of it.
"""
from __future__ import annotations

from typing import Any

from core.backends.cuda import SCALAR_TYPES
from core.genome import Genome, with_gene
from core.workloads.kernel_files import fill, kernel_body, snippet
from core.workloads.w4a16 import cuda_mma, cuda_mma_w_bulk

MATH = "mma_w"
PACKED = ("qweight_mma_w", "scales_mma_w")  # the repacked words' and scales' names in bind()'s tensors
MAX_REGS = cuda_mma.MAX_REGS
RING_LIMIT = 160 * 1024  # with the reduction's 48 KB, under the 227 KB a block may opt in to


def applies(g: Genome) -> bool:
    return g["instruction_sequence"]["math"] == MATH


def bulk(g: Genome) -> bool:
    """Whether the ring is filled by bulk copies of chunks of K (:mod:`cuda_mma_w_bulk`), not every lane's cp.async."""
    return bool(g["memory_pattern"]["stages"]) and g["memory_pattern"]["copy"] == "bulk"


def slot_steps(g: Genome) -> int:
    """Steps of 32 along K in one slot of the bulk ring: a group cut into ``batch`` slots."""
    return 4 // min(g["register_allocation"]["batch"], 4)


def tile_rows(problem: dict) -> int:
    """Rows of x a block multiplies: 8 (one mma per tile) when the problem has at most 8, else 16."""
    return 8 if problem.get("m", 16) <= 8 else 16


def shape_of(g: Genome, rows: int = 16) -> dict:
    """Warps, warps along K and N, 32-column blocks a warp, tiles of 4 floats a lane, the block's columns."""
    warps = g["parallel_config"]["threads"] // 32
    wk = min(g["parallel_config"]["ksplit"], warps)
    vec = g["memory_pattern"]["vec"]
    return {"warps": warps, "wk": wk, "wn": warps // wk, "vec": vec, "th": rows // 8, "nt": 2 * vec * rows // 8,
            "cols": warps // wk * 32 * vec, "kb": g["parallel_config"]["kblocks"]}


def canonical(g: Genome) -> Genome:
    """Genes this path does not read set to one value (so equal kernels are equal genomes)."""
    if not applies(g):
        return g if g["memory_pattern"]["copy"] == "lanes" else with_gene(g, "memory_pattern", "copy", "lanes")
    if not g["memory_pattern"]["stages"]:
        g = with_gene(g, "memory_pattern", "copy", "lanes")
    warps = g["parallel_config"]["threads"] // 32
    if g["memory_pattern"]["stages"]:  # the ring holds the steps in flight, and cp.async is its loads' only hint
        batch = min(g["register_allocation"]["batch"], 4) if bulk(g) else 1  # (bulk: slots a group is cut into)
        stages = g["memory_pattern"]["stages"]  # (the bulk ring takes any count; the lanes ring's 3 and 6 are 4 and 8)
        g = with_gene(with_gene(g, "register_allocation", "batch", batch), "memory_pattern", "stages",
                      stages if bulk(g) else {3: 4, 6: 8}.get(stages, stages))
        g = with_gene(with_gene(g, "memory_pattern", "w_load", ""), "memory_pattern", "x_load", "")
    if g["memory_pattern"]["stages"] or g["register_allocation"]["batch"] <= 2:  # (x as far ahead as the words)
        g = with_gene(g, "register_allocation", "pipeline", "off")
    for group, name, value in (("memory_pattern", "layout", "gptq"), ("parallel_config", "rows_per_block", 1),
                               ("instruction_sequence", "first", "words"), ("instruction_sequence", "dequant", "half2"),
                               ("instruction_sequence", "nibbles", tuple(f"N{b}" for b in range(8))),
                               ("parallel_config", "ksplit", min(g["parallel_config"]["ksplit"], warps))):
        g = with_gene(g, group, name, value)
    return with_gene(g, "register_allocation", "regs", {"scale": "word", "unroll": 1})


def words_ahead(g: Genome) -> int:
    """Steps of words in flight in registers: ``batch``, or one with a ring (its ``batch`` means slots a group)."""
    return 1 if g["memory_pattern"]["stages"] else g["register_allocation"]["batch"]


def x_ahead(g: Genome) -> int:
    """Steps of x in flight: ``batch`` (with the words), or with ``pipeline = next`` at most 2, so
    that the words can go further ahead in the same registers (x comes from L1 and L2, not DRAM)."""
    d = words_ahead(g)
    return min(d, 2) if g["register_allocation"]["pipeline"] == "next" else d


def registers(g: Genome) -> int:
    """32-bit registers of sums (16 rows: the most), words and x in flight (one step's with the
    ring), two groups' scales, and with a fused norm a step's x times gamma."""
    s, d = shape_of(g), words_ahead(g)
    norm = 4 * (s["th"] + 1) if g["instruction_sequence"].get("norm") else 0  # x times gamma, and gamma
    return 2 * 4 * s["nt"] + 4 * (d * s["vec"] + x_ahead(g) * s["th"]) + 4 * s["vec"] + norm


def ring_bytes(g: Genome, rows: int = 16) -> int:
    """``stages`` steps of every lane's words and x rows in dynamic shared memory (0 without the ring),
    or with bulk copies ``stages`` groups of the block's words and x rows per warp along K."""
    s = shape_of(g, rows)
    if bulk(g):
        return cuda_mma_w_bulk.ring_bytes(s, rows, g["memory_pattern"]["stages"], slot_steps(g))
    return g["memory_pattern"]["stages"] * (s["vec"] + s["th"]) * 32 * s["warps"] * 16


def shared_bytes(g: Genome) -> int:
    """Static shared memory: the K warps' partial sums (every warp but the first of each column of
    warps), the split-K flag with blocks along K, and the bulk ring's two barriers a slot."""
    s = shape_of(g)
    return ((s["wk"] - 1) * s["wn"] * s["nt"] * 4 * 32 * 4 + (4 if s["kb"] > 1 else 0)
            + (16 * s["wk"] * g["memory_pattern"]["stages"] if bulk(g) else 0))


def fits(g: Genome) -> str | None:
    """Why the kernel of ``g`` cannot run, or None."""
    if ring_bytes(g) > RING_LIMIT:
        return f"a ring of {ring_bytes(g)} B of shared memory (> {RING_LIMIT})"
    if registers(g) > MAX_REGS:
        return f"{registers(g)} registers of sums, words, x and scales (> {MAX_REGS})"
    if shared_bytes(g) > cuda_mma.SMEM_LIMIT:
        return f"{shared_bytes(g)} B of static shared memory, the K warps' reduction with its flags (> {cuda_mma.SMEM_LIMIT})"
    return None


def launch(g: Genome, problem: dict) -> dict:
    """What ``bind`` and ``repack`` read."""
    s = shape_of(g, tile_rows(problem))
    return {"math": MATH, "threads": 32 * s["warps"], "cols": s["cols"], "kblocks": s["kb"],
            "rows_per_block": tile_rows(problem), "tile_floats": s["wn"] * s["nt"] * 128,
            "dynamic_shared_bytes": ring_bytes(g, tile_rows(problem))}


def grid(lp: dict, m: int, n: int) -> tuple[int, int, int]:
    return (-(-n // lp["cols"]), -(-m // lp["rows_per_block"]), lp["kblocks"])


def workspace(lp: dict, m: int, n: int) -> tuple[int, int]:
    """Floats of the blocks' partial tiles and ints of the tile counters (0, 0 with one block along K)."""
    if lp["kblocks"] == 1:
        return 0, 0
    gx, gy, kb = grid(lp, m, n)
    return kb * gx * gy * lp["tile_floats"], gx * gy


def repack(qweight: Any, scales: Any, cols: int) -> tuple[Any, Any]:
    """GPTQ words (k_groups, 16, n) and scales (k_groups, n) in this path's layouts (the module
    docstring), N padded with zeros to a multiple of ``cols``: int32 (n_pad / 32, K / 32, 32, 4) and
    (n_pad / 32, k_groups, 8, 4) in the scales' dtype, in the inputs' library (torch or numpy)."""
    lib, torch_like = cuda_mma.array_library(qweight)
    g, _, n = qweight.shape
    k, npad = 128 * g, -(-n // cols) * cols
    dev = {"device": qweight.device} if torch_like else {}
    ar = lambda m: lib.arange(m, dtype=qweight.dtype, **dev)  # noqa: E731
    q = ((qweight.reshape(16 * g, 1, n) >> (ar(8).reshape(1, 8, 1) * 4)) & 15).reshape(k, n)  # k = 8 r + b
    pad = lambda a, w: (lib.cat((a, lib.zeros((a.shape[0], w), dtype=a.dtype, **dev)), 1) if torch_like  # noqa: E731
                        else lib.concatenate((a, lib.zeros((a.shape[0], w), dtype=a.dtype)), 1))
    if npad != n:
        q, scales = pad(q, npad - n), pad(scales, npad - n)
    # k = 32 ks + 8 t + 4 s + 2 h + i and n = 32 cb + 16 e + 8 hn + g  ->  (cb, ks, g, t, e, s, h, hn, i)
    q = q.reshape(k // 32, 4, 2, 2, 2, npad // 32, 2, 2, 8)
    order = (5, 0, 8, 1, 6, 2, 3, 7, 4)
    q = (q.permute(*order) if torch_like else q.transpose(order)).reshape(npad // 32, k // 32, 8, 4, 4, 8)
    q = q << (4 * (2 * ar(2).reshape(2, 1, 1) + ar(2).reshape(1, 2, 1)) + 16 * ar(2)).reshape(8)  # (h, hn, i) -> 4 (2h + hn) + 16 i
    words = q.sum(-1, dtype=qweight.dtype).reshape(npad // 32, k // 32, 32, 4)
    s = scales.reshape(g, npad // 32, 2, 2, 8)  # (grp, cb, e, h, g) -> (cb, grp, g, e, h)
    s = (s.permute(1, 0, 4, 2, 3) if torch_like else s.transpose(1, 0, 4, 2, 3)).reshape(npad // 32, g, 8, 4)
    if torch_like:
        return words.contiguous(), s.contiguous()
    return lib.ascontiguousarray(words), lib.ascontiguousarray(s)


def render_source(g: Genome, problem: dict, entry: str, bounds: str, norm: str | None = None,
                  prologue: str = "", norm_call: str = "") -> str:
    """The kernel of genome ``g`` (16-bit activations, ``kernels/mma_w.cu``); ``entry`` and ``bounds``
    come from the CUDA template (the kernel's name and parameters; its ``__launch_bounds__``). With
    ``norm`` ("load" or "store"), an RMSNorm fused in front: ``prologue`` defines the block's 1 / rms,
    ``norm_call`` computes it (:mod:`cuda_norm`), and ``entry`` must leave the call to this function."""
    rows = tile_rows(problem)
    s, m, d = shape_of(g, rows), g["memory_pattern"], words_ahead(g)
    dtype = problem["dtype"]
    base = cuda_mma.TYPE[dtype][1]
    if problem.get("zero_points"):  # per column of the lane's two in each tile: magic + z
        zero = "\n" + fill(snippet(__file__, "mma_w_zero.cuh"), base=str(base))
        c2_decl = snippet(__file__, "mma_w_c2_zero_points.cuh")
    else:
        zero, c2_decl = "", fill(snippet(__file__, "mma_w_c2_constant.cuh"), base8=str(base + 8))
    entry = entry.replace(") {", ", float *__restrict__ ws, int *__restrict__ cnt) {", 1).replace(
        "const T *__restrict__ sc", "const uint2 *__restrict__ sp", 1)
    ring = _ring(g, s, rows)
    if norm:  # x times gamma as its fragments are read; 1 / rms on the finished sums
        ring["step_top"] += fill(kernel_body(__file__, "mma_w_norm_x.cuh"), x_at=ring["x_at"])
        ring["x_at"] = "xn[h]"
    shape = {"threads": 32 * s["warps"], "wk": s["wk"], "wn": s["wn"], "vec": s["vec"], "th": s["th"], "d": d,
             "dx": x_ahead(g), "u": max(4, d), "kb": s["kb"], "rows": rows, "s": m["stages"]}
    return fill(kernel_body(__file__, "mma_w.cu"), title="RMSNorm + " if norm else "", dtype=dtype,
                zero_points=str(problem.get("zero_points", False)), T=SCALAR_TYPES[dtype][0],
                **{k: str(v) for k, v in shape.items()}, helpers=cuda_mma.helpers(dtype, m["x_load"]),
                prologue=prologue, w_ld=cuda_mma.ld(m["w_load"], "v4", "w[i]", "p"),
                x_ld=cuda_mma.ld(m["x_load"], "v4", "xv[h]", "p"), bounds=bounds, entry=entry,
                gamma_decl="\n    const T *const gr = gm + (long long)gb * 128 + 8 * t;" if norm else "",
                c2_decl=c2_decl, zero=zero, inv_first=norm_call if norm == "load" else "",
                inv_last=norm_call if norm == "store" else "", inv_at=" * inv[row - m0]" if norm else "",
                reduce_wk=cuda_mma.REDUCE_WK, split_k=cuda_mma.SPLIT_K, **ring)


def _ring(g: Genome, s: dict, rows: int) -> dict:
    """What fills the kernel's ring and where a step's words and x are: bulk copies of chunks
    (:mod:`cuda_mma_w_bulk`), every lane's cp.async into ``stages`` steps of shared memory, or a ring
    of D steps in registers (the loop over a group's steps is unrolled, so the slot is a constant)."""
    if bulk(g):
        B = cuda_mma_w_bulk
        return {"extra": B.defines(s, rows, slot_steps(g)) + B.HELPERS, "ring_start": B.START, "step_top": B.TOP,
                "step_end": B.END, "w_at": "wc[c / 2]", "x_at": "xc[h]"}
    kind = "lanes" if g["memory_pattern"]["stages"] else "regs"
    return {"extra": "", "ring_start": kernel_body(__file__, f"mma_w_{kind}_start.cuh"),
            "step_top": kernel_body(__file__, f"mma_w_{kind}_top.cuh"),
            "step_end": snippet(__file__, f"mma_w_{kind}_end.cuh"),
            "w_at": "wc[c / 2]" if kind == "lanes" else "w[slot][c / 2]",
            "x_at": "xc[h]" if kind == "lanes" else "xv[xs][h]"}
