"""Helpers shared by the test modules (plain functions and constants; fixtures are in conftest.py).

No test module imports another test module: what two of them use lives here. The registry helpers
(:func:`_pairs`, :func:`problems`, :func:`template`, :func:`genomes`...) parametrise the
conformance and canonical suites over :data:`core.workloads.WORKLOADS`; the simulated devices make
their figures independent of this host.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.backends import BACKENDS, availability, backend_class
from core.backends.base import DeviceInfo, KernelSource
from core.genome import ChoiceGene, GeneSpace, Genome, MapGene, SequenceGene
from core.workloads import WORKLOADS, get_workload
from core.workloads.template import Template

ROOT = Path(__file__).resolve().parents[1]
SMALL_SIZE = 64  # executed problems: every "size" setting at most this (the spec's odd shapes come on top)
N_RANDOM = 4  # random genomes per problem, besides the seeds
NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
INTERPRETER_DTYPES = ("float16", "float32")  # the interpreter computes bf16 wrongly on NumPy (no bf16 type)
# The interpreter runs every program of the grid in NumPy: its problems keep SMALL_SIZE along the
# innermost dimensions (tiles, masks) and this many rows, heads or groups along the others.
INTERPRETER_OUTER = 8

SIMULATED_GPU = DeviceInfo(backend="", index=0, name="NVIDIA H200 (simulated)", memory_bytes=141 << 30,
                           multiprocessors=132, shared_mem_per_block=232448, registers_per_block=65536,
                           registers_per_thread=255, max_threads_per_block=1024, l2_bytes=60 << 20,
                           memory_bandwidth=4.8e12, arch="sm_90")
SIMULATED_CPU = DeviceInfo(backend="", index=0, name="CPU (simulated)", memory_bytes=16 << 30,
                           multiprocessors=os.cpu_count() or 1, l2_bytes=32 << 20, arch=platform.machine())


# ---- the registry --------------------------------------------------------------------------------

def _pairs(where=lambda backend: True) -> list:
    """Every (workload, backend) pair of the registry whose backend satisfies ``where``; a workload
    that does not load is left to :func:`test_registered_workload_loads`, which names the error."""
    out = []
    for name in WORKLOADS:
        try:
            backends = list(get_workload(name).templates)
        except Exception:
            continue
        out += [pytest.param(name, b, id=f"{name}-{b}") for b in backends if b in BACKENDS and where(b)]
    return out


pair = pytest.mark.parametrize("name,backend", _pairs())
# Executed for real: the backends that run on this machine's CPU.
cpu_pair = pytest.mark.parametrize("name,backend", _pairs(lambda b: backend_class(b).device_kind == "cpu"))
# CUDA C sources, compiled by nvcc to PTX (no GPU needed).
cuda_pair = pytest.mark.parametrize("name,backend", _pairs(lambda b: backend_class(b).language == "cuda"))
# Triton modules, run by Triton's interpreter on CPU tensors (InterpreterRuntime is the triton backend's).
triton_pair = pytest.mark.parametrize("name,backend", _pairs(lambda b: b == "triton"))


def caps(backend: str):
    """The backend's capabilities (class attributes: device_kind, arrays, dtypes...)."""
    return backend_class(backend)


@functools.lru_cache(maxsize=None)
def workload(name: str):
    return get_workload(name)


@functools.lru_cache(maxsize=None)
def device(backend: str) -> DeviceInfo:
    """The real device where the backend runs here (a CPU), else a simulated one of its kind."""
    if caps(backend).device_kind == "cpu":
        if availability(backend) is None:
            return backend_class(backend).devices()[0]
        return dataclasses.replace(SIMULATED_CPU, backend=backend)
    return dataclasses.replace(SIMULATED_GPU, backend=backend)


def dtypes(name: str, backend: str) -> list:
    """The dtypes the backend offers, limited to the dtype setting's choices ([None]: no such setting)."""
    p = next((p for p in workload(name).params if p.kind == "dtype"), None)
    if p is None:
        return [None]
    return [d for d in caps(backend).dtypes if not p.choices or d in p.choices]


def problems(name: str, backend: str, small: bool, only: tuple | None = None, outer: int | None = None) -> list[dict]:
    """Validated problems: for every dtype (or those in ``only``), the defaults and each flag flipped;
    sizes capped at SMALL_SIZE when ``small``, and those that are no tensor's innermost dimension
    at ``outer`` if given (fewer rows, heads or groups: less work, the same tiles along the
    dimensions that vector widths and blocks split)."""
    wl, kind = workload(name), caps(backend).device_kind
    base = {p.name: min(p.default_for(kind), SMALL_SIZE) for p in wl.params if small and p.kind == "size"}
    if outer is not None:
        inner = innermost_dims(name, wl.validate_problem(dict(base), backend))
        base = {k: v if k in inner else min(v, outer) for k, v in base.items()}
    dtype_param = next((p.name for p in wl.params if p.kind == "dtype"), None)
    flags = [p for p in wl.params if p.kind == "flag"]
    out = []
    for dt in dtypes(name, backend):
        if only is not None and dt not in only:
            continue
        d = {**base, **({dtype_param: dt} if dtype_param else {})}
        out += [d] + [{**d, f.name: not f.default_for(kind)} for f in flags]
    return [wl.validate_problem(p, backend) for p in out]


def template(name: str, backend: str, problem: dict) -> Template:
    return workload(name).template(backend, problem, device(backend))


