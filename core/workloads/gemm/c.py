"""GEMM on the CPU: a BLIS-style blocked kernel in C whose structure is the genome.

The rendered kernel is three blocking loops (JC over N, KC over K, IC over M) around two micro
loops (JR, IR) that call a register-tiled micro-kernel on an MR x NR tile of C. The genome picks:

* parallel_config -- OpenMP threads, schedule, which loop is work-shared, the block sizes MC/NC/KC;
* memory_pattern -- whether A and B are packed into contiguous, zero-padded, 64-byte aligned
  panels, how the micro-kernel vectorises (GCC vector extensions or ``#pragma omp simd``) and at
  what width, and pointer hints (``restrict``, ``__builtin_assume_aligned``);
* register_allocation -- the seed's register map: MR x NR accumulators in registers (or C updated
  in memory), A values preloaded into registers or streamed, the k loop unrolled 1/2/4 times;
* instruction_sequence -- the nesting order of the five loops and where PREFETCH_A/PREFETCH_B are
  emitted.

Every genome is correct for any M, N, K: tiles at the edges are computed into a local tile from
zero-padded panels and only their valid part is written.
"""
from __future__ import annotations

from typing import Any, Callable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene, with_gene
from core.workloads.c_kernel import CTemplate
from core.workloads.openmp import one_thread, thread_options, vector_genes
from core.workloads.gemm.c_source import BLOCKING, LOOPS, MAX_ACC_VECTORS, PREFETCHES, GemmConfig, render_source

ENTRY = "abebot_gemm"
ARGTYPES = ("ptr", "ptr", "ptr", "int", "int", "int")  # the entry point's C signature, for ctypes


class CGemmTemplate(CTemplate):
    """The C template of :class:`~core.workloads.gemm.GemmWorkload`."""

    def gene_space(self) -> GeneSpace:
        cores = self.cores
        parallel = (
            ChoiceGene("threads", thread_options(cores), "OpenMP threads (1 = no parallel region)"),
            ChoiceGene("schedule", ("static", "dynamic"), "OpenMP schedule of the work-shared loop"),
            ChoiceGene("parallel_loop", ("jc", "ic", "jr", "ir"), "loop whose iterations are shared among threads"),
            ChoiceGene("mc", (16, 32, 48, 64, 96, 128, 192, 256), "rows of A per block (rounded up to MR)"),
            ChoiceGene("nc", (64, 128, 256, 512, 1024, 2048), "columns of B per block (rounded up to NR)"),
            ChoiceGene("kc", (32, 64, 128, 192, 256, 384, 512), "depth of a block along K"),
        )
        memory = (
            ChoiceGene("pack_a", ("none", "panels"), "copy A blocks into contiguous MR-row panels"),
            ChoiceGene("pack_b", ("none", "panels"), "copy B blocks into contiguous NR-column panels"),
            *vector_genes(),
            ChoiceGene("pointer_hints", ("none", "restrict", "restrict_aligned"), "restrict / assume_aligned on the micro-kernel's operands"),
        )
        registers = (
            MapGene("register_map", (
                ("mr", (1, 2, 4, 6, 8, 12, 14)),
                ("nr", (4, 8, 16, 24, 32, 48, 64)),
                ("acc", ("registers", "memory")),
                ("a_values", ("preload", "stream")),
                ("k_unroll", (1, 2, 4)),
            ), "micro-tile MR x NR accumulators: in registers or C in memory; A values preloaded or "
               "streamed; k loop unrolled"),
        )
        sequence = (
            SequenceGene("loop_order", LOOPS, PREFETCHES,
                         tuple((b, m) for b in BLOCKING for m in ("JR", "IR")),
                         "nesting of the blocking loops JC/KC/IC and micro loops JR/IR; a PREFETCH token "
                         "prefetches the next iteration's operand at the top of the loop before it"),
        )
        return GeneSpace(
            groups={"parallel_config": parallel, "memory_pattern": memory,
                    "register_allocation": registers, "instruction_sequence": sequence},
            constraints=(_nr_multiple_of_width, _register_budget),
            seeds=seed_genomes(cores),
            canonicalisers=CANONICALISERS,
            # restrict and alignment promises, where A values wait and the order of two prefetches:
            # gcc may have no use for them in a given loop nest (and that depends on gcc and the CPU)
            hints=("memory_pattern.pointer_hints", "register_allocation.register_map.a_values",
                   "instruction_sequence.loop_order:PREFETCH_A", "instruction_sequence.loop_order:PREFETCH_B"),
        )

    def render(self, genome: Genome) -> KernelSource:
        cfg = GemmConfig.from_genome(genome)
        shape = {k: self.problem[k] for k in ("m", "n", "k")}
        return self.c_kernel(render_source(cfg), ENTRY, ARGTYPES, cfg.threads,
                             cfg.workspace_bytes(shape["m"], shape["n"], shape["k"]),
                             mr=cfg.mr, nr=cfg.nr, mc=cfg.mc, nc=cfg.nc, kc=cfg.kc)

    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], None]:
        return kernel.bind(t["a"], t["b"], t["c"], shape["m"], shape["n"], shape["k"])


TEMPLATE = CGemmTemplate


# ---- genes -> configuration --------------------------------------------------------------------

def _nr_multiple_of_width(g: Genome) -> str | None:
    nr, vw = g["register_allocation"]["register_map"]["nr"], g["memory_pattern"]["vector_width"]
    return None if nr % vw == 0 else f"micro-tile columns NR={nr} are not a multiple of the vector width {vw}"


def _register_budget(g: Genome) -> str | None:
    rm, vw = g["register_allocation"]["register_map"], g["memory_pattern"]["vector_width"]
    n = rm["mr"] * rm["nr"] // vw
    return None if n <= MAX_ACC_VECTORS else f"{n} accumulator vectors (MR*NR/width) > {MAX_ACC_VECTORS}"


# ---- canonical genomes: genes that do not apply in their context get one fixed value ------------

def _scalar_memory_tile(g: Genome) -> Genome:
    # Width 1 with C itself as the accumulator: GCC vector types and `#pragma omp simd` are both only
    # written for widths above 1, so the two spellings render the same scalar micro-kernel.
    if g["memory_pattern"]["vector_width"] == 1 and g["register_allocation"]["register_map"]["acc"] == "memory":
        g = with_gene(g, "memory_pattern", "vectorize", "vector_ext")
    return g


CANONICALISERS = (one_thread(schedule="static", parallel_loop="ic"), _scalar_memory_tile)


def _has_avx512() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx512f" in line for line in f)
    except OSError:
        return False


def seed_genomes(cores: int) -> tuple[dict, ...]:
    """A naive but correct kernel, and a blocked, packed, register-tiled one sized for the vector
    registers here: 8x32 (16 zmm accumulators) with AVX-512, else 6x16 (12 ymm)."""
    mr, nr, vw = (8, 32, 16) if _has_avx512() else (6, 16, 8)
    naive = {
        "parallel_config": {"threads": 1, "schedule": "static", "parallel_loop": "ic", "mc": 256, "nc": 2048, "kc": 512},
        "memory_pattern": {"pack_a": "none", "pack_b": "none", "vectorize": "vector_ext", "vector_width": 1, "pointer_hints": "none"},
        "register_allocation": {"register_map": {"mr": 1, "nr": 4, "acc": "memory", "a_values": "stream", "k_unroll": 1}},
        "instruction_sequence": {"loop_order": ["JC", "KC", "IC", "JR", "IR"]},
    }
    blocked = {
        "parallel_config": {"threads": cores, "schedule": "static", "parallel_loop": "jr", "mc": 96, "nc": 2048, "kc": 256},
        "memory_pattern": {"pack_a": "panels", "pack_b": "panels", "vectorize": "vector_ext", "vector_width": vw, "pointer_hints": "restrict_aligned"},
        "register_allocation": {"register_map": {"mr": mr, "nr": nr, "acc": "registers", "a_values": "stream", "k_unroll": 4}},
        "instruction_sequence": {"loop_order": ["JC", "KC", "IC", "JR", "IR"]},
    }
    return (naive, blocked)
