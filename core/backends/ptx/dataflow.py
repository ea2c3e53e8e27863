"""What the edits must prove before they touch a kernel: read-only global loads, and independence.

* :func:`read_only_loads` -- the global loads whose address derives only from pointer parameters
  that no store, atomic or reduction of the function can write through. Every register's *origin*
  (the parameters and symbols it may derive from) is computed to a fixed point over all its
  definitions, whatever the control flow; a 64-bit value loaded from memory (a pointer, maybe), or
  a register written by an instruction we do not model, has an unknown origin (a 32-bit value
  loaded from memory is an index: it adds no origin, as a 32-bit parameter adds none), and one
  write through an unknown address proves nothing read-only. Distinct pointer parameters are taken
  to be distinct allocations:
  AbeBot binds every tensor of a workload to a buffer of its own (an ``inout`` tensor is one
  parameter), which the harness's guard zones check. Only ``.entry`` functions without calls qualify.
* :func:`movable` and :func:`independent` -- which instructions a ``move`` edit may carry, and
  whether two of them may trade places: no register read or written by one is written by the other,
  and two memory accesses trade places only when both read, or when they are in different explicit
  state spaces. Barriers, atomics, fences, collectives, branches and memory-model accesses move
  nothing across them.
"""
from __future__ import annotations

import re

from core.backends.ptx.parse import _REG, Function, Instr, Ptx

UNKNOWN = "?"
PURE = frozenset({"add", "sub", "mul", "mad", "mad24", "mul24", "fma", "div", "rem", "abs", "neg", "min", "max", "and",
                  "or", "xor", "not", "cnot", "shl", "shr", "shf", "lop3", "bfe", "bfi", "brev", "clz", "popc", "prmt",
                  "cvt", "cvta", "mov", "setp", "selp", "set", "slct", "sad", "rcp", "sqrt", "rsqrt", "ex2", "lg2",
                  "sin", "cos", "tanh", "copysign", "testp", "fns", "dp4a", "dp2a"})
MEMORY = frozenset({"ld", "st", "prefetch", "prefetchu"})
_ORDERED = frozenset({"volatile", "relaxed", "acquire", "release", "mmio", "async", "sync", "aligned"})
_SPACES = ("global", "shared", "local", "param", "const")
_TIMERS = re.compile(r"%(clock|clock64|globaltimer|pm\d|smid|nsmid|warpid)\b")
_WRITERS = frozenset({"st", "atom", "red", "cp", "multimem", "tensormap", "stmatrix", "cp.async"})


def origins(ptx: Ptx, fn: Function) -> dict[str, frozenset]:
    """Register -> the pointer parameters / symbols it may derive from ({UNKNOWN} when not known)."""
    origin: dict[str, frozenset] = {}
    for i in range(*fn.body):  # a register a line we do not understand mentions may hold anything
        if ptx.lines[i].opaque:
            origin.update({reg: frozenset({UNKNOWN}) for reg in _REG.findall(ptx.lines[i].text.split("//")[0])})
    instrs = [ptx.lines[i].instr for i in range(*fn.body) if ptx.lines[i].kind == "instr"]
    changed = True
    while changed:
        changed = False
        for ins in instrs:
            for reg in ins.writes():
                new = origin.get(reg, frozenset()) | _derived(ins, origin)
                if new != origin.get(reg, frozenset()):
                    origin[reg], changed = new, True
    return origin


def _derived(ins: Instr, origin: dict[str, frozenset]) -> frozenset:
    if ins.root == "ld":
        if "param" in ins.parts:
            if not any(t in ins.parts for t in ("b64", "u64", "s64")):
                return frozenset()  # a 32-bit (or narrower) scalar parameter is no pointer
            name = re.match(r"\[\s*([$A-Za-z_][\w$]*)", ins.operands[1]) if len(ins.operands) > 1 else None
            return frozenset({name.group(1)}) if name else frozenset({UNKNOWN})
        # a value of 32 bits or fewer loaded from memory is an index, not a pointer; a 64-bit one may be one
        return frozenset({UNKNOWN}) if any(t[1:] == "64" for t in ins.parts) else frozenset()
    if ins.root not in PURE:
        return frozenset({UNKNOWN})
    out: frozenset = frozenset()
    for op in ins.operands[1:]:
        for reg in _REG.findall(op):
            out |= origin.get(reg, frozenset())
        sym = re.fullmatch(r"([$A-Za-z_][\w$]*)(\s*\+.*)?", op)
        if sym and not op.startswith("%"):
            out |= {f"sym:{sym.group(1)}"}
    return out


