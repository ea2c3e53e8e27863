"""PTX text as lines, functions, segments and instructions.

The parser keeps every line of the text (so an unedited PTX round-trips byte for byte) and
classifies each: an instruction (with its guard, opcode and operands, and the registers it reads
and writes), a label, a scope brace, or anything else (directives, comments, ``.loc``). Functions
(``.entry``/``.func``) are found by their header and braces; a *segment* is a straight run of a
function's body between branch-target labels and scope braces, the unit inside which edits may
move instructions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_LABEL = re.compile(r"^\s*([$A-Za-z_][\w$]*):\s*(//.*)?$")
_INSTR = re.compile(r"^(\s*)(@!?%[\w$]+\s+)?([a-z][\w.:]*)(\s+([^;]*?))?\s*;\s*(//.*)?$")
_DECLARATIONS = (".reg", ".local", ".shared", ".param", ".pragma")
_REG = re.compile(r"%[A-Za-z_$][\w$]*")
_FUNC = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([$A-Za-z_][\w$]*)")
_BRANCH_ROOTS = ("bra", "brx", "call")
# Roots whose first operand is not a register destination (stores, hints, barriers, branches).
NO_DEST = frozenset({"st", "red", "prefetch", "prefetchu", "bar", "barrier", "membar", "fence", "bra", "brx", "ret",
                     "exit", "trap", "cp", "mbarrier", "stmatrix", "multimem", "griddepcontrol", "discard",
                     "applypriority", "cp.async", "tensormap", "setmaxnreg", "wgmma", "nanosleep", "pmevent"})


def split_operands(text: str) -> list[str]:
    """Operands split at commas outside braces and brackets (``{ %r1, %r2 }, [ %rd1 + 0 ]``)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


@dataclass
class Instr:
    """One PTX instruction: ``indent guard opcode operands;``."""

    indent: str
    guard: str
    opcode: str
    operands: list[str]
    comment: str = ""

    @property
    def parts(self) -> list[str]:
        return self.opcode.split(".")

    @property
    def root(self) -> str:
        return self.parts[0]

    def memory_operand(self) -> str | None:
        """The first ``[...]`` operand (an address), or None."""
        return next((o for o in self.operands if o.startswith("[")), None)

    def writes(self) -> set[str]:
        """Registers this instruction may write (its destination operand; none for stores and hints)."""
        if self.root in NO_DEST or not self.operands or self.operands[0].startswith("["):
            return set()
        return set(_REG.findall(self.operands[0].split("|")[0])) | (
            set(_REG.findall(self.operands[0].split("|")[1])) if "|" in self.operands[0] else set())

    def reads(self) -> set[str]:
        """Registers this instruction reads (its guard and every operand but its destination)."""
        regs = set(_REG.findall(self.guard))
        start = 0 if self.root in NO_DEST or not self.operands or self.operands[0].startswith("[") else 1
        for op in self.operands[start:]:
            regs |= set(_REG.findall(op))
        return regs

    def render(self) -> str:
        ops = (" \t" + ", ".join(self.operands)) if self.operands else ""
        guard = self.guard.strip() + " " if self.guard.strip() else ""
        tail = f" {self.comment}" if self.comment else ""
        return f"{self.indent}{guard}{self.opcode}{ops};{tail}"


@dataclass
class Line:
    """One line of PTX: ``kind`` is "instr", "label", "open", "close" or "other"."""

    text: str
    kind: str
    instr: Instr | None = None
    label: str = ""
    dirty: bool = False  # rewritten by an edit: render from ``instr``

    def render(self) -> str:
        return self.instr.render() if self.dirty and self.instr is not None else self.text

    @property
    def transparent(self) -> bool:
        """Whether instructions may move across this line, which is no instruction: blank, a comment,
        ``.loc`` (branch-target labels are checked apart, :meth:`Ptx.segments`)."""
        t = self.text.strip()
        return self.kind == "label" or (self.kind == "other" and (not t or t.startswith(("//", ".loc"))))

    @property
    def opaque(self) -> bool:
        """A line inside a function body that we do not understand (several instructions on one
        line, an inline-asm block on one line...): it may read or write anything."""
        return self.kind == "other" and not self.transparent and not self.text.strip().startswith(_DECLARATIONS)


