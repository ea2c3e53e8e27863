"""The C backend and the C templates of gemm and rmsnorm, through their own harnesses.

Random genomes must all render to correct kernels on every verification shape (the odd ones
too); every gene group must change the source; planted faults must be caught with the right
cause; the exported standalone scripts must verify and fail loudly on a broken kernel.
"""
from __future__ import annotations

import random
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from core.backends import availability
from core.backends.base import Artifact, CompileError, KernelSource
from core.genome import GROUPS, ChoiceGene, MapGene
from core.workloads import get_workload

C_UNAVAILABLE = availability("c")
pytestmark = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")

PROBLEMS = [("gemm", {}), ("rmsnorm", {}), ("rmsnorm", {"residual": True})]
N_RANDOM = {"gemm": 12, "rmsnorm": 12}


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


def test_compile_is_cached_atomic_and_thread_safe(backend, cache):
    src = "void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) { (void)A; (void)B; (void)C; (void)M; (void)N; (void)K; }\n"
    kernel = KernelSource(backend="c", source=src, entry="abebot_gemm")
    results: list[Artifact] = []
    threads = [threading.Thread(target=lambda: results.append(backend.compile(kernel, cache))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({a.path for a in results}) == 1 and Path(results[0].path).exists()
    assert backend.compile(kernel, cache).log == "cache hit"
    assert not list(cache.glob(".*.tmp")), "temporary files left behind"


def test_compile_error_carries_the_log(backend, cache):
    with pytest.raises(CompileError, match="error"):
        backend.compile(KernelSource(backend="c", source="this is not C;\n", entry="abebot_gemm"), cache)


def test_same_symbol_in_two_kernels_does_not_clash(backend, runtime, cache):
    body = "void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {{ (void)A; (void)B; (void)K; for (int i = 0; i < M * N; ++i) C[i] = {v}f; }}\n"
    fns = [runtime.load(backend.compile(KernelSource("c", body.format(v=v), "abebot_gemm"), cache)) for v in (1.0, 2.0)]
    out = np.zeros(4, np.float32)
    for fn, want in zip(fns, (1.0, 2.0)):
        fn(out.ctypes.data, out.ctypes.data, out.ctypes.data, 2, 2, 1)
        assert (out == want).all()


# ---- random genomes are correct -----------------------------------------------------------------

@pytest.mark.parametrize("name,problem", PROBLEMS, ids=lambda p: str(p))
def test_random_genomes_verify_on_every_shape(backend, runtime, cache, name, problem):
    wl, prob, tpl = _setup(backend, name, problem)
    space = tpl.gene_space()
    rng = random.Random(1234)
    n = N_RANDOM[name] // (2 if problem else 1)
    genomes = space.seed_genomes() + [space.random(rng) for _ in range(n)]
    kernels = [tpl.render(g) for g in genomes]
    harness = tpl.harness(runtime)
    for genome, artifact in zip(genomes, _compile_all(backend, kernels, cache)):
        fn = runtime.load(artifact)
        for seed, shape in enumerate(wl.shapes(prob)):
            case = harness.make_case(shape, seed)
            harness.launch(fn, case)
            result = harness.check(case)
            assert result.ok, f"{genome.to_json()} on {shape}: {result}"


def test_gene_space_constraints_and_seeds(backend):
    _, _, tpl = _setup(backend, "gemm", {})
    space = tpl.gene_space()
    assert len(space.seed_genomes()) >= 2
    g = space.seed_genomes()[1]
    rm = dict(g["register_allocation"]["register_map"], nr=24)
    bad = g.replace("memory_pattern", "vector_width", 16).replace("register_allocation", "register_map", rm)
    assert "multiple of the vector width" in space.validate(bad)


# ---- every gene group changes the code ------------------------------------------------------------

def _alternatives(gene, value):
    if isinstance(gene, ChoiceGene):
        return [o for o in gene.options if o != value]
    if isinstance(gene, MapGene):
        return [{**dict(value), k: o} for k, opts in gene.keys for o in opts if o != value[k]]
    rng = random.Random(0)
    return [gene.mutate(value, rng) for _ in range(20)]


@pytest.mark.parametrize("name,problem", PROBLEMS[:2], ids=lambda p: str(p))
def test_every_gene_changes_the_source(backend, name, problem):
    _, _, tpl = _setup(backend, name, problem)
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


# ---- planted faults are caught -------------------------------------------------------------------

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


def _faulty(kernel: KernelSource, entry: str, params: str, args: str, fault: str) -> KernelSource:
    source = kernel.source.replace(f"void {entry}(", f"static void inner_{entry}(")
    source += f"\nvoid {entry}({params}) {{\n  inner_{entry}({args});\n  {fault}\n}}\n"
    return KernelSource("c", source, entry, kernel.flags, kernel.launch, kernel.resources)


@pytest.mark.parametrize("name", ["gemm", "rmsnorm"])
def test_planted_faults_are_detected(backend, runtime, cache, name):
    wl, prob, tpl = _setup(backend, name, {})
    good = tpl.render(tpl.gene_space().seed_genomes()[1])
    if name == "gemm":
        faults, params, args = GEMM_FAULTS, "const float *A, const float *B, float *C, int M, int N, int K", "A, B, C, M, N, K"
    else:
        faults = RMS_FAULTS
        params = "const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps"
        args = "x, w, residual, out, rows, cols, eps"
    harness = tpl.harness(runtime)
    kernels = [_faulty(good, good.entry, params, args, f) for f in faults.values()]
    for cause, artifact in zip(faults, _compile_all(backend, kernels, cache)):
        fn = runtime.load(artifact)
        case = harness.make_case(wl.shapes(prob)[1], 7)
        harness.launch(fn, case)
        result = harness.check(case)
        assert not result.ok and result.cause == cause, f"{cause}: {result}"
    case = harness.make_case(wl.shapes(prob)[0], 8)  # and the poison: an output never written
    assert harness.check(case).cause == "nan_output"


def test_rmsnorm_residual_survives_repeated_launches(backend, runtime, cache):
    wl, prob, tpl = _setup(backend, "rmsnorm", {"residual": True})
    fn = runtime.load(backend.compile(tpl.render(tpl.gene_space().seed_genomes()[1]), cache))
    harness = tpl.harness(runtime)
    case = harness.make_case(wl.shapes(prob)[1], 3)
    for _ in range(25):
        harness.launch(fn, case)
    assert harness.check(case).ok
    harness.reset_outputs(case)
    harness.launch(fn, case)
    first = harness.output_bytes(case)
    harness.reset_outputs(case)
    harness.launch(fn, case)
    assert harness.output_bytes(case) == first and harness.check(case).ok


@pytest.mark.parametrize("name,problem", PROBLEMS, ids=lambda p: str(p))
def test_numpy_baseline_passes_the_same_check(backend, runtime, name, problem):
    wl, prob, tpl = _setup(backend, name, problem)
    harness = tpl.harness(runtime)
    case = harness.make_case(wl.shapes(prob)[0], 5)
    baseline = harness.baselines()["numpy"]
    for _ in range(3):
        baseline(case)
    assert harness.check(case).ok
    assert harness.baseline_memory_bytes("numpy", case) >= 0


# ---- standalone scripts ----------------------------------------------------------------------------

def _run_script(text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "kernel_check.py"
    script.write_text(text)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)


@pytest.mark.parametrize("name,problem", PROBLEMS, ids=lambda p: str(p))
def test_standalone_script_verifies_and_times(backend, tmp_path, name, problem):
    _, _, tpl = _setup(backend, name, problem)
    kernel = tpl.render(tpl.gene_space().seed_genomes()[1])
    res = _run_script(tpl.standalone_script(kernel), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "verification: passed" in res.stdout and "speedup" in res.stdout
    text = tpl.standalone_script(kernel)
    assert "from core" not in text and "import core" not in text


def test_standalone_script_fails_on_a_broken_kernel(backend, tmp_path):
    _, _, tpl = _setup(backend, "gemm", {})
    good = tpl.render(tpl.gene_space().seed_genomes()[1])
    broken = _faulty(good, good.entry, "const float *A, const float *B, float *C, int M, int N, int K",
                     "A, B, C, M, N, K", GEMM_FAULTS["wrong_result"])
    res = _run_script(tpl.standalone_script(broken), tmp_path)
    assert res.returncode == 1 and "FAIL" in res.stdout, res.stdout + res.stderr
