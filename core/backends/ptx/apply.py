"""An edit list applied to a PTX text, with a report of what each edit did.

Every address is resolved against the unedited text first, so each edit means the same thing
whatever else the list holds; then the edits apply in their canonical order (directives, ld/st
qualifiers, removed prefetches, inserted prefetches, moves). Each edit ends in one of three states:

* ``applied`` -- the text changed as the edit says;
* ``noop`` -- nothing at its address (an occurrence past the last, a label the PTX lacks, an
  instruction of another kind): the PTX is left as it was, and the report says so;
* ``refused`` -- something is there, but the edit would not be semantics-preserving or legal PTX
  (see :mod:`.dataflow` and :mod:`.qualifiers`); the PTX is left as it was.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from core.backends.ptx import dataflow
from core.backends.ptx.edits import DIRECTIVES, L2_POLICIES, Edit, canonical, parse_edit
from core.backends.ptx.parse import Instr, Line, Ptx, parse
from core.backends.ptx.qualifiers import parse_access

_QUALIFIERS = ("cop", "evict", "l2hint", "pfsize", "nc")
_SYNC = ("atom", "red", "fence", "membar", "mbarrier")
_POLICY_REG = "%abemc"


@dataclass(frozen=True)
class Outcome:
    """What one edit did: ``status`` is applied, noop or refused; ``detail`` says why, in words."""

    edit: str
    status: str
    detail: str = ""


def apply_edits(text: str, edits) -> tuple[str, list[Outcome]]:
    """``text`` with ``edits`` applied (in canonical order), and one :class:`Outcome` per edit."""
    ptx = parse(text)
    state = _State(ptx)
    report = []
    for raw in canonical(edits):
        edit = parse_edit(raw)
        try:
            detail = state.apply(edit)
            report.append(Outcome(raw, "applied", detail))
        except _NoOp as exc:
            report.append(Outcome(raw, "noop", str(exc)))
        except _Refused as exc:
            report.append(Outcome(raw, "refused", str(exc)))
    state.add_policies()
    return (ptx.text() if any(o.status == "applied" for o in report) else text), report


def summary(report: list[Outcome]) -> dict:
    """Counts by status: ``{"applied": n, "noop": n, "refused": n}``."""
    return {s: sum(o.status == s for o in report) for s in ("applied", "noop", "refused")}


class _NoOp(Exception):
    pass


class _Refused(Exception):
    pass


def family_matches(family: str, ins: Instr) -> bool:
    """Whether ``ins`` belongs to ``family``: the same root, and every other dotted part present."""
    want = family.split(".")
    return ins.root == want[0] and set(want[1:]) <= set(ins.parts[1:])


class _State:
    def __init__(self, ptx: Ptx):
        self.ptx = ptx
        self.original = list(ptx.lines)
        self.function = {}
        self.read_only: set[int] = set()
        self.synced: set[str] = set()
        for fn in ptx.functions:
            self.read_only |= {id(ptx.lines[i]) for i in dataflow.read_only_loads(ptx, fn)}
            for i in range(*fn.body):
                self.function[id(ptx.lines[i])] = fn
                ins = ptx.lines[i].instr
                if ins is not None and ins.root in _SYNC:
                    self.synced.add(fn.name)
        self.policies: dict[str, set[str]] = {}  # function -> L2 policies its loads use
        self.instrs = [(ptx.lines[i], ins) for i, ins in ptx.instructions()]  # as unedited, in text order
        self.segments = {name: [ptx.lines[i] for i in range(first, last) if ptx.lines[i].kind == "instr"]
                         for fn in ptx.functions for name, first, last in ptx.segments(fn)}

    # -- resolving --------------------------------------------------------------------------------
    def resolve(self, edit: Edit) -> Line:
        pattern, block = edit.pattern(), edit.block()
        if pattern:
            family, k = pattern
            hits = [line for line, ins in self.instrs if family_matches(family, ins)]
            if k >= len(hits):
                raise _NoOp(f"{family}#{k}: the PTX has {len(hits)} such instructions")
            return hits[k]
        label, k = block
        if label not in self.segments:
            raise _NoOp(f"no segment starts at {label}")
        if k >= len(self.segments[label]):
            raise _NoOp(f"{label}+{k}: that segment has {len(self.segments[label])} instructions")
        return self.segments[label][k]

    # -- applying ---------------------------------------------------------------------------------
    def apply(self, edit: Edit) -> str:
        if edit.kind in DIRECTIVES:
            return self.directive(edit)
        line = self.resolve(edit)
        if edit.kind in _QUALIFIERS:
            return self.qualify(edit, line)
        return getattr(self, edit.kind)(edit, line)

    def directive(self, edit: Edit) -> str:
        entries = [f for f in self.ptx.functions if f.kind == "entry" and edit.address in ("*", f.name)]
        if not entries:
            raise _NoOp(f"no .entry {edit.address}")
        for fn in entries:
            lines = self.ptx.lines
            start = lines.index(self.original[fn.header[0]])
            brace = next(i for i in range(start, len(lines)) if lines[i].kind == "open")
            have = next((i for i in range(start, brace) if lines[i].text.strip().startswith(f".{edit.kind}")), None)
            new = Line(f".{edit.kind} {edit.value}", "other")
            if have is None:
                lines.insert(brace, new)
            else:
                lines[have] = new
        return f".{edit.kind} {edit.value} on {', '.join(f.name for f in entries)}"

    def qualify(self, edit: Edit, line: Line) -> str:
        try:
            access = parse_access(line.instr.opcode)
        except ValueError as exc:
            raise _NoOp(str(exc)) from None
        before = access
        if edit.kind == "cop":
            if access.root == "ld" and access.cop in ("cg", "cv") and edit.value not in ("cg", "cv") \
                    and self.function[id(line)].name in self.synced:
                raise _Refused(f".{access.cop} load in a function with atomics or fences: it may read another "
                               "block's writes, which L1 would not see")
            access = replace(access, cop=edit.value, evict="")
        elif edit.kind == "evict":
            if access.cop in ("cg", "cv") and self.function[id(line)].name in self.synced:
                raise _Refused(f".{access.cop} access in a function with atomics or fences is left alone")
            access = replace(access, evict=edit.value, cop="")
        elif edit.kind == "pfsize":
            if access.root != "ld":
                raise _NoOp("not a load")
            access = replace(access, size=edit.value)
        elif edit.kind == "nc":
            if access.root != "ld":
                raise _NoOp("not a load")
            if access.nc:
                raise _NoOp("already .nc")
            if id(line) not in self.read_only:
                raise _Refused("not proven read-only (its pointer is written through, or a write's address is unknown)")
            access = replace(access, nc=True)
        elif edit.kind == "l2hint":
            if access.hint:
                raise _Refused("already carries an L2 cache policy of its own")
            access = replace(access, hint=True)
        try:
            access.check()
        except ValueError as exc:
            raise _Refused(str(exc)) from None
        ins = line.instr
        operands = list(ins.operands)
        if edit.kind == "l2hint":
            fn = self.function[id(line)].name
            self.policies.setdefault(fn, set()).add(edit.value)
            operands.append(f"{_POLICY_REG}{L2_POLICIES.index(edit.value)}")
        line.instr = replace(ins, opcode=access.opcode(), operands=operands)
        line.dirty = True
        return f"{before.opcode()} -> {access.opcode()}"

    def unprefetch(self, edit: Edit, line: Line) -> str:
        if line.instr.root not in ("prefetch", "prefetchu"):
            raise _NoOp("not a prefetch")
        self.ptx.lines.remove(line)
        return f"removed {line.instr.opcode} {line.instr.operands[0]}"

    def prefetch(self, edit: Edit, line: Line) -> str:
        ins = line.instr
        if ins.root != "ld" or "global" not in ins.parts:
            raise _NoOp("not a global load")
        lines = self.ptx.lines
        at = lines.index(line)
        needed = dataflow._REG.findall(ins.memory_operand() or "") + dataflow._REG.findall(ins.guard)
        where = at
        while where > 0:
            prev = lines[where - 1]
            if self._boundary(prev) or (prev.kind != "instr" and not prev.transparent) or (prev.kind == "instr" and (
                    not dataflow.movable(prev.instr) or prev.instr.writes() & set(needed))):
                break
            where -= 1
        new = Instr(ins.indent, ins.guard, f"prefetch.global.{edit.value}", [ins.memory_operand()])
        lines.insert(where, Line("", "instr", new, dirty=True))
        self.function[id(lines[where])] = self.function[id(line)]
        ahead = sum(x.kind == "instr" for x in lines[where + 1:at + 1])
        return f"prefetch.global.{edit.value} {ins.memory_operand()} placed {ahead} instructions ahead of its load"

    def move(self, edit: Edit, line: Line) -> str:
        if not dataflow.movable(line.instr):
            raise _Refused(f"{line.instr.opcode} does not move (barrier, atomic, collective or ordered access)")
        lines, d = self.ptx.lines, int(edit.value)
        step = -1 if d < 0 else 1
        at = lines.index(line)
        crossed, i = 0, at
        while crossed < abs(d):
            i += step
            if i < 0 or i >= len(lines) or self._boundary(lines[i]):
                raise _Refused(f"only {crossed} instructions to cross before the segment's edge")
            other = lines[i]
            if other.kind != "instr" and other.transparent:
                continue
            if other.kind != "instr":
                raise _Refused(f"will not cross {other.text.strip()[:60]!r}")
            if not dataflow.movable(other.instr) or not dataflow.independent(line.instr, other.instr):
                raise _Refused(f"depends on {other.instr.opcode} {', '.join(other.instr.operands)}")
            crossed += 1
        lines.pop(at)
        lines.insert(i if step < 0 else i, line)
        return f"{line.instr.opcode} moved {d:+d}"

    def _boundary(self, line: Line) -> bool:
        return line.kind in ("open", "close") or (line.kind == "label" and line.label in self.ptx.targets)

    def add_policies(self) -> None:
        """Declare the policy registers and create the L2 policies each function's hinted loads use."""
        for fn in self.ptx.functions:
            used = self.policies.get(fn.name)
            if not used:
                continue
            lines = self.ptx.lines
            start = lines.index(self.original[fn.body[0]])
            first = next(i for i in range(start, len(lines)) if lines[i].kind in ("instr", "label", "open", "close"))
            new = [Line(f"\t.reg .b64 \t{_POLICY_REG}<{len(L2_POLICIES)}>;", "other")]
            new += [Line(f"\tcreatepolicy.fractional.L2::{p}.b64 \t{_POLICY_REG}{L2_POLICIES.index(p)}, 1.0;", "other")
                    for p in sorted(used)]
            lines[first:first] = new


def census(text: str) -> dict[str, int]:
    """How many instructions of each editable family a PTX text holds (what an alphabet's
    ``occurrences`` or ``sites`` may be set from)."""
    ptx = parse(text)
    families = ("ld.global", "st.global", "ld.shared", "prefetch", "cvt", "fma", "mul", "add", "shfl")
    return {f: sum(family_matches(f, ins) for _, ins in ptx.instructions()) for f in families}


__all__ = ["Outcome", "apply_edits", "census", "family_matches", "summary"]
