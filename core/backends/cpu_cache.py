"""Evicting buffers from the CPU's caches, for the ``cold`` cache policy on the C backend.

A timed call under ``cold`` must read its inputs and weights from DRAM, as a model's layer does.
Writing a scratch buffer twice the last-level cache would do it, but the LLC that sysfs reports on a
cloud machine is the whole socket's (480 MiB on our 2-core development VM): 1 GB of traffic before
every call of a 0.3 ms kernel. So the lines of exactly the buffers the call reads and writes are
evicted instead -- ``clflush`` on x86-64, ``dc civac`` on AArch64 (``evict_lines.c``), which evicts
a line from every level of the hierarchy -- at a cost proportional to the case (about 1 ns a line).

The helper is compiled with the system C compiler once per process, into a private temporary
folder that is removed at once (the loaded copy stays mapped). Where it cannot be built (no
compiler, another architecture), :func:`evictor` falls back to reading a scratch buffer of twice the
last-level cache, capped at :data:`FALLBACK_CAP_BYTES`, and says so in its ``method``.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

SOURCE = Path(__file__).with_name("evict_lines.c")
FALLBACK_CAP_BYTES = 256 << 20


@dataclass
class Evictor:
    """``evict(arrays)`` removes those numpy arrays' lines from the caches; ``method`` says how."""

    evict: Callable[[Iterable[Any]], None]
    method: str


_EVICTOR: Evictor | None = None


def evictor(llc_bytes: int = 0) -> Evictor:
    """The process's evictor (built at the first call)."""
    global _EVICTOR
    if _EVICTOR is None:
        _EVICTOR = _line_evictor() or _scratch_evictor(llc_bytes)
    return _EVICTOR


def _line_evictor() -> Evictor | None:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        return None
    folder = tempfile.mkdtemp(prefix="abebot-evict-")
    try:
        so = os.path.join(folder, "evict.so")
        done = subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", so, str(SOURCE)],
                              capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            return None
        lib = ctypes.CDLL(so)
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    fn = lib.abebot_evict_lines
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t], None

    def evict(arrays: Iterable[Any]) -> None:
        for a in arrays:
            if getattr(a, "nbytes", 0):
                fn(a.ctypes.data, a.nbytes)

    return Evictor(evict, "clflush of the call's buffers")


def _scratch_evictor(llc_bytes: int) -> Evictor:
    import numpy as np

    size = min(max(2 * llc_bytes, 32 << 20), FALLBACK_CAP_BYTES)
    scratch = np.ones(size // 8, dtype=np.float64)

    def evict(_arrays: Iterable[Any]) -> None:
        float(scratch.sum())

    capped = " (capped: the LLC is larger)" if 2 * llc_bytes > FALLBACK_CAP_BYTES else ""
    return Evictor(evict, f"read of a {size >> 20} MiB scratch buffer{capped}")
