"""Buffers the judge allocates and the launcher launches kernels on, shared rather than copied
(issue 35, item 1: :mod:`core.evaluation.judge`, :mod:`core.evaluation.launcher`).

* On the CPU (numpy), every shared array is its own anonymous file (``memfd_create``) mapped by the
  judge; its descriptor crosses to the launcher once, beside the request that first names it
  (``SCM_RIGHTS``, :mod:`core.evaluation.channel`), and the launcher maps it and closes the descriptor.
  No file name exists, so no other process can open one, and nothing is left behind by a crash. An
  array is described by ``("fd", block, offset, shape, dtype)``: a view of a block (an output inside
  its guarded buffer) maps to the same bytes in both processes.
* On the GPU (torch), every CUDA tensor is shared through CUDA IPC: the description is what
  ``torch.multiprocessing.reductions.reduce_tensor`` makes of it (a ``cudaIpcGetMemHandle`` of its
  storage, with offset, size and strides), which the launcher rebuilds on the same device memory.

The judge keeps its own pristine inputs and references apart from these buffers: a launcher can
write the shared arrays (that is what it is for) and nothing else of the judge's.
"""
from __future__ import annotations

import mmap
import os
import weakref
from typing import Any

import numpy as np


class NumpyBlocks:
    """The judge's side on the CPU: shared numpy arrays, their descriptors, and which have died."""

    def __init__(self) -> None:
        self._next = 0
        self._blocks: dict[int, tuple[int, int, int]] = {}  # block id -> (fd, address, size)
        self.dead: list[int] = []  # blocks garbage-collected since the launcher last heard
        self.sent: set[int] = set()  # blocks whose descriptor the launcher holds

    def empty(self, shape: Any, dtype: Any) -> np.ndarray:
        """A new shared array (contents undefined, as ``np.empty``)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        size = max(1, count * dtype.itemsize)
        fd = os.memfd_create("abebot-case", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        block, self._next = self._next, self._next + 1
        whole = np.frombuffer(mm, dtype=np.uint8)
        self._blocks[block] = (fd, int(whole.ctypes.data), size)
        weakref.finalize(mm, self._died, block)
        return np.frombuffer(mm, dtype=dtype, count=count).reshape(shape)

    def _died(self, block: int) -> None:
        fd, _, _ = self._blocks.pop(block, (None, 0, 0))
        if fd is not None:
            os.close(fd)
        if block in self.sent:
            self.sent.discard(block)
            self.dead.append(block)

    def describe(self, x: np.ndarray) -> tuple | None:
        """The descriptor of ``x`` (a C-contiguous view of one shared block), or None when ``x`` is
        not shared."""
        if not isinstance(x, np.ndarray) or not x.flags.c_contiguous:
            return None
        addr = int(x.ctypes.data)
        for block, (_, base, size) in self._blocks.items():
            if base <= addr and addr + x.nbytes <= base + size:
                return ("fd", block, addr - base, tuple(int(d) for d in x.shape), x.dtype.str)
        return None

    def fds(self, descriptors: list) -> tuple[list[int], list[int]]:
        """(blocks, their fds) among ``descriptors`` that the launcher does not hold yet; marks them sent."""
        blocks, fds = [], []
        for d in descriptors:
            if d and d[0] == "fd" and d[1] not in self.sent and d[1] not in blocks:
                blocks.append(d[1])
                fds.append(self._blocks[d[1]][0])
        self.sent.update(blocks)
        return blocks, fds

    def forget_sent(self) -> None:
        """A new launcher holds nothing yet."""
        self.sent.clear()
        self.dead.clear()


class Attached:
    """The launcher's side: the blocks it was given, mapped, and arrays rebuilt from descriptors."""

    def __init__(self) -> None:
        self.maps: dict[int, mmap.mmap] = {}

    def receive(self, blocks: list[int], fds: list[int]) -> None:
        for block, fd in zip(blocks, fds):
            try:
                self.maps[block] = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)

    def drop(self, blocks: list[int]) -> None:
        for block in blocks:
            self.maps.pop(block, None)  # unmapped once no array of it is left

    def array(self, d: Any) -> Any:
        """The array or tensor a descriptor names."""
        if d is None:
            return None
        if d[0] == "fd":
            _, block, offset, shape, dtype = d
            return np.ndarray(shape, dtype=np.dtype(dtype), buffer=self.maps[block], offset=offset)
        if d[0] == "ipc":  # a CUDA tensor, by CUDA IPC
            rebuild, args = d[1], d[2]
            return rebuild(*args)
        raise ValueError(f"unknown buffer descriptor {d[0]!r}")

