"""Triton gathered GEMV template.

A program scores ``block_j`` candidates of one token: it loads their row indices, then walks the
hidden size ``block_k`` at a time, a chunk of ``h`` against the [block_j, block_k] tile of the
gathered rows of W, accumulating in float32; the gathered rows never leave registers.

* parallel_config -- candidates per program, chunk width, warps, and which grid axis is the token;
* memory_pattern -- L2 eviction policy of the W and h loads, ``num_stages`` of the hidden loop
  (software pipelining of the gathered loads), masks on every chunk or only where the shape needs
  them (``EVEN``, decided at launch);
* register_allocation -- the accumulator as a [block_j, block_k] tile reduced once at the end, or
  a [block_j] vector reduced every chunk; the hidden loop's unroll factor;
* instruction_sequence -- the order of LOAD_H, LOAD_W and FMA in the loop body.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.triton_common import (TritonTemplate, eviction, even_twin, gene_groups_of, in_order, indent,
                                          masks_gene, num_warps_gene, per_thread_violation)

TOKENS = ("LOAD_H", "LOAD_W", "FMA")
BEFORE = (("LOAD_H", "FMA"), ("LOAD_W", "FMA"))
MAX_ELEMS_PER_THREAD = 64  # of the W tile (and a tile accumulator)


class TritonGatherGemvTemplate(TritonTemplate):
    """The Triton template of :class:`~core.workloads.gather_gemv.GatherGemvWorkload`."""

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("block_j", (4, 8, 16, 32), "candidates per program"),
                ChoiceGene("block_k", (128, 256, 512, 1024), "hidden elements per chunk"),
                num_warps_gene((1, 2, 4, 8)),
                ChoiceGene("grid", ("tokens_first", "cands_first"), "grid axis 0 is the token, or the candidate block"),
            ),
            "memory_pattern": (
                ChoiceGene("w_eviction", ("", "evict_first"), "L2 eviction policy of the W loads"),
                ChoiceGene("h_eviction", ("", "evict_last"), "L2 eviction policy of the h loads"),
                ChoiceGene("stages", (1, 2, 3), "num_stages of the hidden loop (pipelined loads)"),
                masks_gene("mask every chunk, or only when the shape needs it"),
            ),
            "register_allocation": (
                MapGene("regs", (("acc", ("tile", "row")), ("unroll", (1, 2))),
                        "tile accumulator reduced at the end, or per-row sums every chunk; loop unroll"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, (), BEFORE, "order of the loop body"),),
        }

        def fits(g: Genome) -> str | None:
            p = g["parallel_config"]
            return per_thread_violation(p["block_j"] * p["block_k"] // (32 * p["num_warps"]), MAX_ELEMS_PER_THREAD)

        seeds = ({"parallel_config": {"block_j": 4, "block_k": 512, "num_warps": 4, "grid": "tokens_first"},
                  "memory_pattern": {"w_eviction": "", "h_eviction": "", "stages": 1, "masks": "always"},
                  "register_allocation": {"regs": {"acc": "tile", "unroll": 1}}, "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"block_j": 8, "block_k": 1024, "num_warps": 8, "grid": "cands_first"},
                  "memory_pattern": {"w_eviction": "evict_first", "h_eviction": "evict_last", "stages": 3, "masks": "even"},
                  "register_allocation": {"regs": {"acc": "tile", "unroll": 1}}, "instruction_sequence": {"body": TOKENS}})
        # A pipelined loop (num_stages > 1) may turn the loads into cp.async copies, which carry no
        # eviction policy; whether it does depends on the tile (seen in the sm_90 PTX): hints.
        return GeneSpace(groups, (fits,), seeds, canonicalisers=(self._never_even,),
                         hints=("memory_pattern.w_eviction", "memory_pattern.h_eviction"))

    def _never_even(self, g: Genome) -> Genome:
        # Only the problem's own shape can fill the tiles (the spec's odd shapes never do): where it
        # does not either, the unmasked twin is never taken and "even" builds the masked kernel.
        p, pr = g["parallel_config"], self.problem
        if pr["hidden"] % p["block_k"] or pr["cands"] % p["block_j"]:
            g = with_gene(g, "memory_pattern", "masks", "always")
        return g

    def render(self, genome: Genome) -> KernelSource:
        p, m, regs, body = gene_groups_of(genome)
        threads = 32 * p["num_warps"]
        per_thread = max(1, p["block_j"] * p["block_k"] // threads)
        launch = {"block_j": p["block_j"], "block_k": p["block_k"], "num_warps": p["num_warps"], "grid": p["grid"]}
        return self.kernel_source(render_module(p, m, regs, body), "abebot_gather_gemv", launch, threads,
                                  min(255, 32 + 2 * per_thread))

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        h, W, ids, logits = t["h"], t["W"], t["ids"], t["logits"]
        return lambda: kernel(h, W, ids, logits)


TEMPLATE = TritonGatherGemvTemplate


def _body(body: tuple, m: dict, regs: dict, masked: bool) -> list[str]:
    wev, hev = eviction(m["w_eviction"]), eviction(m["h_eviction"])
    hmask = ", mask=kmask, other=0.0" if masked else ""
    wmask = ", mask=jmask[:, None] & kmask[None, :], other=0.0" if masked else ""
    steps = {"LOAD_H": [f"hv = tl.load(h_ptr + t * K + kk{hmask}{hev}).to(tl.float32)"],
             "LOAD_W": [f"wv = tl.load(rows + kk[None, :]{wmask}{wev}).to(tl.float32)"],
             "FMA": ["acc += wv * hv[None, :]" if regs["acc"] == "tile" else "acc += tl.sum(wv * hv[None, :], axis=1)"]}
    return ["kk = k0 + tl.arange(0, BK)"] + (["kmask = kk < K"] if masked else []) + in_order(body, steps)


def render_module(p: dict, m: dict, regs: dict, body: tuple) -> str:
    loop = f"for k0 in tl.range(0, K, BK, num_stages={m['stages']}, loop_unroll_factor={regs['unroll']}):"
    masked = indent(_body(body, m, regs, True))
    if m["masks"] == "even":  # an unmasked twin, taken when the chunks and candidate blocks fill the shape
        k = even_twin([loop] + indent(_body(body, m, regs, False)), [loop] + masked)
    else:
        k = [loop] + masked
    acc0 = "tl.zeros((BJ, BK), dtype=tl.float32)" if regs["acc"] == "tile" else "tl.zeros((BJ,), dtype=tl.float32)"
    out = "tl.sum(acc, axis=1)" if regs["acc"] == "tile" else "acc"
    t_axis, j_axis = (0, 1) if p["grid"] == "tokens_first" else (1, 0)
    kernel = "\n".join(
        ["@triton.jit",
         "def abebot_gather_gemv(h_ptr, w_ptr, ids_ptr, o_ptr, J, K,",
         "                       BJ: tl.constexpr, BK: tl.constexpr, EVEN: tl.constexpr):",
         f"    t = tl.program_id({t_axis}).to(tl.int64)",
         f"    jj = tl.program_id({j_axis}) * BJ + tl.arange(0, BJ)",
         "    jmask = jj < J",
         "    ids = tl.load(ids_ptr + t * J + jj, mask=jmask, other=0).to(tl.int64)",
         "    rows = w_ptr + ids[:, None] * K",
         f"    acc = {acc0}"]
        + indent(k)
        + [f"    tl.store(o_ptr + t * J + jj, ({out}).to(o_ptr.dtype.element_ty), mask=jmask)"])
    grid = "(T, triton.cdiv(J, BJ))" if p["grid"] == "tokens_first" else "(triton.cdiv(J, BJ), T)"
    return f'''"""AbeBot generated Triton gathered GEMV: logits[t, j] = h[t] . W[ids[t, j]]."""
import triton
import triton.language as tl

BJ, BK, NUM_WARPS = {p["block_j"]}, {p["block_k"]}, {p["num_warps"]}


{kernel}


def launch(h, W, ids, logits):
    """logits (tokens, cands) = h (tokens, hidden) . W[ids] rows (ids: tokens x cands int32)."""
    T, K = h.shape
    J = ids.shape[1]
    even = K % BK == 0 and J % BJ == 0
    return abebot_gather_gemv[{grid}](h, W, ids, logits, J, K, BJ, BK, even, num_warps=NUM_WARPS)
'''
