"""Bounds on the C compiler (issue 36, item 6; issue 35, item 4's include rule).

The C compile runs in the GA process's compile pool, outside the sandbox, on source nobody may have
reviewed. So before the compiler sees it, :func:`refused_include` refuses any directive that would make
the compiler read a file outside the kernel's own folder and the toolchain's headers:

* ``#include``/``#include_next``/``#import``/``#embed`` only with a literal ``<name>`` or ``"name"``,
  relative and without ``..`` (a computed ``#include MACRO`` is refused: its file cannot be checked
  before the preprocessor opens it). ``<name>`` is looked up in the toolchain's include directories
  only; ``"name"`` in the kernel's folder, then those;
* ``#line``/``# N`` with a file name: GCC's diagnostics print the named file's line beside an error;
* the assembler's ``.include``/``.incbin`` anywhere in the text (inline ``asm``).

Refusals name the directive and its line, never the contents of the file it names. Diagnostics are
also printed without the caret line (``-fno-diagnostics-show-caret``), so no error echoes a file.

:func:`limited` wraps the compiler command in ``prlimit`` (else a ``preexec_fn``) with the limits of
:func:`compile_limits`: address space, CPU time and output file size. (They live here, not in
``core/evaluation/limits.py`` with the sandbox's: backends sit below the evaluation layer.)
:func:`limit_cause` turns the compiler's output after a limit fired into one clear line.

Not covered: an ``asm`` directive assembled from macros or string pieces (``".inc" "bin"``), which
the text check cannot see; the assembler then reads the file, within the same limits.
"""
from __future__ import annotations

import os
import re
import shutil
from functools import lru_cache
from typing import Callable

COMPILE_ADDRESS_SPACE_BYTES = 4 << 30  # cc1 on the largest rendered kernel maps a few hundred MiB
COMPILE_CPU_SECONDS = 60
COMPILE_FILE_SIZE_BYTES = 64 << 20  # a kernel's shared object is well under 1 MiB

DIAGNOSTIC_FLAGS: tuple[str, ...] = ("-fno-diagnostics-show-caret",)

_DIRECTIVE = re.compile(r"^[ \t]*(?:#|%:|\?\?=)[ \t]*(include_next|include|import|embed|line|\d)\b[ \t]*(.*)$")
_ASM_FILE = re.compile(r"\.(incbin|include)\b")
_HEADER = re.compile(r'^(?:<([^<>"\n]+)>|"([^"\n]+)")\s*(?:$|//|/\*)')


def _logical_lines(source: str) -> list[tuple[int, str]]:
    """(first physical line number, text) of each line once backslash-newlines are joined and
    comments blanked (string and character literals kept as written)."""
    text = re.sub(r"\\\r?\n", "\x00", source)  # a marker per joined newline keeps line numbers countable
    out, i, n = [], 0, len(text)
    buf: list[str] = []
    state = ""  # "", "//", "/*", '"', "'"
    while i < n:
        c, two = text[i], text[i:i + 2]
        if state == "":
            if two == "//":
                state, i = "//", i + 2
                continue
            if two == "/*":
                state, i = "/*", i + 2
                buf.append(" ")
                continue
            if c in "\"'":
                state = c
        elif state == "//":
            if c == "\n":
                state = ""
            else:
                i += 1
                continue
        elif state == "/*":
            if two == "*/":
                state, i = "", i + 2
                continue
            if c != "\n" and c != "\x00":
                i += 1
                continue
        elif c == "\\" and i + 1 < n:  # an escape inside a literal
            buf.append(text[i:i + 2])
            i += 2
            continue
        elif c == state or c == "\n":
            state = ""
        buf.append(c)
        i += 1
    line = 1
    for raw in "".join(buf).split("\n"):
        out.append((line, raw.replace("\x00", "")))
        line += 1 + raw.count("\x00")
    return out


def refused_include(source: str) -> str | None:
    """Why this source may not be compiled (one line naming the directive and its line), or None."""
    for number, line in _logical_lines(source):
        m = _DIRECTIVE.match(line)
        if m:
            why = _refused_directive(m.group(1), m.group(2).strip())
            if why:
                shown = line.strip()
                shown = shown if len(shown) <= 120 else shown[:117] + "..."
                return f"line {number}: {shown!s} refused: {why}"
    m = _ASM_FILE.search(source)
    if m:
        number = source.count("\n", 0, m.start()) + 1
        return (f"line {number}: the assembler directive .{m.group(1)} refused: a kernel may not make the "
                "assembler read a file")
    return None


