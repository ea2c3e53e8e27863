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

A launch bound this way is a :class:`SlotLaunch`: its pointer arguments can be replaced before a
call, so the dispatcher binds once per call shape and sets the activations' addresses per call
(:class:`core.library.loader.Loaded`). The C backend's kernels get the same treatment
(:class:`SlotCKernel`: one ctypes call on an argument list whose addresses are replaced). Only a
kernel object with a ``bind`` and a ``function`` that is a ``CUfunction`` (the ``cuda`` backend's)
or a ctypes function (the ``c`` backend's) is wrapped; anything else (Triton's) is returned as it
is, and its launches are cached per tensor address instead.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Any, Callable


def fast_launcher(kernel: Any) -> Any:
    """``kernel`` wrapped so that its launches take new pointers per call: a CUDA C kernel in
    :class:`FastCudaKernel`, a C kernel (a ctypes function) in :class:`SlotCKernel`; anything else
    (a Triton kernel) as it is."""
    fn = getattr(kernel, "function", None)
    if not callable(getattr(kernel, "bind", None)):
        return kernel
    if isinstance(getattr(fn, "ptr", None), int):
        return FastCudaKernel(kernel)
    if isinstance(fn, ctypes._CFuncPtr):
        return SlotCKernel(kernel)
    return kernel


class SlotLaunch:
    """A bound launch whose pointer arguments can be replaced before a call: ``pointers`` lists the
    (position, address) of every pointer argument as bound; :meth:`set_pointer` replaces one."""

    pointers: list[tuple[int, int]]

    def set_pointer(self, position: int, address: int) -> None:
        raise NotImplementedError

    def update(self, positions: tuple, addresses: list) -> None:
        """:meth:`set_pointer` for each of ``positions`` with the matching address."""
        for position, address in zip(positions, addresses):
            self.set_pointer(position, address)


class _Recording:
    """What a wrapped kernel's ``bind`` calls made (:attr:`created`, cleared by the caller)."""

    def __init__(self, kernel: Any):
        self._kernel = kernel
        self.created: list[SlotLaunch] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


class SlotCKernel(_Recording):
    """A C kernel (ctypes) whose ``bind(*args)`` -- arrays become addresses, None NULL, as the C
    backend binds -- returns a :class:`CLaunch`."""

    def bind(self, *args: Any) -> "CLaunch":
        conv = [a.ctypes.data if hasattr(a, "ctypes") else a for a in args]
        pointers = [(i, conv[i]) for i, a in enumerate(args) if hasattr(a, "ctypes")]
        launch = CLaunch(self._kernel.function, conv, pointers)
        self.created.append(launch)
        return launch

    def __call__(self, *args: Any) -> None:
        self.bind(*args)()


class CLaunch(SlotLaunch):
    def __init__(self, function: Any, conv: list, pointers: list[tuple[int, int]]):
        self.function, self.conv, self.pointers = function, conv, pointers

    def set_pointer(self, position: int, address: int) -> None:
        self.conv[position] = address

    def update(self, positions: tuple, addresses: list) -> None:
        conv = self.conv
        for position, address in zip(positions, addresses):
            conv[position] = address

    def __call__(self) -> None:
        self.function(*self.conv)


class FastCudaKernel(_Recording):
    """A loaded CUDA kernel whose :meth:`bind` launches through ``cuLaunchKernel`` with the arguments
    packed once; every other attribute is the wrapped kernel's (``launch_params``, ``resources``)."""

    def bind(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> "CudaLaunch":
        """A zero-argument launch of ``grid`` x ``block`` on ``args`` (see the module docstring)."""
        import torch

        launch = CudaLaunch(int(self._kernel.function.ptr), grid, block, args, int(shared_mem),
                            torch.cuda.current_device())
        launch.keep = self._kernel
        self.created.append(launch)
        return launch

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        self.bind(grid, block, args, shared_mem)()


class CudaLaunch(SlotLaunch):
    """One ``cuLaunchKernel`` on torch's current stream with a packed ``void *[]`` of arguments."""

    def __init__(self, function: int, grid: tuple, block: tuple, args: tuple, shared: int, device: int):
        self.values = [_packed(a) for a in args]
        self.array = (ctypes.c_void_p * max(1, len(self.values)))(*[ctypes.addressof(v) for v in self.values])
        self.pointers = [(i, self.values[i].value) for i, a in enumerate(args) if hasattr(a, "data_ptr")]
        g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
        b = tuple(int(x) for x in block) + (1,) * (3 - len(block))
        self.fixed = (ctypes.c_void_p(function), *g, *b, shared)
        self.params = ctypes.cast(self.array, ctypes.c_void_p)
        self.device = device
        self._launch, self._stream = _cu_launch_kernel(), _stream_reader()

    def set_pointer(self, position: int, address: int) -> None:
        self.values[position].value = address

    def update(self, positions: tuple, addresses: list) -> None:
        values = self.values
        for position, address in zip(positions, addresses):
            values[position].value = address

    def __call__(self) -> None:
        rc = self._launch(*self.fixed, self._stream(self.device), self.params, None)
        if rc:
            raise RuntimeError(f"cuLaunchKernel failed with CUDA error {rc}")


def _packed(a: Any) -> Any:
    """One kernel argument as a ctypes value whose address the driver reads."""
    if hasattr(a, "data_ptr"):
        return ctypes.c_uint64(a.data_ptr())
    if isinstance(a, (bool, int)):
        return ctypes.c_int32(int(a))
    if isinstance(a, float):
        return ctypes.c_float(a)
    if isinstance(getattr(getattr(a, "data", None), "ptr", None), int):  # a CuPy array: its device pointer
        return ctypes.c_uint64(a.data.ptr)
    if hasattr(a, "tobytes") and getattr(a, "shape", None) == ():  # a numpy scalar (np.uint64, np.int32...)
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
