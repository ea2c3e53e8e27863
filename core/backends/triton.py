"""Backend ``triton``: genomes render to a Python module holding ``@triton.jit`` kernels and a
``launch(...)`` function that picks the grid and launch options.

Where each half runs:

* ``compile`` (GA process) writes the module into the cache as ``<hash>.py`` and checks that it
  parses; ``precompile`` (GA process) then has the compile processes of
  :mod:`core.backends.triton_aot` compile every launch of the module for the device's target and
  every shape the protocol launches, into Triton's own cache (``<cache_dir>/triton/``, keyed by
  Triton on source, specialisation and options, shared across runs);
* :class:`TritonRuntime` (sandbox) imports the module; its first launch finds the compiled kernel
  in that cache (a kernel the compile processes missed is JIT-compiled there, as before). The
  compiled kernel's registers, spills and shared memory are read from Triton's handle after that
  first launch. A kernel's module, its compiled kernels and their CUDA modules are released once
  the kernel is gone (:func:`release_modules`, at the next load).
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import importlib.util
import itertools
import linecache
import os
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from core.backends import cache
from core.backends.base import Artifact, CompileError, KernelSource, Runtime
from core.backends.cuda import TorchGpuBackend, gpu_unavailable_reason
from core.backends.torch_runtime import TorchCudaRuntime


class TritonBackend(TorchGpuBackend):
    """Triton kernels on a CUDA GPU (see the module docstring for what compiles where)."""

    name = "triton"
    title = "Triton"
    language = "python"
    source_suffix = ".py"
    entry_kind = "a Python module of `@triton.jit` kernels with a `launch(...)` function"
    ptx_edits, line_comment = True, "#"  # the machine_code gene group (core/backends/ptx/triton_hook.py)

    @classmethod
    def load_writes(cls, compile_dir: Path) -> list[str]:
        """Triton's JIT cache (:func:`core.backends.triton_aot.triton_cache_dir`): a kernel the compile
        processes missed is compiled at its first launch, in the sandbox, and filed there."""
        from core.backends.triton_aot import triton_cache_dir

        return [triton_cache_dir(compile_dir)]

    @classmethod
    def availability(cls) -> str | None:
        try:
            from importlib import metadata

            metadata.version("triton")
            metadata.version("torch")
        except Exception as exc:
            return f"triton and torch are needed ({exc})"
        return gpu_unavailable_reason()

    def compile(self, kernel: KernelSource, cache_dir: Path) -> Artifact:
        """``<key>.py`` in ``cache_dir`` (absolute path); a cached module is used only when its bytes
        are the source's and ``<key>.sha256`` beside it matches (else deleted and rewritten)."""
        key = self.cache_key(kernel)
        cache_dir = Path(cache_dir).absolute()
        path = cache_dir / f"{key}.py"
        data = kernel.source.encode()
        t0 = time.perf_counter()
        try:
            compile(kernel.source, str(path), "exec")
        except SyntaxError as exc:
            raise CompileError(f"{exc.__class__.__name__}: {exc}") from None
        with cache.key_lock(cache_dir, key):
            log = self._cached_module(cache_dir, key, path, data)
        cache.note_write(cache_dir)  # the modules capped at ABEBOT_CACHE_BYTES (Triton's own cache is its own)
        return Artifact(backend=self.name, source_hash=key, entry=kernel.entry, path=str(path), launch=dict(kernel.launch),
                        resources=dict(kernel.resources), compile_seconds=time.perf_counter() - t0, log=log)

    @staticmethod
    def _cached_module(cache_dir: Path, key: str, path: Path, data: bytes) -> str:
        """Make ``path`` hold ``data`` with its sidecar; the compile log line."""
        log = "module written; Triton JIT-compiles it at its first launch in the sandbox"
        if path.exists():
            why = cache.mismatch(cache_dir, key, [path])
            if why is None:
                try:
                    why = None if path.read_bytes() == data else f"{path.name} is not the kernel's source"
                except OSError as exc:
                    why = f"{path.name} unreadable ({exc})"
            if why is None:
                cache.touch(path)
                return "cache hit; Triton JIT-compiles it at its first launch in the sandbox"
            log = cache.discard(cache_dir, key, [path], why) + "\n" + log
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache.atomic_write(path, data)
        cache.record(cache_dir, key, {path.name: hashlib.sha256(data).hexdigest()})
        return log

    def precompile(self, artifact: Artifact, launches, workers: int) -> Artifact:
        """Compile every launch of the module for the device's target in the compile processes of
        :mod:`core.backends.triton_aot`; the sandbox's JIT then loads them from Triton's cache."""
        from dataclasses import asdict

        from core.backends import triton_aot

        t0 = time.perf_counter()
        try:
            done = triton_aot.precompile(artifact.path, self.name, launches, asdict(self.device), workers)
        except RuntimeError as exc:
            raise CompileError(str(exc)) from None
        seconds = time.perf_counter() - t0
        log = (f"compiled ahead of time for {self.device.arch}: {done['launches']} shapes in {seconds:.2f} s "
               f"(Triton's cache: {triton_aot.triton_cache_dir(Path(artifact.path).parent)})")
        return dataclasses.replace(artifact, compile_seconds=artifact.compile_seconds + seconds,
                                   log=f"{artifact.log}\n{log}".strip())

    def close(self) -> None:
        from core.backends import triton_aot

        triton_aot.shutdown()

    def make_runtime(self) -> Runtime:
        return TritonRuntime(self.device.index)


