"""Physical floors: how fast any kernel could possibly run on this device, from measured peaks.

At the sandbox's start it measures, on the device and with the runtime's own clock, the copy
bandwidth (bytes read + written by a device-to-device copy of the timed working set's size) and the matrix-multiply rate in
the problem's dtype (the best of a few library matmuls). A call moving ``B`` bytes and doing ``F``
operations cannot take less than ``max(B / bandwidth, F / flops)``: the roofline. Measured peaks
are a little below the true ones (a library copy or matmul is not perfect), so a kernel is
``suspect`` only when it beats the roofline by more than :data:`ALLOWANCE`; and since a verified
library baseline is physical by definition, a floor is never set above the fastest baseline.

Where the runtime can launch an empty kernel (the GPU runtimes), a launch is physical too: no kernel
is faster than launching one, timed the same way, so the floor is also at least
:data:`LAUNCH_SHARE` of that. At decode sizes the roofline is far below a launch (RMSNorm at 16
rows: 0.28 us against 0.75 us), and a timing defect once gave a 16-row kernel 0.27 us while the
roofline floor let it through (``benchmarks/DECODE_H200.md``, sessions 12 and 13).
"""
from __future__ import annotations

import os

from dataclasses import dataclass
from typing import Any

ALLOWANCE = 1.25  # a kernel may beat the measured-peak roofline by this factor before it is suspect
LAUNCH_SHARE = 0.5  # a kernel may take this share of an empty launch's time before it is suspect
SIZES = {"cpu": {"copy_elements": 1 << 24, "matmul": (256, 512)},
         "gpu": {"copy_elements": 1 << 28, "matmul": (4096, 8192)}}


@dataclass(frozen=True)
class Peaks:
    """Measured peaks of one device: bytes/s (read + written) and operations/s of a matmul."""

    bandwidth: float
    flops: float
    dtype: str

    def roofline_s(self, min_bytes: float, flops: float) -> float:
        """The physical time of one call: memory- or compute-bound, whichever is longer."""
        return max(min_bytes / self.bandwidth if self.bandwidth else 0.0, flops / self.flops if self.flops else 0.0)

    def best(self, other: "Peaks | None") -> "Peaks":
        """The higher of each peak: a measured peak can only fall short of the true one (a busy
        moment, a cold clock), so the running maximum approaches it from below."""
        if other is None:
            return self
        return Peaks(max(self.bandwidth, other.bandwidth), max(self.flops, other.flops), self.dtype)

    def as_dict(self) -> dict:
        return {"bandwidth_bytes_per_s": self.bandwidth, "flops_per_s": self.flops, "dtype": self.dtype}


def suspect_floor_us(roofline_us: float, launch_us: float | None, cap_us: float) -> float:
    """Below this a time is ``suspect``: the roofline over :data:`ALLOWANCE`, or :data:`LAUNCH_SHARE`
    of an empty launch where one was timed, whichever is higher, and never above ``cap_us`` (the
    fastest verified baseline over :data:`ALLOWANCE`)."""
    floor = roofline_us / ALLOWANCE
    if launch_us:
        floor = max(floor, LAUNCH_SHARE * launch_us)
    return min(floor, cap_us)


def measure_peaks(runtime: Any, dtype: str, device_kind: str, working_set_bytes: int) -> Peaks:
    """Copy bandwidth and matmul rate of the runtime's device, best of a few timed calls each.

    The copy moves as many bytes as the timed launches rotate through (``working_set_bytes``), so a
    working set that fits in a cache is bounded by that cache's bandwidth, not by DRAM's."""
    a = runtime.arrays
    sizes = SIZES.get(device_kind, SIZES["cpu"])
    elements = int(min(sizes["copy_elements"], max(1 << 14, working_set_bytes // 8)))
    src = a.normal((elements,), "float32", a.generator(1), 0.0, 1.0)
    dst = a.clone(src)
    copy_s = min(min(runtime.time(fn, reps=5, warmup=2)) for fn in _copiers(a, dst, src, device_kind))
    bandwidth = 2 * a.nbytes(src) / copy_s
    src = dst = None  # free the copy buffers before the matmuls
    flops = 0.0
    for n in sizes["matmul"]:
        x = a.normal((n, n), dtype, a.generator(2), 0.0, 1.0)
        y, z = a.clone(x), a.clone(x)
        mm_s = min(runtime.time(lambda i: a.xp.matmul(x, y, out=z), reps=5, warmup=2))
        flops = max(flops, 2.0 * n ** 3 / mm_s)
    return Peaks(bandwidth, flops, dtype)


def _copiers(a: Any, dst: Any, src: Any, device_kind: str) -> list:
    """Ways to copy ``src`` into ``dst`` (``fn(i)``); the fastest sets the bandwidth. On the CPU also
    one slice per core this process may use, copied by threads (numpy releases the GIL): an OpenMP
    kernel uses every core, and one core's copy understates the memory system (rope on 2 cores beat
    it); for a small working set one thread wins, the threads' dispatch costing more than the copy."""
    whole = lambda i: a.copy_into(dst, src)  # noqa: E731
    if device_kind != "cpu":
        return [whole]
    from concurrent.futures import ThreadPoolExecutor

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = len(src)
    bounds = [(k * n // cores, (k + 1) * n // cores) for k in range(cores)]
    pool = ThreadPoolExecutor(max_workers=cores)
    return [whole, lambda i: list(pool.map(lambda b: a.copy_into(dst[b[0]:b[1]], src[b[0]:b[1]]), bounds))]