@dataclass
class Function:
    """An ``.entry`` or ``.func``: its name, header line range and body line range (inside its braces)."""

    kind: str
    name: str
    header: tuple[int, int]  # [first, last) lines of the header, up to the opening brace
    body: tuple[int, int]    # [first, last) lines inside the outermost braces


@dataclass
class Ptx:
    """A parsed PTX module: every line, the functions, and the labels branches jump to."""

    lines: list[Line]
    functions: list[Function] = field(default_factory=list)
    targets: set[str] = field(default_factory=set)

    def text(self) -> str:
        return "\n".join(line.render() for line in self.lines) + "\n"

    def instructions(self) -> list[tuple[int, Instr]]:
        """(line index, instruction) of every instruction inside a function body, in text order."""
        out = []
        for fn in self.functions:
            out += [(i, self.lines[i].instr) for i in range(*fn.body) if self.lines[i].kind == "instr"]
        return out

    def function_of(self, index: int) -> Function | None:
        return next((f for f in self.functions if f.body[0] <= index < f.body[1]), None)

    def segments(self, fn: Function) -> list[tuple[str, int, int]]:
        """(name, first, last) line ranges of ``fn``'s body split at branch-target labels and scope
        braces; the first segment is named after the function, the others after their label."""
        out, name, start = [], fn.name, fn.body[0]
        for i in range(*fn.body):
            line = self.lines[i]
            if line.kind in ("open", "close") or (line.kind == "label" and line.label in self.targets):
                out.append((name, start, i))
                name, start = (line.label if line.kind == "label" else f"{name}{{"), i + 1
        out.append((name, start, fn.body[1]))
        return out


def classify(text: str) -> Line:
    """One line of PTX, classified."""
    stripped = text.split("//", 1)[0].strip()  # a brace may carry a comment: "{ // callseq 0, 0"
    if stripped == "{":
        return Line(text, "open")
    if stripped == "}":
        return Line(text, "close")
    stripped = text.strip()
    m = _LABEL.match(text)
    if m:
        return Line(text, "label", label=m.group(1))
    if stripped.startswith((".", "//", "@@")) or not stripped:
        return Line(text, "other")
    m = _INSTR.match(text)
    if m:
        ops = split_operands(m.group(5) or "")
        return Line(text, "instr", Instr(m.group(1), (m.group(2) or "").strip(), m.group(3), ops, m.group(6) or ""))
    return Line(text, "other")


def parse(text: str) -> Ptx:
    """Parse a PTX module (raises ValueError on unbalanced function braces)."""
    lines = [classify(t) for t in text.splitlines()]
    ptx = Ptx(lines)
    i = 0
    while i < len(lines):
        m = _FUNC.match(lines[i].text)
        if not m or lines[i].text.rstrip().endswith(";"):
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].kind != "open":
            i += 1
        if i == len(lines):
            raise ValueError(f"function {m.group(2)} has no body")
        depth, body = 0, i + 1
        for j in range(i, len(lines)):
            depth += (lines[j].kind == "open") - (lines[j].kind == "close")
            if depth == 0:
                break
        else:
            raise ValueError(f"function {m.group(2)}: unbalanced braces")
        ptx.functions.append(Function(m.group(1), m.group(2), (start, i), (body, j)))
        i = j + 1
    for _, ins in ptx.instructions():
        if ins.root in _BRANCH_ROOTS:
            ptx.targets |= {o for o in ins.operands if re.fullmatch(r"[$A-Za-z_][\w$]*", o)}
    return ptx
