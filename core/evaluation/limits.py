"""The limits the CPU sandbox runs under, the host memory they are sized from, and the functions
the sandbox process applies them with (:func:`set_limit`, :func:`rearm_cpu_time`,
:func:`limit_address_space`, called by ``core/evaluation/sandbox.py``)."""
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


# -- applied in the sandbox process (core/evaluation/sandbox.py) ----------------------------------
def set_limit(name: str, value: int, hard: bool = True) -> bool:
    """Lower ``resource.<name>`` to ``value`` (soft, and hard too when ``hard``); never above the
    existing hard limit. False where it cannot be set."""
    try:
        import resource

        which = getattr(resource, name)
        _, old_hard = resource.getrlimit(which)
        value = int(value) if old_hard == resource.RLIM_INFINITY else min(int(value), old_hard)
        resource.setrlimit(which, (value, value if hard else old_hard))
        return True
    except (ImportError, AttributeError, ValueError, OSError):
        return False


def rearm_cpu_time(limits: dict) -> bool:
    """Re-arm RLIMIT_CPU (soft only, so it can be re-armed) to the CPU time used so far plus
    ``cpu_seconds``: the budget is per request, not for the life of the process."""
    budget = limits.get("cpu_seconds")
    if not budget:
        return False
    try:
        import resource

        used = resource.getrusage(resource.RUSAGE_SELF)
        return set_limit("RLIMIT_CPU", math.ceil(used.ru_utime + used.ru_stime + float(budget)), hard=False)
    except (ImportError, OSError):
        return False


def limit_address_space(limits: dict, spec: dict) -> None:
    """RLIMIT_AS = the address space mapped now + ``address_space_bytes``; never for a GPU backend
    (CUDA reserves address ranges far larger than the memory it uses)."""
    extra = limits.get("address_space_bytes")
    if not extra or device_kind(spec) == "gpu":
        return
    try:
        mapped = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return
    if set_limit("RLIMIT_AS", mapped + int(extra)):
        print(f"[sandbox {os.getpid()}] address space limited to {(mapped + int(extra)) / 2**30:.1f} GiB", flush=True)


def device_kind(spec: dict) -> str:
    backend = spec.get("backend")
    if not backend:
        return ""
    try:
        from core.backends import backend_class

        return backend_class(backend).device_kind
    except Exception:
        return "gpu"  # unknown: do not risk an address-space limit under CUDA