def address_origin(ins: Instr, origin: dict[str, frozenset]) -> frozenset:
    """What the address operand of ``ins`` may point into (UNKNOWN when nothing is known)."""
    mem = ins.memory_operand()
    if mem is None:
        return frozenset({UNKNOWN})
    regs = _REG.findall(mem)
    sym = re.match(r"\[\s*([$A-Za-z_][\w$]*)", mem)
    out = frozenset().union(*(origin.get(r, frozenset({UNKNOWN})) for r in regs)) if regs else frozenset()
    if sym:
        out |= {f"sym:{sym.group(1)}"}
    return out or frozenset({UNKNOWN})


def global_writes(ins: Instr) -> bool:
    """Whether ``ins`` may write global memory (stores, atomics, reductions, bulk copies to global)."""
    if ins.root == "atom" or ins.root == "red" or ins.root == "st" or ins.root in ("multimem", "tensormap"):
        spaces = [p for p in ins.parts if p.split("::")[0] in _SPACES]
        return not spaces or spaces[0].startswith("global")
    if ins.root == "cp":  # the first state space named is the destination
        spaces = [p for p in ins.parts if p.split("::")[0] in _SPACES]
        return not spaces or spaces[0].startswith("global")
    return False


def read_only_loads(ptx: Ptx, fn: Function) -> set[int]:
    """Line indices of ``fn``'s plain global loads that no write of ``fn`` may alias. None in a
    ``.func`` (its caller may pass one buffer as two pointers), in a function that calls another
    (the callee's writes are not seen here) or that holds a line we do not understand which may
    write memory (registers such a line mentions get an unknown origin)."""
    if fn.kind != "entry":
        return set()
    origin = origins(ptx, fn)
    written: set = set()
    for i in range(*fn.body):
        ins = ptx.lines[i].instr
        if (ins is not None and ins.root == "call") or (ptx.lines[i].opaque and _may_write(ptx.lines[i].text)):
            return set()
        if ins is not None and global_writes(ins):  # a bulk tensor copy's operand is its tensor map, not its target
            tensor = "tensor" in ins.parts or ins.root in ("tensormap", "multimem")
            written |= {UNKNOWN} if tensor else address_origin(ins, origin)
        elif ins is not None and ins.root not in PURE | MEMORY and ins.memory_operand() is not None \
                and ins.root not in ("atom", "red", "bar", "barrier", "mbarrier", "fence", "membar"):
            written |= {UNKNOWN}  # an instruction we do not model that takes an address
    if UNKNOWN in written:
        return set()
    out = set()
    for i in range(*fn.body):
        ins = ptx.lines[i].instr
        if ins is None or ins.root != "ld" or "global" not in ins.parts or _ORDERED & set(ins.parts):
            continue
        where = address_origin(ins, origin)
        if UNKNOWN not in where and not (where & written):
            out.add(i)
    return out


def _may_write(text: str) -> bool:
    """Whether a line we do not understand may write memory (an address, a store, an atomic, a call)."""
    code = text.split("//", 1)[0]
    return "[" in code or re.search(r"\b(st|atom|red|cp|call|multimem|tensormap|stmatrix|wgmma)\.", code) is not None


def movable(ins: Instr) -> bool:
    """Whether a ``move`` edit may carry ``ins`` (or carry another instruction across it)."""
    if _TIMERS.search(" ".join(ins.operands)):
        return False
    if ins.root in PURE:
        return True
    return ins.root in MEMORY and not (_ORDERED & set(ins.parts))


def _space(ins: Instr) -> str:
    return next((p.split("::")[0] for p in ins.parts if p.split("::")[0] in _SPACES), "generic")


def independent(a: Instr, b: Instr) -> bool:
    """Whether ``a`` and ``b`` (both :func:`movable`) may trade places."""
    if a.writes() & (b.reads() | b.writes()) or b.writes() & a.reads():
        return False
    if a.root in MEMORY and b.root in MEMORY:
        reads = lambda x: x.root != "st"  # noqa: E731 (ld and prefetch only read)
        if reads(a) and reads(b):
            return True
        sa, sb = _space(a), _space(b)
        if "param" in (sa, sb) or "const" in (sa, sb):  # read-only spaces in a kernel
            return True
        return sa != sb and "generic" not in (sa, sb)
    return True
