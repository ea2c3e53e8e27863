"""Triton ahead of time (:mod:`core.backends.triton_aot`): the GA-side compile processes compile a
generated module for sm_90 on a machine without a GPU, file it in Triton's cache (a second
compile process finds it there), and report a kernel that does not compile as a compile error."""
from __future__ import annotations

from pathlib import Path

import pytest

from core.backends.base import CompileError, DeviceInfo
from core.workloads import get_workload

pytest.importorskip("torch")
pytest.importorskip("triton.backends.compiler")

H200 = DeviceInfo("triton", 0, "NVIDIA H200", 140 << 30, 132, 232448, 65536, 255, 1024, 60 << 20, 4.8e12, "sm_90")


@pytest.fixture(scope="module")
def backend():
    from core.backends import triton_aot
    from core.backends.triton import TritonBackend

    b = TritonBackend.__new__(TritonBackend)  # no GPU here: the device is described, not detected
    b.device = H200
    yield b
    triton_aot.shutdown()


def _gemm(dtype: str = "bfloat16"):
    wl = get_workload("gemm")
    problem = wl.validate_problem({**wl.default_problem("triton"), "dtype": dtype}, "triton")
    template = wl.template("triton", problem, H200)
    return wl, problem, template.render(template.gene_space().seeds[0])


def _launches(backend, problem):
    from core.evaluation.aot import workload_launches

    return workload_launches("gemm", backend.name, problem, backend.device)


def _entries(folder: Path) -> set[str]:
    return {p.name for p in (folder / "triton").iterdir()}


def test_compiled_ahead_and_found_again(backend, tmp_path):
    from core.backends import triton_aot

    wl, problem, kernel = _gemm()
    artifact = backend.precompile(backend.compile(kernel, tmp_path), _launches(backend, problem), 1)
    assert f"{len(wl.shapes(problem))} shapes" in artifact.log
    first = _entries(tmp_path)
    assert any(name for name in first)  # Triton filed the compiled kernels
    cubins = list((tmp_path / "triton").rglob("*.cubin"))
    assert cubins and all(c.stat().st_size > 1000 for c in cubins)
    triton_aot.shutdown()  # a fresh compile process: it must find every kernel in the cache
    backend.precompile(backend.compile(kernel, tmp_path), _launches(backend, problem), 1)
    assert _entries(tmp_path) == first


def test_kernel_that_does_not_compile_is_a_compile_error(backend, tmp_path):
    _, problem, kernel = _gemm()
    broken = kernel.__class__(**{**kernel.__dict__, "source": kernel.source.replace("tl.dot(", "tl.dott(", 1)})
    with pytest.raises(CompileError, match="dott"):
        backend.precompile(backend.compile(broken, tmp_path), _launches(backend, problem), 1)
