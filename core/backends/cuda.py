"""Backend ``cuda``: CUDA C compiled by NVRTC (through CuPy) to a cubin for the device's own arch.

Where each half runs:

* ``availability``/``devices`` query the GPUs in a short child process (cached), so the GA process
  never creates a CUDA context and stays safe to fork;
* ``compile`` (GA process, thread pool) calls NVRTC with an explicit ``--gpu-architecture=sm_XY``:
  NVRTC is a plain compiler library and needs no device or context. The cubin and a JSON side file
  (ptxas resource report: registers, shared, spill bytes) are cached by source hash;
* :class:`CudaRuntime` (sandbox only) loads the cubin into a CuPy ``Module`` (unloaded with its last
  kernel), reads the function's own attributes (``num_regs``, ``shared_size_bytes``, ``local_size_bytes``) and launches on
  torch's current stream, so torch inputs, CUDA events and CUDA graphs all see the same stream.

Kernels are header-free CUDA C (bf16/fp16 handled as 16-bit integers with PTX conversions), so
NVRTC needs no include paths and ``nvcc -ptx`` checks the same text on a machine without a GPU.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from core.backends import cache, elf, tensor_map
from core.backends.base import Artifact, Backend, CompileError, DeviceInfo, KernelSource, Runtime
from core.backends.tensor_map import TensorMap
from core.backends.torch_runtime import TorchCudaRuntime


def hopper_features(arch: str) -> bool:
    """Whether a device of ``arch`` (``sm_XY``) has Hopper's thread block clusters, distributed
    shared memory, bulk copies and mbarrier transaction counts (sm_90 on); True when the arch is
    not known (a template then offers them, and a device without them fails the compile, not the GA)."""
    m = re.fullmatch(r"sm_(\d+)a?", arch or "")
    return not m or int(m.group(1)) >= 90


_PROBE = r"""
import json, sys
out = {"devices": [], "error": None}
try:
    import cupy
    from cupy.cuda import runtime
    n = runtime.getDeviceCount()
    versions = {"driver": runtime.driverGetVersion(), "cuda_runtime": runtime.runtimeGetVersion(),
                "cupy": cupy.__version__}
    try:
        from cupy.cuda import nvrtc
        versions["toolkit"] = "nvrtc-%d.%d" % nvrtc.getVersion()
    except Exception as exc:
        versions["toolkit"] = "nvrtc-missing"
    from importlib import metadata
    for pkg in ("torch", "triton"):
        try:
            versions[pkg] = metadata.version(pkg)
        except Exception:
            versions[pkg] = None
    for i in range(n):
        p = runtime.getDeviceProperties(i)
        bandwidth = 0.0
        try:  # peak DRAM bandwidth (double data rate); the evaluator flags kernels faster than it
            clk = runtime.deviceGetAttribute(36, i)  # cudaDevAttrMemoryClockRate, kHz
            bus = runtime.deviceGetAttribute(37, i)  # cudaDevAttrGlobalMemoryBusWidth, bits
            bandwidth = clk * 1000.0 * 2 * bus / 8
        except Exception:
            pass
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        out["devices"].append({"index": i, "name": name, "memory_bytes": int(p["totalGlobalMem"]),
            "multiprocessors": int(p["multiProcessorCount"]),
            "shared_mem_per_block": int(p.get("sharedMemPerBlockOptin", p["sharedMemPerBlock"])),
            "registers_per_block": int(p["regsPerBlock"]), "registers_per_thread": 255,
            "max_threads_per_block": int(p["maxThreadsPerBlock"]), "l2_bytes": int(p["l2CacheSize"]),
            "memory_bandwidth": bandwidth, "arch": "sm_%d%d" % (p["major"], p["minor"]), "versions": versions})
    if n == 0:
        out["error"] = "no CUDA device"
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
print(json.dumps(out))
"""


# Header-free element types: (C type, body of ``float to_f(T h)``, body of ``T from_f(float f)``).
# bf16 and fp16 travel as their raw 16 bits and convert with PTX, so NVRTC needs no include path.
SCALAR_TYPES = {
    "bfloat16": ("unsigned short", "return __uint_as_float(((unsigned)h) << 16);",
                 'unsigned short r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r;'),
    "float16": ("unsigned short", 'float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;',
                'unsigned short r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r;'),
    "float32": ("float", "return h;", "return f;"),
}


@functools.lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    """None when the probe found a usable CUDA device, else why not."""
    info = probe()
    if info["error"] or not info["devices"]:
        return f"no usable CUDA device: {info['error'] or 'none found'}"
    return None


def gpu_devices(backend: str) -> list[DeviceInfo]:
    """Every CUDA device the probe found, labelled for ``backend``."""
    return [DeviceInfo(backend=backend, **d) for d in probe()["devices"]]


def probe() -> dict:
    """GPU inventory from a child process: ``{"devices": [...], "error": str | None}``."""
    try:
        res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
        return json.loads(res.stdout.strip().splitlines()[-1])
    except Exception as exc:  # no python output at all: report why
        return {"devices": [], "error": f"device probe failed: {exc}"}


_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "static_shared_bytes": re.compile(r"(\d+) bytes smem"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
    "ptx_edits_applied": re.compile(r"machine_code: (\d+) applied"),  # core/backends/ptx/nvrtc.py
    "ptx_edits_noop": re.compile(r"machine_code: \d+ applied, (\d+) noop"),
    "ptx_edits_refused": re.compile(r"machine_code: \d+ applied, \d+ noop, (\d+) refused"),
}


def parse_ptxas(log: str) -> dict:
    """Resource figures from a ``ptxas -v`` report (missing ones are left out)."""
    out = {}
    for key, rx in _PTXAS.items():
        m = rx.search(log)
        if m:
            out[key] = int(m.group(1))
    if "spill_store_bytes" in out or "spill_load_bytes" in out:
        out["spill_bytes"] = out.get("spill_store_bytes", 0) + out.get("spill_load_bytes", 0)
    return out


def nvrtc_compile(source: str, name: str, options: list[str]) -> tuple[bytes, str]:
    """(cubin, log) through CuPy's NVRTC binding; CompileError with the log on failure. A source
    carrying machine_code edits goes NVRTC -> PTX -> edits -> ptxas (core/backends/ptx/nvrtc.py)."""
    from core.backends.ptx import carry, nvrtc as edited
    if carry.carried(source):
        return edited.compile_edited(source, name, options, carry.carried(source))
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            raise CompileError((log or str(exc))[-8000:]) from None
        return nvrtc.getCUBIN(prog), nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


# ---- arch-specific targets (sm_90a: wgmma, setmaxnreg) ---------------------------------------------

def arch_options(device_arch: str, flags: tuple[str, ...]) -> list[str]:
    """NVRTC options: ``--gpu-architecture=<device arch>`` then ``flags``, unless ``flags`` name the
    device's arch-specific target themselves (``--gpu-architecture=sm_90a`` on an sm_90 device, for
    wgmma and setmaxnreg); CompileError when they name another device's."""
    named = [f.split("=", 1)[1] for f in flags if f.startswith("--gpu-architecture=")]
    if not named:
        return [f"--gpu-architecture={device_arch}", *flags]
    if any(a not in (device_arch, device_arch + "a") for a in named):
        raise CompileError(f"the kernel is built for {', '.join(named)}, which this {device_arch} device cannot run")
    return list(flags)


