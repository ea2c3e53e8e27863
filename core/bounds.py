"""What a run may use: the memory a problem needs (checked before anything is written) and the
limits the CPU sandbox runs under.

**The memory bound.** The sandboxed evaluator (``core/evaluation/protocol.py``) holds several
*cases* of the problem at once: the rotated timing cases (``timing_case_count``: at least 2, up to
4 on a CPU and 256 on a GPU, fewer when they would not fit) plus one more (the stability case, or a
baseline's case). One case of ``io_bytes`` (every tensor once, ``Workload.io_bytes``) takes

* ``2 x io_bytes`` for the tensors themselves: the buffers the kernel gets plus the pristine copies
  of the inputs (or the NaN-poisoned, guarded output buffers), and
* ``8 / element_bytes x io_bytes`` for the float64 reference (2 for float32, 4 for bf16/fp16): the
  float64 copies of the inputs the reference is computed from and the float64 expected outputs.

So ``need = 1.25 x (timing cases + 1) x largest io_bytes x (2 + 8 / element_bytes) + process overhead``
(1.25: headroom for the baselines' own buffers and allocator slack; overhead: 0.5 GiB for the
interpreter and libraries on a CPU, 1 GiB for the CUDA context and library workspaces on a GPU).
It must not exceed what is available: on a GPU the device's memory (``DeviceInfo.memory_bytes``;
the device lock keeps other AbeBot runs off it, other programs are not seen); on the CPU the host's
``MemAvailable`` (``/proc/meminfo``), lowered to a cgroup's memory limit when one is set.

:func:`check_fits` raises :class:`ProblemTooBig` (a :class:`~core.config.ConfigError`: the CLI
exits 2 with the one line, the launch form shows it) with "problem needs ~X GiB on <device> (Y GiB
available): make it smaller".
"""
from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any

from core.config import ConfigError

GiB = 1 << 30
HEADROOM = 1.25  # beyond the estimate: the baselines' own buffers, allocator slack
OVERHEAD = {"cpu": GiB // 2, "gpu": GiB}  # the process itself: interpreter and libraries, CUDA context
FILE_SIZE_BYTES = 64 << 20  # kernels have no reason to write files at all


class ProblemTooBig(ConfigError):
    """The problem cannot fit in the device's memory; the message says by how much."""


# -- how much a problem needs --------------------------------------------------------------------
def problem_need_bytes(workload: Any, problem: dict, device: Any, device_kind: str) -> int:
    """Bytes the evaluator needs at its peak for ``problem`` on ``device`` (see the module docstring)."""
    from core.backends.arrays import dtype_bytes
    from core.evaluation.timing import timing_case_count

    shapes = workload.shapes(problem)
    main_io = int(workload.io_bytes(shapes[0], problem))
    largest = max(int(workload.io_bytes(s, problem)) for s in shapes)
    element = min(dtype_bytes(t.dtype_in(problem)) for t in workload.tensors(problem))
    per_case = largest * (2 + 8 / element)
    cases = timing_case_count(main_io, device, device_kind) + 1
    return int(HEADROOM * cases * per_case) + OVERHEAD.get(device_kind, GiB)


def available_bytes(device: Any, device_kind: str) -> int:
    """Memory a run may use on ``device``: the GPU's memory, or the host's available memory."""
    if device_kind == "cpu":
        return host_available_bytes()
    return int(device.memory_bytes or 0)


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


def check_fits(cfg: Any, device: Any = None) -> None:
    """ProblemTooBig unless ``cfg``'s problem (a validated RunConfig) fits in its device's memory.

    ``device`` (a DeviceInfo) is looked up when None (cached per process); there is nothing to
    check when the backend or the device is not available here (the CLI refuses those itself).
    """
    from core.backends import backend_class
    from core.workloads import get_workload

    kind = backend_class(cfg.backend).device_kind
    if device is None:
        found = _devices(cfg.backend)
        if not 0 <= cfg.device < len(found):
            return
        device = found[cfg.device]
    workload = get_workload(cfg.workload)
    need = problem_need_bytes(workload, workload.validate_problem(dict(cfg.problem), cfg.backend), device, kind)
    have = available_bytes(device, kind)
    if have and need > have:
        raise ProblemTooBig(f"problem needs ~{_gib(need)} GiB on {device.label()} ({_gib(have)} GiB available): "
                            "make it smaller")


@functools.lru_cache(maxsize=8)
def _devices(backend: str) -> tuple:
    from core.backends import availability, backend_class

    if availability(backend) is not None:
        return ()
    return tuple(backend_class(backend).devices())


def _gib(n: float) -> str:
    value = n / GiB
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


# -- the sandbox's limits ------------------------------------------------------------------------
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
