"""``python -m core library build``: evolve one entry per planned (part, shape, M bucket), then write it.

Each item of the plan (:mod:`core.tools.library_plan`) is a normal run in the runs folder
(``python -m core run`` in a child process: its own device lock, ``config.json``, ``run.duckdb``,
visible on the dashboard), named ``lib-<model>-<backend>-<part>-m<M>`` so the dashboard groups them
by that prefix (and the run's name in ``meta.json`` says which library). The build is resumable: an
item whose entry is already in the library (same key, device and backend) is skipped, a run
that was interrupted is resumed (``python -m core resume``), and a finished run is only re-timed and
written. Each new run warm-starts from the nearest run already built of the same workload
(:mod:`core.run.warm_start`; nearest in log N, log K and log M). After its run the champion is
re-timed and written as an entry (:func:`core.tools.library_entry.add_run`), and the manifest is
saved after every entry, so an interrupted build loses at most the entry in progress.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from core.library.manifest import Library, LibraryError
from core.tools.library_plan import PlanItem

FINISHED = ("finished",)  # anything else (stopped, dead, failed) is resumed
WARM_FROM = ("finished", "stopped")  # runs whose best genomes may seed a new one
HOURS_PER_ENTRY_FLOOR = 1.0 / 3600  # one second


@dataclass
class Budget:
    """Per entry: ``generations`` (and/or ``hours``), from ``--budget``: ``N`` generations per entry,
    ``<x>h`` / ``<x>m`` hours or minutes in all (split evenly over the planned entries), or
    ``<x>h/entry`` / ``<x>m/entry`` per entry."""

    generations: int = 0
    hours: float = 0.0

    @classmethod
    def parse(cls, text: str, entries: int) -> Budget:
        t = text.strip().lower()
        per_entry = t.endswith("/entry")
        t = t.removesuffix("/entry")
        try:
            if t.isdigit():
                return cls(generations=int(t)) if 1 <= int(t) <= 1_000_000 else cls._bad(text)
            unit = {"h": 1.0, "m": 1 / 60}.get(t[-1:])
            value = float(t[:-1]) if unit else -1.0
        except ValueError:
            value, unit = -1.0, None
        if unit is None or not 0 < value < 1e6 or not math.isfinite(value):
            return cls._bad(text)
        hours = value * unit / (1 if per_entry else max(1, entries))
        return cls(hours=max(hours, HOURS_PER_ENTRY_FLOOR))

    @staticmethod
    def _bad(text: str) -> Budget:
        raise ValueError(f"--budget takes generations per entry (8), a total time (2h, 90m) or a time per "
                         f"entry (10m/entry), not {text!r}")


@dataclass
class BuildSettings:
    """What every run of a build shares: the runs folder, device, budget and extra RunConfig settings."""

    runs_dir: Path
    device: int = 0
    budget: Budget = field(default_factory=lambda: Budget(generations=8))
    settings: dict = field(default_factory=dict)  # population, seed, timeout_s ... (RunConfig fields)
    rounds: int = 3
    warm_start: bool = True
    label: str = ""  # the library's name in each run's meta.json


def open_library(out: Path, model: str | None) -> Library:
    """The library at ``out`` (every existing entry's files checked first: a tampered one refuses the
    build, LibraryError) or a new one; nothing is written here."""
    if not (out / "manifest.json").exists():
        if out.exists() and not out.is_dir():
            raise LibraryError(f"{out} exists and is not a folder")
        return Library(model=model, root=out)
    lib = Library.load(out)
    for entry in lib.entries:
        why = entry.verify_files(out)
        if why:
            raise LibraryError(f"{out}: {why}; remove the entry or rebuild it before adding to this library")
    if lib.model is None:
        lib.model = model
    return lib


def run_config(item: PlanItem, s: BuildSettings, start_from: str) -> dict:
    """The ``config.json`` of ``item``'s run."""
    cfg = {**s.settings, "workload": item.op, "backend": item.backend, "device": s.device,
           "problem": item.problem, "generations": s.budget.generations, "hours": s.budget.hours,
           "start_from": start_from}
    from core.config import RunConfig

    return json.loads(RunConfig.from_dict(cfg).to_json())  # ConfigError (exit 2) for a bad --run-config