def _refused_directive(kind: str, arg: str) -> str | None:
    if kind == "line" or kind.isdigit():
        if '"' in arg:
            return "a line directive may not name a file (diagnostics would print that file's lines)"
        return None
    m = _HEADER.match(arg)
    if not m:
        return (f"#{kind} must name its header literally, as <name> or \"name\" (a computed #{kind} "
                "cannot be checked before the preprocessor opens it)")
    name = m.group(1) or m.group(2)
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", name) or ".." in parts:
        return ("only the kernel's own folder and the toolchain's headers may be included, by a relative "
                "path without '..'")
    return None


def compile_limits() -> dict:
    """The limits every process of one C compile runs under: address space (RLIMIT_AS) 4 GiB
    (``ABEBOT_COMPILE_MEMORY_BYTES`` overrides it), CPU time (RLIMIT_CPU) 60 s, and the size of
    any file it writes (RLIMIT_FSIZE) 64 MiB."""
    memory = os.environ.get("ABEBOT_COMPILE_MEMORY_BYTES", "").strip()
    return {"address_space_bytes": int(memory) if memory.isdigit() and int(memory) > 0 else COMPILE_ADDRESS_SPACE_BYTES,
            "cpu_seconds": COMPILE_CPU_SECONDS, "file_size_bytes": COMPILE_FILE_SIZE_BYTES}


@lru_cache(maxsize=1)
def _prlimit() -> str | None:
    return shutil.which("prlimit")


def limited(cmd: list[str], limits: dict) -> tuple[list[str], Callable[[], None] | None]:
    """``(command, preexec_fn)`` running ``cmd`` under ``limits`` (keys ``address_space_bytes``,
    ``cpu_seconds``, ``file_size_bytes``; each applies to every process the compiler starts): the
    ``prlimit`` utility where it is installed, else a ``preexec_fn`` setting the same rlimits."""
    pairs = [(key, opt, res) for key, opt, res in (("address_space_bytes", "--as", "RLIMIT_AS"),
                                                   ("cpu_seconds", "--cpu", "RLIMIT_CPU"),
                                                   ("file_size_bytes", "--fsize", "RLIMIT_FSIZE"))
             if limits.get(key)]
    if not pairs:
        return cmd, None
    tool = _prlimit()
    if tool:
        return [tool, *(f"{opt}={int(limits[key])}" for key, opt, _ in pairs), "--", *cmd], None
    import resource

    values = [(getattr(resource, res), int(limits[key])) for key, _, res in pairs]

    def apply() -> None:  # in the child, between fork and exec: system calls only
        for which, value in values:
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass

    return cmd, apply


_CAUSES = (
    (re.compile(r"File size limit exceeded|SIGXFSZ|File too large|signal 25\b", re.I), "output size"),
    (re.compile(r"CPU time limit exceeded|SIGXCPU|signal 24\b", re.I), "CPU time"),
    (re.compile(r"out of memory|virtual memory exhausted|Cannot allocate memory|std::bad_alloc|"
                r"memory exhausted|failed to map segment", re.I), "memory"),
)


def limit_cause(output: str, returncode: int, limits: dict) -> str | None:
    """``"compile exceeded its <what> limit (<n>)"`` when the output or exit says a limit fired."""
    sizes = {"output size": ("file_size_bytes", lambda v: f"{v / 2**20:g} MiB"),
             "CPU time": ("cpu_seconds", lambda v: f"{v:g} s"),
             "memory": ("address_space_bytes", lambda v: f"{v / 2**30:g} GiB")}
    for rx, what in _CAUSES:
        if rx.search(output or "") or (what == "output size" and returncode in (-25, 153)) \
                or (what == "CPU time" and returncode in (-24, 152)):
            key, fmt = sizes[what]
            return f"compile exceeded its {what} limit ({fmt(limits[key])})" if limits.get(key) else None
    return None
