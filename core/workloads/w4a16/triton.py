"""Triton W4A16 template (GPTQ int32 words, a scale per 128 rows of K).

A program computes a [block_m, block_n] tile of y. For every group of 128 rows of K it loads the
group's scales (and zero points), then walks the group's 16 words per column ``k_words`` at a
time: a [k_words, block_n] tile of words and the matching [block_m, 8 k_words] tile of x; the words
are unpacked to a [8 k_words, block_n] tile (shift, mask, to float, minus the zero point) and
multiplied in.

* parallel_config -- block_m, block_n, words per step, warps;
* memory_pattern -- L2 eviction policy of the word and x loads, ``num_stages`` of the group loop;
* register_allocation -- the product as ``tl.dot`` (tensor cores; block_m >= 16, x rounded to the
  dtype as it is) or as a broadcast multiply and sum in float32; the scale on each weight or on the
  group's partial sum (then the unpacked (q - z) is exact in bf16 and fp16);
* instruction_sequence -- which of the word and x loads comes first, and the dequantisation:
  a float conversion of q, or the magic-number trick (``0x4B000000 | q`` read as a float is 2^23 + q).

:mod:`core.workloads.rmsnorm_w4a16`'s Triton template is this kernel with RMSNorm fused in front:
its :meth:`~TritonW4A16Template.norm` hook hands :func:`render_module` where 1/rms goes.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene
from core.workloads.triton_common import TritonTemplate, eviction, in_order, indent, num_warps_gene, per_thread_violation

LOADS = ("LOAD_W", "LOAD_X")
MAX_ELEMS_PER_THREAD = 128  # of the largest tile a step holds


class TritonW4A16Template(TritonTemplate):
    """The Triton template of :class:`~core.workloads.w4a16.W4A16Workload`."""

    entry = "abebot_w4a16"

    def gene_space(self) -> GeneSpace:
        # A pipelined loop (num_stages > 1) turns the loads into cp.async copies, which carry no
        # eviction policy (seen in the sm_90 PTX); whether it pipelines depends on the tile: hints.
        return GeneSpace(gene_groups(), (fits,), SEEDS, hints=HINTS)

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        source = render_module(p, genome["memory_pattern"], genome["register_allocation"]["regs"],
                               genome["instruction_sequence"], bool(self.problem.get("zero_points", False)),
                               self.problem["dtype"] == "float32", norm=self.norm(genome))
        threads = 32 * p["num_warps"]
        per_thread = max(1, 8 * p["k_words"] * p["block_n"] // threads)
        launch = {"block_m": p["block_m"], "block_n": p["block_n"], "k_words": p["k_words"], "num_warps": p["num_warps"]}
        return self.kernel_source(source, self.entry, launch, threads, min(255, 32 + per_thread))

    def norm(self, genome: Genome) -> str | None:
        """Where a fused RMSNorm applies 1/rms, "load" or "store" (a subclass's hook); None: W4A16 alone."""
        return None

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        x, qweight, scales, zeros, y = t["x"], t["qweight"], t["scales"], t.get("zeros"), t["y"]
        return lambda: kernel(x, qweight, scales, zeros, y)


TEMPLATE = TritonW4A16Template
HINTS = ("memory_pattern.w_eviction", "memory_pattern.x_eviction")
SEEDS = ({"parallel_config": {"block_m": 1, "block_n": 64, "k_words": 8, "num_warps": 4},
          "memory_pattern": {"w_eviction": "evict_first", "x_eviction": "", "stages": 1},
          "register_allocation": {"regs": {"math": "fma", "scale": "group"}},
          "instruction_sequence": {"loads": LOADS, "dequant": "float"}},
         {"parallel_config": {"block_m": 16, "block_n": 64, "k_words": 8, "num_warps": 4},
          "memory_pattern": {"w_eviction": "evict_first", "x_eviction": "evict_last", "stages": 2},
          "register_allocation": {"regs": {"math": "dot", "scale": "group"}},
          "instruction_sequence": {"loads": LOADS, "dequant": "magic"}})


def gene_groups() -> dict[str, tuple]:
    """W4A16's Triton genes by group."""
    return {
        "parallel_config": (
            ChoiceGene("block_m", (1, 2, 4, 16, 32), "rows of y per program"),
            ChoiceGene("block_n", (32, 64, 128, 256), "columns of y per program"),
            ChoiceGene("k_words", (8, 16), "words per column per step (8 rows of K each)"),
            num_warps_gene((1, 2, 4, 8)),
        ),
        "memory_pattern": (
            ChoiceGene("w_eviction", ("", "evict_first"), "L2 eviction policy of the word loads"),
            ChoiceGene("x_eviction", ("", "evict_last"), "L2 eviction policy of the x loads"),
            ChoiceGene("stages", (1, 2, 3), "num_stages of the group loop"),
        ),
        "register_allocation": (
            MapGene("regs", (("math", ("dot", "fma")), ("scale", ("group", "weight"))),
                    "tl.dot or a float32 multiply-and-sum; scale per weight or per group partial sum"),
        ),
        "instruction_sequence": (
            SequenceGene("loads", LOADS, (), (), "which of the word and x loads comes first"),
            ChoiceGene("dequant", ("float", "magic"), "q to float by conversion or by the 2^23 magic number"),
        ),
    }


def fits(g: Genome, norm_elems: int = 0) -> str | None:
    """Why ``g``'s largest tile does not fit the registers (None: it does); ``norm_elems``: the
    elements of a fused norm's tile, when there is one."""
    p, math = g["parallel_config"], g["register_allocation"]["regs"]["math"]
    threads = 32 * p["num_warps"]
    k = 8 * p["k_words"]
    if math == "dot" and p["block_m"] < 16:
        return "tl.dot needs block_m >= 16"
    biggest = p["block_m"] * k * p["block_n"] if math == "fma" else max(k * p["block_n"], p["block_m"] * p["block_n"])
    return per_thread_violation(max(biggest, norm_elems) // threads, MAX_ELEMS_PER_THREAD)


def render_module(p: dict, m: dict, regs: dict, seq: dict, zeros: bool, ieee: bool, norm: str | None = None) -> str:
    """The Triton module of a genome's groups; with ``norm`` ("load" or "store"), RMSNorm fused in
    front (:mod:`core.workloads.rmsnorm_w4a16`, symmetric weights only): every program computes its
    rows' 1 / rms from x in chunks of ``m["norm_chunk"]``, multiplies x by gamma as loaded, and
    1 / rms goes on x as loaded or on the sums."""
    if norm and zeros:
        raise ValueError("the fused RMSNorm kernel takes no zero points")
    wev, xev = eviction(m["w_eviction"]), eviction(m["x_eviction"])
    group = regs["scale"] == "group"
    load_x = f"xt = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=mmask[:, None], other=0.0{xev})"
    if norm:
        load_x = [f"{load_x}.to(tl.float32)", f"gt = tl.load(g_ptr + kk{xev}).to(tl.float32)",
                  "xt = xt * gt[None, :]" + (" * inv[:, None]" if norm == "load" else "")]
    loads = {"LOAD_W": [f"w = tl.load(qw_ptr + kw[:, None] * N + rn[None, :], mask=nmask[None, :], other=0{wev})"],
             "LOAD_X": load_x if norm else [load_x]}
    if seq["dequant"] == "magic":
        fq = "((q | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0)"
    else:
        fq = "q.to(tl.float32)"
    step = ["kw = (g * 16 + i0 + tl.arange(0, KW)).to(tl.int64)", "kk = (g * 16 + i0) * 8 + tl.arange(0, 8 * KW)"]
    step += in_order(seq["loads"], loads)
    step += ["q = tl.reshape((w[:, None, :] >> (tl.arange(0, 8) * 4)[None, :, None]) & 15, (8 * KW, BN))",
             f"d = ({fq} - z[None, :])" + ("" if group else " * s[None, :]")]
    if regs["math"] == "dot":
        precision = ', input_precision="ieee"' if ieee else ""  # float32: no TF32 rounding of the inputs
        xt = "xt.to(x_ptr.dtype.element_ty)" if norm else "xt"  # the fused x is float32 by now
        step.append(f"part = tl.dot({xt}, d.to(x_ptr.dtype.element_ty){precision})")
    else:
        step.append("part = tl.sum(xt.to(tl.float32)[:, :, None] * d[None, :, :], axis=1)")
    step.append("gacc += part" if group else "acc += part")
    zload = ("z = tl.load(z_ptr + g * N + rn, mask=nmask, other=8).to(tl.float32)" if zeros
             else "z = tl.full((BN,), 8.0, tl.float32)")
    body = (["s = tl.load(s_ptr + g * N + rn, mask=nmask, other=0.0).to(tl.float32)", zload]
            + (["gacc = tl.zeros((BM, BN), dtype=tl.float32)"] if group else [])
            + ["for i0 in tl.static_range(0, 16, KW):"] + indent(step)
            + (["acc += gacc * s[None, :]"] if group else []))
    main = ["acc = tl.zeros((BM, BN), dtype=tl.float32)",
            f"for g in tl.range(0, G, num_stages={m['stages']}):"] + indent(body)
    if norm == "load":
        main = _norm_lines(xev) + main
    elif norm == "store":
        main = main + _norm_lines(xev) + ["acc = acc * inv[:, None]"]
    head = (["def abebot_rmsnorm_w4a16(x_ptr, g_ptr, qw_ptr, s_ptr, y_ptr, M, N, G, eps,",
             "                         BM: tl.constexpr, BN: tl.constexpr, KW: tl.constexpr, NC: tl.constexpr):"]
            if norm else
            ["def abebot_w4a16(x_ptr, qw_ptr, s_ptr, z_ptr, y_ptr, M, N, G,",
             "                 BM: tl.constexpr, BN: tl.constexpr, KW: tl.constexpr):"])
    kernel = "\n".join(
        ["@triton.jit"] + head
        + ["    rm = tl.program_id(1) * BM + tl.arange(0, BM)",
           "    rn = tl.program_id(0) * BN + tl.arange(0, BN)",
           "    mmask = rm < M",
           "    nmask = rn < N",
           "    K = G * 128"]
        + indent(main)
        + ["    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty), "
           "mask=mmask[:, None] & nmask[None, :])"])
    names, values = "BM, BN, KW, NUM_WARPS", f'{p["block_m"]}, {p["block_n"]}, {p["k_words"]}, {p["num_warps"]}'
    if norm:
        return _FUSED_MODULE.format(consts=f"{names}, NORM_CHUNK = {values}, {m['norm_chunk']}", kernel=kernel)
    return _MODULE.format(consts=f"{names} = {values}", kernel=kernel)


def _norm_lines(xev: str) -> list[str]:
    """``inv``, 1 / rms of each of the program's rows, from x in chunks of NC."""
    return ["ss = tl.zeros((BM,), dtype=tl.float32)",
            "for k0 in range(0, K, NC):",
            "    kn = k0 + tl.arange(0, NC)",
            f"    xs = tl.load(x_ptr + rm[:, None] * K + kn[None, :], mask=mmask[:, None] & (kn < K)[None, :], other=0.0{xev})",
            "    xs = xs.to(tl.float32)",
            "    ss += tl.sum(xs * xs, axis=1)",
            "inv = 1.0 / tl.sqrt(ss / K + eps)"]


_MODULE = '''"""AbeBot generated Triton W4A16: y = x . ((q - z) * s), GPTQ words."""
import triton
import triton.language as tl

{consts}


{kernel}


def launch(x, qweight, scales, zeros, y):
    """y (m, n) = x (m, k_groups, 128) . dequant(qweight (k_groups, 16, n), scales[, zeros])."""
    M, G = x.shape[0], x.shape[1]
    N = y.shape[1]
    grid = (triton.cdiv(N, BN), triton.cdiv(M, BM))
    z = zeros if zeros is not None else scales
    return abebot_w4a16[grid](x, qweight, scales, z, y, M, N, G, BM, BN, KW, num_warps=NUM_WARPS)
'''
_FUSED_MODULE = '''"""AbeBot generated Triton RMSNorm + W4A16: y = (x / rms(x) * gamma) . ((q - 8) * s), GPTQ words."""
import triton
import triton.language as tl

{consts}


{kernel}


def launch(x, gamma, qweight, scales, y, eps=1e-5):
    """y (m, n) = rmsnorm(x (m, k_groups, 128)) * gamma (k_groups, 128) . dequant(qweight (k_groups, 16, n), scales)."""
    M, G = x.shape[0], x.shape[1]
    N = y.shape[1]
    grid = (triton.cdiv(N, BN), triton.cdiv(M, BM))
    return abebot_rmsnorm_w4a16[grid](x, gamma, qweight, scales, y, M, N, G, eps, BM, BN, KW, NORM_CHUNK,
                                      num_warps=NUM_WARPS)
'''
