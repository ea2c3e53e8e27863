"""An entry straight from a genome: rendered by the workload's template, compiled by the backend,
written into a library folder in the format of :mod:`core.library.manifest`.

This is how the runtime's tests and ``benchmarks/tools/library_overhead.py`` make real libraries
without a run (a template's seed genomes are real kernels); a champion's genome goes the same way.
The entry carries no figures (nothing was timed) and its provenance names no run unless given.
"""
from __future__ import annotations

import hashlib
import platform
import shutil
from pathlib import Path
from typing import Any, Callable

from core.backends import backend_class, make_backend
from core.library.manifest import (ENTRIES, GENOME, Entry, Library, canonical_json, device_record, entry_id,
                                   sha256_file, TOOLCHAIN_KEYS)
from core.library.models import entry_key
from core.workloads import get_workload


def write_entry(root: Path, op: str, problem: dict, backend: str, cache: Path, genome: Any = None, seed: int = 0,
                genes: dict | None = None, source_edit: Callable[[str], str] | None = None,
                run_id: str = "") -> Entry:
    """The entry of ``op`` on ``problem`` for ``backend`` (this machine's device 0), its files
    written under ``root``: ``genome`` (a dict or Genome), else the template's seed genome ``seed``;
    ``genes`` {(group, name): value} replaced in it; ``source_edit`` applied to the rendered source
    (tests make wrong kernels with it). ``cache`` is the backend's compile cache."""
    b = make_backend(backend)
    workload = get_workload(op)
    problem = workload.validate_problem(problem, backend)
    template = workload.template(backend, problem, b.device)
    space = template.gene_space()
    g = space.canonical(space.from_json(genome.to_dict() if hasattr(genome, "to_dict") else genome)) \
        if genome is not None else space.seed_genomes()[seed]
    for (group, name), value in (genes or {}).items():
        g = g.replace(group, name, value)
    kernel = template.render(g)
    if source_edit is not None:
        kernel = type(kernel)(kernel.backend, source_edit(kernel.source), kernel.entry, kernel.flags, kernel.launch,
                              kernel.resources)
    artifact = b.compile(kernel, cache)
    fmt, n, k, m = entry_key(op, problem)
    source_hash = hashlib.sha256(kernel.source.encode()).hexdigest()
    eid = entry_id(op, fmt, n, k, m, backend, source_hash)
    folder = Path(root) / ENTRIES / eid
    folder.mkdir(parents=True, exist_ok=True)
    suffix = backend_class(backend).source_suffix
    (folder / f"kernel{suffix}").write_text(kernel.source)
    artefact = None
    if artifact.path and Path(artifact.path).is_file():
        artefact = f"{ENTRIES}/{eid}/artefact{Path(artifact.path).suffix}"
        shutil.copyfile(artifact.path, Path(root) / artefact)
    (folder / GENOME).write_text(canonical_json(g.to_dict()))
    return Entry(id=eid, op=op, fmt=fmt, shape={"N": n, "K": k, "M": m}, problem=problem, backend=backend,
                 device=device_record(b.device.name, b.device.arch, type(b).device_kind, b.device.versions), toolchain=_toolchain(b.device.versions), source=f"{ENTRIES}/{eid}/kernel{suffix}",
                 source_hash=source_hash, artefact=artefact,
                 artefact_hash=sha256_file(Path(root) / artefact) if artefact else None,
                 launch={**kernel.launch, "entry": kernel.entry, "flags": list(kernel.flags)}, figures={},
                 provenance={"run_id": run_id, "runs_dir": None, "generation": 0, "genome": g.to_dict(),
                             "genome_hash": g.hash})


def seed_library(root: Path, specs: list[tuple[str, dict]], backend: str, cache: Path, **kw: Any) -> Library:
    """A library at ``root`` with one entry per (op, problem) of ``specs`` (:func:`write_entry`), saved."""
    lib = Library(model=None, root=Path(root))
    for op, problem in specs:
        lib.add(write_entry(Path(root), op, problem, backend, cache, **kw))
    lib.save(root)
    return Library.load(root)


def _toolchain(v: dict) -> dict:
    """The manifest's ``toolchain`` (TOOLCHAIN_KEYS, in order) from a device's ``versions``."""
    cuda = v.get("cuda_runtime") or (v.get("toolkit") if "nvrtc" in str(v.get("toolkit")) else None)
    values = (platform.python_version(), v.get("torch"), v.get("triton"), cuda, v.get("driver"), v.get("compiler"))
    return {k: None if x is None else str(x) for k, x in zip(TOOLCHAIN_KEYS, values)}
