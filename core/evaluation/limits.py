"""The limits the CPU sandbox runs under (``core/evaluation/sandbox.py`` applies them), and the
host memory they are sized from."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

GiB = 1 << 30
FILE_SIZE_BYTES = 64 << 20  # kernels have no reason to write files at all


def sandbox_limits(backend: Any, timeout_s: float) -> dict:
    """The ``limits`` of the sandbox spec (``core/evaluation/sandbox.py`` applies them); empty on a GPU.

    * ``address_space_bytes``: address space the evaluator may map once its server is built
      (RLIMIT_AS = what is mapped then + this): the host's available memory plus room for what
      threads reserve and never touch (stacks, malloc arenas). Never on a GPU: CUDA maps huge ranges.
    * ``cpu_seconds``: CPU time one request may use (RLIMIT_CPU, re-armed before each request):
      twice what the watchdog's longest request (a baseline: ``max(120, 4 x timeout)`` seconds of
      wall time) can use on every core, plus a minute, so the watchdog always acts first.
    * ``file_size_bytes``: largest file the sandbox may grow (RLIMIT_FSIZE), 64 MiB.
    """
    if backend.device_kind != "cpu":
        return {}
    try:
        cores = len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    longest = max(120.0, 4.0 * float(timeout_s))
    return {"address_space_bytes": host_available_bytes() + 2 * GiB + cores * (128 << 20),
            "cpu_seconds": int(math.ceil(2 * longest * cores)) + 60,
            "file_size_bytes": FILE_SIZE_BYTES}


def host_available_bytes() -> int:
    """The host's ``MemAvailable``, no more than a cgroup's memory limit minus its usage (0 if unknown)."""
    available = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if not available:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            available = 0
    cgroup = _cgroup_headroom()
    if cgroup is not None:
        available = min(available, cgroup) if available else cgroup
    return max(0, int(available))


def _cgroup_headroom() -> int | None:
    """limit - usage of this process's cgroup (v2, then v1); None when there is no limit."""
    for limit_file, usage_file in (("memory.max", "memory.current"),
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            raw = Path("/sys/fs/cgroup", limit_file).read_text().strip()
            if raw == "max" or not raw.isdigit() or int(raw) >= 1 << 60:  # v1 writes a huge number for "none"
                continue
            usage = int(Path("/sys/fs/cgroup", usage_file).read_text().strip() or 0)
            return max(0, int(raw) - usage)
        except (OSError, ValueError):
            continue
    return None
