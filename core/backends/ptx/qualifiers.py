"""The qualifiers of a global ld / st, taken apart and put back in the order PTX requires.

``ld{.sem}{.scope}.global{.cop}{.nc}{.L1::evict}{.L2::cache_hint}{.L2::size}{.vec}.type`` and
``st{.sem}{.scope}.global{.cop}{.L1::evict}{.L2::cache_hint}{.vec}.type``. A rewrite is refused
(ValueError, one line) where PTX does not allow it: a cache operator beside an eviction priority,
``.lu``/``.cv`` on a non-coherent load, any of them on a volatile, relaxed or acquire access (whose
memory-model meaning we do not touch).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from core.backends.ptx.edits import EVICTS, LD_COPS, PF_SIZES, ST_COPS

_SEMANTICS = ("weak", "volatile", "relaxed", "acquire", "release", "mmio")
_SCOPES = ("cta", "cluster", "gpu", "sys")
_NC_COPS = ("ca", "cg", "cs")


@dataclass(frozen=True)
class Access:
    """A global ld or st opcode, slot by slot."""

    root: str
    sem: str = ""
    scope: str = ""
    cop: str = ""
    nc: bool = False
    evict: str = ""        # "evict_last"... (the L1 priority)
    hint: bool = False     # .L2::cache_hint (a cache-policy operand follows the address)
    size: str = ""         # "128B"...
    vec: str = ""
    types: tuple[str, ...] = ()

    def opcode(self) -> str:
        parts = [self.root, self.sem, self.scope, "global", self.cop, "nc" if self.nc else "",
                 f"L1::{self.evict}" if self.evict else "", "L2::cache_hint" if self.hint else "",
                 f"L2::{self.size}" if self.size else "", self.vec, *self.types]
        return ".".join(p for p in parts if p)

    def check(self) -> None:
        """ValueError when this combination is not legal PTX (or not one we edit)."""
        if self.sem not in ("", "weak"):
            raise ValueError(f"{self.root}.{self.sem}: memory-model accesses are left alone")
        if self.cop and self.evict:
            raise ValueError("a cache operator and an L1 eviction priority exclude each other")
        cops = (_NC_COPS if self.nc else LD_COPS) if self.root == "ld" else ST_COPS
        if self.cop and self.cop not in cops:
            raise ValueError(f".{self.cop} is not a cache operator of {self.opcode()}")
        if self.root == "st" and (self.nc or self.size):
            raise ValueError("a store takes neither .nc nor a prefetch size")


def parse_access(opcode: str) -> Access:
    """The slots of a global ld/st opcode; ValueError for anything else (or a qualifier we do not know)."""
    parts = opcode.split(".")
    if parts[0] not in ("ld", "st") or "global" not in parts:
        raise ValueError(f"{opcode}: not a global ld/st")
    a = Access(parts[0])
    for p in parts[1:]:
        if p == "global":
            continue
        if p in _SEMANTICS:
            a = replace(a, sem=p)
        elif p in _SCOPES:
            a = replace(a, scope=p)
        elif p in LD_COPS or p in ST_COPS:
            a = replace(a, cop=p)
        elif p == "nc":
            a = replace(a, nc=True)
        elif p.startswith("L1::") and p[4:] in EVICTS:
            a = replace(a, evict=p[4:])
        elif p == "L2::cache_hint":
            a = replace(a, hint=True)
        elif p.startswith("L2::") and p[4:] in PF_SIZES:
            a = replace(a, size=p[4:])
        elif p in ("v2", "v4", "v8"):
            a = replace(a, vec=p)
        elif p[:1] in "bsuf" and p[1:].isdigit() or p in ("pred", "f16x2", "bf16x2", "b128"):
            a = replace(a, types=a.types + (p,))
        else:
            raise ValueError(f"{opcode}: qualifier .{p} not understood")
    return a
