"""Kernel text kept in files a CUDA engineer can read: ``core/workloads/<family>/kernels/``.

A renderer no longer writes a kernel body in an f-string. It reads the family's kernel files
(``*.cu``, ``*.cuh``, ``*.c``, ``*.h``, ``*.py``) and chooses among them, then puts the genome's
choices in front as ``#define``s (C, CUDA C) or constants (Triton), or fills the named
``{{slot}}`` placeholders a file declares with snippets it picked. Files are read once per
process.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

_SLOT = re.compile(r"\{\{(\w+)\}\}")


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
