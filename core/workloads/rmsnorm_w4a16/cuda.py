"""CUDA C template of RMSNorm fused into the 4-bit GEMV: the W4A16 kernel with a norm in front.

The weights are the traffic, so this is :mod:`core.workloads.w4a16.cuda`'s kernel (its genes, its
batched and double-buffered word loads, its dequantisations), rendered with a fused RMSNorm: every
block computes its rows' ``1 / sqrt(mean(x^2) + eps)`` from x (a few KB from L2) with warp
shuffles, and multiplies the x values by gamma as it loads them. One more gene,
``instruction_sequence.norm``: ``load`` computes 1 / rms before the weights stream and applies it
to x as loaded; ``store`` computes it after the stream (its x reads hide behind nothing but cost
no latency up front) and applies it once to each finished sum; ``stream`` (the GEMV path) adds up
x^2 from the x values the K lanes load anyway and reduces it with the sums, so x is read once and
no pass over it is left before or after the weights.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome
from core.workloads.w4a16 import cuda as w4a16_cuda
from core.workloads.w4a16 import cuda_mma, cuda_mma_w
from core.workloads.w4a16 import cuda_genes as w4a16_genes
from core.workloads.w4a16.cuda import CudaW4A16Template, render_source

NORM = ChoiceGene("norm", ("load", "store", "stream"),
                  "1 / rms before the stream on x as loaded, after it on the sums, or gathered from x as it streams")


class CudaRmsNormW4A16Template(CudaW4A16Template):
    """The CUDA template of :class:`~core.workloads.rmsnorm_w4a16.RmsNormW4A16Workload`."""

    def gene_space(self) -> GeneSpace:
        dtype, arch = self.problem["dtype"], self.device.arch
        groups = w4a16_genes.gene_groups(dtype, arch)
        groups["instruction_sequence"] += (NORM,)
        seeds = tuple({**s, "instruction_sequence": {**s["instruction_sequence"], "norm": norm}}
                      for s, norm in zip(w4a16_genes.seeds(dtype, arch), ("store", "load", "store", "stream", "load", "store", "load")))
        if dtype in cuda_mma.TYPES:  # the weights-as-A path, with the norm computed before and after the stream
            seeds += tuple({**MMA_W_SEED, "instruction_sequence": {**MMA_W_SEED["instruction_sequence"], "norm": norm}}
                           for norm in ("load", "store")) + (FUSED_SEED,)
        return GeneSpace(groups, (w4a16_genes.fits, _fits_shared, _fits_stream), seeds + (STREAM_SEED,),
                         canonicalisers=w4a16_genes.CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        base = super().render(genome)
        resources = {**base.resources, "shared_bytes": _shared_bytes(genome) + base.launch.get("dynamic_shared_bytes", 0)}
        source = render_source(genome, self.problem, norm=genome["instruction_sequence"]["norm"])
        return KernelSource("cuda", source, "abebot_rmsnorm_w4a16", base.flags, base.launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        lp = kernel.launch_params
        m, n = shape["m"], shape["n"]
        ws = w4a16_cuda.workspace(lp, t, shape)
        return w4a16_cuda.keeping(kernel.bind(w4a16_cuda.grid(lp, m, n), (lp["threads"], 1, 1),
                                              (t["x"], t["gamma"], w4a16_cuda.words(lp, t), w4a16_cuda.scales(lp, t), t["y"], m, n,
                                               shape["k_groups"], float(self.problem["eps"]), *ws),
                                              lp.get("dynamic_shared_bytes", 0)), ws)


TEMPLATE = CudaRmsNormW4A16Template

# The weights-as-A path's fastest W4A16 genome at the QKV shape (15.27 us, call 28): a per-lane cp.async ring
MMA_W_SEED = {"parallel_config": {"threads": 128, "ksplit": 4, "rows_per_block": 1, "kblocks": 1},
              "memory_pattern": {"vec": 1, "layout": "gptq", "w_load": "", "x_load": "", "stages": 4, "copy": "lanes"},
              "register_allocation": {"regs": {"scale": "word", "unroll": 1}, "batch": 1, "pipeline": "off", "min_blocks": 3},
              "instruction_sequence": {"dequant": "half2", "first": "words", "math": cuda_mma_w.MATH,
                                       "nibbles": tuple(f"N{b}" for b in range(8))}}
# The fastest fused genome of call 31 (16.82 us at the QKV shape, M = 1): 8 warps along K, the norm first
FUSED_SEED = {**MMA_W_SEED, "parallel_config": {**MMA_W_SEED["parallel_config"], "threads": 256, "ksplit": 8},
              "register_allocation": {**MMA_W_SEED["register_allocation"], "min_blocks": 1},
              "instruction_sequence": {**MMA_W_SEED["instruction_sequence"], "norm": "load"}}
# The GEMV seed that streams fastest at M = 1 (16-byte words, 64 K lanes), with the norm gathered in the stream
STREAM_SEED = {**w4a16_genes.SEEDS[2], "instruction_sequence": {**w4a16_genes.SEEDS[2]["instruction_sequence"], "norm": "stream"}}


def _shared_bytes(g: Genome) -> int:
    """W4A16's K-lane reduction, plus a float per warp and row (the sum of squares) and 1 / rms per
    row (16 rows, the most, on the tensor-core paths)."""
    p = g["parallel_config"]
    rows = 16 if g["instruction_sequence"]["math"] != "fma" else p["rows_per_block"]
    return w4a16_genes.shared_bytes(g) + 4 * (p["threads"] // 32 + 1) * rows


def _fits_stream(g: Genome) -> str | None:
    if g["instruction_sequence"]["norm"] != "stream":
        return None
    if g["instruction_sequence"]["math"] != "fma":
        return "the tensor-core paths apply the norm at load or at store only"
    if g["instruction_sequence"]["dequant"] == "mask":
        return "mask pre-scales x as it is loaded; the sum of squares needs x as it is"
    return None


def _fits_shared(g: Genome) -> str | None:
    if _shared_bytes(g) > w4a16_genes.SMEM_LIMIT:
        return f"{_shared_bytes(g)} B of shared memory (> {w4a16_genes.SMEM_LIMIT})"
    return None
