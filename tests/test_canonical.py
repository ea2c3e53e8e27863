"""Canonical genomes: a gene that reaches the GA changes the compiled kernel, or is normalised away.

Parametrised over the registry like :mod:`tests.test_conformance`: every ``(workload, backend)``
pair of :data:`core.workloads.WORKLOADS` and each workload's ``templates``. For the seeds and a few
random canonical genomes (the *parents*), genes are flipped to another legal value (map keys one by
one; sequences to a neighbour: a swap, a move, an optional token inserted or deleted); children the
constraints reject are skipped. Every flip is compiled with its parent -- C: the ``.text`` and
``.rodata`` bytes of the shared object the C backend builds; CUDA C: the PTX of
``nvcc -ptx -arch=sm_90`` (comments dropped); Triton: the PTX Triton compiles for sm_90
(``GPUTarget("cuda", 90, 32)``, no GPU needed) of every kernel the module's ``launch`` starts
through the template's ``bind`` on empty tensors of the timed and the first odd shape, with each
launch's grid (the module's text where triton or torch is missing) -- and paired with its
*effective launch*: what ``bind`` hands the loaded kernel (grid, block, shared memory, scalars)
on every verification shape. Then, per flip:

* **normalised** -- the canonical child is the parent: the gene does not apply there. The
  canonicaliser must be sound: the child as flipped compiles to the parent's kernel and launch.
* **kept** -- otherwise the kernel or its launch must change, unless the flip only changes a
  compiler hint the space declares (``GeneSpace.hints``: restrict, a prefetch's place...).

Everywhere: two kernels with the same source have the same launch and resource estimate (the
compile cache and the evaluator's dedup key on the source, not on ``launch``). A gene the sample
never flips where it applies is looked for among more random parents.

Sampled to stay fast on a two-core runner: each gene is flipped once, to a random legal value,
on one parent in turn -- the default problem's seeds and :data:`N_RANDOM` random genomes, then the
seed of every other problem (dtypes, flags); a template that extends another family's (rmsnorm_w4a16's
extend w4a16's) flips only the genes it adds. ``ABEBOT_CANONICAL_EXHAUSTIVE=1`` flips every gene to
every value, on the seeds and more random parents of every problem (minutes).
C objects are built in the session's compile cache (``compile_cache``, conftest.py), which
tests/test_conformance.py shares, so a source both build is compiled once.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.backends import BACKENDS, availability, backend_class, make_backend
from core.backends.base import KernelSource
from core.genome import ChoiceGene, Genome, MapGene, SequenceGene, with_gene
from core.search.operators import make_valid
from core.workloads import WORKLOADS, get_workload
from tests.helpers import NVCC, _ptx_text, nvcc_ptx, device, problems, template, workload

ROOT = Path(__file__).resolve().parents[1]
EXHAUSTIVE = os.environ.get("ABEBOT_CANONICAL_EXHAUSTIVE") == "1"
N_RANDOM = 8 if EXHAUSTIVE else 1  # random canonical parents of the default problem, besides the seeds
WIDTH = max(2, os.cpu_count() or 1)


def _pairs() -> list:
    out = []
    for name in WORKLOADS:
        try:
            backends = list(get_workload(name).templates)
        except Exception:  # test_conformance.test_registered_workload_loads names the error
            continue
        out += [pytest.param(name, b, id=f"{name}-{b}") for b in backends if b in BACKENDS]
    return out


# ---- flips -----------------------------------------------------------------------------------------

def _unit(group: str, gene, key: str | None = None) -> str:
    return f"{group}.{gene.name}" + (f".{key}" if key else "")


def _neighbours(gene: SequenceGene, value: tuple) -> list[tuple]:
    """Legal sequences one edit away: adjacent swap, a token moved, an optional token inserted or deleted."""
    out, n = [], len(value)
    for i in range(n - 1):
        t = list(value)
        t[i], t[i + 1] = t[i + 1], t[i]
        out.append(t)
    for i in range(n):
        for j in range(n):
            if i != j:
                t = list(value)
                t.insert(j, t.pop(i))
                out.append(t)
    for tok in gene.optional:
        if tok in value:
            out.append([t for t in value if t != tok])
        else:
            out += [list(value[:j]) + [tok] + list(value[j:]) for j in range(n + 1)]
    seen, legal = {value}, []
    for t in out:
        t = tuple(t)
        if gene.validate(t) is None and t not in seen:  # not repaired: repair would turn it into another edit
            seen.add(t)
            legal.append(t)
    return legal


def flips(space, parent: Genome, rng: random.Random, every_value: bool, only: set | None = None) -> list[tuple[str, str, Genome]]:
    """(unit, what, child) for legal children one gene (or map key) away from ``parent``: every other
    value when ``every_value``, else one drawn at random per unit (only the units in ``only``, if given)."""
    out = []
    for group, gene in space.genes():
        value = parent[group][gene.name]
        if isinstance(gene, ChoiceGene):
            units = [(_unit(group, gene), [o for o in gene.options if o != value])]
        elif isinstance(gene, MapGene):
            units = [(_unit(group, gene, k), [{**dict(value), k: o} for o in opts if o != value[k]]) for k, opts in gene.keys]
        else:
            units = [(_unit(group, gene), _neighbours(gene, value))]
        for unit, values in units:
            if only is not None and unit not in only:
                continue
            children = [(v, parent.replace(group, gene.name, v)) for v in values]
            children = [(v, c) for v, c in children if space.validate(c) is None]
            if not every_value and children:
                children = [rng.choice(children)]
            out += [(unit, f"{unit}: {_show(value)} -> {_show(v)}", c) for v, c in children]
    return out


def _show(v) -> str:
    return json.dumps(v if not hasattr(v, "items") else dict(v), default=list)


def is_hint(space, unit: str, parent: Genome, child: Genome) -> bool:
    """Whether the flip only changes what ``space.hints`` declares a compiler hint: a hinted gene,
    or the place (not the presence) of hinted tokens in a sequence."""
    if unit in space.hints:
        return True
    tokens = {h.split(":", 1)[1] for h in space.hints if h.startswith(unit + ":")}
    if not tokens:
        return False
    group, name = unit.split(".")[:2]
    a, b = tuple(parent[group][name]), tuple(child[group][name])
    return set(a) == set(b) and [t for t in a if t not in tokens] == [t for t in b if t not in tokens]


# ---- compiled artefacts ----------------------------------------------------------------------------

def _elf_code(path: str) -> bytes:
    """The bytes of ``.text`` and ``.rodata`` of a 64-bit little-endian ELF shared object (what the
    CPU executes and the constants it reads; no symbol names, build id or file names)."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        pytest.skip("compiled objects are not 64-bit little-endian ELF: no .text to compare")
    u16 = lambda o: int.from_bytes(data[o:o + 2], "little")  # noqa: E731
    u32 = lambda o: int.from_bytes(data[o:o + 4], "little")  # noqa: E731
    u64 = lambda o: int.from_bytes(data[o:o + 8], "little")  # noqa: E731
    shoff, shentsize, shnum, shstrndx = u64(0x28), u16(0x3A), u16(0x3C), u16(0x3E)
    heads = [(u32(shoff + i * shentsize), u64(shoff + i * shentsize + 0x18), u64(shoff + i * shentsize + 0x20))
             for i in range(shnum)]
    names_at = heads[shstrndx][1]
    out = b""
    for name_off, off, size in heads:
        start = names_at + name_off
        name = data[start:data.index(b"\0", start)]
        if name in (b".text", b".rodata"):
            out += name + b"\0" + data[off:off + size]
    return out


