"""Triton ahead of time: a generated module's kernels compiled for the device's target in a pool of
compile processes (GA side), so that the sandbox's first launch finds them in Triton's own cache.

Triton compiles a ``@triton.jit`` function only once it sees the real call: the argument types, the
integers equal to 1 or divisible by 16, the pointers aligned to 16 bytes. A compile process
therefore binds the kernel exactly as the sandbox will -- the workload's tensors of every shape
the protocol launches, the template's ``bind``, handed in by ``core.evaluation.aot`` -- but on CPU tensors of the same sizes and
alignment, with Triton's active driver replaced by one that only names the target (``sm_90``...)
and every launch turned into a compile (``warmup=True``). Triton files the result under a key of
the source, the specialisation, the options and the compiler's version, so the sandbox's JIT,
computing the same key on the GPU tensors, loads the cubin instead of compiling: the compile moves
out of the one sandbox per device into as many processes as the host has cores.

The processes are spawned (they must not inherit a CUDA context) and replaced after
:data:`TASKS_PER_PROCESS` modules, so the modules and Triton's in-memory kernels they accumulate
do not grow for the length of a run.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import re
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TASKS_PER_PROCESS = 200
_lock = threading.Lock()
_pools: dict[tuple, ProcessPoolExecutor] = {}


def target_arch(arch: str) -> int:
    """Triton's integer capability of a DeviceInfo arch ("sm_90a" -> 90)."""
    m = re.search(r"(\d+)", arch or "")
    if not m:
        raise ValueError(f"no compute capability in device arch {arch!r}")
    return int(m.group(1))


def precompile(module_path: str, backend: str, launches, device: dict, workers: int) -> dict:
    """Compile every launch of the module at ``module_path`` that ``launches(load)`` yields (one
    per shape: :func:`core.evaluation.aot.workload_launches`).

    Returns ``{"launches": n, "seconds": s}``; raises RuntimeError with Triton's message when a
    kernel does not compile (the caller reports it as the candidate's compile error).
    """
    cache = triton_cache_dir(Path(module_path).parent)
    result = _pool(workers, cache, target_arch(device.get("arch", ""))).submit(
        _compile_module, module_path, backend, launches, device).result()
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


def triton_cache_dir(compile_dir: Path) -> str:
    """Where Triton files its compiled kernels: ``TRITON_CACHE_DIR`` if the user set it, else
    ``<compile dir>/triton`` (the same rule :func:`core.backends.triton.load_module` applies in the
    sandbox, so both ends use one cache)."""
    return os.environ.get("TRITON_CACHE_DIR") or str(Path(compile_dir).absolute() / "triton")


def shutdown() -> None:
    """Stop every compile process (a run's end; also at interpreter exit)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.shutdown(wait=False, cancel_futures=True)


atexit.register(shutdown)


def _pool(workers: int, cache: str, arch: int) -> ProcessPoolExecutor:
    key = (max(1, workers), cache, arch)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = ProcessPoolExecutor(max_workers=key[0], mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_start_process, initargs=(cache, arch),
                                       max_tasks_per_child=TASKS_PER_PROCESS)
            _pools[key] = pool
        return pool


# ---- inside a compile process -------------------------------------------------------------------

COMPILED: list = []  # in a compile process: the handles the current module's launches compiled


def _start_process(cache: str, arch: int) -> None:
    os.environ["TRITON_CACHE_DIR"] = cache
    try:  # the sandbox times kernels on this host: compiles yield the CPU to it
        os.nice(10)
    except OSError:
        pass
    compile_only(arch)


def compile_only(arch: int) -> None:
    """Make this process's Triton compile for ``GPUTarget("cuda", arch, 32)`` at every launch and
    launch nothing (no GPU needed): each ``kernel[grid](...)`` returns the compiled handle."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    class CompileOnly:
        def get_current_target(self):
            return GPUTarget("cuda", arch, 32)

        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

    driver.set_active(CompileOnly())
    run = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        handle = run(self, *args, grid=grid, warmup=True, **kwargs)
        COMPILED.append(handle)
        return handle

    JITFunction.run = compile_only


def _compile_module(module_path: str, backend: str, launches, device: dict) -> dict:
    import sys

    from core.backends.base import Artifact, CompileError
    from core.backends.triton import load_module, release_modules

    release_modules()  # the previous modules' bookkeeping (they left sys.modules in its finally)
    t0 = time.perf_counter()
    loaded: list = []

    def load():
        loaded.append(load_module(Artifact(backend, "aot", "", module_path)))
        return loaded[-1]

    count = 0
    COMPILED.clear()
    try:
        for shape, launch in launches(load):
            try:
                launch()
            except CompileError as exc:
                return {"error": str(exc)}
            except Exception as exc:  # the module's own launch code failed: the sandbox would fail the same way
                return {"error": f"{type(exc).__name__} while compiling for shape {shape}: {exc}"}
            count += 1
    finally:
        for kernel in loaded:
            sys.modules.pop(kernel.module.__name__, None)
    limit = int(device.get("shared_mem_per_block") or 0)
    for handle in COMPILED:  # the sandbox's load would refuse it: say so here, without a GPU
        shared = int(getattr(handle.metadata, "shared", 0) or 0)
        if limit and shared > limit:
            return {"error": f"OutOfResources: out of resource: shared memory, Required: {shared}, Hardware limit: {limit} "
                             f"(kernel {handle.metadata.name})"}
    COMPILED.clear()
    return {"launches": count, "seconds": time.perf_counter() - t0}
