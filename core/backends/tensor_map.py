"""TMA tensor maps for the ``cuda`` backend: a ``CUtensorMap`` built on the host and passed by value.

A Hopper kernel that copies tiles with ``cp.async.bulk.tensor`` reads a 128-byte ``CUtensorMap``
(the global tensor's address, sizes, row pitch, the box it copies and the shared-memory swizzle),
declared as a ``const __grid_constant__`` kernel parameter. This module

* encodes one through the driver API (``cuTensorMapEncodeTiled`` in ``libcuda.so.1``, through
  ctypes: no CUDA headers, no extra package) -- :func:`encode_2d`;
* holds its 128 bytes as a kernel argument, :class:`TensorMap`;
* launches a kernel whose arguments include such maps (:func:`launcher`): CuPy's ``Function``
  passes only scalars and pointers, so the arguments are packed into ctypes buffers and handed to
  ``cuLaunchKernel`` (``cupy.cuda.driver.launchKernel``) as its ``kernelParams`` array; the driver
  copies each by the size the cubin declares.

:func:`check_2d` applies the driver's rules without a GPU (the template's tests use it), so a map
the driver would refuse is refused here first, with the rule it breaks.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any, Callable

# CUtensorMapDataType (cuda.h): the element types a map may hold, by AbeBot dtype name
DATA_TYPES = {"float16": 6, "float32": 7, "bfloat16": 9}
# CUtensorMapSwizzle: NONE, 32B, 64B, 128B
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
MAP_BYTES = 128


@dataclass(frozen=True)
class TensorMap:
    """A ``CUtensorMap``'s 128 bytes: one by-value kernel argument (``const __grid_constant__``)."""

    raw: bytes

    def __post_init__(self) -> None:
        if len(self.raw) != MAP_BYTES:
            raise ValueError(f"a CUtensorMap is {MAP_BYTES} bytes (got {len(self.raw)})")

    @classmethod
    def unused(cls) -> "TensorMap":
        """All zeros: the argument slot of a map the kernel does not read on this launch."""
        return cls(bytes(MAP_BYTES))


def check_2d(ptr: int, rows: int, cols: int, pitch_bytes: int, box_rows: int, box_cols: int, elt: int,
             swizzle: int) -> str | None:
    """Why the driver would refuse this 2-D map (row-major ``rows`` x ``cols``, ``box_rows`` x
    ``box_cols`` box), or None. Rules from cuTensorMapEncodeTiled's documentation."""
    if ptr % 16:
        return f"global address {ptr:#x} is not 16-byte aligned"
    if pitch_bytes % 16 or pitch_bytes >= 1 << 40:
        return f"row pitch {pitch_bytes} B is not a multiple of 16 B below 2^40"
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        return f"box {box_rows}x{box_cols} has a side outside 1..256"
    if (box_cols * elt) % 16:
        return f"box row of {box_cols * elt} B is not a multiple of 16 B"
    if swizzle not in SWIZZLES:
        return f"swizzle {swizzle} is not one of {sorted(SWIZZLES)}"
    if swizzle and box_cols * elt > swizzle:
        return f"box row of {box_cols * elt} B is wider than the {swizzle} B swizzle"
    if not (1 <= rows < 1 << 32 and 1 <= cols < 1 << 32):
        return f"sizes {rows}x{cols} out of range"
    return None


@functools.lru_cache(maxsize=1)
def _encoder() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def encode_2d(ptr: int, dtype: str, rows: int, cols: int, pitch_bytes: int, box_rows: int, box_cols: int,
              swizzle: int) -> TensorMap:
    """A tiled map of a row-major ``rows`` x ``cols`` tensor at device address ``ptr`` whose rows
    are ``pitch_bytes`` apart, copied in ``box_rows`` x ``box_cols`` boxes into shared memory
    swizzled by ``swizzle`` bytes (0, 32, 64, 128); out-of-bounds elements read as zeros.
    ValueError naming the rule (or the driver's CUresult) when it cannot be encoded."""
    elt = 4 if dtype == "float32" else 2
    why = check_2d(ptr, rows, cols, pitch_bytes, box_rows, box_cols, elt, swizzle)
    if why:
        raise ValueError(f"tensor map refused: {why}")
    storage = ctypes.create_string_buffer(MAP_BYTES + 64)  # the driver wants the map 64-byte aligned
    addr = (ctypes.addressof(storage) + 63) & ~63
    dims = (ctypes.c_uint64 * 2)(cols, rows)
    strides = (ctypes.c_uint64 * 1)(pitch_bytes)
    box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
    unit = (ctypes.c_uint32 * 2)(1, 1)
    status = _encoder()(addr, DATA_TYPES[dtype], 2, ptr, dims, strides, box, unit,
                        0, SWIZZLES[swizzle], 2, 0)  # no interleave, L2 promotion 128 B, zero fill
    if status != 0:
        raise ValueError(f"cuTensorMapEncodeTiled returned CUresult {status} for a {rows}x{cols} {dtype} "
                         f"tensor (pitch {pitch_bytes} B, box {box_rows}x{box_cols}, swizzle {swizzle})")
    return TensorMap(ctypes.string_at(addr, MAP_BYTES))


def packed_params(args: tuple) -> tuple[list, Any]:
    """(buffers, void* array) for ``cuLaunchKernel``'s ``kernelParams``: each argument's bytes in a
    buffer of its own (numpy scalars by their bytes, :class:`TensorMap` by its 128). Keep the
    buffers alive as long as the array is used."""
    buffers = []
    for a in args:
        raw = a.raw if isinstance(a, TensorMap) else a.tobytes()
        buffers.append(ctypes.create_string_buffer(raw, len(raw)))
    array = (ctypes.c_void_p * max(1, len(buffers)))(*[ctypes.addressof(b) for b in buffers])
    return buffers, array


def launcher(function_ptr: int, grid: tuple, block: tuple, args: tuple, shared_mem: int) -> Callable[[int], None]:
    """A launch of the loaded function at ``function_ptr`` with ``args`` (numpy scalars and
    :class:`TensorMap` s, packed once) on the stream whose handle it is given."""
    from cupy.cuda import driver

    buffers, array = packed_params(args)
    g, b = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
    params = ctypes.addressof(array)

    def launch(stream_ptr: int) -> None:
        _keep = (buffers, array)  # noqa: F841 -- the argument buffers live as long as the launch
        driver.launchKernel(function_ptr, g[0], g[1], g[2], b[0], b[1], b[2], shared_mem, stream_ptr, params, 0)

    return launch
