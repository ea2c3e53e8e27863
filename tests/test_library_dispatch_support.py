"""Builds real C-backend libraries for the library runtime's tests (no test of its own).

An entry is a seed genome of the workload's C template rendered, compiled by the C backend and
written in the library format (:mod:`core.library.from_genome`): the same objects a champion gives,
so the dispatcher loads, verifies and runs real kernels.
"""
from __future__ import annotations

from pathlib import Path

from core.library.from_genome import seed_library, write_entry
from core.library.manifest import Entry, Library


def c_entry(root: Path, op: str, problem: dict, cache: Path, **kw) -> Entry:
    """One C entry of ``op`` on ``problem`` (:func:`core.library.from_genome.write_entry`)."""
    return write_entry(root, op, problem, "c", cache, **kw)


def c_library(root: Path, specs: list[tuple[str, dict]], cache: Path, **kw) -> Library:
    """A saved library at ``root`` holding one C entry per (op, problem) of ``specs``."""
    return seed_library(root, specs, "c", cache, **kw)
