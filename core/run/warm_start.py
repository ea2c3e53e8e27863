"""Warm starts: the best genomes of earlier runs as part of a new run's generation 0.

The shapes of one model share most of what makes a kernel fast (a 70B layer's QKV, O, gate_up and
down projections have two K between them), so a run on one shape can start from another's
champions instead of from the seeds alone. ``--start-from RUN[,RUN...]`` names runs in the same
runs folder, of the same workload and backend; their fittest distinct genomes that are legal in the
new run's gene space (up to half the population, :func:`share`) join generation 0 after the seeds (genomes saved before a gene was added load
with its ``legacy`` value; any other misfit is left out and counted). They are measured like every
other candidate: nothing of the old run's measurements is reused, since its shape differed.
"""
from __future__ import annotations

from pathlib import Path

from core.genome import GeneSpace, Genome


def share(population: int) -> int:
    """How many warm-start genomes generation 0 takes: half the population (rounded up), so that
    the seeds and fresh genomes keep the rest and the search does not start as one family."""
    return max(1, -(-population // 2))


class WarmStartError(ValueError):
    """A run named in ``start_from`` that cannot seed this one (one line, for the user)."""


def run_ids(start_from: str) -> list[str]:
    """The run ids of a ``start_from`` value (comma-separated; blanks ignored), each checked to be a
    run id and never a path; WarmStartError otherwise."""
    from store.runs import RUN_ID_RE

    ids = [s.strip() for s in start_from.split(",") if s.strip()]
    for rid in ids:
        if not RUN_ID_RE.match(rid):
            raise WarmStartError(f"start_from: {rid!r} is not a run id (letters, digits, '-' and '_')")
    return list(dict.fromkeys(ids))


def check(runs_dir: Path, start_from: str, workload: str, backend: str) -> list[Path]:
    """The folders of the runs named in ``start_from``; WarmStartError when one is missing, unreadable
    or of another workload or backend."""
    from store.runs import read_json, run_dir

    folders = []
    for rid in run_ids(start_from):
        folder = run_dir(runs_dir, rid)
        if not folder.is_dir():
            raise WarmStartError(f"start_from: no run {rid!r} in {runs_dir}")
        cfg = read_json(folder / "config.json")  # None when missing or not JSON
        if not isinstance(cfg, dict):
            raise WarmStartError(f"start_from: run {rid!r} has a missing or unreadable config.json")
        theirs = (cfg.get("workload"), cfg.get("backend"))
        if theirs != (workload, backend):
            raise WarmStartError(f"start_from: run {rid!r} evolved {theirs[0]} on {theirs[1]}, not {workload} on {backend}")
        folders.append(folder)
    return folders


def genomes(folders: list[Path], space: GeneSpace, limit: int) -> tuple[list[Genome], int]:
    """Up to ``limit`` distinct genomes legal in ``space``, the fittest of each run first (runs taken
    in turn), and how many of their best were left out as not legal here."""
    from store.reader import RunReader

    ranked = []
    for folder in folders:
        top = RunReader(folder).top(limit)
        ranked.append(list(top["genome"]) if "genome" in top else [])
    out: dict[str, Genome] = {}
    skipped = 0
    for i in range(max((len(r) for r in ranked), default=0)):
        for r in ranked:
            if i >= len(r) or len(out) >= limit:
                continue
            try:
                g = space.canonical(space.from_json(r[i]))
            except (ValueError, KeyError, TypeError):
                skipped += 1
                continue
            out.setdefault(g.hash, g)
    return list(out.values()), skipped