class TorchGpuBackend(Backend):
    """What the backends whose kernels run on this host's CUDA GPUs on torch tensors share (cuda,
    triton): the device kind, arrays, dtypes, sticky errors and the devices."""

    device_kind = "gpu"
    arrays = "torch"
    dtypes = ("bfloat16", "float16", "float32")
    sticky_errors = True

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        return gpu_devices(cls.name)


class CudaBackend(TorchGpuBackend):
    """CUDA C through NVRTC; see the module docstring for what runs where."""

    name = "cuda"
    title = "CUDA C"
    language = "cuda"
    source_suffix = ".cu"
    entry_kind = "an `extern \"C\" __global__` CUDA kernel, compiled by NVRTC"
    ptx_edits, line_comment = True, "//"  # the machine_code gene group (core/backends/ptx, docs/machine-code.md)

    @classmethod
    def availability(cls) -> str | None:
        try:
            import cupy  # noqa: F401
        except Exception as exc:
            return f"cupy cannot be imported ({type(exc).__name__}: {exc})"
        return gpu_unavailable_reason()

    def compile(self, kernel: KernelSource, cache_dir: Path) -> Artifact:
        """``<key>.cubin`` and ``<key>.json`` in ``cache_dir`` (absolute paths), used from the cache
        only when ``<key>.sha256`` beside them matches both (else deleted and rebuilt)."""
        key = self.cache_key(kernel)
        cache_dir = Path(cache_dir).absolute()
        with cache.key_lock(cache_dir, key):
            artifact = self._compile(kernel, cache_dir, key)
        cache.note_write(cache_dir)  # capped at ABEBOT_CACHE_BYTES, least recently used first
        return artifact

    def _compile(self, kernel: KernelSource, cache_dir: Path, key: str) -> Artifact:
        cubin, meta = cache_dir / f"{key}.cubin", cache_dir / f"{key}.json"
        rejected = ""
        if cubin.exists() or meta.exists():
            why = cache.mismatch(cache_dir, key, [cubin, meta])
            if why is None:
                try:
                    info = json.loads(meta.read_text())
                    cache.touch(cubin)
                    return self._artifact(kernel, key, cubin, info["resources"], 0.0, info["log"])
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    why = f"{meta.name} unreadable ({type(exc).__name__})"
            rejected = cache.discard(cache_dir, key, [cubin, meta], why) + "\n"
        options = arch_options(self.device.arch, kernel.flags)
        t0 = time.perf_counter()
        try:
            data, log = nvrtc_compile(kernel.source, f"{key}.cu", options + ["--ptxas-options=-v"])
        except CompileError as exc:
            if "ptxas-options" not in str(exc):
                raise
            data, log = nvrtc_compile(kernel.source, f"{key}.cu", options)  # older NVRTC: no -v
        seconds = time.perf_counter() - t0
        resources = {**kernel.resources, **parse_ptxas(log)}
        cache_dir.mkdir(parents=True, exist_ok=True)
        meta_bytes = json.dumps({"resources": resources, "log": log[-4000:]}).encode()
        cache.atomic_write(cubin, data)
        cache.atomic_write(meta, meta_bytes)
        cache.record(cache_dir, key, {cubin.name: hashlib.sha256(data).hexdigest(),
                                      meta.name: hashlib.sha256(meta_bytes).hexdigest()})
        return self._artifact(kernel, key, cubin, resources, seconds, rejected + log)

    @staticmethod
    def _artifact(kernel: KernelSource, key: str, path: Path, resources: dict, seconds: float, log: str) -> Artifact:
        return Artifact(backend="cuda", source_hash=key, entry=kernel.entry, path=str(path), launch=dict(kernel.launch),
                        resources=dict(resources), compile_seconds=seconds, log=log[-4000:],
                        code_hash=elf.code_hash(path, kernel.launch, kernel.entry))

    def make_runtime(self) -> Runtime:
        return CudaRuntime(self.device.index)


