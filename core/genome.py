"""Genomes: immutable, hashable, JSON round-trippable descriptions of a kernel.

A genome holds the seed's four gene groups (``GROUPS``). Each group is a mapping of gene name to
value; what values are legal is decided by the workload's :class:`GeneSpace`, built from three gene
kinds:

* :class:`ChoiceGene` -- one value out of a list (tile sizes, vector widths, thread counts);
* :class:`MapGene` -- a map of role -> option (the seed's register map, ``{"acc": "registers"}``),
  crossed over uniformly key by key;
* :class:`SequenceGene` -- an ordered list of instruction tokens (``LDG -> FFMA -> STG -> SYNC``),
  each required token once, optional tokens at most once, with "must come before" constraints;
  crossed over at one point.

Workloads render a genome to kernel source; every gene changes that source -- where it applies.
A gene may not apply in some contexts (an OpenMP schedule on one thread, a lane layout the
tensor-core path ignores): the space's *canonicalisers* set such genes to a fixed value, so that
genomes which compile to the same kernel are the same genome, with the same hash
(:meth:`GeneSpace.canonical`). New genomes come canonical from :meth:`GeneSpace.random`,
:meth:`GeneSpace.seed_genomes` and :func:`core.search.operators.make_valid`.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Union

from core.genes import _REQUIRED, ChoiceGene, EditListGene, Gene, MapGene, SequenceGene, _frozen_map  # noqa: F401 (the gene kinds are this module's language)

GROUPS: tuple[str, ...] = ("parallel_config", "memory_pattern", "register_allocation", "instruction_sequence")
# Groups a space may add on top of the four, each with its genes' default values. A genome holding a
# group's defaults is the genome without it: same JSON, same hash (docs/machine-code.md).
OPTIONAL_GROUPS: Mapping[str, Mapping[str, Any]] = MappingProxyType({"machine_code": MappingProxyType({"edits": ()})})
ALL_GROUPS: tuple[str, ...] = GROUPS + tuple(OPTIONAL_GROUPS)

GeneValue = Union[str, int, tuple, Mapping[str, Any]]


class Genome:
    """An immutable genome: ``genome[group][gene]`` gives a gene's value.

    Equality and hashing follow the canonical JSON form, so two genomes with the same genes are the
    same genome whatever order they were built in. ``genome.hash`` is a short stable id.
    """

    __slots__ = ("_genes", "_json", "_hash")

    def __init__(self, genes: Mapping[str, Mapping[str, Any]]):
        frozen = {}
        for group in GROUPS:
            values = genes.get(group, {})
            frozen[group] = MappingProxyType({k: _freeze(v) for k, v in sorted(values.items())})
        for group, defaults in OPTIONAL_GROUPS.items():
            values = {**defaults, **genes.get(group, {})}
            frozen[group] = MappingProxyType({k: _freeze(v) for k, v in sorted(values.items())})
        extra = set(genes) - set(ALL_GROUPS)
        if extra:
            raise ValueError(f"unknown gene groups {sorted(extra)}")
        object.__setattr__(self, "_genes", MappingProxyType(frozen))
        shown = {g: v for g, v in frozen.items() if g in GROUPS or not _is_default(g, v)}
        object.__setattr__(self, "_json", json.dumps(_thaw(shown), sort_keys=True, separators=(",", ":")))
        object.__setattr__(self, "_hash", hashlib.sha256(self._json.encode()).hexdigest()[:16])

    def __setattr__(self, *_):
        raise AttributeError("Genome is immutable")

    def __getitem__(self, group: str) -> Mapping[str, Any]:
        return self._genes[group]

    def get(self, group: str, name: str) -> Any:
        return self._genes[group][name]

    @property
    def hash(self) -> str:
        return self._hash

    def to_json(self) -> str:
        return self._json

    def to_dict(self) -> dict:
        """The genome as plain data (what :meth:`to_json` writes: an optional group at its defaults left out)."""
        return json.loads(self._json)

    @classmethod
    def from_json(cls, text: str | Mapping) -> "Genome":
        raw = json.loads(text) if isinstance(text, str) else text
        return cls(raw)

    def replace(self, group: str, name: str, value: Any) -> "Genome":
        genes = {g: dict(v) for g, v in self._genes.items()}
        genes[group][name] = value
        return Genome(genes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Genome) and other._json == self._json

    def __hash__(self) -> int:
        return hash(self._json)

    def __repr__(self) -> str:
        return f"Genome({self._hash})"


def with_gene(genome: Genome, group: str, name: str, value: Any, key: str | None = None) -> Genome:
    """``genome`` with gene ``group.name`` -- or only key ``key`` of that map gene -- set to ``value``;
    ``genome`` itself when it has that value already. The building block of canonicalisers."""
    current = genome[group][name]
    if key is not None:
        if current[key] == value:
            return genome
        return genome.replace(group, name, {**dict(current), key: value})
    return genome if _freeze(value) == current else genome.replace(group, name, value)


def _is_default(group: str, values: Mapping[str, Any]) -> bool:
    return dict(values) == {k: _freeze(v) for k, v in OPTIONAL_GROUPS[group].items()}


def _freeze(v: Any) -> Any:
    if isinstance(v, Mapping):
        return _frozen_map({k: _freeze(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _thaw(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _thaw(x) for k, x in sorted(v.items())}
    if isinstance(v, tuple):
        return [_thaw(x) for x in v]
    return v


@dataclass(frozen=True)
class GeneSpace:
    """The legal genomes of one workload on one backend.

    ``groups`` maps each of the four ``GROUPS`` to its genes. ``constraints`` are functions that
    return a reason string when a genome is structurally fine gene by gene but invalid as a whole
    (for example a tile that does not divide the thread count); such children are rejected.
    ``seeds`` are hand-written genomes (as plain dicts) placed in the first generation.
    ``canonicalisers`` are functions ``Genome -> Genome`` that set genes which do not apply in the
    genome's context (they leave the compiled kernel unchanged) to one fixed value, and return
    the genome unchanged otherwise; :meth:`canonical` applies them until nothing changes. Twins
    -- genomes differing only in such genes -- then share one canonical genome and one hash.
    ``hints`` names what only hints the compiler: a gene (``"memory_pattern.pointer_hints"``, a map
    key as ``"group.gene.key"``) or an optional token whose place in a sequence is a hint
    (``"instruction_sequence.stages:PREFETCH"``). Whether the compiler makes use of a hint depends on
    the compiler, the CPU and the context, so hints are not normalised, and two values of one may
    compile to the same kernel (``tests/test_canonical.py`` accepts that for them, and only for them).
    """

    groups: Mapping[str, tuple[Gene, ...]]
    constraints: tuple[Callable[[Genome], str | None], ...] = ()
    seeds: tuple[Mapping[str, Mapping[str, Any]], ...] = field(default_factory=tuple)
    canonicalisers: tuple[Callable[[Genome], Genome], ...] = ()
    hints: tuple[str, ...] = ()

    def __post_init__(self):
        missing = [g for g in GROUPS if not self.groups.get(g)]
        if missing:
            raise ValueError(f"gene space lacks groups {missing}: every group must change the kernel")

    def genes(self) -> Iterable[tuple[str, Gene]]:
        for group in self.group_names():
            for gene in self.groups[group]:
                yield group, gene

    def group_names(self) -> tuple[str, ...]:
        """The four ``GROUPS``, then the optional groups (``OPTIONAL_GROUPS``) this space has."""
        return GROUPS + tuple(g for g in OPTIONAL_GROUPS if self.groups.get(g))

    def gene(self, group: str, name: str) -> Gene:
        for gene in self.groups[group]:
            if gene.name == name:
                return gene
        raise KeyError(f"{group}.{name}")

    def size(self) -> int | None:
        """Number of genomes in the space, ignoring constraints (None for sequence genes)."""
        n = 1
        for _, gene in self.genes():
            if isinstance(gene, ChoiceGene):
                n *= len(gene.options)
            elif isinstance(gene, MapGene):
                for _, opts in gene.keys:
                    n *= len(opts)
            else:
                return None
        return n

    def validate(self, genome: Genome) -> str | None:
        """None when ``genome`` is legal, else the first reason it is not."""
        for group in GROUPS:
            names = {g.name for g in self.groups[group]}
            if set(genome[group]) != names:
                return f"{group}: genes must be {sorted(names)}, got {sorted(genome[group])}"
        for group in OPTIONAL_GROUPS:
            if not self.groups.get(group) and not _is_default(group, genome[group]):
                return f"{group}: this space has no {group} group"
        for group, gene in self.genes():
            reason = gene.validate(genome[group][gene.name])
            if reason:
                return f"{group}.{reason}"
        for check in self.constraints:
            reason = check(genome)
            if reason:
                return reason
        return None

    def canonical(self, genome: Genome, max_rounds: int = 16) -> Genome:
        """``genome`` with every gene that does not apply in its context set to its fixed value.

        The canonicalisers run in turn until a whole round changes nothing (one rule may make
        another apply); a genome without inapplicable genes comes back as it is.
        """
        for _ in range(max_rounds):
            before = genome
            for rule in self.canonicalisers:
                genome = rule(genome)
            if genome == before:
                return genome
        raise RuntimeError(f"canonicalisers do not reach a fixed point in {max_rounds} rounds (they fight over a gene)")

    def random(self, rng: random.Random, max_tries: int = 200) -> Genome:
        """A random legal canonical genome (rejection sampling against the constraints)."""
        for _ in range(max_tries):
            g = Genome({grp: {gene.name: gene.random(rng) for gene in genes} for grp, genes in self.groups.items()})
            if self.validate(g) is None:
                g = self.canonical(g)
                if self.validate(g) is None:
                    return g
        raise RuntimeError("gene space constraints reject almost every random genome")

    def seed_genomes(self) -> list[Genome]:
        """The hand-written seeds, canonical, each once (two seeds may be twins)."""
        out = []
        for s in self.seeds:
            try:  # (from_json gives a gene added since the seed was written its legacy value)
                g = self.from_json(s)
            except ValueError as e:
                raise ValueError(f"seed genome invalid: {e}") from None
            g = self.canonical(g)
            reason = self.validate(g)
            if reason:
                raise ValueError(f"seed genome invalid once canonical: {reason}")
            out.append(g)
        return list(dict.fromkeys(out))

    def from_json(self, text: str | Mapping) -> Genome:
        """Parse and validate; raises ValueError with the reason when illegal."""
        raw = json.loads(text) if isinstance(text, str) else dict(text)
        for group in OPTIONAL_GROUPS:
            if raw.get(group) and not self.groups.get(group) and not _is_default(group, Genome({group: raw[group]})[group]):
                raise ValueError(f"{group}: this space has no {group} group (enable it: docs/machine-code.md)")
        genes = {}
        for group, gene in self.genes():
            saved = raw.get(group, {})
            if gene.name in saved:
                genes.setdefault(group, {})[gene.name] = gene.from_json(saved[gene.name])
            elif getattr(gene, "legacy", _REQUIRED) is not _REQUIRED:
                genes.setdefault(group, {})[gene.name] = gene.legacy
            else:
                raise ValueError(f"{group}.{gene.name} missing")
        g = Genome(genes)
        reason = self.validate(g)
        if reason:
            raise ValueError(reason)
        return g

    def describe(self) -> list[dict]:
        """One row per gene, for the dashboard and ``python -m core workloads``."""
        rows = []
        for group, gene in self.genes():
            if isinstance(gene, ChoiceGene):
                kind, values = "choice", list(gene.options)
            elif isinstance(gene, MapGene):
                kind, values = "map", {k: list(v) for k, v in gene.keys}
            elif isinstance(gene, EditListGene):
                kind, values = "edits", {"max_edits": gene.max_edits}
            else:
                kind, values = "sequence", {"required": list(gene.required), "optional": list(gene.optional)}
            rows.append({"group": group, "gene": gene.name, "kind": kind, "values": values, "doc": gene.doc})
        return rows


def diff(a: Genome, b: Genome) -> list[dict]:
    """Gene-by-gene comparison: one row per gene with both values and whether they differ."""
    rows = []
    for group in GROUPS + tuple(g for g in OPTIONAL_GROUPS if g in a.to_dict() or g in b.to_dict()):
        for name in sorted(set(a[group]) | set(b[group])):
            va, vb = _thaw(a[group].get(name)), _thaw(b[group].get(name))
            rows.append({"group": group, "gene": name, "a": va, "b": vb, "changed": va != vb})
    return rows

