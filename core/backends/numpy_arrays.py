"""numpy as a harness's array library (the C backend's kernels read and write numpy buffers)."""
from __future__ import annotations

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

    def generator(self, seed: int) -> np.random.Generator:
        return np.random.default_rng(seed)

    def normal(self, shape, dtype, gen, mean, std):
        return (gen.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean)).astype(dtype)

    def uniform(self, shape, dtype, gen, low, high):
        return gen.uniform(low, high, shape).astype(np.float32).astype(dtype)

    def poisoned(self, shape, dtype, guard=GUARD_ELEMENTS):
        size = int(np.prod(shape))
        flat = np.empty(size + 2 * guard, dtype=dtype)
        self.poison(flat)
        return flat, flat[guard:guard + size].reshape(shape)

    def poison(self, flat):
        bits, value = SENTINEL[flat.dtype.name]
        flat.view(bits)[:] = value

    def guards_intact(self, flat, guard=GUARD_ELEMENTS):
        bits, value = SENTINEL[flat.dtype.name]
        raw = flat.view(bits)
        return bool((raw[:guard] == value).all() and (raw[-guard:] == value).all())

    def copy_into(self, dst, src):
        dst[...] = src

    def clone(self, x):
        return x.copy()

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

    def peak_extra_bytes(self, fn: Callable[[], Any]) -> int:
        """Peak Python-visible allocations of one call (numpy's temporaries), by tracemalloc.
        Buffers a library allocates outside Python's allocator (OpenBLAS's own) are not seen."""
        tracemalloc.start()
        try:
            fn()
            return int(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()

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
