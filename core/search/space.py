"""Gene spaces to sweep and replay: a sub-space around a base genome, every genome of a space, a sample.

A workload's whole space is usually too large to measure (a sequence gene alone makes it grow with
every permutation), so a sweep may name the genes it varies (``--vary``): every other gene keeps the
base genome's value (the first seed's), as a one-option :class:`~core.genome.ChoiceGene`. The
sub-space is an ordinary :class:`~core.genome.GeneSpace` -- same constraints, same canonicalisers --
so the GA, random search and Optuna search it exactly as they would the whole space, and replay
rebuilds the same sub-space from the table's header.
"""
from __future__ import annotations

import itertools
import random
from typing import Iterable, Iterator, Sequence

from core.genome import GROUPS, ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene


class SpaceError(ValueError):
    """A sub-space or enumeration that cannot be built (one line)."""


def workload_space(workload: str, backend: str, problem: dict, device: dict | None = None) -> GeneSpace:
    """The whole gene space of ``workload`` on ``backend`` for ``problem``. A template that needs its device
    to build its space gets ``device`` (a stored device record) or, without one, this machine's device."""
    from core.backends.base import DeviceInfo
    from core.workloads import get_workload

    w = get_workload(workload)
    problem = w.validate_problem(dict(problem), backend)
    if device:
        return w.template(backend, problem, DeviceInfo.from_dict(device, backend)).gene_space()
    try:
        return w.template(backend, problem, None).gene_space()
    except Exception:  # a template that needs its device to build its space
        from core.backends import make_backend

        made = make_backend(backend, 0)
        try:
            return w.template(backend, problem, made.device).gene_space()
        finally:
            made.close()


def gene_names(space: GeneSpace) -> list[str]:
    """``group.gene`` of every gene of ``space``, in order."""
    return [f"{group}.{gene.name}" for group, gene in space.genes()]


def subspace(space: GeneSpace, base: Genome, vary: Sequence[str]) -> GeneSpace:
    """``space`` with only the genes named in ``vary`` (``gene`` or ``group.gene``) free; every other
    gene fixed at ``base``'s value. An empty ``vary`` returns ``space`` itself."""
    if not vary:
        return space
    names = gene_names(space)
    wanted: set[str] = set()
    for v in vary:
        hits = [n for n in names if n == v or n.split(".", 1)[1] == v]
        if not hits:
            raise SpaceError(f"--vary: no gene {v!r} in this space (genes: {', '.join(n.split('.', 1)[1] for n in names)})")
        wanted.update(hits)
    groups = {}
    for group in GROUPS:
        genes = []
        for gene in space.groups[group]:
            if f"{group}.{gene.name}" in wanted:
                genes.append(gene)
            else:
                genes.append(ChoiceGene(gene.name, (base[group][gene.name],), doc=f"fixed at the base genome's value"))
        groups[group] = tuple(genes)
    return GeneSpace(groups, space.constraints, (base.to_dict(),), space.canonicalisers, space.hints)


def _values(gene) -> list:
    if isinstance(gene, ChoiceGene):
        return list(gene.options)
    if isinstance(gene, MapGene):
        keys = [k for k, _ in gene.keys]
        return [dict(zip(keys, combo)) for combo in itertools.product(*(opts for _, opts in gene.keys))]
    raise SpaceError(f"gene {gene.name} is a sequence: its values cannot be listed; sweep it with --sample N "
                     "or leave it out of --vary")


def enumerate_space(space: GeneSpace, limit: int = 1_000_000) -> list[Genome]:
    """Every legal canonical genome of ``space``, each once, in a fixed order (SpaceError when the space
    has a free sequence gene or more than ``limit`` raw combinations)."""
    genes = list(space.genes())
    value_lists = [_values(g) for _, g in genes]
    total = 1
    for v in value_lists:
        total *= len(v)
    if total > limit:
        raise SpaceError(f"the space has {total} gene combinations (more than {limit}): sweep a sample (--sample N) "
                         "or fewer genes (--vary)")
    out: dict[str, Genome] = {}
    for combo in itertools.product(*value_lists):
        raw: dict[str, dict] = {}
        for (group, gene), value in zip(genes, combo):
            raw.setdefault(group, {})[gene.name] = value
        g = Genome(raw)
        if space.validate(g) is None:
            g = space.canonical(g)
            if space.validate(g) is None:
                out.setdefault(g.hash, g)
    return list(out.values())


def sample_space(space: GeneSpace, n: int, seed: int, max_draws_per_genome: int = 50) -> list[Genome]:
    """``n`` distinct random canonical genomes of ``space`` (fewer when the space has fewer), drawn with
    :meth:`GeneSpace.random` from ``random.Random(seed)``: the same seed gives the same sample."""
    rng = random.Random(seed)
    out: dict[str, Genome] = {}
    for _ in range(n * max_draws_per_genome):
        if len(out) >= n:
            break
        g = space.random(rng)
        out.setdefault(g.hash, g)
    return list(out.values())


def has_sequence(space: GeneSpace) -> bool:
    """Whether ``space`` has a free sequence gene (one that cannot be listed)."""
    return any(isinstance(g, SequenceGene) for _, g in space.genes())


def iter_genomes(rows: Iterable[str]) -> Iterator[Genome]:
    """Genomes from canonical genome JSON strings."""
    for text in rows:
        yield Genome.from_json(text)
