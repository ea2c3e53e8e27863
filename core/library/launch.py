"""A CUDA C kernel launch with its arguments packed once: ``cuLaunchKernel`` through ctypes.

The ``cuda`` backend's loaded kernel binds a launch through CuPy: every call converts its
arguments, enters a CuPy stream context and goes through CuPy's ``Function.__call__`` -- the
~25 us of host time per call measured on the H200 (issue 28). A library call needs the same launch
at a few microseconds, so :func:`fast_launcher` wraps such a kernel: its ``bind(grid, block, args,
shared_mem)`` (the signature the CUDA templates call) packs the arguments into a ``void *[]`` once,
and each call is one ctypes call of the driver's ``cuLaunchKernel`` on torch's current stream
(read with torch's C accessor, so a CUDA graph capture records it on its capture stream).

Why this over the alternatives the issue names: CuPy's ``RawKernel`` with cached arguments still
goes through ``Function.__call__``'s per-call argument handling; a compiled C extension would need a
compiler and Python headers at install time on every user's machine; ctypes and the driver library
are always there where CUDA is. Arguments are converted as the backend's own ``bind`` converts them:
tensors to 64-bit pointers, ints to int32, floats to float32, numpy scalars by their bytes.

Only a kernel object with a ``function`` whose ``ptr`` is a ``CUfunction`` and a ``bind`` is
wrapped (the ``cuda`` backend's); anything else is returned as it is.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any, Callable


def fast_launcher(kernel: Any) -> Any:
    """``kernel`` wrapped in :class:`FastCudaKernel` where it is a CUDA function, else ``kernel``."""
    fn = getattr(kernel, "function", None)
    if isinstance(getattr(fn, "ptr", None), int) and callable(getattr(kernel, "bind", None)):
        return FastCudaKernel(kernel)
    return kernel


class FastCudaKernel:
    """A loaded CUDA kernel whose :meth:`bind` launches through ``cuLaunchKernel`` with the arguments
    packed once; every other attribute is the wrapped kernel's (``launch_params``, ``resources``)."""

    def __init__(self, kernel: Any):
        self._kernel = kernel

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)

    def bind(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> Callable[[], None]:
        """A zero-argument launch of ``grid`` x ``block`` on ``args`` (see the module docstring)."""
        import torch

        values = [_packed(a) for a in args]
        array = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        params = ctypes.cast(array, ctypes.c_void_p)
        g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
        b = tuple(int(x) for x in block) + (1,) * (3 - len(block))
        func = ctypes.c_void_p(int(self._kernel.function.ptr))
        launch, stream = _cu_launch_kernel(), _stream_reader()
        device = torch.cuda.current_device()
        shared = int(shared_mem)

        def run() -> None:
            rc = launch(func, g[0], g[1], g[2], b[0], b[1], b[2], shared, stream(device), params, None)
            if rc:
                raise RuntimeError(f"cuLaunchKernel failed with CUDA error {rc}")

        run.keep = (values, array, self._kernel)  # type: ignore[attr-defined] -- what the pointers point into
        return run

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        self.bind(grid, block, args, shared_mem)()


def _packed(a: Any) -> Any:
    """One kernel argument as a ctypes value whose address the driver reads."""
    if hasattr(a, "data_ptr"):
        return ctypes.c_uint64(a.data_ptr())
    if isinstance(a, (bool, int)):
        return ctypes.c_int32(int(a))
    if isinstance(a, float):
        return ctypes.c_float(a)
    if hasattr(a, "tobytes") and hasattr(a, "nbytes"):  # a numpy scalar (np.uint64, np.int32...)
        raw = a.tobytes()
        return (ctypes.c_char * len(raw)).from_buffer_copy(raw)
    raise TypeError(f"cannot pass a {type(a).__name__} to a CUDA kernel")


@lru_cache(maxsize=1)
def _cu_launch_kernel() -> Any:
    fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    fn.restype = ctypes.c_int
    return fn


@lru_cache(maxsize=1)
def _stream_reader() -> Callable[[int], int]:
    """``f(device) -> raw handle`` of torch's current stream on ``device`` (torch's C accessor where
    it has one, which costs a fraction of ``torch.cuda.current_stream()``)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream
