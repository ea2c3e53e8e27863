"""Genes every OpenMP C template shares: the thread counts to offer, and the canonical form of
genes that a single thread or a scalar width leaves unwritten."""
from __future__ import annotations

from typing import Callable

from core.genome import ChoiceGene, Genome, with_gene


def thread_options(cores: int) -> tuple[int, ...]:
    """1, all cores and a few counts between; 2 even on one core, so that threading stays a gene."""
    return tuple(sorted({1, 2, cores, *(c for c in (4, 8, 16, 32) if c < cores), max(1, cores // 2)}))


def row_parallel_genes(cores: int) -> tuple[ChoiceGene, ...]:
    """parallel_config of a row-wise kernel: OpenMP threads over rows, their schedule and chunk."""
    return (
        ChoiceGene("threads", thread_options(cores), "OpenMP threads over rows (1 = no parallel region)"),
        ChoiceGene("schedule", ("static", "dynamic", "guided"), "OpenMP schedule of the row loop"),
        ChoiceGene("rows_per_chunk", (1, 2, 4, 8, 16, 32), "rows handed to a thread at a time"),
    )


def split_parallel_genes(cores: int, splits: tuple[str, ...], split: str,
                         chunks: tuple[int, ...] = (1, 2, 4, 8, 16, 32)) -> tuple[ChoiceGene, ...]:
    """parallel_config of a kernel whose parallel loop runs over one of ``splits`` (``split`` says
    what each means): OpenMP threads, schedule, chunk and the split."""
    return (
        ChoiceGene("threads", thread_options(cores), "OpenMP threads (1 = no parallel region)"),
        ChoiceGene("schedule", ("static", "dynamic", "guided"), "OpenMP schedule of the parallel loop"),
        ChoiceGene("chunk", chunks, "iterations handed to a thread at a time"),
        ChoiceGene("split", splits, split),
    )


def pointer_hints_gene(pointers: str = "") -> ChoiceGene:
    """Whether the kernel's (``pointers``, e.g. "row ") pointers are ``restrict``-qualified."""
    return ChoiceGene("pointer_hints", ("none", "restrict"), f"restrict-qualified {pointers}pointers")


def compiler_hints(prefetch: str) -> tuple[str, ...]:
    """A GeneSpace's ``hints`` for a C template: ``restrict`` and the place of the ``prefetch``
    stage among independent statements, which gcc may have no use for in a given loop (that
    depends on gcc and the CPU)."""
    return ("memory_pattern.pointer_hints", f"instruction_sequence.stages:{prefetch}")


def vector_genes() -> tuple[ChoiceGene, ...]:
    """How a loop vectorises: GCC vector types or ``#pragma omp simd``, and its width in floats."""
    return (
        ChoiceGene("vectorize", ("vector_ext", "omp_simd"), "GCC vector types or #pragma omp simd loops"),
        ChoiceGene("vector_width", (1, 4, 8, 16), "floats per vector (1 = scalar)"),
    )


def vector_kind(memory_pattern: dict) -> str:
    """The loop :func:`vector_genes` describe: "scalar" (width 1), "vector" (GCC vector types) or "simd"."""
    if memory_pattern["vector_width"] == 1:
        return "scalar"
    return "vector" if memory_pattern["vectorize"] == "vector_ext" else "simd"


def one_thread(**fixed) -> Callable[[Genome], Genome]:
    """threads = 1 renders no parallel region, so no ``omp for schedule(kind, chunk)`` is written:
    the ``parallel_config`` genes in ``fixed`` take their fixed values."""
    def rule(g: Genome) -> Genome:
        if g["parallel_config"]["threads"] == 1:
            for name, value in fixed.items():
                g = with_gene(g, "parallel_config", name, value)
        return g
    return rule


def scalar_width(g: Genome) -> Genome:
    """Width 1 is the scalar loop whichever the spelling: GCC vector types and ``#pragma omp simd``
    are only written for widths above 1."""
    if g["memory_pattern"]["vector_width"] == 1:
        g = with_gene(g, "memory_pattern", "vectorize", "vector_ext")
    return g
