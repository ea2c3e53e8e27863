"""The edits a kernel carries in its source: one comment line the compilers ignore.

A genome's ``machine_code`` edits reach the backend inside the rendered source, as the last line
``// abebot machine_code: [...]`` (CUDA C) or ``# abebot machine_code: [...]`` (a Triton module).
So the compile cache, keyed by the source, is keyed by the edits too; an exported kernel keeps its
edits; and a kernel without edits is byte for byte what it was before the gene group existed.
"""
from __future__ import annotations

import json
import re

MARK = "abebot machine_code:"
_LINE = re.compile(r"^(?://|#) " + re.escape(MARK) + r" (\[.*\])\s*$", re.MULTILINE)


def attach(source: str, edits, comment: str = "//") -> str:
    """``source`` carrying ``edits`` (canonical strings); unchanged when there are none."""
    edits = list(edits)
    if not edits:
        return source
    body = source if source.endswith("\n") else source + "\n"
    return f"{body}{comment} {MARK} {json.dumps(edits, separators=(',', ':'))}\n"


def carried(source: str) -> tuple[str, ...]:
    """The edits ``source`` carries (the last such line), () when none."""
    found = _LINE.findall(source)
    if not found:
        return ()
    edits = json.loads(found[-1])
    if not isinstance(edits, list) or not all(isinstance(e, str) for e in edits):
        raise ValueError(f"{MARK} line is not a list of edit strings")
    return tuple(edits)
