"""A run's champion as a library entry: source, artefact, genome, figures, provenance, toolchain.

:func:`add_run` re-times the champion of a finished (or stopped) run with the bench machinery
(:func:`core.tools.bench.bench_champion`: cold cache, interleaved pairs with every baseline, a second
timing method with the host overhead per call), under the device lock, then writes its entry into
a library folder (:func:`write_entry`): ``kernel.<ext>`` exactly as compiled, the compiled artefact
copied from the compile cache where the backend has one (a ``.so`` for C, a cubin for CUDA, the
module for Triton), ``genome.json``, and the manifest's record of all of it.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Callable

from core.backends import backend_class, make_backend
from core.backends.base import KernelSource
from core.config import RunConfig
from core.library.manifest import (ENTRIES, GENOME, TOOLCHAIN_KEYS, Entry, Library, canonical_json, device_record, entry_id,
                                   sha256_bytes, sha256_file)
from core.library.models import entry_key


def toolchain(versions: dict) -> dict:
    """The entry's toolchain from the device's ``versions`` and the installed packages (never imports them)."""
    from importlib import metadata

    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    def text(v) -> str | None:
        return None if v is None else str(v)

    toolkit = str(versions.get("toolkit") or "")
    cuda = versions.get("cuda_runtime") or (toolkit if "nvrtc" in toolkit else None)
    values = (platform.python_version(), installed("torch"), installed("triton"), text(cuda),
              text(versions.get("driver")), text(versions.get("compiler")))
    return dict(zip(TOOLCHAIN_KEYS, values))  # python, torch, triton, cuda, driver, cc


def figures(bench: dict) -> dict:
    """The entry's figures from a bench record: the champion's median time, spread, cache policy and
    host overhead per call; per baseline its time and the champion's paired speed-up over it (the
    ratio of the medians where it was not timed in pairs, ``paired`` false); ``primary`` the fastest
    baseline and ``speedup`` the champion's over it."""
    champ = bench["champion"]
    rounds = champ.get("speedup_rounds") or []
    out: dict = {}
    for name, b in bench["baselines"].items():
        if not b.get("time_us") or b.get("verified") is False:
            continue
        paired = b.get("speedup") is not None
        spread = (max(rounds) - min(rounds)) / 2 if name == bench["primary"] and len(rounds) > 1 else None
        out[name] = {"time_us": b["time_us"], "speedup": b["speedup"] if paired else b["time_us"] / champ["time_us"],
                     "speedup_spread": spread, "noisy": bool(b.get("noisy")), "paired": paired}
    if not out:
        raise ValueError(f"run {bench.get('run_id')}: no baseline verified, so the entry has no speed-up to report")
    fastest = min(out, key=lambda n: out[n]["time_us"])
    return {"time_us": champ["time_us"], "spread_us": champ.get("spread_us"), "cache": bench.get("cache", "cold"),
            "host_overhead_us": champ.get("host_overhead_us"), "noisy": bool(champ.get("noisy")),
            "rounds": bench.get("rounds"), "baselines": out, "primary": fastest, "speedup": out[fastest]["speedup"],
            "independent_speedup": champ.get("independent_speedup"), "measured_at": bench.get("measured_at")}


def _artefact(kernel: KernelSource, cfg: RunConfig, cache_dir: Path) -> Path | None:
    """The compiled artefact of ``kernel`` in the compile cache (compiled now on a miss), or None
    when the backend keeps none (its path is not a file)."""
    backend = make_backend(cfg.backend, cfg.device)
    try:
        art = backend.compile(kernel, cache_dir / cfg.backend)
    finally:
        backend.close()
    return Path(art.path) if art.path and Path(art.path).is_file() else None


