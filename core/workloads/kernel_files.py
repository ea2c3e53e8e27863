"""Kernel text kept in files a CUDA engineer can read: ``core/workloads/<family>/kernels/``.

A renderer no longer writes a kernel body in an f-string. It reads the family's kernel files
(``*.cu``, ``*.cuh``, ``*.c``, ``*.h``, ``*.py``) and chooses among them, then puts the genome's
choices in front as ``#define``s (C, CUDA C) or constants (Triton), or fills the named
``{{slot}}`` placeholders a file declares with snippets it picked. Files are read once per
process.

A kernel file opens with a comment for its reader (what it is, the ``#define``s and slots it
expects); :func:`kernel_body` and :func:`snippet` give the text without it, for renderers whose
output must not carry it.

Lines that several kernel files share live once, in a file of their own that the others include:
a line ``#include "<path>"`` (at the start of the line, alone but for a ``//`` comment) in a C or
CUDA C file stands for the body of the file at ``<path>``, relative to the including file's folder
as the preprocessor has it -- its lines without its leading comment, whose ``{{slot}}``s become
the includer's. It is resolved when the file is read, so a rendered kernel stays one header-free
source. The pieces of several families lie in ``core/workloads/kernels/`` (``#include
"../../kernels/<name>"`` from a family's kernels; :data:`COMMON` names that folder to
:func:`kernel_text` and the others).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

_SLOT = re.compile(r"\{\{(\w+)\}\}")
# the reader's comment at the top of a kernel file: a /* ... */ block (C, CUDA C) or # lines
# (Python), and the blank lines after it
_HEAD = {".py": re.compile(r"(?:#[^\n]*\n)+\n*")}
_C_HEAD = re.compile(r"/\*.*?\*/\n*", re.S)
# a textual include: the whole line, its break too, stands for the included file's body
_INCLUDE = re.compile(r'^#include "([^"\n]+)"[ \t]*(?://[^\n]*)?\n', re.M)
_C_SUFFIXES = (".c", ".h", ".cu", ".cuh")
# ``family_file`` of the kernel pieces several families share: core/workloads/kernels/
COMMON = __file__


@functools.lru_cache(maxsize=None)
def kernel_text(family_file: str, name: str) -> str:
    """The text of ``kernels/<name>`` beside ``family_file`` (a template module's ``__file__``, or
    :data:`COMMON`), its ``#include "..."`` lines resolved."""
    return _read((Path(family_file).resolve().parent / "kernels" / name).resolve())


@functools.lru_cache(maxsize=None)
def _read(path: Path, within: tuple[Path, ...] = ()) -> str:
    text = path.read_text()
    if path.suffix not in _C_SUFFIXES:
        return text
    if path in within:
        raise ValueError(f"{path.name} includes itself: {' -> '.join(p.name for p in within + (path,))}")

    def body(m: re.Match) -> str:
        included = (path.parent / m.group(1)).resolve()
        out = _strip_head(_read(included, within + (path,)), included.suffix)
        if not out.endswith("\n"):
            raise ValueError(f"{included.name} (included by {path.name}) does not end with a line break")
        return out
    return _INCLUDE.sub(body, text)


def _strip_head(text: str, suffix: str) -> str:
    head = _HEAD.get(suffix, _C_HEAD).match(text)
    return text[head.end():] if head else text


def fill(text: str, **slots: str) -> str:
    """``text`` with every ``{{slot}}`` replaced by ``slots[slot]``; KeyError names a slot left
    unfilled, ValueError a slot given that the text does not have (both are renderer bugs)."""
    named = set(_SLOT.findall(text))
    if unknown := set(slots) - named:
        raise ValueError(f"no slot {sorted(unknown)} in the kernel text")
    return _SLOT.sub(lambda m: slots[m.group(1)], text)


def defines(values: dict[str, object]) -> str:
    """``#define NAME value`` lines, one per item, in order (booleans as 0 or 1)."""
    return "".join(f"#define {name} {int(v) if isinstance(v, bool) else v}\n" for name, v in values.items())


@functools.lru_cache(maxsize=None)
def kernel_body(family_file: str, name: str) -> str:
    """:func:`kernel_text` without the file's leading comment (and the blank lines after it)."""
    return _strip_head(kernel_text(family_file, name), Path(name).suffix)


def snippet(family_file: str, name: str) -> str:
    """:func:`kernel_body` without its final newline: the lines that replace a ``{{slot}}`` standing
    alone on a line of another kernel file (so that slot's line break stays the only one)."""
    return kernel_body(family_file, name).removesuffix("\n")
