"""A kernel launch with its arguments packed once, whose pointer arguments are set per call.

The ``cuda`` backend's loaded kernel binds a launch through CuPy: every call converts its
arguments, enters a CuPy stream context and goes through CuPy's ``Function.__call__`` (12-15 us of
host time per call on the H200 host, benchmarks/reports/LIBRARY_H200.md). :func:`fast_launcher`
wraps such a kernel so that its ``bind(grid, block, args, shared_mem)`` (the signature the CUDA
templates call) packs the arguments once into a launch object, and each call only writes the
call's data pointers and calls the driver's ``cuLaunchKernel`` on torch's current stream (read
per call with torch's C accessor, so a CUDA graph capture records it on its capture stream).

Two launch objects do that, with the same interface (``pointers``, ``set_pointer``, ``update``,
a call with no argument, and :func:`caller`):

* the compiled launcher (:mod:`core.library.fast_launch`, a small CPython extension built with
  the system C compiler at first use): one C call writes the pointers and calls
  ``cuLaunchKernel`` through a function pointer -- the default;
* :class:`CudaLaunch`, the same through ctypes (about a microsecond more per call: ctypes converts
  eleven arguments), used where no compiler is available (with one warning) or when asked for
  (``compiled=False``, to compare).

Why this over the alternatives the issue names: CuPy's ``RawKernel`` with cached arguments still
goes through ``Function.__call__``'s per-call argument handling; a torch C++ extension needs
torch's and CUDA's headers and a minute of compiling; the CPython C API needs only a C compiler and
Python's headers, and ctypes remains the fallback. Arguments are converted as the backend's own
``bind`` converts them: tensors to 64-bit pointers, ints to int32, floats to float32, numpy
scalars by their bytes.

:func:`caller` turns a bound launch into the one callable an op's fast path calls with its
tensors (:mod:`core.library.fast_launch_plan`): one source per slot, each written into the
argument positions of its slot, optionally checked for dtype and device (a mismatch raises
:class:`~core.library.fast_launch.LaunchArgumentError` before anything is launched).

The C backend's kernels get the same treatment (:class:`SlotCKernel`: one ctypes call on an
argument list whose addresses are replaced). Only a kernel object with a ``bind`` and a
``function`` that is a ``CUfunction`` (the ``cuda`` backend's) or a ctypes function (the ``c``
backend's) is wrapped; anything else (Triton's) is returned as it is, and its launches are cached
per tensor address instead.
"""
from __future__ import annotations

import ctypes
import struct
from functools import lru_cache
from typing import Any, Callable, Sequence

from core.library import fast_launch
from core.library.fast_launch import LaunchArgumentError


def fast_launcher(kernel: Any, compiled: bool | None = None) -> Any:
    """``kernel`` wrapped so that its launches take new pointers per call: a CUDA C kernel in
    :class:`FastCudaKernel` (``compiled``: None, the compiled launcher where it builds; False,
    ctypes), a C kernel (a ctypes function) in :class:`SlotCKernel`; anything else (a Triton
    kernel) as it is."""
    fn = getattr(kernel, "function", None)
    if not callable(getattr(kernel, "bind", None)):
        return kernel
    if isinstance(getattr(fn, "ptr", None), int):
        return FastCudaKernel(kernel, compiled)
    if isinstance(fn, ctypes._CFuncPtr):
        return SlotCKernel(kernel)
    return kernel


class SlotLaunch:
    """A bound launch whose pointer arguments can be replaced before a call: ``pointers`` lists the
    (position, address) of every pointer argument as bound; :meth:`set_pointer` replaces one."""

    pointers: list[tuple[int, int]]

    def set_pointer(self, position: int, address: int) -> None:
        raise NotImplementedError

    def update(self, positions: Sequence[int], addresses: Sequence[int]) -> None:
        """:meth:`set_pointer` for each of ``positions`` with the matching address."""
        for position, address in zip(positions, addresses):
            self.set_pointer(position, address)

    def __call__(self) -> None:
        raise NotImplementedError