def _c_artefacts(kernels: dict[str, KernelSource], cache: Path) -> dict[str, str]:
    backend = make_backend("c")

    def one(k: KernelSource) -> str:
        return hashlib.sha256(_elf_code(backend.compile(k, cache).path)).hexdigest()

    with ThreadPoolExecutor(max_workers=WIDTH) as pool:
        return dict(zip(kernels, pool.map(one, kernels.values())))


def _cuda_artefacts(kernels: dict[str, KernelSource], ptx_cache: Path) -> dict[str, str]:
    def one(k: KernelSource) -> str:
        ptx, err = nvcc_ptx(k, ptx_cache)
        return f"compile error: {err[:500]}" if ptx is None else hashlib.sha256(_ptx_text(ptx).encode()).hexdigest()

    with ThreadPoolExecutor(max_workers=WIDTH) as pool:
        return dict(zip(kernels, pool.map(one, kernels.values())))


# Runs in a subprocess (a fresh Triton with its own cache): every job's module is loaded and bound
# on empty CPU tensors of the timed and the first odd shape; each launch is compiled for sm_90 instead of run.
TRITON_WORKER = textwrap.dedent(r'''
    import hashlib, json, os, re, sys
    import torch
    from triton.runtime.jit import JITFunction
    from pathlib import Path
    from core.backends.base import Artifact, DeviceInfo, source_hash
    from core.backends.triton import load_module
    from core.backends.triton_aot import compile_only
    from core.genome import Genome
    from core.workloads import get_workload
    from tests.helpers import _ptx_text

    compile_only(90)  # the evaluator's ahead-of-time compile: an sm_90 target, nothing is launched
    LAUNCHES = []
    _run = JITFunction.run

    def _compile_only(self, *args, grid, warmup, **kwargs):
        handle = _run(self, *args, grid=grid, warmup=warmup, **kwargs)
        ptx = hashlib.sha256(_ptx_text(handle.asm["ptx"]).encode()).hexdigest()[:16]
        LAUNCHES.append([self.fn.__name__, list(grid) if not callable(grid) else "callable", ptx])
        return handle

    JITFunction.run = _compile_only
    DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int32": torch.int32, "uint8": torch.uint8}
    job = json.loads(Path(sys.argv[1]).read_text())
    folder = Path(job["folder"])
    wl = get_workload(job["workload"])
    dev = DeviceInfo(**job["device"])
    out = {}
    for item in job["items"]:
        problem = item["problem"]
        tpl = wl.template(job["backend"], problem, dev)
        shape = wl.shapes(problem)[job["shape"]]
        tensors = {t.name: torch.empty([shape[d] if isinstance(d, str) else d for d in t.dims], dtype=DT[t.dtype_in(problem)])
                   for t in wl.tensors(problem)}
        for key, raw in item["genomes"].items():
            kernel = tpl.render(Genome.from_json(raw))
            path = folder / f"{source_hash(kernel)}.py"
            path.write_text(kernel.source)
            art = Artifact(kernel.backend, source_hash(kernel), kernel.entry, str(path), launch=dict(kernel.launch))
            LAUNCHES.clear()
            try:
                tpl.bind(load_module(art), tensors, shape)()
                out[key] = json.dumps(LAUNCHES)
            except Exception as exc:
                out[key] = f"compile error: {type(exc).__name__}: {str(exc)[:300]}"
    Path(sys.argv[2]).write_text(json.dumps(out))
''')