class TritonKernel:
    """An imported generated module; calling it forwards to the module's ``launch``.

    ``resources`` gains ``registers``, ``spill_bytes`` and ``shared_bytes`` from Triton's compiled
    handle after the first launch (the JIT compile happens there).
    """

    def __init__(self, module: Any, artifact: Artifact):
        self.module = module
        self.launch_params = dict(artifact.launch)
        self.resources = dict(artifact.resources)
        self.compile_seconds = 0.0
        self._compiled = False

    def __call__(self, *args, **kwargs) -> Any:
        if self._compiled:
            return self.module.launch(*args, **kwargs)
        t0 = time.perf_counter()
        try:
            handle = self.module.launch(*args, **kwargs)
        except Exception as exc:  # the JIT compile happens here: report its failures as compile errors
            if type(exc).__name__ in ("OutOfResources", "PTXASError", "CompilationError", "CompileTimeAssertionFailure"):
                raise CompileError(f"{type(exc).__name__}: {exc}") from None
            raise
        self.compile_seconds = time.perf_counter() - t0
        self._compiled = True
        self.record(handle)
        return handle

    def record(self, handle: Any) -> None:
        if handle is None:
            return
        try:
            self.resources["registers"] = int(handle.n_regs)
            self.resources["spill_bytes"] = int(handle.n_spills) * 4
            self.resources["shared_bytes"] = int(handle.metadata.shared)
            self.resources["threads"] = int(handle.metadata.num_warps) * 32
            edits = getattr(handle.metadata, "abebot_ptx_edits", None) or {}  # core/backends/ptx/triton_hook.py
            self.resources.update({f"ptx_edits_{k}": edits[k] for k in ("applied", "noop", "refused") if k in edits})
        except Exception:  # older/newer handle layouts: keep the template's estimate
            pass


class TritonRuntime(TorchCudaRuntime):
    """Sandbox half of the ``triton`` backend."""

    def load(self, artifact: Artifact) -> TritonKernel:
        """Import the generated module (Triton compiles at the first launch). The modules of kernels
        dropped since the last load are released first, their CUDA modules unloaded."""
        release_modules(self._unload)
        return load_module(artifact)

    def _unload(self, handles: list[int]) -> None:
        """``cuModuleUnload`` each of Triton's module handles, once the device has finished with them;
        none after a failed synchronize (the context is lost, and the sandbox restarts anyway)."""
        try:
            self.synchronize()
        except Exception:
            return
        unload = _cu_module_unload()
        for handle in handles:
            unload(ctypes.c_void_p(handle))


