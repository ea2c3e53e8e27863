"""What a run may use: the memory a problem needs (checked before anything is written) against the
memory the evaluator's sandbox may use (its limits: ``core/evaluation/limits.py``).

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
from typing import Any

from core.config import ConfigError
from core.evaluation.limits import GiB, host_available_bytes

HEADROOM = 1.25  # beyond the estimate: the baselines' own buffers, allocator slack
OVERHEAD = {"cpu": GiB // 2, "gpu": GiB}  # the process itself: interpreter and libraries, CUDA context


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
