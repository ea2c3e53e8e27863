"""The compiled launcher (core/library/fast_launch.c), checked without a GPU: it is built here, and
``cuLaunchKernel`` is a stub library compiled in the test that records what it receives."""
from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess

import numpy as np
import pytest
import torch

from core.library import fast_launch, launch as launch_module
from core.library.fast_launch import FastLaunchWarning, LaunchArgumentError
from core.library.launch import CudaLaunch, FastCudaKernel, caller, fast_launcher

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

STUB = r"""
#include <string.h>
struct record { unsigned long long calls; void *f; unsigned grid[3], block[3], shared; void *stream; void *extra;
                unsigned long long args[16]; } last;
int stub_rc = 0, stub_nargs = 0;
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra) {
    last.calls++; last.f = f; last.grid[0] = gx; last.grid[1] = gy; last.grid[2] = gz;
    last.block[0] = bx; last.block[1] = by; last.block[2] = bz; last.shared = shared; last.stream = stream;
    last.extra = extra;
    for (int i = 0; i < stub_nargs && i < 16; i++) memcpy(&last.args[i], params[i], 8);
    return stub_rc;
}
"""


class Record(ctypes.Structure):
    _fields_ = [("calls", ctypes.c_ulonglong), ("f", ctypes.c_void_p), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint), ("stream", ctypes.c_void_p),
                ("extra", ctypes.c_void_p), ("args", ctypes.c_ulonglong * 16)]