class _Recording:
    """What a wrapped kernel's ``bind`` calls made (:attr:`created`, cleared by the caller)."""

    def __init__(self, kernel: Any):
        self._kernel = kernel
        self.created: list[Any] = []

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

    def update(self, positions: Sequence[int], addresses: Sequence[int]) -> None:
        conv = self.conv
        for position, address in zip(positions, addresses):
            conv[position] = address

    def __call__(self) -> None:
        self.function(*self.conv)


class FastCudaKernel(_Recording):
    """A loaded CUDA kernel whose :meth:`bind` launches through ``cuLaunchKernel`` with the arguments
    packed once; every other attribute is the wrapped kernel's (``launch_params``, ``resources``).
    ``compiled``: None uses the compiled launcher where it builds, False always ctypes."""

    def __init__(self, kernel: Any, compiled: bool | None = None):
        super().__init__(kernel)
        self.compiled = compiled is not False and fast_launch.module() is not None

    def bind(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> Any:
        """A launch of ``grid`` x ``block`` on ``args`` (see the module docstring): the compiled
        launcher's ``Launch``, else a :class:`CudaLaunch`; either is called with no argument."""
        import torch

        device = torch.cuda.current_device()
        if self.compiled:
            launch = compiled_launch(int(self._kernel.function.ptr), grid, block, args, int(shared_mem), device)
        else:
            launch = CudaLaunch(int(self._kernel.function.ptr), grid, block, args, int(shared_mem), device)
        launch.keep = self._kernel
        self.created.append(launch)
        return launch

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        self.bind(grid, block, args, shared_mem)()


def compiled_launch(function: int, grid: tuple, block: tuple, args: tuple, shared: int, device: int) -> Any:
    """The compiled launcher's ``Launch`` of ``function`` on ``args`` (its ``pointers`` set as
    :class:`SlotLaunch`'s), launching on torch's current stream of ``device``."""
    mod = fast_launch.module()
    launch = mod.Launch(_driver_address(), function, _triple(grid), _triple(block), shared,
                        [_arg_bytes(a) for a in args], stream=_stream_reader(), device=device)
    launch.pointers = [(i, _address(a)) for i, a in enumerate(args) if hasattr(a, "data_ptr")]
    return launch


class CudaLaunch(SlotLaunch):
    """One ``cuLaunchKernel`` through ctypes on torch's current stream with a packed ``void *[]`` of
    arguments (the fallback of the compiled launcher)."""

    def __init__(self, function: int, grid: tuple, block: tuple, args: tuple, shared: int, device: int):
        self.values = [_packed(a) for a in args]
        self.array = (ctypes.c_void_p * max(1, len(self.values)))(*[ctypes.addressof(v) for v in self.values])
        self.pointers = [(i, self.values[i].value) for i, a in enumerate(args) if hasattr(a, "data_ptr")]
        self.fixed = (ctypes.c_void_p(function), *_triple(grid), *_triple(block), shared)
        self.params = ctypes.cast(self.array, ctypes.c_void_p)
        self.device = device
        self._launch, self._stream = _cu_launch_kernel(), _stream_reader()

    def set_pointer(self, position: int, address: int) -> None:
        self.values[position].value = address

    def update(self, positions: Sequence[int], addresses: Sequence[int]) -> None:
        values = self.values
        for position, address in zip(positions, addresses):
            values[position].value = address

    def __call__(self) -> None:
        rc = self._launch(*self.fixed, self._stream(self.device), self.params, None)
        if rc:
            raise RuntimeError(f"cuLaunchKernel failed with CUDA error {rc}")


def caller(launch: Any, slots: Sequence[Sequence[int]], names: Sequence[str] | None = None,
           dtypes: Sequence[Any] | None = None, devices: Sequence[int | None] | None = None) -> Callable[..., None]:
    """A callable taking one source per slot of ``slots`` (each a tuple of ``launch``'s argument
    positions): a call writes each source's address (an int, or ``data_ptr()``) into its positions
    and launches. ``dtypes`` / ``devices`` (per slot, None to skip) are checked first: a wrong
    count, dtype or device (``get_device()``) raises :class:`LaunchArgumentError`. For the compiled
    launcher it is a new ``Launch`` with a copy of ``launch``'s current arguments (one C call)."""
    slots = [tuple(int(p) for p in slot) for slot in slots]
    names = tuple(names) if names is not None else tuple(str(i) for i in range(len(slots)))
    mod = fast_launch.module()
    if mod is not None and isinstance(launch, mod.Launch):
        made = mod.Launch(launch.launcher, launch.function, launch.grid, launch.block, launch.shared,
                          launch.values(), slots=slots, names=names, dtypes=dtypes, devices=devices,
                          stream=launch.stream, device=launch.device)
        made.keep = launch
        return made
    return _PythonCaller(launch, slots, names, dtypes, devices)


class _PythonCaller:
    """:func:`caller` for a launch object written in Python (ctypes)."""

    def __init__(self, launch: Any, slots: list, names: tuple, dtypes: Any, devices: Any):
        self.launch, self.names, self.count = launch, names, len(slots)
        self.positions = tuple(p for slot in slots for p in slot)
        self.owners = tuple(i for i, slot in enumerate(slots) for _ in slot)
        checks = [(i, None if dtypes is None else dtypes[i], None if devices is None else devices[i])
                  for i in range(len(slots))]
        self.checks = tuple(c for c in checks if c[1] is not None or c[2] is not None)
        conv = getattr(launch, "conv", None)  # a C kernel's argument list: written in place
        self.conv = conv if isinstance(launch, CLaunch) else None

    def __call__(self, *sources: Any) -> None:
        if sources:
            if len(sources) != self.count:
                raise LaunchArgumentError(f"this launch takes {self.count} sources {self.names} (or none), "
                                          f"got {len(sources)}")
            for i, dtype, device in self.checks:
                s = sources[i]
                try:
                    ok = (dtype is None or s.dtype == dtype) and (device is None or s.get_device() == device)
                except AttributeError:
                    ok = False
                if not ok:
                    _check(self.names[i], s, dtype, device)
            addresses = [s if isinstance(s, int) else s.data_ptr() for s in sources]
            if self.conv is not None:
                conv = self.conv
                for position, i in zip(self.positions, self.owners):
                    conv[position] = addresses[i]
            else:
                self.launch.update(self.positions, [addresses[i] for i in self.owners])
        self.launch()


def _check(name: str, source: Any, dtype: Any, device: int | None) -> None:
    if isinstance(source, int):
        return
    if not hasattr(source, "data_ptr"):
        raise LaunchArgumentError(f"launch source {name} is a {type(source).__name__}, not a tensor or an address")
    if dtype is not None and source.dtype != dtype:
        raise LaunchArgumentError(f"launch source {name} has dtype {source.dtype!r}, expected {dtype!r}")
    if device is not None and source.get_device() != device:
        raise LaunchArgumentError(f"launch source {name} has device index {source.get_device()}, expected {device}")


def _triple(xs: tuple) -> tuple[int, int, int]:
    return tuple(int(x) for x in xs) + (1,) * (3 - len(xs))  # type: ignore[return-value]


def _address(a: Any) -> int:
    return int(a.data_ptr())


def _arg_bytes(a: Any) -> bytes:
    """One kernel argument's bytes, as :func:`_packed` converts it."""
    if hasattr(a, "data_ptr"):
        return struct.pack("<Q", a.data_ptr())
    if isinstance(a, (bool, int)):
        return struct.pack("<i", int(a))
    if isinstance(a, float):
        return struct.pack("<f", a)
    return bytes(_packed(a))


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
def _driver_address() -> int:
    """``cuLaunchKernel``'s address for the compiled launcher (tests replace it with a stub's)."""
    return fast_launch.driver_launch()


@lru_cache(maxsize=1)
def _cu_launch_kernel() -> Any:
    fn = ctypes.CDLL(fast_launch.DRIVER).cuLaunchKernel
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