def nearest_run(item: PlanItem, built: list[tuple[str, tuple]], runs_dir: Path) -> str:
    """Of ``built`` ((run id, key) of the entries and items built before), the finished run of the
    same workload and backend nearest to ``item`` (distance in log N, log K and log M); "" for none."""
    from store.runs import effective_status

    def distance(key: tuple) -> float:
        return sum(abs(math.log(a) - math.log(b)) for a, b in zip(item.key[2:], key[2:]))

    done = [(rid, key) for rid, key in built if rid and key[0] == item.op and rid != item.run_id
            and (runs_dir / rid).is_dir() and effective_status(runs_dir / rid) in WARM_FROM
            and _backend(runs_dir / rid) == item.backend]
    return min(done, key=lambda d: distance(d[1]))[0] if done else ""


def _backend(folder: Path) -> str | None:
    from store.runs import read_json

    cfg = read_json(folder / "config.json")
    return cfg.get("backend") if isinstance(cfg, dict) else None


def _child(argv: list[str], log: Callable[[str], None]) -> int:
    """Run ``python -m core <argv>``, passing its lines to ``log``; its exit status."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[2]),
                                                                   os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.Popen([sys.executable, "-m", "core", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    for line in proc.stdout:
        log("  " + line.rstrip())
    return proc.wait()


def evolve(item: PlanItem, s: BuildSettings, built: list[tuple[str, tuple]], log: Callable[[str], None]) -> Path:
    """Make sure ``item``'s run has finished: start it, resume it, or leave a finished one; its folder.
    RuntimeError (one line) when the run fails."""
    from store.runs import atomic_write_json, effective_status

    folder = s.runs_dir / item.run_id
    if folder.is_dir() and effective_status(folder) in FINISHED:
        log(f"{item.run_id}: run already finished; re-timing its champion")
        return folder
    if folder.is_dir():
        log(f"{item.run_id}: resuming the interrupted run")
        rc = _child(["resume", item.run_id, "--runs-dir", str(s.runs_dir)], log)
    else:
        start = nearest_run(item, built, s.runs_dir) if s.warm_start else ""
        cfg = run_config(item, s, start)
        log(f"{item.run_id}: evolving {item.op} {json.dumps(item.problem, sort_keys=True)}"
            + (f", warm-started from {start}" if start else ""))
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(cfg, f)
        try:
            rc = _child(["run", "--config", f.name, "--runs-dir", str(s.runs_dir), "--run-id", item.run_id], log)
        finally:
            os.unlink(f.name)
        if folder.is_dir():
            atomic_write_json(folder / "meta.json", {"name": f"library {s.label}: {item.part} M={item.key[4]}",
                                                     "notes": f"entry {'/'.join(map(str, item.key))} of the library "
                                                              f"{s.label} (python -m core library build)"})
    if rc != 0:
        raise RuntimeError(f"{item.run_id}: the run exited with status {rc}; fix the cause and build again "
                           "(the library keeps the entries built so far)")
    return folder


def build(lib: Library, out: Path, items: list[PlanItem], s: BuildSettings,
          log: Callable[[str], None] = print) -> list[str]:
    """Build every item into ``lib`` (folder ``out``), saving after each entry; the ids written."""
    from core.backends import backend_class
    from core.tools.library_entry import add_run

    written = []
    here = backend_class(items[0].backend).devices()[s.device].name if items else ""
    for number, item in enumerate(items, 1):
        have = [e for e in lib.entries if key_of(e) == item.key and e.device["name"] == here
                and e.backend == item.backend]
        if have:
            log(f"[{number}/{len(items)}] {item.run_id}: already in the library ({have[0].id})")
            continue
        log(f"[{number}/{len(items)}] {item.run_id}")
        built = [(e.provenance.get("run_id"), key_of(e)) for e in lib.entries]
        built += [(i.run_id, i.key) for i in items[:number - 1]]
        folder = evolve(item, s, built, log)
        entry = add_run(lib, out, folder, s.runs_dir, rounds=s.rounds, log=lambda line: log("  " + line),
                        extra={"part": item.part, "model": lib.model})
        lib.save(out)
        f = entry.figures
        log(f"  entry {entry.id}: {f['time_us']:.2f} us, {f['speedup']:.3f}x {f['primary']}")
        written.append(entry.id)
    if not (out / "manifest.json").exists():
        lib.save(out)
    return written


def key_of(entry) -> tuple:
    """(op, fmt, N, K, M) of a library entry, as :attr:`PlanItem.key` orders it."""
    return (entry.op, entry.fmt, entry.shape["N"], entry.shape["K"], entry.shape["M"])
