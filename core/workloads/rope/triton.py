"""Triton RoPE template (NeoX style, in place on query and key).

A program takes ``tokens_per_program`` tokens and, of each, every ``head_splits``-th block of
``heads_per_block`` heads (query heads, then key heads), as [heads, half] tiles of x1 and x2.

* parallel_config -- tokens per program, programs sharing a token's heads (grid axis 1: spreads a
  decode step of one token over the GPU), heads per tile, warps;
* memory_pattern -- L2 eviction policy of the q/k loads and of the cos/sin loads, the store's cache
  modifier, masks on every access or only where the shape needs them (``EVEN``, decided at launch);
* register_allocation -- the rotation in fp32 or in the input dtype (products rounded, as the
  eager ``forward_native``), and cos/sin held in registers across a token's head tiles or reloaded
  for every tile;
* instruction_sequence -- the order of the loads of x1, x2 and cos/sin, the rotation and the two
  stores.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.triton_common import (TritonTemplate, cache_modifier, eviction, even_twin, gene_groups_of, in_order,
                                          indent, masks_gene, next_pow2, num_warps_gene, per_thread_violation)

TOKENS = ("LOAD_X1", "LOAD_X2", "LOAD_CS", "ROTATE", "STORE_X1", "STORE_X2")
BEFORE = (("LOAD_X1", "ROTATE"), ("LOAD_X2", "ROTATE"), ("LOAD_CS", "ROTATE"), ("ROTATE", "STORE_X1"),
          ("ROTATE", "STORE_X2"))
MAX_ELEMS_PER_THREAD = 64  # of the four [heads, half] tiles together


class TritonRopeTemplate(TritonTemplate):
    """The Triton template of :class:`~core.workloads.rope.RopeWorkload`."""

    def gene_space(self) -> GeneSpace:
        groups = {
            "parallel_config": (
                ChoiceGene("tokens_per_program", (1, 2, 4, 8), "tokens one program rotates"),
                ChoiceGene("head_splits", (1, 2, 4, 8), "programs sharing one token's head tiles"),
                ChoiceGene("heads_per_block", (4, 8, 16, 32), "heads per tile"),
                num_warps_gene((1, 2, 4, 8)),
            ),
            "memory_pattern": (
                ChoiceGene("x_eviction", ("", "evict_first", "evict_last"), "L2 eviction policy of the q/k loads"),
                ChoiceGene("cs_eviction", ("", "evict_last"), "L2 eviction policy of the cos/sin loads"),
                ChoiceGene("store", ("", ".cs"), "store cache modifier (.cs = streaming)"),
                masks_gene("mask every access, or only when the shape needs it"),
            ),
            "register_allocation": (
                MapGene("regs", (("math", ("fp32", "input")), ("cs", ("hold", "reload"))),
                        "precision of the rotation; cos/sin held across a token's tiles or reloaded per tile"),
            ),
            "instruction_sequence": (SequenceGene("body", TOKENS, (), BEFORE, "order of a tile's operations"),),
        }
        half = next_pow2(self.problem["half_dim"])

        def fits(g: Genome) -> str | None:
            p = g["parallel_config"]
            return per_thread_violation(4 * p["heads_per_block"] * half // (32 * p["num_warps"]), MAX_ELEMS_PER_THREAD)

        seeds = ({"parallel_config": {"tokens_per_program": 1, "head_splits": 1, "heads_per_block": 8, "num_warps": 4},
                  "memory_pattern": {"x_eviction": "", "cs_eviction": "", "store": "", "masks": "always"},
                  "register_allocation": {"regs": {"math": "fp32", "cs": "hold"}},
                  "instruction_sequence": {"body": TOKENS}},
                 {"parallel_config": {"tokens_per_program": 1, "head_splits": 4, "heads_per_block": 8, "num_warps": 2},
                  "memory_pattern": {"x_eviction": "evict_first", "cs_eviction": "evict_last", "store": ".cs", "masks": "even"},
                  "register_allocation": {"regs": {"math": "fp32", "cs": "hold"}},
                  "instruction_sequence": {"body": TOKENS}})
        canonicalisers = CANONICALISERS + ((_fp32_math,) if self.problem["dtype"] == "float32" else ()) + (self._never_even,)
        return GeneSpace(groups, (fits,), seeds, canonicalisers=canonicalisers)

    def _never_even(self, g: Genome) -> Genome:
        # Only the problem's own shape can fill the tiles (the spec's odd shapes never do): where it
        # does not either, the unmasked twin is never taken and "even" builds the masked kernel.
        bh, pr = g["parallel_config"]["heads_per_block"], self.problem
        if pr["half_dim"] != next_pow2(pr["half_dim"]) or pr["q_heads"] % bh or pr["kv_heads"] % bh:
            g = with_gene(g, "memory_pattern", "masks", "always")
        return g

    def render(self, genome: Genome) -> KernelSource:
        p, m, regs, body = gene_groups_of(genome)
        threads = 32 * p["num_warps"]
        per_thread = max(1, 4 * p["heads_per_block"] * next_pow2(self.problem["half_dim"]) // threads)
        launch = {"tokens_per_program": p["tokens_per_program"], "head_splits": p["head_splits"],
                  "heads_per_block": p["heads_per_block"], "num_warps": p["num_warps"]}
        return self.kernel_source(render_module(p, m, regs, body), "abebot_rope", launch, threads, min(255, 32 + per_thread))

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        positions, cache, q, k = t["positions"], t["cos_sin_cache"], t["q"], t["k"]
        return lambda: kernel(positions, cache, q, k)


TEMPLATE = TritonRopeTemplate


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _held_cs_loads_first(g: Genome) -> Genome:
    # Held cos/sin are loaded once per token, before the head tiles: LOAD_CS has no place in a tile.
    if g["register_allocation"]["regs"]["cs"] == "hold":
        body = tuple(g["instruction_sequence"]["body"])
        g = with_gene(g, "instruction_sequence", "body", ("LOAD_CS",) + tuple(t for t in body if t != "LOAD_CS"))
    return g


def _fp32_math(g: Genome) -> Genome:
    # float32 tensors: the rotation "in the input dtype" is the rotation in float32.
    return with_gene(g, "register_allocation", "regs", "fp32", key="math")


CANONICALISERS = (_held_cs_loads_first,)


def _cos_sin(m: dict, regs: dict) -> list[str]:
    """The loads of the token's cos and sin, [1, half] each."""
    cev, cast = eviction(m["cs_eviction"]), ".to(tl.float32)" if regs["math"] == "fp32" else ""
    return [f"c = tl.load(cs_ptr + jj, mask=jmask{cev})[None, :]{cast}",
            f"s = tl.load(cs_ptr + H + jj, mask=jmask{cev})[None, :]{cast}"]


