"""CPU-side checks of the GPU templates (CI has no GPU).

* every module imports without a GPU, and the GPU backends say why they are unavailable;
* every gene group changes the rendered source;
* CUDA C of sampled genomes (seeded, every dtype) compiles with ``nvcc -ptx -arch=sm_90``;
* Triton modules of sampled genomes give correct results under ``TRITON_INTERPRET=1`` at tiny
  sizes, in a subprocess (the variable must be set before triton is imported). The interpreter
  computes bf16 wrongly on NumPy (no bf16 type), so it checks float16 and float32.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.backends.base import DeviceInfo
from core.genome import GROUPS
from core.workloads import get_workload

ROOT = Path(__file__).resolve().parents[1]
H200 = DeviceInfo("cuda", 0, "NVIDIA H200 (simulated)", 150 << 30, 132, 232448, 65536, 255, 1024, 60 << 20, "sm_90", {})
CASES = [("gemm", {}), ("rmsnorm", {}), ("rmsnorm", {"residual": True})]


def template(workload: str, backend: str, extra: dict, dtype: str = "bfloat16"):
    wl = get_workload(workload)
    problem = wl.validate_problem({"dtype": dtype, **extra}, backend)
    return wl.template(backend, problem, DeviceInfo(backend, *list(H200.__dict__.values())[1:]))


def sample(tpl, n: int, seed: int):
    space = tpl.gene_space()
    rng = random.Random(seed)
    return space.seed_genomes() + [space.random(rng) for _ in range(n)]


def test_gpu_modules_import_and_backends_report_why():
    code = ("import sys; from core.backends import availability;"
            "import core.backends.cuda, core.backends.triton, core.workloads.gpu_harness;"
            "import core.workloads.gemm.cuda, core.workloads.gemm.triton, core.workloads.rmsnorm.cuda, core.workloads.rmsnorm.triton;"
            "assert 'cupy' not in sys.modules and 'torch' not in sys.modules, 'GPU packages imported at module level';"
            "print(repr(availability('cuda'))); print(repr(availability('triton')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    reasons = out.stdout.strip().splitlines()
    has_gpu = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi"], capture_output=True).returncode == 0
    if not has_gpu:
        for reason in reasons:
            assert reason != "None" and len(reason) > 10, reasons


@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("workload,extra", CASES)
def test_every_gene_group_changes_the_source(workload, extra, backend):
    tpl = template(workload, backend, extra)
    space = tpl.gene_space()
    base = space.seed_genomes()[0]
    src = tpl.render(base).source
    rng = random.Random(1)
    for group in GROUPS:
        changed = False
        for gene in space.groups[group]:
            for _ in range(30):
                child = base.replace(group, gene.name, gene.mutate(base[group][gene.name], rng))
                if space.validate(child) is None and tpl.render(child).source != src:
                    changed = True
                    break
            if changed:
                break
        assert changed, f"{workload}/{backend}: no gene of {group} changes the source"


def test_resource_limits_reject_before_compiling():
    tpl = template("gemm", "cuda", {})
    space = tpl.gene_space()
    g = space.seed_genomes()[0]
    k = tpl.render(g)
    assert tpl.resource_violation(k) is None
    big = type(k)(k.backend, k.source, k.entry, k.flags, k.launch, {**k.resources, "shared_bytes": 10 << 20})
    assert "shared memory" in tpl.resource_violation(big)


NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None)


@pytest.mark.skipif(NVCC is None, reason="nvcc not installed: CUDA C sources cannot be compiled here")
@pytest.mark.parametrize("workload,extra,dtype", [("gemm", {}, "bfloat16"), ("gemm", {}, "float16"), ("gemm", {}, "float32"),
                                                  ("rmsnorm", {}, "bfloat16"), ("rmsnorm", {"residual": True}, "float16"),
                                                  ("rmsnorm", {"residual": True}, "float32")])
def test_cuda_sources_compile_with_nvcc(tmp_path, workload, extra, dtype):
    tpl = template(workload, "cuda", extra, dtype)
    files = []
    for g in sample(tpl, 3 if dtype != "bfloat16" else 6, seed=hash((workload, dtype)) % 1000):
        k = tpl.render(g)
        f = tmp_path / f"{g.hash}.cu"
        f.write_text(k.source)
        files.append((f, k))
    procs = [(f, subprocess.Popen([NVCC, "-ptx", "-arch=sm_90", *k.flags, "-o", str(f.with_suffix(".ptx")), str(f)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)) for f, k in files]
    for f, p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"{f.name}: {err[:2000]}"
        ptx = f.with_suffix(".ptx").read_text()
        assert ".entry abebot_" in ptx
        if "USE_MMA 1" in f.read_text():
            assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx


def _have(mod: str) -> bool:
    try:
        __import__(mod)
        return True
    except Exception:
        return False


INTERP = textwrap.dedent(r'''
    import importlib.util, json, os, random, sys
    import torch
    import triton.runtime.interpreter as _I
    _orig = _I._patch_lang_tensor
    def _patched(tensor, scope):  # NumPy >= 2.4 refuses int() of a 1-element array; the interpreter does that for loop bounds
        _orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    _I._patch_lang_tensor = _patched
    sys.path.insert(0, os.getcwd())
    from core.backends.base import DeviceInfo
    from core.workloads import get_workload
    workload, extra, dtype, n, seed, tmp = json.loads(sys.argv[1])
    dev = DeviceInfo("triton", 0, "H200", 150 << 30, 132, 232448, 65536, 255, 1024, 60 << 20, "sm_90", {})
    wl = get_workload(workload)
    prob = wl.validate_problem({"dtype": dtype, **extra}, "triton")
    t = wl.template("triton", prob, dev)
    space = t.gene_space()
    rng = random.Random(seed)
    genomes = space.seed_genomes() + [space.random(rng) for _ in range(n)]
    dt = getattr(torch, dtype)
    tol = 5e-2 if dtype == "float16" else 1e-4
    for i, g in enumerate(genomes):
        path = os.path.join(tmp, f"m_{g.hash}.py")
        open(path, "w").write(t.render(g).source)
        spec = importlib.util.spec_from_file_location(f"m{i}", path)
        mod = importlib.util.module_from_spec(spec); sys.modules[f"m{i}"] = mod; spec.loader.exec_module(mod)
        torch.manual_seed(i)
        if workload == "gemm":
            for M, N, K in ((67, 53, 41), (40, 72, 96)):
                a = (torch.randn(M, K) / K ** 0.25).to(dt); b = (torch.randn(K, N) / K ** 0.25).to(dt)
                c = torch.full((M, N), float("nan"), dtype=dt)
                ws = torch.empty(max(1, mod.workspace_bytes(M, N, K) // 4))
                mod.launch(a, b, c, ws)
                ref = a.double() @ b.double()
                err = float((c.double() - ref).abs().max())
                assert err < tol * 4, (g.to_json(), (M, N, K), err)
        else:
            for R, C in ((5, 37), (3, 64)):
                x = torch.randn(R, C).to(dt); w = (1 + 0.5 * torch.randn(C)).to(dt)
                o = torch.full((R, C), float("nan"), dtype=dt)
                r = torch.randn(R, C).to(dt) if prob["residual"] else None
                r0 = r.clone() if r is not None else None
                mod.launch(x, w, o, r, 1e-6)
                xx = x.double() + (r0.double() if r0 is not None else 0)
                ref = xx / (xx.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double()
                err = float((o.double() - ref).abs().max())
                if r is not None:
                    err = max(err, float((r.double() - xx).abs().max()))
                assert err < tol * 2, (g.to_json(), (R, C), err)
    print("checked", len(genomes))
''')


@pytest.mark.skipif(not (_have("triton") and _have("torch")), reason="triton and torch are needed for TRITON_INTERPRET")
@pytest.mark.parametrize("workload,extra,dtype,n", [("gemm", {}, "float16", 6), ("gemm", {}, "float32", 2),
                                                    ("rmsnorm", {}, "float16", 6), ("rmsnorm", {"residual": True}, "float32", 4)])
def test_triton_kernels_correct_under_interpreter(tmp_path, workload, extra, dtype, n):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    arg = json.dumps([workload, extra, dtype, n, 3, str(tmp_path)])
    out = subprocess.run([sys.executable, "-c", INTERP, arg], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    assert "checked" in out.stdout


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
    import json
    import os
    import subprocess
    import sys

    from core.backends import cuda
    from core.backends.base import DeviceInfo

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
    assert dev.memory_bandwidth == 2619000 * 1000.0 * 2 * 6144 / 8  # double data rate x bus width
