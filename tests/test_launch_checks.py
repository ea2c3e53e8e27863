"""The checks around timed launches, in both array libraries (numpy, and torch on the CPU, which runs
the same code the GPU runs), with kernels written in Python: an honest one passes, cheats fail."""
from __future__ import annotations

import random

import pytest

from core.backends.arrays import make_arrays
from core.evaluation.checks import LaunchChecks
from core.evaluation.harness import Harness
from core.evaluation.timing import rotation
from core.workloads import get_workload

LIBRARIES = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None, reason="torch is not installed"))]
PROBLEM = {"m": 24, "n": 16, "k": 8, "dtype": "float32"}


class _Runtime:
    """Just the arrays: these tests call the launches themselves."""

    def __init__(self, arrays):
        self.arrays = arrays

    def synchronize(self):
        pass


class _Template:
    """Binds ``kernel(a, b, c, state)``, where state is a dict the kernel may keep between calls."""

    def __init__(self):
        self.state: dict = {}

    def bind(self, kernel, t, shape):
        return lambda: kernel(t["a"], t["b"], t["c"], self.state)

    def extra_bytes(self, *_):
        return 0


def honest(a, b, c, _state):
    c[...] = a @ b


def skip_when_written(a, b, c, _state):
    if bool((c == c).all()):  # no NaN: looks written already
        return
    c[...] = a @ b


def memo_by_address(a, b, c, state):
    key = id(c)
    if key not in state:
        state[key] = a @ b
    c[...] = state[key]


def _checked_launches(library: str, kernel, launches: int = 40):
    arrays = make_arrays(library, "cpu")
    workload = get_workload("gemm")
    template = _Template()
    harness = Harness(workload, template, _Runtime(arrays), PROBLEM)
    main = workload.shapes(PROBLEM)[0]
    cases = [harness.make_case(main, seed) for seed in (1, 2, 3)]
    checks = LaunchChecks(harness, cases, seed=7)
    launch = rotation(lambda case: harness.launch(kernel, case), cases)
    for i in range(launches):
        checks.before(i)
        launch(i)
        checks.after(i)
    return checks.verify()


@pytest.mark.parametrize("library", LIBRARIES)
def test_an_honest_kernel_passes_every_checked_launch(library):
    assert _checked_launches(library, honest).ok


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_kernel_that_skips_when_its_output_looks_written_is_caught_by_the_decoys(library):
    res = _checked_launches(library, skip_when_written)
    assert not res.ok and res.cause == "wrong_result" and "timed launch" in res.detail


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_kernel_memoising_by_address_is_caught_by_the_permuted_inputs(library):
    res = _checked_launches(library, memo_by_address)
    assert not res.ok and res.cause == "wrong_result"


@pytest.mark.parametrize("library", LIBRARIES)
def test_the_last_output_of_every_case_is_checked_even_without_after(library):
    """Under a CUDA graph the runtime calls only ``before``: the final outputs are still verified."""
    arrays = make_arrays(library, "cpu")
    workload = get_workload("gemm")
    harness = Harness(workload, _Template(), _Runtime(arrays), PROBLEM)
    cases = [harness.make_case(workload.shapes(PROBLEM)[0], s) for s in (4, 5)]
    checks = LaunchChecks(harness, cases, seed=random.Random(0).getrandbits(31))
    for i in range(6):
        checks.before(i)
        if i < 4:  # the last launch on each case never happens: its outputs stay poisoned or a decoy
            harness.launch(honest, cases[i % 2])
    assert not checks.verify().ok


def _cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU (run on the device)")
@pytest.mark.parametrize("kernel,ok", [(honest, True), (skip_when_written, False)])
@pytest.mark.parametrize("block", [1, 3])  # (preparation, launch) pairs; a chain of launches on 3 prepared cases
def test_graph_timed_chunks_on_the_gpu_are_checked(kernel, ok, block):
    """Timed as a measurement in graph mode is (a pilot, then chunks that replay the graphs captured
    by the first): an honest kernel verifies -- the record of each case's last permutation follows
    the graphs -- and a cheat does not (it cannot be captured, and falls back to checked events)."""
    from core.backends.cuda import CudaRuntime  # the shared CUDA runtime with a loader (the base is abstract)

    runtime = CudaRuntime(0)
    runtime.graph_block = block
    workload = get_workload("gemm")
    harness = Harness(workload, _Template(), runtime, PROBLEM)
    cases = [harness.make_case(workload.shapes(PROBLEM)[0], s) for s in (1, 2, 3)]
    checks = LaunchChecks(harness, cases, seed=11)
    fn = rotation(lambda case: harness.launch(kernel, case), cases)
    runtime.time(fn, reps=3, warmup=1, before=checks.before, after=checks.after)
    for chunk in range(3):
        assert runtime.time(fn, reps=8, warmup=2, before=checks.before, after=checks.after, method="graph")
    assert checks.verify().ok == ok


@pytest.mark.parametrize("library", LIBRARIES)
def test_the_permutation_tables_are_permutations_drawn_from_the_seed(library):
    """Drawn by numpy in one go (one Python ``random.sample`` per row took ~50 ms a case at 4096 rows, on
    every candidate): each row a permutation of the rows, the rows unlike each other, the same seed the
    same tables."""
    arrays = make_arrays(library, "cpu")
    workload = get_workload("gemm")
    harness = Harness(workload, _Template(), _Runtime(arrays), PROBLEM)
    cases = [harness.make_case(workload.shapes(PROBLEM)[0], seed) for seed in (1, 2)]
    tables = [[[int(v) for v in row] for row in t.tolist()] for t in LaunchChecks(harness, cases, seed=7).tables]
    m = PROBLEM["m"]
    assert all(sorted(row) == list(range(m)) for table in tables for row in table)
    assert all(len({tuple(row) for row in table}) > len(table) // 2 for table in tables)
    again = [[[int(v) for v in row] for row in t.tolist()] for t in LaunchChecks(harness, cases, seed=7).tables]
    assert again == tables and tables[0] != tables[1]