def genomes(tpl: Template, key: str, n: int = N_RANDOM) -> list[Genome]:
    """The seeds, then ``n`` random genomes from a generator seeded by ``key`` (see :func:`label`)."""
    space = tpl.gene_space()
    rng = random.Random(key)
    out = space.seed_genomes() + [space.random(rng) for _ in range(n)]
    return list(dict.fromkeys(out))


def label(name: str, backend: str, problem: dict) -> str:
    """A stable seed for a problem's random genomes (str seeds do not depend on PYTHONHASHSEED)."""
    return f"{name}/{backend}/{json.dumps(problem, sort_keys=True)}"


def innermost_dims(name: str, problem: dict) -> set[str]:
    """The named last dimension of every tensor: the one vector widths and unrolls split."""
    return {t.dims[-1] for t in workload(name).tensors(problem) if t.dims and isinstance(t.dims[-1], str)}


def _normalised(value):
    """As JSON gives it back (tuples become lists)."""
    return json.loads(json.dumps(value))

H200 = SIMULATED_GPU  # the simulated H200 the w4a16 tests name so


# ---- the toy gene space (GA tests) ----------------------------------------

SEQ = SequenceGene("main_loop", required=("LDG", "FFMA", "STG"), optional=("SYNC", "PREFETCH"),
                   before=(("LDG", "FFMA"), ("FFMA", "STG")))


def toy_space() -> GeneSpace:
    def tile_fits(g: Genome) -> str | None:
        if g.get("parallel_config", "block") * g.get("memory_pattern", "vector") > 1024:
            return "parallel_config.block x memory_pattern.vector exceeds 1024"
        return None

    return GeneSpace(
        groups={
            "parallel_config": (ChoiceGene("block", (32, 64, 128, 256, 512)), ChoiceGene("grid", (1, 2, 4))),
            "memory_pattern": (ChoiceGene("vector", (1, 2, 4, 8)), ChoiceGene("layout", ("coalesced", "strided"))),
            "register_allocation": (MapGene("regs", (("R0", ("input_ptr", "weight_ptr", "acc")), ("R1", ("acc", "tmp")), ("R2", ("tmp", "spill")))),),
            "instruction_sequence": (SEQ,),
        },
        constraints=(tile_fits,),
        seeds=({"parallel_config": {"block": 128, "grid": 1}, "memory_pattern": {"vector": 4, "layout": "coalesced"},
                "register_allocation": {"regs": {"R0": "input_ptr", "R1": "acc", "R2": "tmp"}},
                "instruction_sequence": {"main_loop": ["LDG", "FFMA", "STG"]}},),
    )


def fake_measure(genome) -> dict:
    """Deterministic 'measurements': bigger blocks and vectors are faster; 'strided' is lethal."""
    if genome.get("memory_pattern", "layout") == "strided" and genome.get("parallel_config", "grid") == 4:
        return {"status": "wrong_result", "cause": "planted"}
    t = 1000.0 / (genome.get("parallel_config", "block") * genome.get("memory_pattern", "vector")) ** 0.5
    t += 3.0 * len(genome.get("instruction_sequence", "main_loop"))
    mem = 1000 + 10 * genome.get("parallel_config", "grid")
    return {"status": "ok", "time_us": t, "memory_bytes": mem, "stability": 1.0}


# ---- the CLI ------------------------------------------------------------

def cli(*args: str, runs_dir: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "ABEBOT_RUNS_DIR": str(runs_dir), **(env or {})})


# ---- PTX ------------------------------------------------------------

def nvcc_ptx(kernel: KernelSource, cache: Path) -> tuple[str | None, str]:
    """``(PTX, "")`` of ``nvcc -ptx -arch=sm_90`` on ``kernel``, or ``(None, nvcc's errors)``, kept
    in ``cache`` by source and flags (the ``ptx_cache`` fixture: the session's workers share it, so
    the seeds tests/test_canonical.py and tests/test_conformance.py both compile are compiled once).
    Each result lands by an atomic rename: a worker reads a whole file or none."""
    key = hashlib.sha256(json.dumps([kernel.source, list(kernel.flags)]).encode()).hexdigest()[:32]
    ptx, err = cache / f"{key}.ptx", cache / f"{key}.err"
    if ptx.exists():
        return ptx.read_text(), ""
    if err.exists():
        return None, err.read_text()
    mine = f"{key}.{os.getpid()}.{threading.get_ident()}"
    cu, out = cache / f"{mine}.cu", cache / f"{mine}.ptx"
    cu.write_text(kernel.source)
    try:
        res = subprocess.run([NVCC, "-ptx", "-arch=sm_90", *kernel.flags, "-o", str(out), str(cu)],
                             capture_output=True, text=True, timeout=300)
    finally:
        cu.unlink()
    if res.returncode != 0:
        (cache / f"{mine}.err").write_text(res.stderr)
        os.replace(cache / f"{mine}.err", err)
        return None, res.stderr
    text = out.read_text()
    os.replace(out, ptx)
    return text, ""


def _ptx_text(text: str) -> str:
    """PTX without comments and debug locations (the file name and line numbers are not the kernel)."""
    lines = []
    for ln in text.splitlines():
        ln = ln.split("//", 1)[0].rstrip()
        if ln and not ln.lstrip().startswith((".file", ".loc")):
            lines.append(ln)
    return "\n".join(lines)
