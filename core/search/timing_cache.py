"""A timing cache across runs (``--timing-cache 1``): a genome measured once on this device is not measured again.

Runs never measure one genome twice (:mod:`core.search.known`); this extends that across runs. The
cache is keyed by what makes two measurements comparable -- workload, backend, problem (the shape),
the device's name, its toolchain versions and the timer version (:func:`timer_version`) -- and holds,
per canonical genome hash, the evaluation (an :class:`~core.evaluation.record.Evaluation` dict) of
its first ``ok`` measurement. It lives in the runs folder's compile cache,
``<runs>/.cache/timings/<key>.jsonl``, one JSON line per genome, appended (a line is written with one
``write`` on a file opened for appending, so runs sharing a key do not interleave lines; a torn last
line is skipped). Only ``ok`` measurements are kept: a crash or a timeout may be the machine's fault.
A reused measurement keeps its paired speed-up, which was timed beside the baseline of its own run.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Mapping, Sequence

DROP = ("compile_log",)  # not needed again, and long


def timer_version() -> str:
    """The timing code's version: its ``TIMER_VERSION`` if it declares one, else a hash of the sources
    that time a kernel (timing and protocol), so measurements timed by different code never mix."""
    from core.evaluation import protocol, timing

    declared = getattr(timing, "TIMER_VERSION", None)
    if declared:
        return str(declared)
    h = hashlib.sha256()
    for mod in (timing, protocol):
        h.update(Path(mod.__file__).read_bytes())
    return "src-" + h.hexdigest()[:12]


def identity(config, device: Mapping) -> dict:
    """What two measurements must share to be interchangeable."""
    return {"workload": config.workload, "backend": config.backend, "problem": config.problem,
            "device": device.get("name"), "toolchain": device.get("versions") or {}, "timer": timer_version()}


class TimingCache:
    """genome hash -> its cached evaluation, for one :func:`identity`."""

    def __init__(self, folder: Path, ident: Mapping):
        key = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]
        self.path = Path(folder) / f"{key}.jsonl"
        self._entries: dict[str, dict] | None = None

    def _load(self) -> dict[str, dict]:
        if self._entries is None:
            self._entries = {}
            try:
                lines = self.path.read_text().splitlines()
            except FileNotFoundError:
                lines = []
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a torn line
                if isinstance(entry, dict) and entry.get("status") == "ok" and entry.get("genome_hash"):
                    self._entries.setdefault(entry["genome_hash"], entry)
        return self._entries

    def get(self, genome_hash: str) -> dict | None:
        entry = self._load().get(genome_hash)
        return dict(entry) if entry is not None else None

    def put(self, measure: Mapping) -> None:
        """Keep ``measure`` when it is ok and its genome is not cached yet."""
        h = measure.get("genome_hash")
        if measure.get("status") != "ok" or not h or h in self._load():
            return
        entry = {k: v for k, v in measure.items() if k not in DROP}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry, default=str) + "\n"
        with open(self.path, "a") as f:
            f.write(line)
        self._entries[h] = entry

    def __len__(self) -> int:
        return len(self._load())


def cached(evaluate: Callable[[list], list[dict]], cache: TimingCache,
           log: Callable[[str], None] | None = None) -> Callable[[list], list[dict]]:
    """``evaluate`` that answers genomes in ``cache`` from it and measures (and caches) the others."""

    def run(genomes: Sequence) -> list[dict]:
        hits = {g.hash: cache.get(g.hash) for g in genomes}
        todo = [g for g in genomes if hits[g.hash] is None]
        fresh = dict(zip((g.hash for g in todo), evaluate(list(todo)) if todo else []))
        for m in fresh.values():
            cache.put(m)
        reused = len(genomes) - len(todo)
        if reused and log:
            log(f"timing cache: {reused} of {len(genomes)} genomes measured in an earlier run, not measured again")
        return [{**(hits[g.hash] or fresh[g.hash]), "genome_hash": g.hash} for g in genomes]

    return run