def write_entry(lib: Library, root: Path, champ: dict, cfg: RunConfig, bench: dict, run_dir: Path,
                runs_dir: Path, extra: dict | None = None) -> Entry:
    """Write the champion row ``champ`` (``RunReader.champion()``) of the run at ``run_dir`` as an entry
    of ``lib`` (folder ``root``): its files under ``entries/<id>/`` (replaced as a whole), its record
    added to ``lib`` (not saved). ``extra`` joins the provenance (the model part it serves)."""
    kernel = KernelSource.from_row(champ["kernel"], cfg.backend)
    source = kernel.source.encode()
    s_hash = sha256_bytes(source)
    fmt, n, k, m = entry_key(cfg.workload, cfg.problem)
    eid = entry_id(cfg.workload, fmt, n, k, m, cfg.backend, s_hash)
    artefact = _artefact(kernel, cfg, runs_dir / ".cache")
    dev = bench["device"]
    cls = backend_class(cfg.backend)
    genome = json.loads(champ["genome"]) if isinstance(champ.get("genome"), str) else champ.get("genome") or {}
    names = {"source": "kernel" + cls.source_suffix,
             "artefact": None if artefact is None else "artefact" + "".join(artefact.suffixes[-1:])}
    (root / ENTRIES).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{eid}-", dir=root / ENTRIES))
    os.chmod(staging, 0o755)  # mkdtemp makes it private; an entry is as readable as the rest of the library
    try:
        (staging / names["source"]).write_bytes(source)
        if artefact is not None:
            shutil.copyfile(artefact, staging / names["artefact"])
        (staging / GENOME).write_text(canonical_json(genome) + "\n")
        a_hash = None if artefact is None else sha256_file(staging / names["artefact"])
        final = root / ENTRIES / eid
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    rel = f"{ENTRIES}/{eid}"
    entry = Entry(
        id=eid, op=cfg.workload, fmt=fmt, shape={"N": n, "K": k, "M": m}, problem=dict(cfg.problem),
        backend=cfg.backend,
        device=device_record(dev.get("name", "unknown"), dev.get("arch", ""), cls.device_kind, dev.get("versions")),
        toolchain=toolchain(dev.get("versions") or {}), source=f"{rel}/{names['source']}", source_hash=s_hash,
        artefact=None if artefact is None else f"{rel}/{names['artefact']}", artefact_hash=a_hash,
        launch={**kernel.launch, "entry": kernel.entry, "flags": list(kernel.flags)},
        figures=figures(bench),
        provenance={"run_id": run_dir.name, "runs_dir": str(runs_dir), "generation": _int(champ.get("generation")),
                    "genome": genome, "genome_hash": champ.get("genome_hash"), "resources": dict(kernel.resources),
                    **(extra or {})})
    lib.add(entry)
    return entry


def add_run(lib: Library, root: Path, run_dir: Path, runs_dir: Path, rounds: int = 3,
            log: Callable[[str], None] = print, extra: dict | None = None) -> Entry:
    """Re-time the champion of the run at ``run_dir`` (bench, under its device lock) and write its
    entry into ``lib``; ValueError (one line) when the run has no verified champion."""
    from core.run.device_lock import hold_device
    from core.tools.bench import bench_champion
    from core.tools.export import readable_run

    with tempfile.TemporaryDirectory(prefix="abebot-libadd-") as scratch:
        reader = readable_run(run_dir, Path(scratch))
        cfg = RunConfig.from_dict(reader.config())
        champ = reader.champion()
        if champ is None or not champ.get("kernel"):
            raise ValueError(f"run {run_dir.name} has no verified champion to add")
        with hold_device(runs_dir, cfg.backend, cfg.device, f"library entry of run {run_dir.name}"):
            bench = bench_champion(run_dir, runs_dir, rounds=rounds, log=log)
        if bench.get("genome_hash") != champ.get("genome_hash"):
            raise ValueError(f"run {run_dir.name}: its champion changed while it was re-timed; add it again")
        return write_entry(lib, root, champ, cfg, bench, run_dir, runs_dir, extra)


def _int(v) -> int | None:
    try:
        return None if v is None or v != v else int(v)
    except (TypeError, ValueError):
        return None


def geomean(values: list[float]) -> float | None:
    """The geometric mean of positive ``values`` (None when there are none)."""
    vals = [v for v in values if v and v > 0]
    return statistics.geometric_mean(vals) if vals else None


def export_library(run_dir: Path, out: Path, runs_dir: Path, rounds: int = 3,
                   log: Callable[[str], None] = print) -> Path:
    """``python -m core export RUN --out DIR --library``: the run's champion, re-timed, as a one-entry
    library at ``out`` (which the caller made sure is new or empty). Nothing is left at ``out`` when
    it fails."""
    lib = Library(model=None, root=out)
    created = not out.exists()
    try:
        add_run(lib, out, run_dir, runs_dir, rounds=rounds, log=log)
        lib.save(out)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in out.iterdir():
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
        raise
    return out
