"""The devices one run evaluates on: GPUs of a host, or disjoint core sets of a CPU.

A run names them with ``devices`` (``"0,1"``, ``"all"``; empty: its one ``device``). Each becomes a
:class:`Slot`, and the evaluation pool (:class:`~core.evaluation.pool.SandboxPool`) starts one
sandbox per slot:

* on a GPU backend a slot is a device index (``cuda:1``);
* on the CPU a slot is a *core set* (``c:1``): the host's cores are split into as many disjoint,
  contiguous sets as slots, and each sandbox is pinned to its set (``sched_setaffinity``) with its
  OpenMP and BLAS thread counts set to the set's size, so two candidates timed at once do not share
  a core. The templates see a device of that many cores.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass


class DevicesError(ValueError):
    """The ``devices`` setting names devices this machine does not have; the message says which."""


@dataclass(frozen=True)
class Slot:
    """One sandbox's device: the backend's device ``index``, and on the CPU the ``cores`` it is pinned to."""

    label: str
    index: int
    cores: tuple[int, ...] = ()

    def spec(self) -> dict:
        """What the sandbox's spec carries for this slot."""
        return {"device": self.index, "cores": list(self.cores), "slot": self.label}


def parse(text: str, available: int) -> list[int]:
    """Device indices from ``"0,1"``, ``"all"`` or ``""`` (empty list: the run's one device)."""
    text = (text or "").strip().lower()
    if not text:
        return []
    if text == "all":
        return list(range(available))
    try:
        wanted = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise DevicesError(f"devices must be comma-separated indices or 'all' (got {text!r})") from None
    if len(set(wanted)) != len(wanted):
        raise DevicesError(f"devices lists an index twice ({text!r})")
    bad = [d for d in wanted if not 0 <= d < available]
    if bad:
        raise DevicesError(f"device {bad[0]} does not exist ({available} available: 0-{available - 1})")
    return wanted


def plan(device_kind: str, backend: str, devices: str, device: int, gpu_count: int) -> list[Slot]:
    """The slots of a run: ``devices`` parsed against the machine, else the one ``device``.

    On the CPU, ``devices`` counts core sets (``"0,1"``: two sets), at least 1 core each.
    """
    if device_kind != "cpu":
        indices = parse(devices, gpu_count) or [device]
        return [Slot(f"{backend}:{i}", i) for i in indices]
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    sets = parse(devices, len(cores))
    if not sets:
        return [Slot(f"{backend}:0", 0)]
    return [Slot(f"{backend}:{k}", 0, tuple(part)) for k, part in enumerate(split(cores, len(sets)))]


def split(cores: list[int], n: int) -> list[list[int]]:
    """``cores`` in ``n`` disjoint contiguous sets of sizes differing by at most one."""
    if not 1 <= n <= len(cores):
        raise DevicesError(f"{n} core sets cannot be made from {len(cores)} cores")
    size, extra = divmod(len(cores), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(cores[start:end])
        start = end
    return out


def pin(cores: list[int] | tuple[int, ...]) -> None:
    """Pin this process to ``cores`` and size its thread pools to them (a sandbox, before imports)."""
    if not cores:
        return
    os.sched_setaffinity(0, set(cores))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(len(cores))


def set_size(slots: list[Slot]) -> int:
    """Cores of the smallest core set (0 when the slots are not core sets): what templates render for."""
    return min((len(s.cores) for s in slots if s.cores), default=0)


def slot_device(info, cores: int):
    """``info`` (a DeviceInfo) as a core set of ``cores`` cores sees it (unchanged for 0)."""
    return dataclasses.replace(info, multiprocessors=cores) if cores else info