def _tile(body: tuple, m: dict, regs: dict) -> list[str]:
    """One [heads, half] tile of x (``x_ptr`` rows ``hh`` of ``nh``), in genome order."""
    ev, st = eviction(m["x_eviction"]), cache_modifier(m["store"])
    cast = ".to(tl.float32)" if regs["math"] == "fp32" else ""
    steps = {"LOAD_X1": [f"x1 = tl.load(x_ptr + offs, mask=mask{ev}){cast}"],
             "LOAD_X2": [f"x2 = tl.load(x_ptr + offs + H, mask=mask{ev}){cast}"],
             "LOAD_CS": _cos_sin(m, regs) if regs["cs"] == "reload" else [],
             "ROTATE": ["o1 = x1 * c - x2 * s", "o2 = x2 * c + x1 * s"],
             "STORE_X1": [f"tl.store(x_ptr + offs, o1.to(x_ptr.dtype.element_ty), mask=mask{st})"],
             "STORE_X2": [f"tl.store(x_ptr + offs + H, o2.to(x_ptr.dtype.element_ty), mask=mask{st})"]}
    return (["offs = (row + hh)[:, None] * (2 * H) + jj[None, :]", "mask = (hh[:, None] < nh) & jmask[None, :]"]
            + in_order(body, steps))


def render_module(p: dict, m: dict, regs: dict, body: tuple) -> str:
    tile = _tile(body, m, regs)
    if m["masks"] == "even":  # an unmasked twin of the tile, taken when heads and half fill the tiles
        tile = even_twin([ln.replace(", mask=mask", "").replace(", mask=jmask", "") for ln in tile], tile)
    held = []
    if regs["cs"] == "hold":
        held = _cos_sin(m, regs)
        if m["masks"] == "even":
            held = even_twin([ln.replace(", mask=jmask", "") for ln in held], held)
    helper = "\n".join(["@triton.jit",
                        "def _heads(x_ptr, cs_ptr, row, nh, h_first, H, jj, jmask,",
                        "           SPLITS: tl.constexpr, BH: tl.constexpr, EVEN: tl.constexpr):"]
                       + indent(held)
                       + ["    for h0 in range(h_first, nh, SPLITS * BH):", "        hh = h0 + tl.arange(0, BH)"]
                       + indent(tile, 2))
    return f'''"""AbeBot generated Triton RoPE (NeoX style, in place)."""
import triton
import triton.language as tl

TOKENS, SPLITS, BH, NUM_WARPS = {p["tokens_per_program"]}, {p["head_splits"]}, {p["heads_per_block"]}, {p["num_warps"]}


{helper}


@triton.jit
def abebot_rope(pos_ptr, cache_ptr, q_ptr, k_ptr, n_tokens, nq, nk, H,
                TOKENS: tl.constexpr, SPLITS: tl.constexpr, BH: tl.constexpr, HALF: tl.constexpr, EVEN: tl.constexpr):
    jj = tl.arange(0, HALF)
    jmask = jj < H
    h_first = tl.program_id(1) * BH
    for i in range(TOKENS):
        t = tl.program_id(0) * TOKENS + i
        if t < n_tokens:
            cs_ptr = cache_ptr + tl.load(pos_ptr + t).to(tl.int64) * (2 * H)
            _heads(q_ptr, cs_ptr, t.to(tl.int64) * nq, nq, h_first, H, jj, jmask, SPLITS, BH, EVEN)
            _heads(k_ptr, cs_ptr, t.to(tl.int64) * nk, nk, h_first, H, jj, jmask, SPLITS, BH, EVEN)


def launch(positions, cos_sin_cache, q, k):
    """Rotate q (tokens, q_heads, 2, half) and k (tokens, kv_heads, 2, half) in place."""
    T, NQ, _, H = q.shape
    NK = k.shape[1]
    half = triton.next_power_of_2(H)
    even = H == half and NQ % BH == 0 and NK % BH == 0
    grid = (triton.cdiv(T, TOKENS), SPLITS)
    return abebot_rope[grid](positions, cos_sin_cache, q, k, T, NQ, NK, H, TOKENS, SPLITS, BH, half, even,
                             num_warps=NUM_WARPS)
'''
