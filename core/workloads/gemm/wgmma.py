"""Hopper GEMM template (``cuda`` backend, sm_90a): TMA, mbarriers, wgmma, warp specialisation.

Chosen with the problem setting ``"template": "wgmma"`` (``--workload gemm --backend cuda
--problem '{"template": "wgmma"}'``); without it a gemm run on ``cuda`` keeps the ``mma.sync``
template of :mod:`core.workloads.gemm.cuda`, its genomes and their hashes unchanged. bf16 or fp16
in, fp32 accumulation, the input type out; any M, N, K.

Design (the kernel text is ``kernels/wgmma.cu``; its header says what each part does):

* a producer warpgroup whose one thread issues the TMA copies of A's and B's tiles into a
  ``stages``-deep shared-memory ring; a full and an empty mbarrier per ring slot (the producer
  arms the full one with the bytes to come, each consumer warp frees the slot on the empty one);
* ``consumers`` consumer warpgroups, each computing BM/consumers rows of the BM x BN tile with
  ``wgmma.mma_async m64nBNk16`` straight from the swizzled shared tiles (A K-major, B MN-major);
* ``setmaxnreg`` moving registers from the producer to the consumers (``reg_split``);
* a persistent grid (one block per SM, walking tiles in the ``raster`` order) or one block a tile;
* optionally clusters of two CTAs on vertically adjacent tiles (``cluster_m``): each copies half of
  B's tile and multicasts it to both, and frees a slot on both CTAs' empty barriers;
* optionally split-K (``split_k`` 2, 4, 8): a tile's k-tiles cut into slices, each a work unit of its
  own; each slice leaves an fp32 partial in a workspace and counts itself on the tile's counter, and
  the one that counts last adds the partials in slice order and stores C (``kernels/wgmma_splitk.cuh``:
  no unit waits for another, and the sum's order is fixed, so the result is the same bits every
  launch);
* an epilogue from registers to global memory with guards, or through a swizzled shared tile and
  TMA stores (which clip at the edges); the latter falls back at run time to the former when
  C's rows are not 16-byte aligned (N not a multiple of 8);
* A or B whose rows TMA cannot map (K or N not a multiple of 8) are staged into padded buffers
  before each launch (:mod:`core.workloads.gemm.wgmma_launch`): correct for 4095 x 4097 x 1023,
  at the price of that copy.

Genes, each changing the rendered source:

* parallel_config -- ``block_m`` (64/128/256), ``block_n`` (64/80/96/128/192/256), ``block_k`` (32/64/128),
  ``consumers`` (1/2 warpgroups), ``persistent`` (persistent grid or one block per tile),
  ``raster`` (row, column, grouped by 8 tile rows), ``cluster_m`` (1 or 2 CTAs sharing B), ``split_k``
  (1/2/4/8 slices of K per tile; a genome saved before the gene existed reads as 1);
* memory_pattern -- ``stages`` (2-6), ``swizzle`` (128/64/32 B: TMA box width and wgmma
  descriptor mode), ``epilogue`` (direct or tma);
* register_allocation -- ``reg_split`` (setmaxnreg producer/consumer registers, or none);
* instruction_sequence -- ``inflight`` (wgmma groups left in flight before a slot is freed: 0
  or 1) and ``load_order`` (A's copies before B's or after).

Not built yet (issue 30): clusters along N (multicast of A), stream-K, swap-AB.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import Artifact, KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, with_gene
from core.workloads.gemm import wgmma_launch
from core.workloads.gemm.wgmma_source import (ENTRY, REG_SPLITS, SMEM_LIMIT, _entry_registers, derived,
                                              render_source, violation)
from core.workloads.template import Template

FLAGS = ("-std=c++17", "--gpu-architecture=sm_90a")

GENES = {
    "parallel_config": (
        ChoiceGene("block_m", (64, 128, 256), "rows of C per block (split over the consumer warpgroups)"),
        ChoiceGene("block_n", (64, 80, 96, 128, 192, 256), "columns of C per block (the wgmma N; 80 tiles N = 10240 "
                   "into 128 blocks)"),
        ChoiceGene("block_k", (32, 64, 128), "K depth of one ring slot"),
        ChoiceGene("consumers", (1, 2), "consumer warpgroups (each 64 or 128 rows of the tile)"),
        ChoiceGene("persistent", ("persistent", "grid"), "one block per SM walking the tiles, or one block per tile"),
        ChoiceGene("raster", ("row", "column", "grouped"), "order of the tiles (L2 reuse of A's rows or B's columns)"),
        ChoiceGene("cluster_m", (1, 2), "CTAs per cluster along M, sharing B's tile by TMA multicast"),
        ChoiceGene("split_k", (1, 2, 4, 8), "slices of K per tile, each a work unit; fp32 partials added in slice "
                   "order by the last slice to finish (deterministic)", legacy=1),
    ),
    "memory_pattern": (
        ChoiceGene("stages", (2, 3, 4, 5, 6), "ring slots of A and B tiles in flight"),
        ChoiceGene("swizzle", (128, 64, 32), "shared-memory swizzle in bytes (TMA box width, wgmma descriptor mode)"),
        ChoiceGene("epilogue", ("direct", "tma"), "registers to global memory, or through shared memory and TMA stores"),
    ),
    "register_allocation": (
        ChoiceGene("reg_split", tuple(REG_SPLITS), "setmaxnreg producer/consumer registers per thread (none: no setmaxnreg)"),
    ),
    "instruction_sequence": (
        ChoiceGene("inflight", (0, 1), "wgmma groups left in flight before the slot they read is freed"),
        ChoiceGene("load_order", ("AB", "BA"), "the producer's copies of a slot: A's first or B's first"),
    ),
}

SEEDS = (
    {"parallel_config": {"block_m": 128, "block_n": 256, "block_k": 64, "consumers": 2, "persistent": "persistent",
                         "raster": "grouped", "cluster_m": 1, "split_k": 1},
     "memory_pattern": {"stages": 4, "swizzle": 128, "epilogue": "direct"},
     "register_allocation": {"reg_split": "40/232"},
     "instruction_sequence": {"inflight": 1, "load_order": "AB"}},
    {"parallel_config": {"block_m": 128, "block_n": 128, "block_k": 64, "consumers": 2, "persistent": "grid",
                         "raster": "row", "cluster_m": 1, "split_k": 1},
     "memory_pattern": {"stages": 4, "swizzle": 128, "epilogue": "tma"},
     "register_allocation": {"reg_split": "24/240"},
     "instruction_sequence": {"inflight": 0, "load_order": "AB"}},
    {"parallel_config": {"block_m": 64, "block_n": 128, "block_k": 64, "consumers": 1, "persistent": "persistent",
                         "raster": "column", "cluster_m": 1, "split_k": 1},
     "memory_pattern": {"stages": 6, "swizzle": 128, "epilogue": "direct"},
     "register_allocation": {"reg_split": "none"},
     "instruction_sequence": {"inflight": 1, "load_order": "BA"}},
)


def _one_consumer_keeps_its_registers(g: Genome) -> Genome:
    # With one consumer warpgroup the block enters with 255 registers a thread: setmaxnreg has
    # nothing to move (the renderer emits none), so every split is the same kernel as "none".
    if g["parallel_config"]["consumers"] == 1:
        g = with_gene(g, "register_allocation", "reg_split", "none")
    return g


CANONICALISERS = (_one_consumer_keeps_its_registers,)


class WgmmaGemmTemplate(Template):
    backend = "cuda"

    def gene_space(self) -> GeneSpace:
        dtype = self.problem["dtype"]
        limit = min(self.device.shared_mem_per_block or SMEM_LIMIT, SMEM_LIMIT)
        return GeneSpace(GENES, (lambda g: violation(g, dtype, limit),), SEEDS, canonicalisers=CANONICALISERS)

    def render(self, genome: Genome) -> KernelSource:
        dtype = self.problem["dtype"]
        why = violation(genome, dtype)
        if why:
            raise ValueError(f"wgmma genome refused: {why}")
        d = derived(genome)
        launch = {"block_m": d["bm"], "block_n": d["bn"], "block_k": d["bk"], "wg_m": d["wg_m"], "threads": d["threads"],
                  "swizzle": d["swizzle"], "dynamic_shared_bytes": d["smem"], "cluster_m": d["cluster_m"],
                  "persistent": genome.get("parallel_config", "persistent") == "persistent", "split_k": d["split_k"],
                  "epilogue_tma": genome.get("memory_pattern", "epilogue") == "tma"}
        resources = {"threads": d["threads"], "shared_bytes": d["smem"], "registers": _entry_registers(d["threads"])}
        return KernelSource("cuda", render_source(genome, dtype), ENTRY, FLAGS, launch, resources)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        return wgmma_launch.bind(kernel, self.problem["dtype"], t, shape, self.device.multiprocessors or 132)

    def extra_bytes(self, kernel: Any, artifact: Artifact, shape: dict) -> int:
        """The padded copies of A and B staged for shapes TMA cannot map in place, and split-K's
        workspace (fp32 partials and counters)."""
        launch = kernel.launch_params if kernel is not None else artifact.launch if artifact is not None else {}
        return wgmma_launch.extra_bytes(launch, shape["m"], shape["n"], shape["k"])


TEMPLATE = WgmmaGemmTemplate
