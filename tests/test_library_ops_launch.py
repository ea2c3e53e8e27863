"""The packed launches of core.library.launch, checked without a GPU: what ``cuLaunchKernel`` would
receive (the driver call replaced by a recorder), and a C launch whose pointers are replaced per call."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from core.library import launch as launch_module
from core.library.launch import CLaunch, CudaLaunch, FastCudaKernel, SlotCKernel, fast_launcher


class _Tensor:
    """What a CUDA template passes for a tensor: something with ``data_ptr()``."""

    def __init__(self, address: int):
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def test_a_cuda_launch_packs_every_argument_once_and_replaces_pointers(monkeypatch):
    calls = []

    def record(*args):
        func, gx, gy, gz, bx, by, bz, shared, stream, params, extra = args
        ptrs = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        calls.append({"func": func.value, "grid": (gx, gy, gz), "block": (bx, by, bz), "shared": shared,
                      "stream": stream, "x": ctypes.c_uint64.from_address(ptrs[0]).value,
                      "n": ctypes.c_int32.from_address(ptrs[1]).value,
                      "eps": ctypes.c_float.from_address(ptrs[2]).value,
                      "raw": ctypes.c_uint64.from_address(ptrs[3]).value, "extra": extra})
        return 0

    monkeypatch.setattr(launch_module, "_cu_launch_kernel", lambda: record)
    monkeypatch.setattr(launch_module, "_stream_reader", lambda: (lambda device: 1234 + device))
    run = CudaLaunch(0xABC, (8,), (128, 2), (_Tensor(0x1000), 7, 0.5, np.uint64(99)), 256, 1)
    assert run.pointers == [(0, 0x1000)]
    run()
    run.set_pointer(0, 0x2000)
    run()
    assert calls[0] == {"func": 0xABC, "grid": (8, 1, 1), "block": (128, 2, 1), "shared": 256, "stream": 1235,
                        "x": 0x1000, "n": 7, "eps": 0.5, "raw": 99, "extra": None}
    assert calls[1]["x"] == 0x2000


def test_a_failed_cuda_launch_raises_with_the_driver_error(monkeypatch):
    monkeypatch.setattr(launch_module, "_cu_launch_kernel", lambda: (lambda *a: 700))
    monkeypatch.setattr(launch_module, "_stream_reader", lambda: (lambda device: 0))
    with pytest.raises(RuntimeError, match="CUDA error 700"):
        CudaLaunch(1, (1, 1, 1), (32,), (), 0, 0)()


def test_a_c_launch_takes_new_pointers_per_call():
    libc = ctypes.CDLL(None)
    memcpy = libc.memcpy
    memcpy.argtypes, memcpy.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p

    class Kernel:
        function = memcpy
        launch_params: dict = {}

        def bind(self, *args):
            raise AssertionError("the wrapper binds, not the kernel")

    wrapped = fast_launcher(Kernel())
    assert isinstance(wrapped, SlotCKernel) and wrapped.launch_params == {}
    src, dst = np.arange(4, dtype=np.float32), np.zeros(4, dtype=np.float32)
    run = wrapped.bind(dst, src, 16)
    assert isinstance(run, CLaunch) and [p for p, _ in run.pointers] == [0, 1] and wrapped.created == [run]
    run()
    assert dst.tolist() == [0, 1, 2, 3]
    other = np.zeros(4, dtype=np.float32)
    run.set_pointer(0, other.ctypes.data)
    run()
    assert other.tolist() == [0, 1, 2, 3]


def test_only_kernels_with_a_cuda_function_or_a_ctypes_function_are_wrapped():
    class Function:
        ptr = 42

    class Cuda:
        function = Function()
        launch_params = {"threads": 128}

        def bind(self, *a):
            pass

    assert isinstance(fast_launcher(Cuda()), FastCudaKernel)
    assert fast_launcher(Cuda()).launch_params == {"threads": 128}

    class Triton:
        def __call__(self, *a):
            pass

    t = Triton()
    assert fast_launcher(t) is t
