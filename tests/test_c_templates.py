"""The C backend, and what is particular to the C templates of gemm and rmsnorm.

What every template of every workload must do (seed and random genomes verify on every shape, the
numpy baselines pass the same check, the exported ``run_kernel.py`` verifies and fails loudly)
is in tests/test_conformance.py. Here: the backend's compile cache and loader, the gemm gene
space's constraints, every single gene changing the C source, and planted faults caught by the
generic harness (:class:`~core.evaluation.harness.Harness`) driven through a C template.
"""
from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from core.backends import availability
from core.backends.base import Artifact, CompileError, KernelSource
from core.evaluation.harness import Harness
from core.genome import GROUPS, ChoiceGene, MapGene
from core.workloads import get_workload

C_UNAVAILABLE = availability("c")
pytestmark = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")

GEMM_ARGTYPES = ("ptr", "ptr", "ptr", "int", "int", "int")
SMALL = {"gemm": {"m": 64, "n": 64, "k": 64}, "rmsnorm": {"rows": 64, "cols": 64}}


@pytest.fixture(scope="module")
def backend():
    from core.backends.c import CBackend

    return CBackend()


@pytest.fixture(scope="module")
def runtime(backend):
    return backend.make_runtime()


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("c-cache")


def _setup(backend, name: str, problem: dict):
    wl = get_workload(name)
    prob = wl.validate_problem(problem, "c")
    return wl, prob, wl.template("c", prob, backend.device)


def _compile_all(backend, kernels: list[KernelSource], cache: Path) -> list[Artifact]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda k: backend.compile(k, cache), kernels))


# ---- backend ------------------------------------------------------------------------------------

def test_device_describes_this_cpu(backend):
    d = backend.device
    assert d.backend == "c" and d.multiprocessors >= 1 and d.memory_bytes > 0 and d.arch
    assert d.versions["compiler"] and d.versions["numpy"] == np.__version__


def test_runtime_works_in_numpy(runtime):
    assert runtime.arrays.name == "numpy" and runtime.arrays.xp is np


