"""Kernels are unloaded (issue 36, item 1): the C runtime dlcloses a kernel's shared object once
nothing can call into it, so a sandbox's memory mappings and RSS stay flat however many kernels it
loads.

The loads run in a child process (a leak must not stay in pytest's). ``ABEBOT_UNLOAD_KERNELS``
sets how many (default 2,000, a few seconds; 50,000 is the issue's full check).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.backends.c import compiler_command

KERNELS = int(os.environ.get("ABEBOT_UNLOAD_KERNELS", "2000"))
ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not compiler_command(), reason="no C compiler")

# Loads ``count`` copies of one small kernel (copies: the dynamic loader tells objects apart by
# file), each from its own path as a run's kernels are, calls each once, and drops it; reports the
# mappings and RSS after the first 10% and at the end. Each copy is deleted once loaded, so disk use
# stays small too.
_SCRIPT = textwrap.dedent("""
    import json, os, shutil, sys, time
    import numpy as np
    from core.backends.base import Artifact
    from core.backends.c import CRuntime

    so, work, count = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def figures():
        maps = sum(1 for _ in open("/proc/self/maps"))
        rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        return maps, rss

    rt = CRuntime()
    x = np.zeros(4, dtype=np.float32)
    marks = {}
    t0 = time.perf_counter()
    for i in range(count):
        path = os.path.join(work, f"k{i}.so")
        shutil.copyfile(so, path)
        kernel = rt.load(Artifact("c", f"k{i}", "kernel", path, launch={"argtypes": ["ptr", "int"]}))
        kernel(x, i)
        assert x[0] == i, (x[0], i)
        del kernel
        os.unlink(path)
        if i + 1 == max(1, count // 10):
            marks["early"] = figures()
    marks["end"] = figures()
    loader = getattr(rt, "loader", None)  # None before kernels were unloaded
    print(json.dumps({"marks": marks, "seconds": time.perf_counter() - t0,
                      **{k: getattr(loader, k, -1) for k in ("opened", "closed", "pinned")}}))
""")

_KERNEL = "void kernel(float *x, int i) { x[0] = (float)i; }\n"


def _run_loads(tmp_path: Path, count: int) -> dict:
    src = tmp_path / "k.c"
    src.write_text(_KERNEL)
    so = tmp_path / "k.so"
    subprocess.run([*compiler_command(), "-O2", "-fPIC", "-shared", "-o", str(so), str(src)], check=True)
    work = tmp_path / "loads"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", _SCRIPT, str(so), str(work), str(count)], capture_output=True,
                         text=True, env=env, timeout=3600)
    assert res.returncode == 0, res.stderr[-3000:]
    shutil.rmtree(work, ignore_errors=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_loading_many_kernels_keeps_mappings_and_rss_flat(tmp_path):
    out = _run_loads(tmp_path, KERNELS)
    (early_maps, early_rss), (end_maps, end_rss) = out["marks"]["early"], out["marks"]["end"]
    print(f"{KERNELS} kernels in {out['seconds']:.1f} s: mappings {early_maps} -> {end_maps}, "
          f"RSS {early_rss / 2**20:.1f} -> {end_rss / 2**20:.1f} MiB; {out}")
    # Before unloading, every kernel kept ~5 mappings: 2,000 kernels added ~9,000 after the first 200.
    assert end_maps - early_maps < 40, out
    assert end_rss - early_rss < 8 << 20, out
    assert out["closed"] >= KERNELS - 16, out


def test_a_kernel_stays_loaded_while_a_call_bound_from_it_lives(tmp_path):
    from core.backends.base import Artifact
    from core.backends.c import CRuntime
    import numpy as np

    src = tmp_path / "k.c"
    src.write_text(_KERNEL)
    subprocess.run([*compiler_command(), "-O2", "-fPIC", "-shared", "-o", str(tmp_path / "k0.so"), str(src)], check=True)
    for i in range(1, 12):
        shutil.copyfile(tmp_path / "k0.so", tmp_path / f"k{i}.so")
    rt = CRuntime()
    art = lambda i: Artifact("c", f"k{i}", "kernel", str(tmp_path / f"k{i}.so"), launch={"argtypes": ["ptr", "int"]})
    x = np.zeros(4, dtype=np.float32)
    call = rt.load(art(0)).bind(x, 7)  # the kernel object is dropped; the bound call is kept
    for i in range(1, 12):  # more loads than the loader keeps on its own
        rt.load(art(i))(x, i)
    call()  # would crash the process if k0.so had been unmapped
    assert x[0] == 7
    assert rt.loader.closed >= 11 - rt.loader.keep


_TRITON_SCRIPT = textwrap.dedent("""
    import os, sys, json
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from core.backends.base import Artifact
    from core.backends.triton import InterpreterRuntime

    path, count = sys.argv[1], int(sys.argv[2])
    rt = InterpreterRuntime()
    x = torch.zeros(8)
    for i in range(count):
        kernel = rt.load(Artifact("triton", f"m{i}", "launch", path))
        kernel(x)
        del kernel
    live = [n for n in sys.modules if n.startswith("abebot_triton_")]
    print(json.dumps({"live": len(live), "sum": float(x.sum())}))
""")

_TRITON_MODULE = '''import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1.0, mask=i < n)


def launch(x):
    _add_one[(1,)](x, x.numel(), BLOCK=16)
'''


def test_a_dropped_triton_kernel_leaves_no_module_behind(tmp_path):
    pytest.importorskip("triton")
    pytest.importorskip("torch")
    path = tmp_path / "m.py"
    path.write_text(_TRITON_MODULE)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    res = subprocess.run([sys.executable, "-c", _TRITON_SCRIPT, str(path), "20"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["sum"] == 8 * 20  # every load ran
    assert out["live"] <= 1, out  # before: one module per load, kept for good


def test_the_evaluators_sandbox_keeps_only_its_most_recent_kernels_mapped(tmp_path):
    """Through the whole protocol (load, verify, time, stability, memory), nothing keeps a finished
    candidate's kernel: the sandbox maps no more than the loader's most recent few."""
    import dataclasses
    import random

    from core.backends import availability
    from core.backends.c_loader import KEEP_LOADED
    from core.config import RunConfig
    from core.evaluation.evaluator import Evaluator

    if availability("c"):
        pytest.skip(availability("c"))
    config = RunConfig.from_dict({"workload": "gemm", "backend": "c", "problem": {"m": 32, "n": 24, "k": 16},
                                  "timeout_s": 20.0, "stability_launches": 2, "seed": 1})
    ev = Evaluator(config, tmp_path / ".cache", log=lambda line: None, log_path=tmp_path / "sandbox.log",
                   timing_target_s=0.005)
    ev.start()
    try:
        space = ev.template.gene_space()
        genome = (space.seed_genomes() or [space.random(random.Random(0))])[0]
        seed = ev.template.render(genome)
        count = KEEP_LOADED + 12
        # An exported function of its own makes each a different object (twins are measured once).
        sources = [dataclasses.replace(seed, source=f"{seed.source}\nint abebot_candidate_{i}(void) {{ return {i}; }}\n")
                   for i in range(count)]
        results = ev.evaluate_sources(sources)
        assert [r.status for r in results] == ["ok"] * count, [r.cause for r in results]
        [box] = ev.sandbox.sandboxes.values()
        maps = Path(f"/proc/{box.info['pid']}/maps").read_text()
    finally:
        ev.close()
    mapped = {line.split()[-1] for line in maps.splitlines() if str(tmp_path) in line and line.endswith(".so")}
    assert len(mapped) <= KEEP_LOADED + 1, sorted(mapped)  # before: every one of them, for good


def test_a_cuda_kernels_module_is_unloaded_with_its_last_reference(monkeypatch):
    """Without a GPU: CuPy replaced by a stand-in that records loads and unloads (as CuPy's Module
    unloads in its destructor). What is checked is that the runtime loads each cubin into a module of
    its own, not CuPy's per-path memo, and keeps nothing once the kernel is dropped."""
    import sys
    import types

    from core.backends.base import Artifact
    from core.backends.cuda import CudaRuntime

    loaded: set[str] = set()
    attrs = {1: 1024, 3: 0, 4: 40}

    class Module:
        def load_file(self, path):
            self.path = path
            loaded.add(path)

        def get_function(self, name):
            return types.SimpleNamespace(ptr=7, module=self, name=name)

        def __del__(self):
            loaded.discard(getattr(self, "path", None))

    set_calls = []
    driver = types.SimpleNamespace(funcGetAttribute=lambda which, ptr: attrs[which],
                                   funcSetAttribute=lambda ptr, which, value: set_calls.append((which, value)))
    cuda = types.SimpleNamespace(Device=lambda i: types.SimpleNamespace(use=lambda: None), driver=driver,
                                 function=types.SimpleNamespace(Module=Module))
    cupy = types.SimpleNamespace(cuda=cuda)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.function", cuda.function)
    runtime = CudaRuntime.__new__(CudaRuntime)  # no torch CUDA device here
    runtime.device_index = 0
    art = Artifact("cuda", "k", "abebot_k", "/cache/k.cubin", launch={"dynamic_shared_bytes": 64 * 1024})
    kernel = runtime.load(art)
    assert loaded == {"/cache/k.cubin"}
    assert kernel.resources["registers"] == 40 and kernel.resources["shared_bytes"] == 1024 + 64 * 1024
    assert set_calls == [(8, 64 * 1024)]  # past 48 KB in all: the block opts in to its dynamic shared memory
    del kernel
    assert loaded == set()
