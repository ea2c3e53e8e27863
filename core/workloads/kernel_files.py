"""Kernel text kept in files a CUDA engineer can read: ``core/workloads/<family>/kernels/``.

A renderer no longer writes a kernel body in an f-string. It reads the family's kernel files
(``*.cu``, ``*.cuh``, ``*.c``, ``*.h``, ``*.py``) and chooses among them, then puts the genome's
choices in front as ``#define``s (C, CUDA C) or constants (Triton), or fills the named
``{{slot}}`` placeholders a file declares with snippets it picked. Files are read once per
process.

A kernel file opens with a comment for its reader (what it is, the ``#define``s and slots it
expects); :func:`kernel_body` and :func:`snippet` give the text without it, for renderers whose
output must not carry it.
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


@functools.lru_cache(maxsize=None)
def kernel_text(family_file: str, name: str) -> str:
    """The text of ``kernels/<name>`` beside ``family_file`` (a template module's ``__file__``)."""
    return (Path(family_file).resolve().parent / "kernels" / name).read_text()


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
    text = kernel_text(family_file, name)
    head = _HEAD.get(Path(name).suffix, _C_HEAD).match(text)
    return text[head.end():] if head else text


def snippet(family_file: str, name: str) -> str:
    """:func:`kernel_body` without its final newline: the lines that replace a ``{{slot}}`` standing
    alone on a line of another kernel file (so that slot's line break stays the only one)."""
    return kernel_body(family_file, name).removesuffix("\n")
