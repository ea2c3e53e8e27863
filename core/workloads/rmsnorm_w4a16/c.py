"""RMSNorm + W4A16 on the CPU: :mod:`core.workloads.w4a16.c`'s OpenMP kernel with a norm in front.

The weights are the traffic, so this is W4A16's C kernel (its tiles of ``rows`` rows by ``cols``
vectors, its genes and their loops), rendered with a fused RMSNorm: each row's ``inv = 1 /
sqrt(mean(x^2) + eps)`` is computed once per call before the parallel loop, or by every tile for
its own rows (the GPU kernels' fusion: nothing shared between tasks), and the x values a tile
loads are multiplied by gamma (and by inv, when the norm is applied at the load). The normalised
row is never stored. Two more genes:

* ``memory_pattern.norm_pass`` -- inv computed once per call, or per tile;
* ``register_allocation.register_map.norm`` -- inv applied to x as it is loaded, or to the
  finished sums.

W4A16's ``layout`` gene is left out: this workload declares no weights, so nothing repacks them
into panels; the kernel reads GPTQ's words (symmetric: zero point 8).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from core.genome import ChoiceGene, GeneSpace, Genome
from core.workloads.w4a16 import c as w4a16_c
from core.workloads.w4a16.c import CW4A16Template, Norm

ENTRY = "abebot_rmsnorm_w4a16"
# x, gamma, qweight, scales, y, m, n, k_groups, eps
ARGTYPES = ("ptr", "ptr", "ptr", "ptr", "ptr", "int", "int", "int", "float")
NORM_PASS = ChoiceGene("norm_pass", ("once", "per_tile"), "each row's 1/rms computed once per call, or by every tile")
NORM_AT = ("norm", ("load", "store"))  # a key of the register map


class CRmsNormW4A16Template(CW4A16Template):
    """The C template of :class:`~core.workloads.rmsnorm_w4a16.RmsNormW4A16Workload`."""

    entry, argtypes = ENTRY, ARGTYPES

    def gene_space(self) -> GeneSpace:
        cores = self.cores
        groups = w4a16_c.gene_groups(cores)
        groups["memory_pattern"] = (*(g for g in groups["memory_pattern"] if g.name != "layout"), NORM_PASS)
        (regs,) = groups["register_allocation"]
        groups["register_allocation"] = (dataclasses.replace(
            regs, keys=(*regs.keys, NORM_AT), doc=f"{regs.doc}; 1/rms on x as it is loaded or on the finished sums"),)
        return GeneSpace(groups=groups, seeds=seed_genomes(cores), canonicalisers=w4a16_c.canonicalisers(),
                         hints=w4a16_c.HINTS)

    def norm(self, genome: Genome) -> Norm:
        """The fused RMSNorm: 1/rms at the load or the store, computed per tile or once."""
        return Norm(genome["register_allocation"]["register_map"]["norm"],
                    genome["memory_pattern"]["norm_pass"] == "per_tile")

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        return kernel.bind(t["x"], t["gamma"], t["qweight"], t["scales"], t["y"], shape["m"], shape["n"],
                           shape["k_groups"], float(self.problem["eps"]))


TEMPLATE = CRmsNormW4A16Template


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """W4A16's seeds (a scalar one-column kernel on one thread, a vectorised, threaded 2-row one),
    the first with 1/rms per tile on x as loaded, the second once per call on the sums."""
    seeds = []
    for s, (norm_pass, at) in zip(w4a16_c.seed_genomes(cores), (("per_tile", "load"), ("once", "store"))):
        memory = {k: v for k, v in s["memory_pattern"].items() if k != "layout"}
        regs = {**s["register_allocation"]["register_map"], "norm": at}
        seeds.append({**s, "memory_pattern": {**memory, "norm_pass": norm_pass},
                      "register_allocation": {"register_map": regs}})
    return tuple(seeds)
