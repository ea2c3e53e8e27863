"""The edit grammar of the ``machine_code`` gene group: ``kind:address=value`` strings.

An address names what an edit applies to in a way that means the same thing in every individual
of a run, resolved against the *unedited* PTX (so one edit's meaning never depends on the others):

* ``family#k`` -- the k-th instruction (0-based, module text order) whose opcode has all the dotted
  parts of ``family`` and the same root: ``ld.global#3`` is the fourth global load, ``ld.nc#0`` the
  first non-coherent one, ``fma#12`` the thirteenth fma;
* ``label+i`` -- the i-th instruction of the segment that starts at branch-target label ``label``
  (or at the start of function ``label``): ``$L__BB0_2+5``;
* ``*`` or a function name -- for the directive kinds: every ``.entry``, or that one.

Kinds (each semantics-preserving by construction, or refused by :mod:`.apply`):

======================  ==============================================  ======================
kind                    what it does                                    values
======================  ==============================================  ======================
``cop``                 cache operator of a global ld / st              ld: ca cg cs lu cv; st: wb cg cs wt
``evict``               L1 eviction priority of a global ld / st        evict_normal evict_unchanged evict_first evict_last no_allocate
``l2hint``              L2 policy (createpolicy + ``.L2::cache_hint``)  evict_first evict_last evict_normal evict_unchanged
``pfsize``              L2 prefetch size of a global load               64B 128B 256B
``nc``                  ``.nc`` on a global load proven read-only       (none)
``prefetch``            insert ``prefetch.global`` of a load's address  L1 L2 L2::evict_last L2::evict_normal
``unprefetch``          remove an existing ``prefetch``                 (none)
``move``                move an instruction by d places in its segment  -8 .. 8 (not 0)
``maxnreg``             ``.maxnreg`` of the entries                     32 .. 255
``minnctapersm``        ``.minnctapersm`` of the entries                1 .. 32
======================  ==============================================  ======================

The canonical form of an edit list: each edit normalised, at most one edit per *slot* (``cop`` and
``evict`` share one: PTX allows only one of them on an instruction), sorted.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

LD_COPS = ("ca", "cg", "cs", "lu", "cv")
ST_COPS = ("wb", "cg", "cs", "wt")
EVICTS = ("evict_normal", "evict_unchanged", "evict_first", "evict_last", "no_allocate")
L2_POLICIES = ("evict_first", "evict_last", "evict_normal", "evict_unchanged")
PF_SIZES = ("64B", "128B", "256B")
PREFETCH_LEVELS = ("L1", "L2", "L2::evict_last", "L2::evict_normal")
MOVES = tuple(d for d in range(-8, 9) if d)
MAXNREG = (32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 168, 200, 255)
MINNCTA = (1, 2, 3, 4, 6, 8, 16, 32)

# kind -> (families its pattern addresses may name, values or None, slot)
KINDS: dict[str, tuple[tuple[str, ...], tuple | None, str]] = {
    "cop": (("ld.global", "st.global"), None, "l1"),
    "evict": (("ld.global", "st.global"), EVICTS, "l1"),
    "l2hint": (("ld.global", "st.global"), L2_POLICIES, "l2hint"),
    "pfsize": (("ld.global",), PF_SIZES, "pfsize"),
    "nc": (("ld.global",), None, "nc"),
    "prefetch": (("ld.global",), PREFETCH_LEVELS, "prefetch"),
    "unprefetch": (("prefetch",), None, "unprefetch"),
    "move": ((), tuple(str(d) for d in MOVES), "move"),
    "maxnreg": ((), tuple(str(n) for n in MAXNREG), "maxnreg"),
    "minnctapersm": ((), tuple(str(n) for n in MINNCTA), "minnctapersm"),
}
DIRECTIVES = ("maxnreg", "minnctapersm")
KIND_ORDER = tuple(KINDS)
_PATTERN = re.compile(r"^([a-z][\w]*(?:\.[\w:]+)*)#(\d+)$")
_BLOCK = re.compile(r"^([$A-Za-z_][\w$]*)\+(\d+)$")
_NAME = re.compile(r"^(\*|[$A-Za-z_][\w$]*)$")


@dataclass(frozen=True, order=True)
class Edit:
    """One parsed edit; ``str(edit)`` is its canonical text."""

    kind: str
    address: str
    value: str = ""

    def __str__(self) -> str:
        return f"{self.kind}:{self.address}" + (f"={self.value}" if self.value else "")

    @property
    def slot(self) -> tuple[str, str]:
        """Two edits with one slot cannot both stand: the canonical form keeps one."""
        return KINDS[self.kind][2], self.address

    def pattern(self) -> tuple[str, int] | None:
        m = _PATTERN.match(self.address)
        return (m.group(1), int(m.group(2))) if m else None

    def block(self) -> tuple[str, int] | None:
        m = _BLOCK.match(self.address)
        return (m.group(1), int(m.group(2))) if m else None


def parse_edit(text: str) -> Edit:
    """An edit from its text; ValueError (one line) when it is not one."""
    if not isinstance(text, str) or ":" not in text:
        raise ValueError(f"edit {text!r}: expected kind:address[=value]")
    kind, rest = text.split(":", 1)
    if kind not in KINDS:
        raise ValueError(f"edit {text!r}: unknown kind {kind!r} (kinds: {', '.join(KINDS)})")
    address, _, value = rest.partition("=")
    families, values, _ = KINDS[kind]
    edit = Edit(kind, address.strip(), value.strip())
    if kind in DIRECTIVES:
        if not _NAME.match(edit.address):
            raise ValueError(f"edit {text!r}: a directive's address is * or a function name")
    elif edit.pattern() is None and edit.block() is None:
        raise ValueError(f"edit {text!r}: address must be family#k or label+i")
    elif families and edit.pattern() and edit.pattern()[0] not in families:
        raise ValueError(f"edit {text!r}: {kind} addresses one of {', '.join(families)}")
    if kind == "cop":
        values = ST_COPS if edit.address.startswith("st") else LD_COPS
    if values is None and edit.value:
        raise ValueError(f"edit {text!r}: {kind} takes no value")
    if values is not None and edit.value not in values:
        raise ValueError(f"edit {text!r}: value must be one of {', '.join(values)}")
    return edit


def canonical(edits) -> tuple[str, ...]:
    """The canonical form of an edit list: parsed, one per slot (the last given wins), sorted."""
    by_slot: dict[tuple[str, str], Edit] = {}
    for e in edits:
        edit = e if isinstance(e, Edit) else parse_edit(e)
        by_slot[edit.slot] = edit
    ordered = sorted(by_slot.values(), key=lambda e: (KIND_ORDER.index(e.kind), e.address, e.value))
    return tuple(str(e) for e in ordered)


@dataclass(frozen=True)
class Alphabet:
    """What the ``machine_code`` gene draws edits from: pattern addresses up to ``occurrences`` per
    family, or exactly the ``sites`` a census of a real PTX found (:func:`census`), and which
    ``kinds``. The gene (:class:`core.genes.EditListGene`) knows nothing of PTX but this interface:
    ``draw``, ``normalise``, ``slot`` and ``variants``."""

    kinds: tuple[str, ...] = KIND_ORDER
    occurrences: int = 16
    sites: tuple[str, ...] = ()  # addresses ("ld.global#0", "fma#3"...) a census found; () for any
    move_families: tuple[str, ...] = ("ld.global", "ld.shared", "st.global", "cvt", "fma", "mul", "add")

    def draw(self, rng: random.Random) -> str:
        """A random legal edit."""
        kind = rng.choice(self.kinds)
        families, values, _ = KINDS[kind]
        if kind in DIRECTIVES:
            return str(Edit(kind, "*", rng.choice(values)))
        fams = families or self.move_families
        if self.sites:
            options = [s for s in self.sites if any(s.startswith(f + "#") for f in fams)] or list(self.sites)
            address = rng.choice(options)
        else:
            address = f"{rng.choice(fams)}#{rng.randrange(self.occurrences)}"
        if kind == "cop":
            values = ST_COPS if address.startswith("st") else LD_COPS
        edit = Edit(kind, address, rng.choice(values) if values else "")
        try:
            return str(parse_edit(str(edit)))
        except ValueError:  # a census site of another family: fall back to a pattern address
            return self.draw(rng)

    def normalise(self, text: str) -> str:
        return str(parse_edit(text))

    def slot(self, text: str) -> tuple[str, str]:
        return parse_edit(text).slot

    def variants(self, text: str) -> list[str]:
        """The same edit with each other legal value (what a "change" mutation picks from)."""
        edit = parse_edit(text)
        values = KINDS[edit.kind][1]
        if edit.kind == "cop":
            values = ST_COPS if edit.address.startswith("st") else LD_COPS
        return [str(Edit(edit.kind, edit.address, v)) for v in (values or ()) if v != edit.value]

    def canonical(self, edits) -> tuple[str, ...]:
        return canonical(edits)