def _triton_compiles() -> bool:
    try:
        import torch  # noqa: F401
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.runtime.driver import driver  # noqa: F401
        return True
    except Exception:
        return False


def _triton_artefacts(name: str, backend: str, jobs: list[tuple[str, dict, Genome]], folder: Path,
                      shape: int = 0) -> dict[str, str]:
    """key -> the launches (kernel, grid, PTX hash) of the module rendered from each job's genome, on
    verification shape number ``shape`` of its problem."""
    by_problem: dict[str, dict] = {}
    for key, problem, genome in jobs:
        item = by_problem.setdefault(json.dumps(problem, sort_keys=True), {"problem": problem, "genomes": {}})
        item["genomes"][key] = genome.to_json()
    items = list(by_problem.values())
    import dataclasses

    # Two workers share the jobs (one interpreter start-up each: torch and triton imports).
    shards = [[] for _ in range(min(WIDTH, 2) if len(jobs) > 4 else 1)]
    for i, item in enumerate(items):
        keys = list(item["genomes"])
        for s, shard in enumerate(shards):
            part = {k: item["genomes"][k] for k in keys[s::len(shards)]}
            if part:
                shard.append({"problem": item["problem"], "genomes": part})
    env = {**os.environ, "TRITON_CACHE_DIR": str(folder / "triton-cache"), "TRITON_DISABLE_LINE_INFO": "1"}
    env.pop("TRITON_INTERPRET", None)
    procs = []
    for s, shard in enumerate(shards):
        if not shard:
            continue
        job = {"workload": name, "backend": backend, "device": dataclasses.asdict(device(backend)), "items": shard,
               "folder": str(folder), "shape": shape}
        (folder / f"job{shape}-{s}.json").write_text(json.dumps(job))
        procs.append((s, subprocess.Popen([sys.executable, "-c", TRITON_WORKER, str(folder / f"job{shape}-{s}.json"),
                                           str(folder / f"out{shape}-{s}.json")], cwd=ROOT, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    out = {}
    for s, p in procs:
        log = p.communicate(timeout=600)[0]
        assert p.returncode == 0, log[-4000:]
        out.update(json.loads((folder / f"out{shape}-{s}.json").read_text()))
    return out


# ---- the test --------------------------------------------------------------------------------------

class _Tensor:
    """A named stand-in for a tensor: C and CUDA templates only pass tensors on to ``kernel.bind``."""

    def __init__(self, name: str):
        self.name = name

    def new_empty(self, shape, dtype=None):  # a workspace a template's bind makes: its size is part of the launch
        return _Tensor(f"{self.name}.new_empty{tuple(shape)}")

    new_zeros = new_empty


class _Tensors(dict):
    """The case's stand-ins, and one for any name a repack would add (the tensor-core words)."""

    def __missing__(self, name: str) -> _Tensor:
        return _Tensor(name)


class _Recorder:
    """Stands in for a loaded C or CUDA kernel: records what ``Template.bind`` would launch."""

    def __init__(self, kernel: KernelSource):
        self.launch_params = dict(kernel.launch)
        self.calls: list = []

    def bind(self, *args, **kwargs):
        self.calls.append(_plain([args, kwargs]))
        return lambda: None

    __call__ = bind


def _plain(v):
    if isinstance(v, _Tensor):
        return f"<{v.name}>"
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def effective_launch(tpl, problem: dict, kernel: KernelSource) -> str:
    """What the template launches for every verification shape: grid, block, shared memory and
    scalar arguments, as ``bind`` passes them to the loaded kernel (Triton: "", its launches come
    from compiling the module, whose text holds them)."""
    if backend_class(kernel.backend).language not in ("c", "cuda"):
        return ""
    wl = workload(tpl.workload.name)
    tensors = _Tensors({t.name: _Tensor(t.name) for t in wl.tensors(problem)})
    out = []
    for shape in wl.shapes(problem):
        rec = _Recorder(kernel)
        tpl.bind(rec, tensors, shape)
        out.append(rec.calls)
    return json.dumps(out, sort_keys=True)


def unit_names(space) -> list[str]:
    """Every gene of the space, map keys one by one: what a flip changes."""
    out = []
    for group, gene in space.genes():
        out += [_unit(group, gene, k) for k, _ in gene.keys] if isinstance(gene, MapGene) else [_unit(group, gene)]
    return out


def inherited_units(name: str, backend: str) -> set[str]:
    """The units of ``name``'s template on ``backend`` that another registered workload's template
    there, one its class derives from, declares too (rmsnorm_w4a16's templates extend w4a16's).
    Sampled, only the rest are flipped: the base pair flips the inherited ones."""
    mine = type(template(name, backend, workload(name).default_problem(backend)))
    out: set[str] = set()
    for other in WORKLOADS:
        if other == name or backend not in workload(other).templates:
            continue
        base = template(other, backend, workload(other).default_problem(backend))
        if type(base) in mine.__mro__[1:]:
            out |= set(unit_names(base.gene_space()))
    return out


def units_to_flip(name: str, backend: str, space) -> list[str]:
    """Every unit of ``space`` when exhaustive; sampled, those it does not inherit (:func:`inherited_units`)."""
    skip = set() if EXHAUSTIVE else inherited_units(name, backend)
    return [u for u in unit_names(space) if u not in skip]


def _sample(name: str, backend: str) -> list[tuple[dict, Genome, bool, set | None]]:
    """(problem, canonical parent, flip every value?, the units to flip or None for all): the sample
    described in the module docstring. Sampled, the parents are the default problem's seeds and
    random genomes, then the seed of every other problem, and gene i is flipped on parent i mod n."""
    default = workload(name).default_problem(backend)
    others = [p for p in problems(name, backend, small=False) if p != default]
    parents = []
    for i, problem in enumerate([default] + others):
        space = template(name, backend, problem).gene_space()
        rng = random.Random(f"canonical/{name}/{backend}/{json.dumps(problem, sort_keys=True)}")
        seeds = space.seed_genomes()
        if EXHAUSTIVE:
            chosen = seeds + [space.random(rng) for _ in range(N_RANDOM if i == 0 else 2)]
        else:
            chosen = seeds + [space.random(rng) for _ in range(N_RANDOM)] if i == 0 else seeds[:1]
        parents += [(problem, g) for g in dict.fromkeys(chosen)]
    if EXHAUSTIVE:
        return [(problem, g, True, None) for problem, g in parents]
    names = units_to_flip(name, backend, template(name, backend, default).gene_space())
    out = [(problem, g, False, set(names[j::len(parents)])) for j, (problem, g) in enumerate(parents)]
    return [job for job in out if job[3]]


TOP_UP_PARENTS = 300  # random parents searched for a context where a gene the sample never flipped applies


@pytest.mark.parametrize("name,backend", _pairs())
def test_every_gene_flip_changes_the_compiled_kernel_or_is_normalised(name, backend, tmp_path, compile_cache,
                                                                     ptx_cache):
    language = backend_class(backend).language
    if language == "c" and availability(backend):
        pytest.skip(f"{backend} backend unavailable: {availability(backend)}")
    if language == "cuda" and NVCC is None:
        pytest.skip("nvcc not installed: CUDA C sources cannot be compiled to PTX here")
    failures: list[str] = []
    applied: set[str] = set()  # units flipped where they apply
    kernels: dict[str, KernelSource] = {}  # source key -> kernel: one compile per distinct source
    jobs: dict[str, tuple[dict, Genome]] = {}  # source key -> (problem, a genome rendering it)
    launched: dict[str, tuple[str, str]] = {}  # source key -> (effective launch, resources) of the first genome
    kept, normalised = [], []  # (what, (source key, launch) of the parent, of the child, a hint flip?)

    def record(tpl, problem: dict, g: Genome) -> tuple[str, str]:
        k = tpl.render(g)
        key = hashlib.sha256(json.dumps([problem, k.source, k.entry, list(k.flags)], sort_keys=True).encode()).hexdigest()[:24]
        how = (effective_launch(tpl, problem, k), json.dumps(k.resources, sort_keys=True))
        if launched.setdefault(key, how) != how:  # the compile cache and the evaluator key on the source
            failures.append(f"{json.dumps(problem)} {g.to_json()}: one source, another launch or resource estimate: "
                            f"{how} where the same source elsewhere has {launched[key]}")
        kernels.setdefault(key, k)
        jobs.setdefault(key, (problem, g))
        return key, how[0]

    def flip_all(problem: dict, parent: Genome, choose) -> None:
        """Flip ``parent`` as ``choose(space, parent)`` lists: (unit, what, child) triples."""
        tpl = template(name, backend, problem)
        space = tpl.gene_space()
        assert space.canonical(parent) == parent and space.validate(parent) is None
        mine = record(tpl, problem, parent)
        for unit, what, child in choose(space, parent):
            canon = space.canonical(child)
            what = f"{json.dumps(problem)} {what} (parent {parent.to_json()})"
            if space.validate(canon) is not None:
                failures.append(f"{what}: the canonical child is illegal: {space.validate(canon)}")
            elif canon == parent:  # normalised: the child as flipped must build the parent's kernel
                normalised.append((what, mine, record(tpl, problem, child)))
            else:
                applied.add(unit)
                kept.append((what, mine, record(tpl, problem, canon), is_hint(space, unit, parent, canon)))

    for problem, parent, every, only in _sample(name, backend):
        rng = random.Random(f"{parent.hash}/{json.dumps(problem, sort_keys=True)}")
        flip_all(problem, parent, lambda space, parent: flips(space, parent, rng, every, only))
    # A gene that applies only in rare contexts (a persistent grid with whole rows...): look among
    # random parents for one where a flip of it is kept, and compile that flip.
    problem = workload(name).default_problem(backend)
    space = template(name, backend, problem).gene_space()
    rng = random.Random(f"canonical/top-up/{name}/{backend}")
    for _ in range(TOP_UP_PARENTS):
        missing = set(units_to_flip(name, backend, space)) - applied
        if not missing:
            break
        parent = space.random(rng)
        found = {}
        for unit, what, child in flips(space, parent, rng, True, missing):
            if space.canonical(child) != parent:
                found.setdefault(unit, (unit, what, child))
        if found:
            flip_all(problem, parent, lambda space, parent: list(found.values()))

    triton = language not in ("c", "cuda") and _triton_compiles()
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
        folder = Path(folder)
        if language == "c":
            code = _c_artefacts(kernels, compile_cache)  # the session's cache: built once
        elif language == "cuda":
            code = _cuda_artefacts(kernels, ptx_cache)
        elif triton:  # the timed shape first; below, the odd shape where that shape cannot tell
            code = _triton_artefacts(name, backend, [(k, *jobs[k]) for k in kernels], folder)
        else:  # no triton or torch here: the module text stands in for what Triton would compile
            code = {key: k.source for key, k in kernels.items()}
        if triton:
            # A flip that leaves the timed shape's kernels alike, or that is normalised but renders
            # another module, is compiled again on the first odd shape too (where a TMA module falls
            # back to its pointer twin, and nothing divides the tiles).
            same = lambda a, b: (code[a[0]], a[1]) == (code[b[0]], b[1])  # noqa: E731
            again = {k for _, a, b, _ in kept if same(a, b) for k in (a[0], b[0])}
            again |= {k for _, a, b in normalised if a[0] != b[0] for k in (a[0], b[0])}
            odd = _triton_artefacts(name, backend, [(k, *jobs[k]) for k in sorted(again)], folder, shape=1) if again else {}
            code = {k: c + "|" + odd.get(k, "") if k in odd else c for k, c in code.items()}
            errors = {k for k, c in odd.items() if c.startswith("compile error")}
            code.update({k: odd[k] for k in errors})
    errors = {key: a for key, a in code.items() if a.startswith("compile error")}
    failures += [f"{json.dumps(jobs[key][0])} {jobs[key][1].to_json()}: {a}" for key, a in errors.items()]
    ok = lambda *records: not any(key in errors for key, _ in records)  # noqa: E731
    unused_hints = 0
    for what, a, b, hint in kept:
        if ok(a, b) and (code[a[0]], a[1]) == (code[b[0]], b[1]):
            if hint:
                unused_hints += 1  # a compiler hint the compiler had no use for here: allowed
            else:
                failures.append(f"{what}: neither the compiled kernel nor its launch changes -- normalise the gene here")
    for what, a, b in normalised:
        if ok(a, b) and (code[a[0]], a[1]) != (code[b[0]], b[1]):
            failures.append(f"{what}: normalised away, but it changes the "
                            f"{'compiled kernel' if code[a[0]] != code[b[0]] else 'launch'}")
    assert kept, "no flip was compiled"
    assert not failures, (f"{len(failures)} failures over {len(kept)} kept and {len(normalised)} normalised flips "
                          f"({unused_hints} compiler hints unused):\n" + "\n".join(failures if EXHAUSTIVE else failures[:60]))


# ---- twins -------------------------------------------------------------------------------------------

# (workload, backend, problem settings, which seed, the flips that make its twin): genes that do not
# apply where the seed stands -- the examples, and one per template.
TWINS = [
    ("gemm", "c", {}, 0, {("parallel_config", "schedule"): "dynamic", ("parallel_config", "parallel_loop"): "jr"}),
    ("rmsnorm", "c", {}, 0, {("memory_pattern", "vectorize"): "omp_simd", ("parallel_config", "rows_per_chunk"): 8}),
    ("silu_mul", "c", {}, 0, {("memory_pattern", "vectorize"): "omp_simd", ("parallel_config", "schedule"): "guided"}),
    ("gemm", "cuda", {"dtype": "bfloat16"}, 0, {("register_allocation", "regs", "lanes"): "8x4",
                                                ("register_allocation", "regs", "assign"): "contiguous"}),
    ("rmsnorm", "cuda", {}, 0, {("parallel_config", "waves"): 4}),
    ("silu_mul", "cuda", {}, 0, {("parallel_config", "waves"): 8}),
    ("silu_mul", "cuda", {}, 1, {("parallel_config", "rows_per_block"): 4}),
    ("gemm", "triton", {}, 0, {("memory_pattern", "hints"): "contiguous"}),
    ("rmsnorm", "triton", {}, 0, {("register_allocation", "regs", "w_hoist"): "yes", ("parallel_config", "waves"): 8}),
    ("silu_mul", "triton", {}, 1, {("parallel_config", "rows_per_program"): 4}),
]


@pytest.mark.parametrize("name,backend,settings,seed,flips_", TWINS,
                         ids=[f"{t[0]}-{t[1]}-{'+'.join(k[-1] for k in t[4])}" for t in TWINS])
def test_twins_have_the_same_hash_and_the_same_source(name, backend, settings, seed, flips_):
    problem = workload(name).validate_problem({**workload(name).default_problem(backend), **settings}, backend)
    tpl = template(name, backend, problem)
    space = tpl.gene_space()
    a = space.seed_genomes()[seed]
    b = a
    for (group, gene, *key), value in flips_.items():
        b = with_gene(b, group, gene, value, key=key[0] if key else None)
    assert space.validate(b) is None and b != a and b.hash != a.hash, "the flip should make a legal twin"
    assert space.canonical(b) == a and space.canonical(b).hash == a.hash
    assert make_valid(b, space, random.Random(0)) == a, "every child the GA breeds passes make_valid"
    source = tpl.render(a).source
    assert tpl.render(space.canonical(b)).source == source
    assert a.hash not in source and b.hash not in source


@pytest.mark.parametrize("name,backend", _pairs())
def test_sources_carry_no_genome_hash_or_gene_text(name, backend):
    problem = workload(name).default_problem(backend)
    tpl = template(name, backend, problem)
    space = tpl.gene_space()
    rng = random.Random(f"no-hash/{name}/{backend}")
    for g in space.seed_genomes() + [space.random(rng) for _ in range(5)]:
        source = tpl.render(g).source
        assert g.hash not in source, f"{g.to_json()}: the genome hash is in the source"
        assert "genes:" not in source and "genome " not in source.lower(), f"{g.to_json()}: gene text in the source"
