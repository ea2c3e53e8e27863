"""Builds real C-backend libraries for the library runtime's tests (no test of its own).

An entry is a seed genome of the workload's C template rendered, compiled by the C backend and
written in the library format (core/library/manifest.py): the same objects a champion gives, so
the dispatcher loads, verifies and runs real kernels.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from core.backends import make_backend
from core.library.manifest import ENTRIES, GENOME, Entry, Library, canonical_json, entry_id, sha256_file
from core.library.models import entry_key
from core.workloads import get_workload


def c_entry(root: Path, op: str, problem: dict, cache: Path, seed: int = 0, genes: dict | None = None,
            source_edit=None) -> Entry:
    """One entry of ``op`` on ``problem``: the template's seed genome ``seed`` (with ``genes``
    replaced: {(group, name): value}), its source optionally edited by ``source_edit``."""
    backend = make_backend("c")
    workload = get_workload(op)
    problem = workload.validate_problem(problem, "c")
    template = workload.template("c", problem, backend.device)
    genome = template.gene_space().seed_genomes()[seed]
    for (group, name), value in (genes or {}).items():
        genome = genome.replace(group, name, value)
    kernel = template.render(genome)
    if source_edit is not None:
        kernel = type(kernel)(kernel.backend, source_edit(kernel.source), kernel.entry, kernel.flags, kernel.launch,
                              kernel.resources)
    artifact = backend.compile(kernel, cache)
    fmt, n, k, m = entry_key(op, problem)
    source_hash = hashlib.sha256(kernel.source.encode()).hexdigest()
    eid = entry_id(op, fmt, n, k, m, "c", source_hash)
    folder = root / ENTRIES / eid
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.c").write_text(kernel.source)
    shutil.copyfile(artifact.path, folder / "artefact.so")
    (folder / GENOME).write_text(canonical_json(genome.to_dict()))
    device = backend.device
    return Entry(id=eid, op=op, fmt=fmt, shape={"N": n, "K": k, "M": m}, problem=problem, backend="c",
                 device={"name": device.name, "arch": device.arch, "kind": "cpu"},
                 toolchain={"python": device.versions.get("python"), "torch": None, "triton": None, "cuda": None,
                            "driver": None, "cc": device.versions.get("compiler")},
                 source=f"{ENTRIES}/{eid}/kernel.c", source_hash=source_hash,
                 artefact=f"{ENTRIES}/{eid}/artefact.so", artefact_hash=sha256_file(folder / "artefact.so"),
                 launch={**kernel.launch, "entry": kernel.entry, "flags": list(kernel.flags)},
                 figures={}, provenance={"run_id": "test", "runs_dir": None, "generation": 0,
                                         "genome": genome.to_dict(), "genome_hash": genome.hash})


def c_library(root: Path, specs: list[tuple[str, dict]], cache: Path, **kw) -> Library:
    """A library at ``root`` holding one C entry per (op, problem) of ``specs``, saved."""
    lib = Library(model=None, root=root)
    for op, problem in specs:
        lib.add(c_entry(root, op, problem, cache, **kw))
    lib.save(root)
    return Library.load(root)