def test_compile_is_cached_atomic_and_thread_safe(backend, cache):
    src = "void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) { (void)A; (void)B; (void)C; (void)M; (void)N; (void)K; }\n"
    kernel = KernelSource(backend="c", source=src, entry="abebot_gemm", launch={"argtypes": GEMM_ARGTYPES})
    results: list[Artifact] = []
    threads = [threading.Thread(target=lambda: results.append(backend.compile(kernel, cache))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len({a.path for a in results}) == 1 and Path(results[0].path).exists()
    assert backend.compile(kernel, cache).log == "cache hit"
    assert results[0].launch["argtypes"] == GEMM_ARGTYPES  # the artifact carries the signature into the sandbox
    assert not list(cache.glob(".*.tmp")), "temporary files left behind"


def test_compile_error_carries_the_log(backend, cache):
    with pytest.raises(CompileError, match="error"):
        backend.compile(KernelSource(backend="c", source="this is not C;\n", entry="abebot_gemm"), cache)


def test_a_kernel_without_argtypes_is_refused_at_load(backend, runtime, cache):
    src = "void abebot_gemm(void) {}\n"
    with pytest.raises(ValueError, match="argtypes"):
        runtime.load(backend.compile(KernelSource("c", src, "abebot_gemm"), cache))


def test_same_symbol_in_two_kernels_does_not_clash(backend, runtime, cache):
    body = "void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {{ (void)A; (void)B; (void)K; for (int i = 0; i < M * N; ++i) C[i] = {v}f; }}\n"
    kernels = [KernelSource("c", body.format(v=v), "abebot_gemm", launch={"argtypes": GEMM_ARGTYPES}) for v in (1.0, 2.0)]
    fns = [runtime.load(backend.compile(k, cache)) for k in kernels]
    out = np.zeros(4, np.float32)
    for fn, want in zip(fns, (1.0, 2.0)):
        fn(out, out, out, 2, 2, 1)
        assert (out == want).all()


# ---- gene spaces ----------------------------------------------------------------------------------

def test_gemm_gene_space_constraints_and_seeds(backend):
    _, _, tpl = _setup(backend, "gemm", {})
    space = tpl.gene_space()
    assert len(space.seed_genomes()) >= 2
    g = space.seed_genomes()[1]
    rm = dict(g["register_allocation"]["register_map"], nr=24)
    bad = g.replace("memory_pattern", "vector_width", 16).replace("register_allocation", "register_map", rm)
    assert "multiple of the vector width" in space.validate(bad)
    rm = dict(g["register_allocation"]["register_map"], mr=14, nr=64)
    assert "accumulator vectors" in space.validate(g.replace("memory_pattern", "vector_width", 4)
                                                   .replace("register_allocation", "register_map", rm))


def _alternatives(gene, value):
    if isinstance(gene, ChoiceGene):
        return [o for o in gene.options if o != value]
    if isinstance(gene, MapGene):
        return [{**dict(value), k: o} for k, opts in gene.keys for o in opts if o != value[k]]
    rng = random.Random(0)
    return [gene.mutate(value, rng) for _ in range(20)]


@pytest.mark.parametrize("name", ["gemm", "rmsnorm"])
def test_every_gene_changes_the_source(backend, name):
    _, _, tpl = _setup(backend, name, {})
    space = tpl.gene_space()
    base = space.seed_genomes()[1].replace("parallel_config", "threads", 2)
    source = tpl.render(base).source
    changed_groups = set()
    for group, gene in space.genes():
        variants = [base.replace(group, gene.name, v) for v in _alternatives(gene, base[group][gene.name])]
        variants = [v for v in variants if space.validate(v) is None]
        assert any(tpl.render(v).source != source for v in variants), f"{group}.{gene.name} never changes the source"
        changed_groups.add(group)
    assert changed_groups == set(GROUPS)


# ---- planted faults are caught by the generic harness ----------------------------------------------

GEMM_FAULTS = {
    "nan_output": "C[(size_t)M * N - 1] = 0.0f / 0.0f;",
    "out_of_bounds_write": "C[(size_t)M * N] = 1.0f;",
    "input_modified": "((float *)A)[K - 1] += 1.0f;",
    "wrong_result": "C[(size_t)(M / 2) * N + N / 2] += 0.05f;",
}
RMS_FAULTS = {
    "nan_output": "out[(size_t)rows * cols - 1] = 0.0f / 0.0f;",
    "out_of_bounds_write": "out[-1] = 1.0f;",
    "input_modified": "((float *)w)[0] += 1.0f;",
    "wrong_result": "out[0] *= 1.01f;",
}
RES_FAULTS = {  # the residual is updated in place: it is an output as well
    "wrong_result": "residual[cols - 1] += 0.5f;",
    "out_of_bounds_write": "residual[(size_t)rows * cols] = 1.0f;",
}
SIGNATURES = {
    "gemm": ("const float *A, const float *B, float *C, int M, int N, int K", "A, B, C, M, N, K"),
    "rmsnorm": ("const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps",
                "x, w, residual, out, rows, cols, eps"),
}


def _faulty(kernel: KernelSource, params: str, args: str, fault: str) -> KernelSource:
    """The rendered kernel renamed and wrapped by an entry point that calls it, then misbehaves."""
    entry = kernel.entry
    source = kernel.source.replace(f"void {entry}(", f"static void inner_{entry}(")
    source += f"\nvoid {entry}({params}) {{\n  inner_{entry}({args});\n  {fault}\n}}\n"
    return KernelSource("c", source, entry, kernel.flags, kernel.launch, kernel.resources)


@pytest.mark.parametrize("name,problem,faults", [("gemm", {}, GEMM_FAULTS), ("rmsnorm", {}, RMS_FAULTS),
                                                 ("rmsnorm", {"residual": True}, RES_FAULTS)],
                         ids=["gemm", "rmsnorm", "rmsnorm-residual"])
def test_planted_faults_are_caught_with_their_cause(backend, runtime, cache, name, problem, faults):
    wl, prob, tpl = _setup(backend, name, {**SMALL[name], **problem})
    good = tpl.render(tpl.gene_space().seed_genomes()[1])
    harness = Harness(wl, tpl, runtime, prob)
    kernels = [_faulty(good, *SIGNATURES[name], f) for f in faults.values()]
    odd = wl.shapes(prob)[1]
    for cause, artifact in zip(faults, _compile_all(backend, kernels, cache)):
        fn = runtime.load(artifact)
        case = harness.make_case(odd, 7)
        harness.launch(fn, case)
        result = harness.check(case)
        assert not result.ok and result.cause == cause, f"{cause}: {result}"
    case = harness.make_case(wl.shapes(prob)[0], 8)  # and a kernel that never ran: poison left in the output
    # (an in-place residual, checked first, still holds its input: wrong, but finite)
    assert harness.check(case).cause == ("wrong_result" if prob.get("residual") else "nan_output")


def test_rmsnorm_residual_is_restored_before_each_checked_launch(backend, runtime, cache):
    wl, prob, tpl = _setup(backend, "rmsnorm", {**SMALL["rmsnorm"], "residual": True})
    fn = runtime.load(backend.compile(tpl.render(tpl.gene_space().seed_genomes()[1]), cache))
    harness = Harness(wl, tpl, runtime, prob)
    case = harness.make_case(wl.shapes(prob)[1], 3)
    for _ in range(25):  # without a reset the residual keeps growing: the check must fail, not crash
        harness.launch(fn, case)
    assert not harness.check(case).ok
    harness.reset_outputs(case)  # restores the residual and re-poisons the output
    harness.launch(fn, case)
    assert harness.check(case).ok
    first = harness.output_bytes(case)
    harness.reset_outputs(case)
    harness.launch(fn, case)
    assert harness.output_bytes(case) == first and harness.check(case).ok


@pytest.mark.parametrize("name", ["gemm", "rmsnorm"])
def test_extra_memory_is_the_templates_workspace_estimate(backend, runtime, cache, name):
    wl, prob, tpl = _setup(backend, name, SMALL[name])
    kernel = tpl.render(tpl.gene_space().seed_genomes()[1])
    artifact = backend.compile(kernel, cache)
    harness = Harness(wl, tpl, runtime, prob)
    case = harness.make_case(wl.shapes(prob)[0], 1)
    assert harness.extra_memory_bytes(runtime.load(artifact), artifact, case) == kernel.resources["workspace_bytes"]
    assert harness.onchip_bytes(artifact) == 0  # no registers or shared memory reported on a CPU
