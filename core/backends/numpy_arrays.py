"""numpy as a harness's array library (the C backend's kernels read and write numpy buffers)."""
from __future__ import annotations

import ctypes
import tracemalloc
from typing import Any, Callable

import numpy as np

from core.backends.arrays import GUARD_ELEMENTS, Arrays, CheckResult

# A quiet NaN whose payload no arithmetic produces: a kernel that copies poison around still
# leaves the exact bits, and guards compare bit for bit.
SENTINEL = {"float32": (np.uint32, 0x7FC0DEAD), "float64": (np.uint64, 0x7FF8_0000_DEAD_BEEF),
            "float16": (np.uint16, 0x7E5D)}


class NumpyArrays(Arrays):
    name = "numpy"
    xp = np
    # While set (the judge making a case: core.evaluation.shared_buffers.NumpyBlocks), the buffers a case
    # is launched on (``poisoned``, ``clone``) are allocated in memory the launcher process shares.
    shared: Any = None

    def _empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype) if self.shared is None else self.shared.empty(shape, dtype)

    def describe(self, x):
        """How the launcher finds ``x`` (a shared array), or None when it is not shared."""
        return None if self.shared_pool is None else self.shared_pool.describe(x)

    shared_pool: Any = None  # the judge's NumpyBlocks, whether or not a case is being made now

    def generator(self, seed: int) -> np.random.Generator:
        return np.random.default_rng(seed)

    def normal(self, shape, dtype, gen, mean, std):
        return (gen.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)).astype(dtype)

    def uniform(self, shape, dtype, gen, low, high):
        return gen.uniform(low, high, shape).astype(np.float32).astype(dtype)

    def poisoned(self, shape, dtype, guard=GUARD_ELEMENTS):
        size = int(np.prod(shape))
        flat = self._empty((size + 2 * guard,), dtype)
        self.poison(flat)
        return flat, flat[guard:guard + size].reshape(shape)

    def poison(self, flat):
        bits, value = SENTINEL[flat.dtype.name]
        flat.view(bits)[:] = value

    def guards_intact(self, flat, guard=GUARD_ELEMENTS):
        bits, value = SENTINEL[flat.dtype.name]
        raw = flat.view(bits)
        return bool((raw[:guard] == value).all() and (raw[-guard:] == value).all())

    def guard_damage(self, flat, guard=GUARD_ELEMENTS):
        """Guard elements whose bits are no longer the sentinel's."""
        bits, value = SENTINEL[flat.dtype.name]
        raw = flat.view(bits)
        return int((raw[:guard] != value).sum() + (raw[-guard:] != value).sum())

    def copy_into(self, dst, src):
        dst[...] = src

    def clone(self, x):
        if self.shared is None:
            return x.copy()
        out = self.shared.empty(x.shape, x.dtype)
        out[...] = x
        return out

    def same_bits(self, a, b):
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()

    def float64(self, x):
        return np.asarray(x, dtype=np.float64)

    def compare(self, out, ref, atol, rtol) -> CheckResult:
        o = np.asarray(out, dtype=np.float64)
        bad = ~np.isfinite(o)
        if bad.any():
            idx = np.unravel_index(int(np.argmax(bad)), o.shape)
            return CheckResult(False, "nan_output", float("inf"), float("inf"),
                               f"{int(bad.sum())} of {o.size} outputs not finite (unwritten?), first at {tuple(map(int, idx))}")
        err = np.abs(o - ref)
        max_abs = float(err.max(initial=0.0))
        norm = float(np.linalg.norm(ref))
        rel = float(np.linalg.norm(o - ref) / norm) if norm > 0 else max_abs
        limit = atol + rtol * np.abs(ref)
        used = float((err / limit).max(initial=0.0))
        over = err > limit
        if over.any():
            idx = np.unravel_index(int(np.argmax(err - limit)), o.shape)
            return CheckResult(False, "wrong_result", max_abs, rel,
                               f"{int(over.sum())} of {o.size} outputs beyond tolerance, worst at {tuple(map(int, idx))}: "
                               f"got {o[idx]:.6g}, want {ref[idx]:.6g}", used)
        return CheckResult(True, "", max_abs, rel, margin_used=used)

    def to_bytes(self, x) -> bytes:
        return np.ascontiguousarray(x).tobytes()

    def nbytes(self, x) -> int:
        return int(x.nbytes)

    # -- memory a kernel allocates itself (issue 36, item 7) ---------------------------------------
    kernel_heap_bytes = 0  # heap the current C kernel kept after its first call (CKernel measures it)

    def begin_kernel(self) -> None:
        """A new kernel is loaded: what the previous one kept is not this one's."""
        self.kernel_heap_bytes = 0

    def note_kernel_heap(self, grown: int) -> None:
        """The heap grew by ``grown`` bytes over the current kernel's first call and stayed: memory it
        keeps (a workspace allocated once and reused), counted into every later measurement."""
        self.kernel_heap_bytes = max(self.kernel_heap_bytes, int(grown))

    def peak_extra_bytes(self, fn: Callable[[], Any]) -> int:
        """Memory one call needs beyond its inputs and outputs: the largest of the peak Python-visible
        allocations (numpy's temporaries, by tracemalloc), the C heap's growth (``mallinfo2``) and the
        resident set's peak growth over the call (``VmHWM``, reset before it: memory a kernel touches and
        frees within the call, from malloc or mmap), plus the heap the kernel kept since its first call
        (:meth:`note_kernel_heap`). Buffers a library allocates and never touches are not seen."""
        heap0 = heap_in_use()
        rss0 = _reset_peak_rss()
        tracemalloc.start()
        try:
            fn()
            traced = int(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        heap = max(0, heap_in_use() - heap0) if heap0 is not None else 0
        rss = max(0, _peak_rss() - rss0) if rss0 is not None else 0
        return max(traced, heap, rss) + int(self.kernel_heap_bytes)

    def index_table(self, rows):
        return np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)

    def choose(self, table, rng):
        i = int(rng.integers(len(table)))
        return i, table[i]

    def take_into(self, dst, src, row, axis):
        np.take(src, row, axis=axis, out=dst)

    def count_outside(self, out, ref, atol, rtol):
        o = np.asarray(out, dtype=np.float64)
        finite = np.isfinite(o)
        over = np.abs(o - ref) > atol + rtol * np.abs(ref)
        return int(o.size - finite.sum()), int(np.count_nonzero(over & finite))

    def to_host(self, values):
        return [float(v) for v in values]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        fn = ctypes.CDLL(None).mallinfo2  # glibc 2.33 on
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [], _MallInfo2
    return fn


_MALLINFO2 = _mallinfo2()


def heap_in_use() -> int | None:
    """Bytes the C allocator has handed out and not had back, over every arena and its mmapped
    blocks (``mallinfo2``: ``uordblks + hblkhd``); None where the C library has no ``mallinfo2``."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return int(info.uordblks) + int(info.hblkhd)


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _reset_peak_rss() -> int | None:
    """Reset the peak resident set to the current one (``/proc/self/clear_refs``); the current RSS,
    or None where the peak cannot be reset."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _status_kib("VmRSS:")


def _peak_rss() -> int:
    return _status_kib("VmHWM:") or 0
