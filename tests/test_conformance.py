"""The conformance suite: every registered workload, on every backend it has a template for.

In the manner of Optuna's shared storage and sampler test suites, the tests here are written once
against the contracts (:mod:`core.workloads.spec`, :mod:`core.workloads.template`,
:mod:`core.evaluation`) and parametrised over the registry: every ``(workload, backend)`` pair of
:data:`core.workloads.WORKLOADS` and each workload's ``templates``. Registering a workload puts it
through the whole suite, with no edit here.

1. The spec is coherent: default problems validate on every backend; tensor names are unique;
   the first shape is the problem's own and another is odd; a tolerance exists for every dtype
   the backend offers; bytes and flops are positive; the backend's array library has baselines.
2. The gene space: seeds validate and fit the device; random genomes render, deterministically;
   every gene group is non-empty and changes the source.
3. CPU backends, for real: seed and random genomes verify on every shape (the odd ones too)
   through the generic :class:`~core.evaluation.harness.Harness`; so do the library baselines;
   the exported ``run_kernel.py`` passes a good kernel and exits 1 on a broken one.
4. CUDA C: the seeds of every problem (dtypes, flags) and random genomes compile with
   ``nvcc -ptx -arch=sm_90``.
5. Triton: the seeds of every float16 and float32 problem and random genomes verify under
   ``TRITON_INTERPRET=1`` through the generic harness (one interpreter subprocess per workload), on
   problems with :data:`~tests.helpers.INTERPRETER_OUTER` rows, heads or groups (all of them when exhaustive).
6. The exported script of every pair is valid Python and its ``kernel.json`` round-trips.

Executed checks use small problems (sizes capped at :data:`SMALL_SIZE`; the spec's odd shapes
are small already) and :data:`N_RANDOM` random genomes per problem, so the suite stays fast on a
two-core CI runner. The compiled checks (4 and 5) are slimmer still: random genomes on the pair's
first problem only, the seeds on its other problems (see :func:`sampled`);
``ABEBOT_CONFORMANCE_EXHAUSTIVE=1`` takes random genomes on every problem. The C compile cache and
the PTX cache are the session's (``compile_cache``, ``ptx_cache`` in conftest.py), shared with
tests/test_canonical.py.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import py_compile
import random
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.backends import BACKENDS, availability, make_backend
from core.backends.base import KernelSource, source_hash
from core.evaluation.harness import Harness
from core.evaluation.standalone import write_standalone
from core.genome import GROUPS, Genome
from core.workloads import WORKLOADS, get_workload
from core.workloads.template import Template

from tests.helpers import (INTERPRETER_DTYPES, INTERPRETER_OUTER, N_RANDOM, NVCC, ROOT, _normalised, caps, cpu_pair, cuda_pair, device,
                           dtypes, genomes,
                           innermost_dims, label, nvcc_ptx, pair, problems, template, triton_pair, workload)

# ABEBOT_CONFORMANCE_EXHAUSTIVE=1: nvcc and the Triton interpreter take N_RANDOM random genomes on
# every problem; by default (slim) on the first problem of each pair only, and the seeds elsewhere.
EXHAUSTIVE = os.environ.get("ABEBOT_CONFORMANCE_EXHAUSTIVE") == "1"


def sampled(name: str, backend: str, problem: dict, first: bool) -> list[Genome]:
    """The genomes the compiled checks (nvcc, the interpreter) take for a problem: the seeds and
    N_RANDOM random genomes on the pair's first problem (every problem when exhaustive), the seeds
    on the others (their dtypes and flags; random genomes of every problem are rendered by
    test_random_genomes_render_deterministically and pinned by tests/test_render_golden.py)."""
    return genomes(template(name, backend, problem), label(name, backend, problem), N_RANDOM if first or EXHAUSTIVE else 0)


# ---- 0. the registry entry -----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(WORKLOADS))
def test_registered_workload_loads(name):
    wl = get_workload(name)
    assert wl.name == name and wl.description
    assert wl.templates and set(wl.templates) <= set(BACKENDS), f"unknown backends in {sorted(wl.templates)}"
    names = [p.name for p in wl.params]
    assert len(names) == len(set(names)), f"settings named twice: {names}"


@pair
def test_template_is_registered_under_its_own_backend(name, backend):
    problem = workload(name).default_problem(backend)
    tpl = template(name, backend, problem)
    assert isinstance(tpl, Template) and tpl.backend == backend
    assert tpl.workload is not None and tpl.problem == problem


# ---- 1. the spec is coherent ---------------------------------------------------------------------

@pair
def test_default_problems_validate_on_every_backend(name, backend):
    wl = workload(name)
    default = wl.default_problem(backend)
    assert set(default) == {p.name for p in wl.params}
    assert wl.validate_problem({}, backend) == default
    assert wl.validate_problem(dict(default), backend) == default
    with pytest.raises(ValueError, match="no setting"):
        wl.validate_problem({"no_such_setting": 1}, backend)
    for p in wl.params:
        if p.kind == "size":
            with pytest.raises(ValueError, match=p.name):
                wl.validate_problem({p.name: 0}, backend)
        if p.kind == "dtype":
            with pytest.raises(ValueError, match=p.name):
                wl.validate_problem({p.name: "int8"}, backend)


@pair
def test_tensor_names_are_unique_and_every_dimension_is_in_every_shape(name, backend):
    wl = workload(name)
    for problem in problems(name, backend, small=False) + problems(name, backend, small=True):
        tensors = wl.tensors(problem)
        names = [t.name for t in tensors]
        assert len(names) == len(set(names)), f"tensor names repeat: {names}"
        assert any(t.read for t in tensors) and any(t.written for t in tensors), "needs an input and an output"
        dims = {d for t in tensors for d in t.dims if isinstance(d, str)}
        for shape in wl.shapes(problem):
            assert dims <= set(shape), f"shape {shape} lacks {sorted(dims - set(shape))}"
            assert all(isinstance(v, int) and v >= 1 for v in shape.values()), shape


@pair
def test_first_shape_is_the_problems_own_and_another_is_odd(name, backend):
    wl = workload(name)
    for problem in problems(name, backend, small=False) + problems(name, backend, small=True):
        shapes = wl.shapes(problem)
        own = shapes[0]
        assert set(own) <= set(problem) and own == {k: problem[k] for k in own}, \
            f"first shape {own} is not the problem's {problem}"
        assert len(shapes) >= 2, "verification needs an odd shape besides the timed one"
        assert len({json.dumps(s, sort_keys=True) for s in shapes}) == len(shapes), f"a shape repeats: {shapes}"
        inner = innermost_dims(name, problem)
        odd = [s for s in shapes[1:] if all(s[d] % 2 == 1 for d in inner)]
        assert odd, f"no shape has an odd innermost dimension ({sorted(inner)}): {shapes}"


@pair
def test_tolerance_is_defined_for_every_dtype_the_backend_offers(name, backend):
    wl = workload(name)
    offered = dtypes(name, backend)
    assert offered, f"{backend} offers none of the dtypes {name} allows"
    for problem in problems(name, backend, small=False):
        for shape in wl.shapes(problem):
            for t in wl.tensors(problem):
                if not t.written:
                    continue
                atol, rtol = wl.tolerance(t.dtype_in(problem), shape)
                assert math.isfinite(atol) and math.isfinite(rtol) and atol >= 0 and rtol >= 0, (atol, rtol)
                assert atol > 0 or rtol > 0, f"zero tolerance for {t.name} in {t.dtype_in(problem)}"


@pair
def test_bytes_and_flops_are_positive(name, backend):
    wl = workload(name)
    for problem in problems(name, backend, small=False):
        for shape in wl.shapes(problem):
            io, least = wl.io_bytes(shape, problem), wl.min_bytes(shape, problem)
            assert io > 0 and least > 0 and least <= 2 * io, (shape, io, least)
            assert wl.flops(shape, problem) >= 0


@pair
def test_baselines_exist_for_the_backends_arrays_with_unique_names(name, backend):
    arrays = caps(backend).arrays
    baselines = workload(name).baselines(arrays)
    assert baselines, f"no {arrays} baseline: fitness has nothing to be normalised by"
    names = [b.name for b in baselines]
    assert len(names) == len(set(names)), f"baseline names repeat: {names}"
    for b in baselines:
        assert b.arrays == arrays and callable(b.fn), b


# ---- 2. the gene space -----------------------------------------------------------------------------

@pair
def test_seed_genomes_validate_and_fit_the_device(name, backend):
    for problem in problems(name, backend, small=False):
        tpl = template(name, backend, problem)
        space = tpl.gene_space()
        seeds = space.seed_genomes()  # raises with the reason when a seed is illegal
        assert seeds, "a template needs at least one seed genome"
        for g in seeds:
            assert space.validate(g) is None
            kernel = tpl.render(g)
            assert tpl.resource_violation(kernel) is None, f"seed {g.hash} does not fit {device(backend).name}"


@pair
def test_random_genomes_render_deterministically(name, backend):
    for problem in problems(name, backend, small=False):
        tpl, again = template(name, backend, problem), template(name, backend, problem)
        for g in genomes(tpl, label(name, backend, problem)):
            kernel = tpl.render(g)
            assert kernel.backend == backend and kernel.entry and kernel.entry in kernel.source
            assert kernel == tpl.render(g), f"{g.hash}: two renders differ"
            assert kernel == again.render(Genome.from_json(g.to_json())), f"{g.hash}: a fresh template renders otherwise"


@pair
def test_every_gene_group_is_non_empty_and_changes_the_source(name, backend):
    problem = workload(name).default_problem(backend)
    tpl = template(name, backend, problem)
    space = tpl.gene_space()
    base = space.seed_genomes()[0]
    source = tpl.render(base).source
    rng = random.Random(1)
    for group in GROUPS:
        assert space.groups[group], f"gene group {group} is empty"
        changed = False
        for gene in space.groups[group]:
            for _ in range(30):
                child = base.replace(group, gene.name, gene.mutate(base[group][gene.name], rng))
                if space.validate(child) is None and tpl.render(child).source != source:
                    changed = True
                    break
            if changed:
                break
        assert changed, f"no gene of {group} changes the source"


# ---- 3. CPU backends, for real ---------------------------------------------------------------------

def _needs_cpu_backend(backend: str) -> None:
    reason = availability(backend)
    if reason:
        pytest.skip(f"{backend} backend unavailable: {reason}")


@functools.lru_cache(maxsize=None)
def cpu_backend(backend: str):
    b = make_backend(backend)
    return b, b.make_runtime()


@cpu_pair
def test_seed_and_random_genomes_verify_on_every_shape(name, backend, compile_cache):
    _needs_cpu_backend(backend)
    be, runtime = cpu_backend(backend)
    wl = workload(name)
    jobs = []  # (problem, template, genome, kernel)
    for problem in problems(name, backend, small=True):
        tpl = template(name, backend, problem)
        jobs += [(problem, tpl, g, tpl.render(g)) for g in genomes(tpl, label(name, backend, problem))]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        artifacts = list(pool.map(lambda job: be.compile(job[3], compile_cache), jobs))
    failures = []
    for (problem, tpl, g, _), artifact in zip(jobs, artifacts):
        harness = Harness(wl, tpl, runtime, problem)
        kernel = runtime.load(artifact)
        for seed, shape in enumerate(wl.shapes(problem)):
            case = harness.make_case(shape, seed)
            harness.launch(kernel, case)
            result = harness.check(case)
            if not result.ok:
                failures.append(f"{problem} {g.to_json()} on {shape}: {result.cause} {result.detail}")
    assert not failures, f"{len(failures)} of {len(jobs)} kernels failed:\n" + "\n".join(failures[:10])


@cpu_pair
def test_library_baselines_pass_the_same_check(name, backend):
    _needs_cpu_backend(backend)
    _, runtime = cpu_backend(backend)
    wl = workload(name)
    for problem in problems(name, backend, small=True):
        harness = Harness(wl, template(name, backend, problem), runtime, problem)
        assert harness.baselines(), "no baseline in the runtime's array library"
        for bname, fn in harness.baselines().items():
            for seed, shape in enumerate(wl.shapes(problem)):
                case = harness.make_case(shape, seed)
                harness.accept_baseline_result(case, fn(case))
                result = harness.check(case)
                assert result.ok, f"baseline {bname} on {problem} {shape}: {result.cause} {result.detail}"
            assert harness.baseline_memory_bytes(bname, harness.make_case(wl.shapes(problem)[0], 99)) >= 0


def _broken(kernel: KernelSource) -> KernelSource:
    """The same kernel (entry, flags, launch) whose entry point returns without writing anything."""
    language = caps(kernel.backend).language
    if language != "c":
        pytest.skip(f"no broken-kernel recipe for {language} sources")
    return dataclasses.replace(kernel, source=f"void {kernel.entry}() {{}}\n")


@cpu_pair
def test_exported_script_passes_a_good_kernel_and_fails_a_broken_one(name, backend, tmp_path):
    _needs_cpu_backend(backend)
    problem = problems(name, backend, small=True)[0]
    tpl = template(name, backend, problem)
    good = tpl.render(tpl.gene_space().seed_genomes()[-1])
    procs = {}
    for which, kernel in (("good", good), ("broken", _broken(good))):
        folder = tmp_path / which
        folder.mkdir()
        write_standalone(folder, kernel, name, problem)
        procs[which] = subprocess.Popen([sys.executable, "run_kernel.py", "--seconds", "0.02", "--stability-launches", "5"],
                                        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env={**os.environ, "OMP_NUM_THREADS": "2"})
    try:
        out = {which: (p.communicate(timeout=300)[0], p.returncode) for which, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    text, rc = out["good"]
    assert rc == 0 and "verification: passed" in text, text[-3000:]
    assert "shapes verified" in text and "kernel:" in text
    text, rc = out["broken"]
    assert rc == 1 and "verification: FAILED" in text, text[-3000:]


# ---- 4. CUDA C compiles with nvcc ----------------------------------------------------------------

@cuda_pair
def test_cuda_sources_compile_to_ptx_with_nvcc(name, backend, ptx_cache):
    if NVCC is None:
        pytest.skip("nvcc not installed: CUDA C sources cannot be compiled here")
    kernels: dict[str, tuple[str, KernelSource]] = {}  # source hash -> (what, kernel); identical sources once
    for i, problem in enumerate(problems(name, backend, small=False)):
        tpl = template(name, backend, problem)
        for g in sampled(name, backend, problem, first=i == 0):
            kernel = tpl.render(g)
            kernels.setdefault(source_hash(kernel), (f"{problem} {g.to_json()}", kernel))
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda item: nvcc_ptx(item[1], ptx_cache), kernels.values()))
    failures = []
    for (what, kernel), (ptx, err) in zip(kernels.values(), results):
        if ptx is None:
            failures.append(f"{what}: {err[:1500]}")
        elif not re.search(rf"\.entry\s+{re.escape(kernel.entry)}\b", ptx):
            failures.append(f"{what}: no .entry {kernel.entry} in the PTX")
    assert not failures, f"{len(failures)} of {len(kernels)} sources failed:\n" + "\n".join(failures[:5])


# ---- 5. Triton kernels verify under the interpreter ------------------------------------------------

def _have(module: str) -> bool:
    try:
        __import__(module)
        return True
    except Exception:
        return False


# Runs in a subprocess: TRITON_INTERPRET=1 must be set before triton is imported.
INTERPRETER = textwrap.dedent(r'''
    import dataclasses, json, os, random, sys
    assert os.environ.get("TRITON_INTERPRET") == "1"
    import triton.runtime.interpreter as _I
    _orig = _I._patch_lang_tensor
    def _patched(tensor, scope):  # NumPy >= 2.4 refuses int() of a 1-element array; the interpreter does that for loop bounds
        _orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    _I._patch_lang_tensor = _patched
    from pathlib import Path
    from core.backends.base import Artifact, DeviceInfo, source_hash
    from core.backends.triton import InterpreterRuntime
    from core.evaluation.harness import Harness
    from core.genome import Genome
    from core.workloads import get_workload

    job = json.loads(sys.argv[1])
    folder = Path(job["folder"])
    dev = DeviceInfo(**job["device"])
    wl = get_workload(job["workload"])
    runtime = InterpreterRuntime()
    failures, checked = [], 0
    for item in job["items"]:
        problem = item["problem"]
        tpl = wl.template(job["backend"], problem, dev)
        harness = Harness(wl, tpl, runtime, problem)
        for raw in item["genomes"]:
            g = tpl.gene_space().from_json(raw)
            kernel = tpl.render(g)
            key = source_hash(kernel)
            path = folder / f"{key}.py"
            path.write_text(kernel.source)
            artifact = Artifact(backend=kernel.backend, source_hash=key, entry=kernel.entry, path=str(path),
                                launch=dict(kernel.launch), resources=dict(kernel.resources))
            try:
                loaded = runtime.load(artifact)
                for seed, shape in enumerate(wl.shapes(problem)):
                    case = harness.make_case(shape, seed)
                    harness.launch(loaded, case)
                    result = harness.check(case)
                    checked += 1
                    if not result.ok:
                        failures.append(f"{problem} {raw} on {shape}: {result.cause} {result.detail}")
                        break
            except Exception as exc:
                failures.append(f"{problem} {raw}: {type(exc).__name__}: {exc}")
    print("RESULT " + json.dumps({"checked": checked, "failures": failures}))
''')


@triton_pair
def test_triton_kernels_verify_under_the_interpreter(name, backend, tmp_path):
    if not (_have("triton") and _have("torch")):
        pytest.skip("triton and torch are needed for TRITON_INTERPRET")
    items = []
    for i, problem in enumerate(problems(name, backend, small=True, only=INTERPRETER_DTYPES,
                                          outer=None if EXHAUSTIVE else INTERPRETER_OUTER)):
        items.append({"problem": problem, "genomes": [g.to_json() for g in sampled(name, backend, problem, first=i == 0)]})
    assert items, f"{backend} offers neither of {INTERPRETER_DTYPES} for {name}"
    job = {"workload": name, "backend": backend, "device": dataclasses.asdict(device(backend)), "items": items,
           "folder": str(tmp_path)}
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    out = subprocess.run([sys.executable, "-c", INTERPRETER, json.dumps(job)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert out.returncode == 0 and lines, (out.stdout + out.stderr)[-4000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert not result["failures"], f"{len(result['failures'])} failures:\n" + "\n".join(result["failures"][:10])
    assert result["checked"] >= sum(len(i["genomes"]) for i in items)


# ---- 6. the exported script ----------------------------------------------------------------------

@pair
def test_exported_script_compiles_and_its_manifest_round_trips(name, backend, tmp_path):
    problem = workload(name).default_problem(backend)
    tpl = template(name, backend, problem)
    kernel = tpl.render(tpl.gene_space().seed_genomes()[0])
    write_standalone(tmp_path, kernel, name, problem)
    py_compile.compile(str(tmp_path / "run_kernel.py"), doraise=True)
    manifest = json.loads((tmp_path / "kernel.json").read_text())
    assert (manifest["workload"], manifest["backend"]) == (name, backend)
    assert workload(name).validate_problem(manifest["problem"], backend) == problem
    k = manifest["kernel"]
    rebuilt = KernelSource(k["backend"], k["source"], k["entry"], tuple(k["flags"]), k["launch"], k["resources"])
    assert (rebuilt.backend, rebuilt.source, rebuilt.entry, rebuilt.flags) == (kernel.backend, kernel.source,
                                                                               kernel.entry, kernel.flags)
    assert rebuilt.launch == _normalised(kernel.launch) and rebuilt.resources == _normalised(kernel.resources)
    module = workload(name).templates[backend]
    assert (tmp_path / "abebot" / Path(*module.split("."))).with_suffix(".py").exists(), "template not exported"


# ---- 7. decode sizes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rows", [1, 3])
def test_rmsnorm_with_residual_verifies_at_decode_rows(rows, compile_cache):
    """vLLM's fused_add_rms_norm at a decode step's few rows (the timed shape is the problem's own)."""
    _needs_cpu_backend("c")
    be, runtime = cpu_backend("c")
    wl = workload("rmsnorm")
    problem = wl.validate_problem({"rows": rows, "cols": 1024, "residual": True}, "c")
    tpl = template("rmsnorm", "c", problem)
    failures, checked = [], 0
    for g in genomes(tpl, label("rmsnorm", "c", problem), n=2):
        harness = Harness(wl, tpl, runtime, problem)
        kernel = runtime.load(be.compile(tpl.render(g), compile_cache))
        for seed, shape in enumerate(wl.shapes(problem)):
            case = harness.make_case(shape, seed)
            harness.launch(kernel, case)
            result = harness.check(case)
            checked += 1
            if not result.ok:
                failures.append(f"{g.to_json()} on {shape}: {result.cause} {result.detail}")
    assert checked and wl.shapes(problem)[0]["rows"] == rows
    assert not failures, "\n".join(failures)


def test_w4a16_dequantizes_gptq_words_as_gptq_packs_them():
    """The w4a16 layout is GPTQ's: word [k // 8, n] holds W[k, n] in bits 4 (k % 8) .. 4 (k % 8) + 3."""
    import numpy as np

    from core.workloads.w4a16 import dequantize

    rng = np.random.default_rng(0)
    K, n = 256, 5
    q = rng.integers(0, 16, (K, n))
    z = rng.integers(0, 16, (K // 128, n))
    s = rng.uniform(0.5, 1.5, (K // 128, n))
    packed = np.zeros((K // 8, n), dtype=np.uint32)
    for k in range(K):  # GPTQ's pack(): qweight[k // 8] |= intweight[k] << (4 * (k % 8))
        packed[k // 8] |= (q[k].astype(np.uint32) << np.uint32(4 * (k % 8)))
    words = packed.view(np.int32).reshape(K // 128, 16, n)
    want = (q - np.repeat(z, 128, axis=0)) * np.repeat(s, 128, axis=0)
    assert np.array_equal(dequantize(np, words.astype(np.float64), s, z.astype(np.float64)), want)
    assert np.array_equal(dequantize(np, words, s), (q - 8) * np.repeat(s, 128, axis=0))
