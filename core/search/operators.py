"""Genetic operators as plain functions (DEAP style): crossover, mutation, repair.

Crossover follows the seed: one-point on instruction sequences, uniform on register maps and on
choices. Children that break a gene space's whole-genome constraints are repaired by re-mutating
the genes named in the reason where possible, else rejected (``None``) so the caller draws again.
Every child passes :func:`make_valid`, which returns it canonical (genes that do not apply in its
context set to their fixed value, :meth:`GeneSpace.canonical`), so twins share one hash.
"""
from __future__ import annotations

import random
from typing import Any, Mapping

from core.genome import GeneSpace, Genome, MapGene, SequenceGene


def crossover_sequence(a: tuple[str, ...], b: tuple[str, ...], gene: SequenceGene, rng: random.Random) -> tuple[str, ...]:
    """One-point crossover: ``a``'s prefix up to the cut, then ``b``'s tokens from the cut on.

    Tokens repeated or missing after the cut are fixed by ``gene.repair`` (order crossover for
    permutations falls out of this: the prefix keeps its order, the rest follows ``b``'s order).
    """
    if len(a) < 2:
        return gene.repair(a)
    cut = rng.randint(1, len(a) - 1)
    head = list(a[:cut])
    tail = [t for t in b[min(cut, len(b)):] if t not in head]
    # Required tokens that neither part kept go back in the order ``b`` has them.
    rest = [t for t in b if t not in head and t not in tail and t in gene.required]
    return gene.repair(head + tail + rest)


def crossover_map(a: Mapping[str, Any], b: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """Uniform crossover: each key from either parent with probability 1/2."""
    return {k: (a[k] if rng.random() < 0.5 else b[k]) for k in a}


def crossover(p1: Genome, p2: Genome, space: GeneSpace, rng: random.Random) -> Genome:
    """A child of ``p1`` and ``p2`` (may violate whole-genome constraints; see :func:`make_valid`)."""
    genes: dict[str, dict[str, Any]] = {}
    for group, gene in space.genes():
        va, vb = p1[group][gene.name], p2[group][gene.name]
        if isinstance(gene, SequenceGene):
            value = crossover_sequence(va, vb, gene, rng)
        elif hasattr(gene, "crossover"):  # an edit list (core.genes.EditListGene): slot by slot
            value = gene.crossover(va, vb, rng)
        elif isinstance(gene, MapGene):
            value = crossover_map(va, vb, rng)
        else:
            value = va if rng.random() < 0.5 else vb
        genes.setdefault(group, {})[gene.name] = value
    return Genome(genes)


def mutate(genome: Genome, space: GeneSpace, rate: float, rng: random.Random) -> Genome:
    """Each gene mutates with probability ``rate``; at least one gene always changes.

    Choice genes step to a neighbouring option most of the time, maps re-allocate one role,
    sequences swap, move, insert or delete one instruction. A change only to genes that do not
    apply in the genome's context (undone by :meth:`GeneSpace.canonical`) does not count.
    """
    all_genes = list(space.genes())
    start = space.canonical(genome)
    for _ in range(10):  # a move can be undone by repair (e.g. a swap against an order constraint)
        genes = {g: dict(genome[g]) for g in genome.to_dict()}
        chosen = [(grp, gene) for grp, gene in all_genes if rng.random() < rate] or [rng.choice(all_genes)]
        for group, gene in chosen:
            genes.setdefault(group, {})[gene.name] = gene.mutate(genome[group][gene.name], rng)
        child = Genome(genes)
        if child != genome and space.canonical(child) != start:
            return child
    return child

def make_valid(child: Genome, space: GeneSpace, rng: random.Random, attempts: int = 8) -> Genome | None:
    """Repair ``child`` against the space's constraints and return it canonical, or reject it (``None``).

    Structural problems (sequence order, missing tokens) were already repaired by the gene kinds;
    what remains are whole-genome constraints. We re-mutate the genes the reason names (a
    constraint reports e.g. ``"parallel_config.block_m ..."``), falling back to any gene. A legal
    child comes back through :meth:`GeneSpace.canonical`: every genome the GA breeds passes here,
    so twins (children differing only in genes that do not apply) get one hash and are evaluated once.
    """
    for attempt in range(attempts + 1):
        reason = space.validate(child)
        if reason is None:
            child = space.canonical(child)
            reason = space.validate(child)  # None, unless a canonicaliser breaks a constraint (a gene-space bug)
            if reason is None:
                return child
        if attempt == attempts:
            return None
        named = [(grp, gene) for grp, gene in space.genes() if f"{gene.name}" in reason]
        group, gene = rng.choice(named or list(space.genes()))
        child = child.replace(group, gene.name, gene.mutate(child[group][gene.name], rng))
    return None


def distance(a: Genome, b: Genome) -> int:
    """Number of genes (map keys counted separately) on which two genomes differ."""
    fa, fb = flat_genes(a), flat_genes(b)
    return sum(v != fb.get(k) for k, v in fa.items())


def flat_genes(g: Genome) -> dict:
    """(group, gene[, map key]) -> value: the genes :func:`distance` compares, once per genome."""
    out = {}
    for group, values in g.to_dict().items():
        for name, v in values.items():
            if isinstance(v, dict):
                out.update({(group, name, k): x for k, x in v.items()})
            else:
                out[(group, name)] = v
    return out


__all__ = ["crossover", "crossover_map", "crossover_sequence", "distance", "make_valid", "mutate"]
