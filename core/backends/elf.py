"""What a compiled kernel executes, as one hash: the code and constant sections of its ELF file.

Two sources that differ only where the compiler ignores them (a ``restrict`` it could prove, a
statement order it reschedules, a hint) compile to the same machine code; the evaluator measures
such *twins* once (:mod:`core.evaluation.evaluator`). Symbol tables, file names, build ids and
debug lines are left out, so the twins' different source hashes do not separate them. Used for the
C backend's shared objects and the CUDA backend's cubins (both 64-bit little-endian ELF).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

# Sections that decide what runs: code, constants, initialised data, and CUDA's per-kernel
# attributes (registers, parameter layout, shared memory).
# The exported names (.dynstr) too: a twin must also export the entry the launch calls.
CODE_SECTIONS = (b".text", b".rodata", b".data", b".dynstr", b".nv.constant", b".nv.info", b".nv.global.init",
                 b".nv.shared")


def sections(data: bytes) -> dict[bytes, bytes]:
    """Section name -> bytes of a 64-bit little-endian ELF image (empty for anything else)."""
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        return {}
    u16 = lambda o: int.from_bytes(data[o:o + 2], "little")  # noqa: E731
    u32 = lambda o: int.from_bytes(data[o:o + 4], "little")  # noqa: E731
    u64 = lambda o: int.from_bytes(data[o:o + 8], "little")  # noqa: E731
    shoff, shentsize, shnum, shstrndx = u64(0x28), u16(0x3A), u16(0x3C), u16(0x3E)
    heads = [(u32(shoff + i * shentsize), u32(shoff + i * shentsize + 4), u64(shoff + i * shentsize + 0x18),
              u64(shoff + i * shentsize + 0x20)) for i in range(shnum)]
    names_at = heads[shstrndx][2]
    out = {}
    for name_off, kind, off, size in heads:
        start = names_at + name_off
        name = data[start:data.index(b"\0", start)]
        out[name] = size.to_bytes(8, "little") if kind == 8 else data[off:off + size]  # NOBITS (.bss): its size
    return out


def code_hash(path: str | Path, launch: dict, entry: str) -> str:
    """SHA-256 of the code sections of the ELF at ``path`` with the launch that runs them ("" when
    the file is not such an ELF: no twin is then recognised)."""
    try:
        parts = sections(Path(path).read_bytes())
    except (OSError, ValueError, IndexError):
        return ""
    code = {name: body for name, body in parts.items() if name.startswith(CODE_SECTIONS)}
    if not code:
        return ""
    h = hashlib.sha256(json.dumps([entry, launch], sort_keys=True, default=str).encode())
    for name in sorted(code):
        h.update(name + b"\0" + code[name])
    return h.hexdigest()[:24]
