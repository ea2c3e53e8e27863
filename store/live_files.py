"""The names of a run's live/ Parquet files: which generations each holds, and which to read.

Every dataset of the mirror (``individuals``, ``kernels``, ``generations``) is a folder of
append-only parts: ``gen_XXXXXXXX.parquet`` holds one generation, ``chunk_FIRST_LAST.parquet`` a run
of them merged by the writer (``store/mirror.py``). A part inside a wider one is a leftover of a
merge and is not read. Runs written before the generations dataset had a folder keep one
``live/generations.parquet``, rewritten at every commit (:data:`LEGACY_GENERATIONS`); it is read
while it exists, and a writer that opens such a run replaces it by the folder.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DATASETS = ("individuals", "kernels", "generations")
LEGACY_GENERATIONS = "generations.parquet"  # in live/, runs from before issue 36's incremental mirror
_PART = re.compile(r"^(?:gen_(\d{8})|chunk_(\d{8})_(\d{8}))\.parquet$")


@dataclass(frozen=True)
class Part:
    """One live Parquet file holding generations ``first`` .. ``last``."""

    first: int
    last: int
    path: Path


def live_parts(folder: Path, include_covered: bool = False) -> list[Part]:
    """The live files of one dataset in generation order; parts that a wider part covers (gen files
    under a chunk, chunks under a merged chunk) are left out unless ``include_covered``."""
    parts = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        m = _PART.match(entry.name)
        if m:
            first, last = (int(m[1]), int(m[1])) if m[1] else (int(m[2]), int(m[3]))
            parts.append(Part(first, last, Path(entry.path)))
    # widest first among equal starts (a chunk before a gen file of the same range): then a part is
    # covered exactly when an earlier one reaches at least as far
    parts.sort(key=lambda p: (p.first, -p.last, not p.path.name.startswith("chunk_")))
    if include_covered:
        return sorted(parts, key=lambda p: (p.first, p.last))
    kept, reach = [], -1
    for p in parts:
        if p.last > reach:
            kept.append(p)
            reach = p.last
    return kept


def covered(folder: Path) -> list[Part]:
    """The parts of ``folder`` that a wider part covers: what a merge cut short left behind."""
    kept = {p.path for p in live_parts(folder)}
    return [p for p in live_parts(folder, include_covered=True) if p.path not in kept]


def generation_files(live: Path) -> list[Path]:
    """The files that hold the run's generations rows, in order: the legacy single file while it
    exists, else the parts of ``live/generations/``."""
    legacy = live / LEGACY_GENERATIONS
    if legacy.exists():
        return [legacy]
    return [p.path for p in live_parts(live / "generations")]
