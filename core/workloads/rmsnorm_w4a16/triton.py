"""Triton RMSNorm + W4A16 template (GPTQ int32 words, a scale per 128 rows of K).

A program computes a [block_m, block_n] tile of y. It computes its rows' ``1 / sqrt(mean(x^2) +
eps)`` from x in chunks of ``norm_chunk`` (every program does: that is the fusion), before the
product when 1/rms multiplies x as it is loaded, or after it when it multiplies the finished sums.
The product walks the groups of 128 rows of K: the group's scales, then its 16 words per column
``k_words`` at a time: a [k_words, block_n] tile of words and the matching [block_m, 8 k_words]
tile of x times gamma; the words are unpacked to a [8 k_words, block_n] tile (shift, mask, to
float, minus 8) and multiplied in. The normalised row is never stored.

* parallel_config -- block_m, block_n, words per step, warps;
* memory_pattern -- L2 eviction policy of the word and x loads, ``num_stages`` of the group loop,
  the width of the norm's chunks;
* register_allocation -- the product as ``tl.dot`` (tensor cores; block_m >= 16, x rounded to the
  dtype as it is) or as a broadcast multiply and sum in float32; the scale on each weight or on the
  group's partial sum;
* instruction_sequence -- which of the word and x loads comes first, the dequantisation (a float
  conversion of q, or the magic number ``0x4B000000 | q`` read as a float, 2^23 + q), and where
  1/rms is applied (x as loaded, norm first; or the sums, norm last).
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene
from core.workloads.template import Template

LOADS = ("LOAD_W", "LOAD_X")
MAX_ELEMS_PER_THREAD = 128  # of the largest tile a step holds


class TritonRmsNormW4A16Template(Template):
    """The Triton template of :class:`~core.workloads.rmsnorm_w4a16.RmsNormW4A16Workload`."""

    backend = "triton"

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("block_m", (1, 2, 4, 16), "rows of y per program"),
                ChoiceGene("block_n", (32, 64, 128, 256), "columns of y per program"),
                ChoiceGene("k_words", (8, 16), "words per column per step (8 rows of K each)"),
                ChoiceGene("num_warps", (1, 2, 4, 8), "warps per program"),
            ),
            "memory_pattern": (
                ChoiceGene("w_eviction", ("", "evict_first"), "L2 eviction policy of the word loads"),
                ChoiceGene("x_eviction", ("", "evict_last"), "L2 eviction policy of the x and gamma loads"),
                ChoiceGene("stages", (1, 2, 3), "num_stages of the group loop"),
                ChoiceGene("norm_chunk", (256, 1024, 2048), "elements of a row the norm reads per step"),
            ),
            "register_allocation": (
                MapGene("regs", (("math", ("dot", "fma")), ("scale", ("group", "weight"))),
                        "tl.dot or a float32 multiply-and-sum; scale per weight or per group partial sum"),
            ),
            "instruction_sequence": (
                SequenceGene("loads", LOADS, (), (), "which of the word and x loads comes first"),
                ChoiceGene("dequant", ("float", "magic"), "q to float by conversion or by the 2^23 magic number"),
                ChoiceGene("norm", ("load", "store"), "1/rms on x as loaded (norm first) or on the sums (norm last)"),
            ),
        }

        def fits(g: Genome) -> str | None:
            p, m = g["parallel_config"], g["memory_pattern"]
            math = g["register_allocation"]["regs"]["math"]
            threads = 32 * p["num_warps"]
            k = 8 * p["k_words"]
            if math == "dot" and p["block_m"] < 16:
                return "tl.dot needs block_m >= 16"
            biggest = p["block_m"] * k * p["block_n"] if math == "fma" else max(k * p["block_n"], p["block_m"] * p["block_n"])
            biggest = max(biggest, p["block_m"] * m["norm_chunk"])
            if biggest // threads > MAX_ELEMS_PER_THREAD:
                return f"{biggest // threads} elements per thread (> {MAX_ELEMS_PER_THREAD})"
            return None

        seeds = ({"parallel_config": {"block_m": 1, "block_n": 64, "k_words": 8, "num_warps": 4},
                  "memory_pattern": {"w_eviction": "evict_first", "x_eviction": "", "stages": 1, "norm_chunk": 1024},
                  "register_allocation": {"regs": {"math": "fma", "scale": "group"}},
                  "instruction_sequence": {"loads": LOADS, "dequant": "float", "norm": "load"}},
                 {"parallel_config": {"block_m": 16, "block_n": 64, "k_words": 8, "num_warps": 4},
                  "memory_pattern": {"w_eviction": "evict_first", "x_eviction": "evict_last", "stages": 2,
                                     "norm_chunk": 256},
                  "register_allocation": {"regs": {"math": "dot", "scale": "group"}},
                  "instruction_sequence": {"loads": LOADS, "dequant": "magic", "norm": "store"}})
        # A pipelined loop (num_stages > 1) turns the loads into cp.async copies, which carry no
        # eviction policy (as W4A16's template found): whether it pipelines depends on the tile.
        return GeneSpace(groups, (fits,), seeds, hints=("memory_pattern.w_eviction", "memory_pattern.x_eviction"))

    def render(self, genome: Genome) -> KernelSource:
        p = genome["parallel_config"]
        source = render_module(p, genome["memory_pattern"], genome["register_allocation"]["regs"],
                               genome["instruction_sequence"], self.problem["dtype"] == "float32")
        threads = 32 * p["num_warps"]
        per_thread = max(1, 8 * p["k_words"] * p["block_n"] // threads)
        resources = {"threads": threads, "shared_bytes": 0, "registers": min(255, 32 + per_thread)}
        launch = {"block_m": p["block_m"], "block_n": p["block_n"], "k_words": p["k_words"], "num_warps": p["num_warps"]}
        return KernelSource("triton", source, "abebot_rmsnorm_w4a16", (), launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        x, gamma, qweight, scales, y = t["x"], t["gamma"], t["qweight"], t["scales"], t["y"]
        eps = float(self.problem["eps"])
        return lambda: kernel(x, gamma, qweight, scales, y, eps)


TEMPLATE = TritonRmsNormW4A16Template


def render_module(p: dict, m: dict, regs: dict, seq: dict, ieee: bool) -> str:
    wev = f', eviction_policy="{m["w_eviction"]}"' if m["w_eviction"] else ""
    xev = f', eviction_policy="{m["x_eviction"]}"' if m["x_eviction"] else ""
    group = regs["scale"] == "group"
    at_load = seq["norm"] == "load"
    loads = {"LOAD_W": [f"w = tl.load(qw_ptr + kw[:, None] * N + rn[None, :], mask=nmask[None, :], other=0{wev})"],
             "LOAD_X": [f"xt = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=mmask[:, None], other=0.0{xev}).to(tl.float32)",
                        f"gt = tl.load(g_ptr + kk{xev}).to(tl.float32)",
                        "xt = xt * gt[None, :]" + (" * inv[:, None]" if at_load else "")]}
    if seq["dequant"] == "magic":
        fq = "((q | 0x4B000000).to(tl.float32, bitcast=True) - 8388616.0)"
    else:
        fq = "(q.to(tl.float32) - 8.0)"
    step = ["kw = (g * 16 + i0 + tl.arange(0, KW)).to(tl.int64)", "kk = (g * 16 + i0) * 8 + tl.arange(0, 8 * KW)"]
    for tok in seq["loads"]:
        step += loads[tok]
    step += ["q = tl.reshape((w[:, None, :] >> (tl.arange(0, 8) * 4)[None, :, None]) & 15, (8 * KW, BN))",
             f"d = {fq}" + ("" if group else " * s[None, :]")]
    if regs["math"] == "dot":
        precision = ', input_precision="ieee"' if ieee else ""  # float32: no TF32 rounding of the inputs
        step.append(f"part = tl.dot(xt.to(x_ptr.dtype.element_ty), d.to(x_ptr.dtype.element_ty){precision})")
    else:
        step.append("part = tl.sum(xt[:, :, None] * d[None, :, :], axis=1)")
    step.append("gacc += part" if group else "acc += part")
    body = (["s = tl.load(s_ptr + g * N + rn, mask=nmask, other=0.0).to(tl.float32)"]
            + (["gacc = tl.zeros((BM, BN), dtype=tl.float32)"] if group else [])
            + ["for i0 in tl.static_range(0, 16, KW):"] + ["    " + ln for ln in step]
            + (["acc += gacc * s[None, :]"] if group else []))
    norm = ["ss = tl.zeros((BM,), dtype=tl.float32)",
            "for k0 in range(0, K, NC):",
            "    kn = k0 + tl.arange(0, NC)",
            f"    xs = tl.load(x_ptr + rm[:, None] * K + kn[None, :], mask=mmask[:, None] & (kn < K)[None, :], other=0.0{xev})",
            "    xs = xs.to(tl.float32)",
            "    ss += tl.sum(xs * xs, axis=1)",
            "inv = 1.0 / tl.sqrt(ss / K + eps)"]
    product = ["acc = tl.zeros((BM, BN), dtype=tl.float32)",
               f"for g in tl.range(0, G, num_stages={m['stages']}):"] + ["    " + ln for ln in body]
    main = (norm + product) if at_load else (product + norm + ["acc = acc * inv[:, None]"])
    kernel = "\n".join(
        ["@triton.jit",
         "def abebot_rmsnorm_w4a16(x_ptr, g_ptr, qw_ptr, s_ptr, y_ptr, M, N, G, eps,",
         "                         BM: tl.constexpr, BN: tl.constexpr, KW: tl.constexpr, NC: tl.constexpr):",
         "    rm = tl.program_id(1) * BM + tl.arange(0, BM)",
         "    rn = tl.program_id(0) * BN + tl.arange(0, BN)",
         "    mmask = rm < M",
         "    nmask = rn < N",
         "    K = G * 128"]
        + ["    " + ln for ln in main]
        + ["    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty), "
           "mask=mmask[:, None] & nmask[None, :])"])
    return f'''"""AbeBot generated Triton RMSNorm + W4A16: y = (x / rms(x) * gamma) . ((q - 8) * s), GPTQ words."""
import triton
import triton.language as tl

BM, BN, KW, NUM_WARPS, NORM_CHUNK = {p["block_m"]}, {p["block_n"]}, {p["k_words"]}, {p["num_warps"]}, {m["norm_chunk"]}


{kernel}


def launch(x, gamma, qweight, scales, y, eps=1e-5):
    """y (m, n) = rmsnorm(x (m, k_groups, 128)) * gamma (k_groups, 128) . dequant(qweight (k_groups, 16, n), scales)."""
    M, G = x.shape[0], x.shape[1]
    N = y.shape[1]
    grid = (triton.cdiv(N, BN), triton.cdiv(M, BM))
    return abebot_rmsnorm_w4a16[grid](x, gamma, qweight, scales, y, M, N, G, eps, BM, BN, KW, NORM_CHUNK,
                                      num_warps=NUM_WARPS)
'''
