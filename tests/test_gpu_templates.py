"""CPU-side checks of the GPU backends and templates (CI has no GPU).

* every GPU module -- backends, the evaluation package, every workload's templates, taken from
  the registry -- imports without a GPU and without importing a GPU package, and the GPU backends
  say why they are unavailable;
* a static resource estimate beyond the device rejects a kernel before it is compiled;
* the GEMM template's tensor-core genomes emit ``mma``/``ldmatrix`` (``nvcc -ptx``, when installed);
* the device probe yields a full :class:`DeviceInfo` against a stand-in cupy runtime.

What every template must do (gene groups change the source, CUDA C compiles with ``nvcc``,
Triton kernels verify under ``TRITON_INTERPRET=1`` through the generic harness, the exported
script) is in tests/test_conformance.py, for every registered workload.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.backends.base import DeviceInfo
from core.workloads import WORKLOADS, get_workload

ROOT = Path(__file__).resolve().parents[1]
H200 = DeviceInfo(backend="cuda", index=0, name="NVIDIA H200 (simulated)", memory_bytes=150 << 30, multiprocessors=132,
                  shared_mem_per_block=232448, registers_per_block=65536, registers_per_thread=255,
                  max_threads_per_block=1024, l2_bytes=60 << 20, memory_bandwidth=4.8e12, arch="sm_90")
NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)
GPU_PACKAGES = ("cupy", "torch", "triton")


def template(workload: str, backend: str, problem: dict | None = None):
    wl = get_workload(workload)
    prob = wl.validate_problem(problem or {}, backend)
    return wl.template(backend, prob, dataclasses.replace(H200, backend=backend))


def _has_gpu() -> bool:
    return bool(shutil.which("nvidia-smi")) and subprocess.run(["nvidia-smi"], capture_output=True).returncode == 0


def test_gpu_modules_import_without_a_gpu_and_backends_report_why():
    modules = ["core.backends.cuda", "core.backends.triton", "core.backends.torch_runtime", "core.backends.torch_arrays",
               "core.evaluation.protocol", "core.evaluation.harness", "core.evaluation.standalone", "core.evaluation.evaluator"]
    for name in WORKLOADS:  # every template module of every registered workload
        modules += list(get_workload(name).templates.values())
    code = ("import sys; from core.backends import availability\n"
            f"for m in {modules!r}: __import__(m)\n"
            f"loaded = [p for p in {GPU_PACKAGES!r} if p in sys.modules]\n"
            "assert not loaded, f'GPU packages imported at module level: {loaded}'\n"
            "print(repr(availability('cuda'))); print(repr(availability('triton')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    reasons = out.stdout.strip().splitlines()
    assert len(reasons) == 2
    if not _has_gpu():
        for reason in reasons:
            assert reason != "None" and len(reason) > 10, reasons


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_resource_limits_reject_before_compiling(backend):
    tpl = template("gemm", backend)
    k = tpl.render(tpl.gene_space().seed_genomes()[0])
    assert tpl.resource_violation(k) is None
    big = dataclasses.replace(k, resources={**k.resources, "shared_bytes": 10 << 20})
    assert "shared memory" in tpl.resource_violation(big)
    many = dataclasses.replace(k, resources={**k.resources, "threads": 2048})
    assert "threads per block" in tpl.resource_violation(many)
    regs = dataclasses.replace(k, resources={**k.resources, "registers": 255, "threads": 1024})
    assert "registers" in tpl.resource_violation(regs)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed: CUDA C sources cannot be compiled here")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gemm_tensor_core_genomes_emit_mma_and_ldmatrix(tmp_path, dtype):
    tpl = template("gemm", "cuda", {"dtype": dtype})
    seed = tpl.gene_space().seed_genomes()[0]
    assert seed["register_allocation"]["regs"]["math"] == "mma"
    kernel = tpl.render(seed)
    assert "USE_MMA 1" in kernel.source
    src = tmp_path / "gemm.cu"
    src.write_text(kernel.source)
    res = subprocess.run([NVCC, "-ptx", "-arch=sm_90", *kernel.flags, "-o", str(tmp_path / "gemm.ptx"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[:2000]
    ptx = (tmp_path / "gemm.ptx").read_text()
    assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx


FAKE_CUPY_RUNTIME = '''
class runtime:
    getDeviceCount = staticmethod(lambda: 1)
    driverGetVersion = staticmethod(lambda: 13000)
    runtimeGetVersion = staticmethod(lambda: 13020)
    getDeviceProperties = staticmethod(lambda i: {
        "name": b"Fake H200", "totalGlobalMem": 141 << 30, "multiProcessorCount": 132,
        "sharedMemPerBlockOptin": 232448, "sharedMemPerBlock": 49152, "regsPerBlock": 65536,
        "maxThreadsPerBlock": 1024, "l2CacheSize": 60 << 20, "major": 9, "minor": 0})
    deviceGetAttribute = staticmethod(lambda a, i: {36: 2619000, 37: 6144}[a])  # memory clock kHz, bus bits
class nvrtc:
    getVersion = staticmethod(lambda: (13, 0))
'''


def test_device_probe_fills_limits_and_bandwidth(tmp_path):
    """The probe script, run against a stand-in cupy runtime, yields a full DeviceInfo (CI has no GPU)."""
    from core.backends import cuda

    pkg = tmp_path / "cupy" / "cuda"
    pkg.mkdir(parents=True)
    (tmp_path / "cupy" / "__init__.py").write_text('__version__ = "0-fake"\n')
    (pkg / "__init__.py").write_text(FAKE_CUPY_RUNTIME)
    r = subprocess.run([sys.executable, "-c", cuda._PROBE], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)})
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert info["error"] is None, info
    dev = DeviceInfo(backend="cuda", **info["devices"][0])
    assert dev.arch == "sm_90" and dev.multiprocessors == 132 and dev.shared_mem_per_block == 232448
    assert dev.max_threads_per_block == 1024 and dev.registers_per_block == 65536 and dev.l2_bytes == 60 << 20
    assert dev.memory_bandwidth == 2619000 * 1000.0 * 2 * 6144 / 8  # double data rate x bus width
    assert dev.versions["toolkit"] == "nvrtc-13.0"
