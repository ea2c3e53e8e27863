"""Triton RMSNorm + W4A16 template: :mod:`core.workloads.w4a16.triton`'s kernel with a norm in front.

A program computes W4A16's [block_m, block_n] tile of y (its genes, its walk over the groups of 128
rows of K, ``k_words`` words per column at a time), rendered with a fused RMSNorm: it computes its
rows' ``1 / sqrt(mean(x^2) + eps)`` from x in chunks of ``norm_chunk`` (every program does: that
is the fusion) and multiplies the x tiles it loads by gamma. The normalised row is never stored.
Two more genes:

* ``memory_pattern.norm_chunk`` -- the width of the norm's chunks;
* ``instruction_sequence.norm`` -- 1/rms computed before the product and applied to x as loaded
  (norm first), or after it and applied to the finished sums (norm last).

block_m stops at 16, the workload's largest M; the weights are symmetric (zero point 8).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from core.genome import ChoiceGene, GeneSpace, Genome
from core.workloads.w4a16 import triton as w4a16_triton
from core.workloads.w4a16.triton import TritonW4A16Template

NORM_CHUNK = ChoiceGene("norm_chunk", (256, 1024, 2048), "elements of a row the norm reads per step")
NORM = ChoiceGene("norm", ("load", "store"), "1/rms on x as loaded (norm first) or on the sums (norm last)")


class TritonRmsNormW4A16Template(TritonW4A16Template):
    """The Triton template of :class:`~core.workloads.rmsnorm_w4a16.RmsNormW4A16Workload`."""

    entry = "abebot_rmsnorm_w4a16"

    def gene_space(self) -> GeneSpace:
        groups = w4a16_triton.gene_groups()
        groups["parallel_config"] = _with(groups["parallel_config"], "block_m", options=(1, 2, 4, 16))
        groups["memory_pattern"] = (*_with(groups["memory_pattern"], "x_eviction",
                                           doc="L2 eviction policy of the x and gamma loads"), NORM_CHUNK)
        groups["instruction_sequence"] = (*groups["instruction_sequence"], NORM)
        seeds = tuple({**s, "memory_pattern": {**s["memory_pattern"], "norm_chunk": chunk},
                       "instruction_sequence": {**s["instruction_sequence"], "norm": norm}}
                      for s, (chunk, norm) in zip(w4a16_triton.SEEDS, ((1024, "load"), (256, "store"))))
        return GeneSpace(groups, (_fits,), seeds, hints=w4a16_triton.HINTS)

    def norm(self, genome: Genome) -> str:
        """Where 1/rms is applied: "load" (x as loaded) or "store" (the sums)."""
        return genome["instruction_sequence"]["norm"]

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        x, gamma, qweight, scales, y = t["x"], t["gamma"], t["qweight"], t["scales"], t["y"]
        eps = float(self.problem["eps"])
        return lambda: kernel(x, gamma, qweight, scales, y, eps)


TEMPLATE = TritonRmsNormW4A16Template


def _with(genes: tuple, name: str, **changes: Any) -> tuple:
    return tuple(dataclasses.replace(g, **changes) if g.name == name else g for g in genes)


def _fits(g: Genome) -> str | None:
    # The norm holds a [block_m, norm_chunk] tile of x besides the product's.
    return w4a16_triton.fits(g, g["parallel_config"]["block_m"] * g["memory_pattern"]["norm_chunk"])