class InterpreterRuntime(Runtime):
    """Triton kernels under ``TRITON_INTERPRET=1``: torch tensors on the CPU, timed by the wall
    clock. For checking templates on a machine without a GPU (the conformance suite); its
    timings say nothing about a GPU."""

    def __init__(self):
        from core.backends.torch_arrays import TorchArrays

        if os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("set TRITON_INTERPRET=1 before triton is imported to use the interpreter")
        self.arrays = TorchArrays("cpu")

    def load(self, artifact: Artifact) -> TritonKernel:
        release_modules()
        return load_module(artifact)

    def synchronize(self) -> None:
        """Interpreted launches are synchronous."""

    def time(self, fn, reps: int, warmup: int, before=None, after=None, method=None) -> list[float]:
        out = []
        for i in range(warmup + reps):
            if before is not None:
                before(i)
            t0 = time.perf_counter()
            fn(i)
            t1 = time.perf_counter()
            if after is not None:
                after(i)
            if i >= warmup:
                out.append(t1 - t0)
        return out


_counter = itertools.count(1)


def load_module(artifact: Artifact) -> TritonKernel:
    """Import a generated module under a unique name (Triton's JIT looks it up for its globals)."""
    from core.backends.triton_aot import triton_cache_dir

    os.environ.setdefault("TRITON_CACHE_DIR", triton_cache_dir(Path(artifact.path).parent))
    name = f"abebot_triton_{artifact.source_hash}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, artifact.path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    from core.backends.ptx import carry, triton_hook
    edits = carry.carried(Path(artifact.path).read_text())
    if edits:  # machine_code edits, applied to Triton's PTX at each compile (core/backends/ptx/triton_hook.py)
        triton_hook.attach(module, edits)
    kernel = TritonKernel(module, artifact)
    # Once the kernel is gone its module is released at the next load (release_modules), not here:
    # a finalizer runs wherever the last reference drops, perhaps with launches still in flight.
    weakref.finalize(kernel, _dropped.append, (name, artifact.path)).atexit = False
    return kernel


_dropped: list[tuple[str, str]] = []  # (module name, path) of kernels gone since the last release


def release_modules(unload: Callable[[list[int]], None] | None = None) -> int:
    """Forget the generated modules of every kernel dropped since the last call: their entries in
    ``sys.modules`` and ``linecache``, and the compiled kernels their ``@triton.jit`` functions cache,
    whose CUDA module handles are passed to ``unload`` (None: interpreted, nothing loaded). Returns
    how many modules were released. Without this every candidate's module, its JIT functions and
    Triton's loaded CUDA module stayed in the sandbox for the length of a run (issue 36)."""
    released, handles = 0, []
    while _dropped:
        name, path = _dropped.pop()
        linecache.cache.pop(path, None)
        module = sys.modules.pop(name, None)
        if module is None:
            continue
        released += 1
        for value in list(vars(module).values()):
            for compiled in _forget_compiled(value):
                handle = getattr(compiled, "module", None)
                if handle:
                    handles.append(int(handle))
    if handles and unload is not None:
        unload(handles)
    return released


def _forget_compiled(value: Any) -> list:
    """The compiled kernels a ``@triton.jit`` function (under any autotune/heuristics wrappers) caches,
    its caches emptied; [] for any other value."""
    try:
        from triton.runtime.jit import KernelInterface
    except Exception:
        return []
    found: list = []
    for _ in range(8):  # Autotuner -> Heuristics -> JITFunction: each wrapper's ``fn`` is the next
        if not isinstance(value, KernelInterface):
            break
        caches = getattr(value, "device_caches", None) or getattr(value, "cache", None)
        if isinstance(caches, dict):
            for entry in caches.values():
                table = entry[0] if isinstance(entry, tuple) else entry
                if isinstance(table, dict):
                    found.extend(table.values())
            caches.clear()
        value = getattr(value, "fn", None)
    return found


def _cu_module_unload() -> Callable[[Any], int]:
    fn = ctypes.CDLL("libcuda.so.1").cuModuleUnload
    fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
    return fn