class CudaKernel:
    """A loaded CUDA function plus its template launch parameters and measured resources."""

    def __init__(self, function: Any, artifact: Artifact):
        self.function = function
        self.launch_params = dict(artifact.launch)
        self.resources = dict(artifact.resources)
        self._streams: dict[int, Any] = {}

    def bind(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> Callable[[], None]:
        """A zero-argument launch: torch tensors become pointers, ints int32, floats float32, once.
        Each call launches on torch's current stream (a graph capture runs on a stream of its own)."""
        import cupy
        import numpy as np

        from core.backends.torch_runtime import current_stream_ptr

        conv = []
        for a in args:
            if hasattr(a, "data_ptr"):
                conv.append(np.uint64(a.data_ptr()))
            elif isinstance(a, bool) or isinstance(a, int):
                conv.append(np.int32(a))
            elif isinstance(a, float):
                conv.append(np.float32(a))
            else:
                conv.append(a)
        grid, block, conv = tuple(grid), tuple(block), tuple(conv)
        if any(isinstance(a, TensorMap) for a in conv):  # by-value tensor maps: packed for cuLaunchKernel
            return self._bind_packed(grid, block, conv, shared_mem)

        def launch() -> None:
            ptr = current_stream_ptr()
            stream = self._streams.get(ptr)
            if stream is None:
                stream = self._streams[ptr] = cupy.cuda.ExternalStream(ptr)
            with stream:
                self.function(grid, block, conv, shared_mem=shared_mem)

        return launch

    def _bind_packed(self, grid: tuple, block: tuple, args: tuple, shared_mem: int) -> Callable[[], None]:
        from core.backends.torch_runtime import current_stream_ptr

        go = tensor_map.launcher(self.function.ptr, grid, block, args, shared_mem)
        return lambda: go(current_stream_ptr())

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        """Launch once on torch's current stream."""
        self.bind(grid, block, args, shared_mem)()


# cuFuncGetAttribute's CUfunction_attribute values (cuda.h).
_FUNC_SHARED_SIZE_BYTES, _FUNC_LOCAL_SIZE_BYTES, _FUNC_NUM_REGS, _FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 1, 3, 4, 8


class CudaRuntime(TorchCudaRuntime):
    """Sandbox half of the ``cuda`` backend; timing and synchronisation come from :class:`TorchCudaRuntime`."""

    def load(self, artifact: Artifact) -> CudaKernel:
        """Load the cubin; resources are replaced by the function's own attributes.

        The cubin is loaded into a ``cupy.cuda.function.Module`` of its own, not a ``cupy.RawModule``:
        CuPy memoizes a RawModule's module per path and device for the life of the process, so every
        candidate's cubin stayed loaded (issue 36). A plain Module is unloaded (``cuModuleUnload``)
        when the kernel, its function and every launch bound from it are gone."""
        import cupy
        from cupy.cuda import driver
        from cupy.cuda.function import Module

        cupy.cuda.Device(self.device_index).use()
        module = Module()
        module.load_file(artifact.path)
        fn = module.get_function(artifact.entry)  # holds the module: unloaded after the last reference

        def attribute(which: int) -> int:
            return int(driver.funcGetAttribute(which, fn.ptr))

        static, dyn = attribute(_FUNC_SHARED_SIZE_BYTES), int(artifact.launch.get("dynamic_shared_bytes", 0))
        if dyn and dyn + static > 48 * 1024:  # past 48 KB in all, a block opts in to its dynamic part
            driver.funcSetAttribute(fn.ptr, _FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn)
        k = CudaKernel(fn, artifact)
        k.resources.update({"registers": attribute(_FUNC_NUM_REGS), "static_shared_bytes": static,
                            "local_bytes": attribute(_FUNC_LOCAL_SIZE_BYTES), "shared_bytes": static + dyn})
        k.module = module
        return k