class Stub:
    """The stub driver: ``address`` of its cuLaunchKernel, ``last`` what the latest call received."""

    def __init__(self, path):
        self.path = str(path)
        self.lib = ctypes.CDLL(self.path)
        self.last = Record.in_dll(self.lib, "last")
        self.rc = ctypes.c_int.in_dll(self.lib, "stub_rc")
        self.nargs = ctypes.c_int.in_dll(self.lib, "stub_nargs")  # how many arguments the stub copies
        self.function = self.lib.cuLaunchKernel
        self.address = ctypes.cast(self.function, ctypes.c_void_p).value

    def seen(self) -> dict:
        r = self.last
        return {"calls": r.calls, "function": r.f, "grid": tuple(r.grid), "block": tuple(r.block),
                "shared": r.shared, "stream": r.stream, "extra": r.extra, "args": list(r.args)[:self.nargs.value]}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The extension built into a fresh cache, and the stub library."""
    root = tmp_path_factory.mktemp("fastlaunch")
    mp = pytest.MonkeyPatch()
    mp.setenv("ABEBOT_CACHE_DIR", str(root / "cache"))
    mp.delenv("CC", raising=False)
    fast_launch.module.cache_clear()
    mod = fast_launch.module()
    stub_c = root / "stub.c"
    stub_c.write_text(STUB)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", str(stub_c), "-o", str(root / "stub.so")], check=True)
    yield mod, Stub(root / "stub.so")
    fast_launch.module.cache_clear()
    mp.undo()


@pytest.fixture()
def stub_driver(built, monkeypatch):
    """launch.py's launches pointed at the stub: the compiled one through its address, the ctypes
    one through the stub's function; torch's current stream of device d is 5000 + d."""
    mod, stub = built
    fn = stub.function
    fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    fn.restype = ctypes.c_int
    monkeypatch.setattr(launch_module, "_driver_address", lambda: stub.address)
    monkeypatch.setattr(launch_module, "_cu_launch_kernel", lambda: fn)
    monkeypatch.setattr(launch_module, "_stream_reader", lambda: (lambda device: 5000 + device))
    monkeypatch.setattr(fast_launch, "module", lambda: mod)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    stub.rc.value, stub.nargs.value = 0, 0
    return mod, stub


class Function:
    ptr = 0xF00D


class CudaKernel:
    """What the cuda backend loads: a ``function`` with a ``ptr`` and a ``bind``."""
    function = Function()
    launch_params = {"threads": 128}

    def bind(self, *a):
        raise AssertionError("the wrapper binds, not the kernel")


def u64(value: int) -> int:
    return value & 0xFFFFFFFFFFFFFFFF


def test_the_extension_is_built_once_into_a_cache_keyed_by_its_source(built, tmp_path, monkeypatch):
    path = fast_launch.built_path()
    assert path.exists() and path.name.startswith("abebot_fast_launch-")
    mtime = path.stat().st_mtime_ns
    assert fast_launch.build() == path and path.stat().st_mtime_ns == mtime  # reused, not rebuilt
    edited = tmp_path / "fast_launch.c"
    edited.write_text(fast_launch.SOURCE.read_text() + "\n/* edited */\n")
    monkeypatch.setattr(fast_launch, "SOURCE", edited)
    assert fast_launch.built_path() != path


def test_the_kernel_receives_exactly_the_bound_function_grid_block_shared_memory_stream_and_arguments(stub_driver):
    mod, stub = stub_driver
    x, y = torch.arange(4.0), torch.zeros(4)
    wrapped = fast_launcher(CudaKernel())
    assert isinstance(wrapped, FastCudaKernel) and wrapped.compiled and wrapped.launch_params == {"threads": 128}
    run = wrapped.bind((7, 2), (128,), (x, y, 3, 0.5, np.uint64(2**40 + 5), -2), 1024)
    stub.nargs.value = 6
    assert isinstance(run, mod.Launch) and wrapped.created == [run]
    assert run.pointers == [(0, x.data_ptr()), (1, y.data_ptr())]
    run()
    seen = stub.seen()
    assert seen["calls"] >= 1 and seen["function"] == 0xF00D and seen["grid"] == (7, 2, 1)
    assert seen["block"] == (128, 1, 1) and seen["shared"] == 1024 and seen["stream"] == 5001 and seen["extra"] is None
    a = seen["args"]
    assert a[0] == x.data_ptr() and a[1] == y.data_ptr() and a[4] == 2**40 + 5
    assert a[2] & 0xFFFFFFFF == 3 and struct.unpack("<f", struct.pack("<I", a[3] & 0xFFFFFFFF))[0] == 0.5
    assert a[5] & 0xFFFFFFFF == u64(-2) & 0xFFFFFFFF


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "ctypes"])
def test_a_caller_writes_each_calls_tensors_and_keeps_the_other_arguments(stub_driver, compiled):
    mod, stub = stub_driver
    x, w, out = torch.randn(2, 8), torch.ones(8), torch.empty(2, 8)
    run = FastCudaKernel(CudaKernel(), compiled=None if compiled else False).bind(
        (2,), (64,), (x, w, x, out, 2, 8), 0)
    stub.nargs.value = 6
    assert isinstance(run, mod.Launch if compiled else CudaLaunch)
    # rmsnorm without a residual: x is read at arguments 0 and 2, one source for both
    call = caller(run, [(0, 2), (1,), (3,)], ("x", "w", "out"), dtypes=[None, torch.float32, None],
                  devices=[None, -1, None])
    for _ in range(2):
        x2, w2, out2 = torch.randn(2, 8), torch.ones(8), torch.empty(2, 8)
        call(x2, w2, out2)
        a = stub.seen()["args"]
        assert a[:4] == [x2.data_ptr(), w2.data_ptr(), x2.data_ptr(), out2.data_ptr()]
        assert [v & 0xFFFFFFFF for v in a[4:6]] == [2, 8]
        assert stub.seen()["grid"] == (2, 1, 1) and stub.seen()["stream"] == 5001
    call(x.data_ptr(), w.data_ptr(), 0x1234)  # addresses as ints
    assert stub.seen()["args"][3] == 0x1234


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "ctypes"])
def test_a_wrong_source_count_dtype_or_device_is_refused_before_anything_launches(stub_driver, compiled):
    mod, stub = stub_driver
    x, y = torch.randn(4), torch.empty(4)
    run = FastCudaKernel(CudaKernel(), compiled=None if compiled else False).bind((1,), (32,), (x, y, 4), 0)
    stub.nargs.value = 3
    call = caller(run, [(0,), (1,)], ("x", "y"), dtypes=[torch.float32, None], devices=[-1, 0])
    before = stub.seen()["calls"]
    with pytest.raises(LaunchArgumentError, match=r"takes 2 sources"):
        call(x)
    with pytest.raises(LaunchArgumentError, match=r"x has dtype torch.float16, expected torch.float32"):
        call(x.half(), y)
    with pytest.raises(LaunchArgumentError, match=r"y has device index -1, expected 0"):
        call(x, y)  # y is on the CPU (-1), the launch was bound for device 0
    with pytest.raises(LaunchArgumentError, match=r"x is a str, not a tensor or an address"):
        call("x", 0)
    assert stub.seen()["calls"] == before
    assert issubclass(LaunchArgumentError, TypeError)


def test_a_failed_launch_raises_with_the_drivers_error_code(stub_driver):
    mod, stub = stub_driver
    run = FastCudaKernel(CudaKernel()).bind((1,), (32,), (torch.zeros(1),), 0)
    stub.nargs.value, stub.rc.value = 1, 700
    with pytest.raises(RuntimeError, match="CUDA error 700"):
        run()


def test_update_and_set_pointer_replace_addresses_as_the_ctypes_launch_does(stub_driver):
    mod, stub = stub_driver
    run = FastCudaKernel(CudaKernel()).bind((1,), (32,), (torch.zeros(1), torch.zeros(1), 9), 0)
    stub.nargs.value = 3
    run.update((0, 1), (0x1000, 0x2000))
    run()
    assert stub.seen()["args"][:2] == [0x1000, 0x2000]
    run.set_pointer(1, 0x3000)
    run()
    assert stub.seen()["args"][:2] == [0x1000, 0x3000]
    with pytest.raises(IndexError, match="not an 8-byte argument"):
        run.set_pointer(2, 0x4000)  # the int32


def test_the_driver_address_is_resolved_with_dlopen(built):
    mod, stub = built
    assert mod.resolve(stub.path, "cuLaunchKernel") == stub.address
    with pytest.raises(OSError, match="dlsym"):
        mod.resolve(stub.path, "cuNoSuchFunction")


def test_without_a_compiler_launches_fall_back_to_ctypes_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("ABEBOT_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(launch_module, "_cu_launch_kernel", lambda: (lambda *a: 0))
    monkeypatch.setattr(launch_module, "_stream_reader", lambda: (lambda device: 0))
    fast_launch.module.cache_clear()
    try:
        with pytest.warns(FastLaunchWarning, match="no-such-cc.*ctypes"):
            assert fast_launch.module() is None
        wrapped = fast_launcher(CudaKernel())
        assert not wrapped.compiled
        assert isinstance(wrapped.bind((1,), (32,), (torch.zeros(1),), 0), CudaLaunch)
    finally:
        fast_launch.module.cache_clear()
