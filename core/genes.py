"""The three gene kinds a :class:`core.genome.GeneSpace` is built from.

* :class:`ChoiceGene` -- one value out of a list (tile sizes, vector widths, thread counts);
* :class:`MapGene` -- a map of role -> option (the seed's register map, ``{"acc": "registers"}``),
  crossed over uniformly key by key;
* :class:`SequenceGene` -- an ordered list of instruction tokens (``LDG -> FFMA -> STG -> SYNC``),
  each required token once, optional tokens at most once, with "must come before" constraints;
  crossed over at one point;
* :class:`EditListGene` -- a canonical list of edits (the ``machine_code`` group's PTX edits), at
  most one per slot, crossed over slot by slot.

Each kind draws, validates, mutates and (de)serialises its own values; none knows a workload.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Union

_REQUIRED = object()


def _frozen_map(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(sorted(d.items())))


@dataclass(frozen=True)
class ChoiceGene:
    """One value out of ``options``. ``legacy``, for a gene added to a template later: the value a
    genome saved before it existed is read with (the one that renders the kernel it was)."""

    name: str
    options: tuple
    doc: str = ""
    legacy: Any = _REQUIRED

    def random(self, rng: random.Random) -> Any:
        return rng.choice(self.options)

    def validate(self, value: Any) -> str | None:
        return None if value in self.options else f"{self.name}={value!r} not in {list(self.options)}"

    def mutate(self, value: Any, rng: random.Random) -> Any:
        others = [o for o in self.options if o != value]
        if not others:
            return value
        # Ordered numeric options: prefer a neighbour, so mutation is a local step most of the time.
        if all(isinstance(o, (int, float)) for o in self.options) and value in self.options and rng.random() < 0.7:
            idx = self.options.index(value)
            near = [self.options[i] for i in (idx - 1, idx + 1) if 0 <= i < len(self.options)]
            return rng.choice(near)
        return rng.choice(others)

    def to_json(self, value: Any) -> Any:
        return value

    def from_json(self, raw: Any) -> Any:
        return raw


@dataclass(frozen=True)
class MapGene:
    """A map of role -> option; ``keys`` gives each role's options (the seed's register map)."""

    name: str
    keys: tuple[tuple[str, tuple], ...]
    doc: str = ""

    @property
    def options(self) -> dict[str, tuple]:
        return dict(self.keys)

    def random(self, rng: random.Random) -> Mapping[str, Any]:
        return _frozen_map({k: rng.choice(opts) for k, opts in self.keys})

    def validate(self, value: Any) -> str | None:
        if not isinstance(value, Mapping) or set(value) != {k for k, _ in self.keys}:
            return f"{self.name}: keys must be {[k for k, _ in self.keys]}"
        for k, opts in self.keys:
            if value[k] not in opts:
                return f"{self.name}.{k}={value[k]!r} not in {list(opts)}"
        return None

    def mutate(self, value: Mapping[str, Any], rng: random.Random) -> Mapping[str, Any]:
        k, opts = rng.choice(self.keys)
        new = dict(value)
        others = [o for o in opts if o != value[k]]
        if others:
            new[k] = rng.choice(others)
        return _frozen_map(new)

    def to_json(self, value: Mapping[str, Any]) -> dict:
        return dict(sorted(value.items()))

    def from_json(self, raw: Any) -> Mapping[str, Any]:
        return _frozen_map(raw)


@dataclass(frozen=True)
class SequenceGene:
    """An ordered list of instruction tokens.

    Every token of ``required`` appears exactly once, tokens of ``optional`` at most once, and for
    each pair ``(a, b)`` in ``before``, ``a`` precedes ``b`` whenever both are present.
    """

    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    before: tuple[tuple[str, str], ...] = ()
    doc: str = ""

    @property
    def alphabet(self) -> tuple[str, ...]:
        return self.required + self.optional

    def random(self, rng: random.Random) -> tuple[str, ...]:
        tokens = list(self.required) + [t for t in self.optional if rng.random() < 0.5]
        rng.shuffle(tokens)
        return self.repair(tokens)

    def validate(self, value: Any) -> str | None:
        if not isinstance(value, tuple) or not all(isinstance(t, str) for t in value):
            return f"{self.name}: must be a sequence of tokens"
        unknown = [t for t in value if t not in self.alphabet]
        if unknown:
            return f"{self.name}: unknown tokens {unknown}"
        if len(set(value)) != len(value):
            return f"{self.name}: repeated tokens in {list(value)}"
        missing = [t for t in self.required if t not in value]
        if missing:
            return f"{self.name}: missing {missing}"
        pos = {t: i for i, t in enumerate(value)}
        for a, b in self.before:
            if a in pos and b in pos and pos[a] > pos[b]:
                return f"{self.name}: {a} must come before {b}"
        return None

    def repair(self, tokens: Iterable[str]) -> tuple[str, ...]:
        """Drop unknown and repeated tokens, add missing required ones, then order by ``before``.

        The ordering is a stable topological sort: tokens keep their relative order except where a
        constraint moves one, so a repaired child stays close to its parents.
        """
        seen: list[str] = []
        for t in tokens:
            if t in self.alphabet and t not in seen:
                seen.append(t)
        seen += [t for t in self.required if t not in seen]
        out: list[str] = []
        pending = list(seen)
        while pending:
            for t in pending:
                if not any(b == t and a in pending for a, b in self.before):
                    out.append(t)
                    pending.remove(t)
                    break
            else:  # a cycle in ``before`` is a gene-space bug, not a genome problem
                raise ValueError(f"{self.name}: cyclic 'before' constraints")
        return tuple(out)

    def mutate(self, value: tuple[str, ...], rng: random.Random) -> tuple[str, ...]:
        tokens = list(value)
        absent = [t for t in self.optional if t not in tokens]
        present_optional = [t for t in tokens if t in self.optional]
        moves = ["swap", "move"] + (["insert"] if absent else []) + (["delete"] if present_optional else [])
        move = rng.choice(moves)
        if move == "swap" and len(tokens) > 1:
            i = rng.randrange(len(tokens) - 1)
            tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
        elif move == "move" and len(tokens) > 1:
            t = tokens.pop(rng.randrange(len(tokens)))
            tokens.insert(rng.randrange(len(tokens) + 1), t)
        elif move == "insert":
            tokens.insert(rng.randrange(len(tokens) + 1), rng.choice(absent))
        elif move == "delete":
            tokens.remove(rng.choice(present_optional))
        return self.repair(tokens)

    def to_json(self, value: tuple[str, ...]) -> list[str]:
        return list(value)

    def from_json(self, raw: Any) -> tuple[str, ...]:
        return tuple(raw)


@dataclass(frozen=True)
class EditListGene:
    """A canonical tuple of edit strings, empty by default (the ``machine_code`` group).

    The gene knows nothing of what an edit means: ``alphabet`` does (e.g.
    :class:`core.backends.ptx.edits.Alphabet`), through ``draw(rng)`` (a random legal edit),
    ``normalise(text)`` (its canonical text; ValueError when it is none), ``slot(text)`` (edits of
    one slot exclude each other), ``variants(text)`` (the same edit with another value) and
    ``canonical(edits)`` (normalised, one per slot, sorted). Crossover takes each slot from either
    parent, so an edit, addressed the same way in every individual, survives it.
    """

    name: str
    alphabet: Any
    max_edits: int = 8
    doc: str = ""
    legacy: Any = ()

    def random(self, rng: random.Random) -> tuple[str, ...]:
        return self.alphabet.canonical([self.alphabet.draw(rng) for _ in range(rng.randint(0, 2))])

    def validate(self, value: Any) -> str | None:
        if not isinstance(value, tuple) or not all(isinstance(e, str) for e in value):
            return f"{self.name}: must be a list of edit strings"
        if len(value) > self.max_edits:
            return f"{self.name}: {len(value)} edits, at most {self.max_edits}"
        try:
            canonical = self.alphabet.canonical(value)
        except ValueError as exc:
            return f"{self.name}: {exc}"
        return None if canonical == value else f"{self.name}: not in canonical form (expected {list(canonical)})"

    def mutate(self, value: tuple[str, ...], rng: random.Random) -> tuple[str, ...]:
        """Add an edit, remove one, or change one's value; the result is canonical."""
        for _ in range(8):
            moves = (["add"] if len(value) < self.max_edits else []) + (["remove", "change"] if value else [])
            move, edits = rng.choice(moves), list(value)
            if move == "add":
                edits.append(self.alphabet.draw(rng))
            elif move == "remove":
                edits.pop(rng.randrange(len(edits)))
            else:
                i = rng.randrange(len(edits))
                others = self.alphabet.variants(edits[i])
                edits[i] = rng.choice(others) if others else self.alphabet.draw(rng)
            new = self.alphabet.canonical(edits)
            if new != value:
                return new
        return value

    def crossover(self, a: tuple[str, ...], b: tuple[str, ...], rng: random.Random) -> tuple[str, ...]:
        """Slot by slot: a slot both parents fill comes from either; one only one fills, half the time."""
        by_slot: dict = {}
        for parent in (a, b):
            for e in parent:
                by_slot.setdefault(self.alphabet.slot(e), []).append(e)
        kept = []
        for slot in sorted(by_slot):
            options = by_slot[slot]
            if len(options) == 2 or rng.random() < 0.5:
                kept.append(rng.choice(options))
        while len(kept) > self.max_edits:
            kept.pop(rng.randrange(len(kept)))
        return self.alphabet.canonical(kept)

    def to_json(self, value: tuple[str, ...]) -> list[str]:
        return list(value)

    def from_json(self, raw: Any) -> tuple[str, ...]:
        return self.alphabet.canonical(raw or ())


Gene = Union[ChoiceGene, MapGene, SequenceGene, EditListGene]
