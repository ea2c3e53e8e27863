"""A pool of sandboxed evaluator processes: one per device of the run.

Each device's sandbox is a :class:`~core.evaluation.sandbox.Sandbox` built from the same spec with
its own ``device`` index, so a crash or a sticky error on one device restarts only that one. A run
has one device today; the pool is the place where several GPUs (and several hosts) plug in.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from core.evaluation.sandbox import Sandbox


class SandboxPool:
    """``spec`` is the sandbox server's spec without ``device``; ``devices`` the indices to serve."""

    def __init__(self, spec: dict, devices: list[int], timeout_s: float, log_path: Path | str | None = None):
        if not devices:
            raise ValueError("a sandbox pool needs at least one device")
        self.devices = list(devices)
        self.sandboxes = {d: Sandbox({**spec, "device": d}, timeout_s, _per_device(log_path, d, len(devices)))
                          for d in self.devices}

    def start(self) -> None:
        """Start every device's sandbox (SandboxError from the first that cannot start)."""
        for box in self.sandboxes.values():
            box.start()

    def call(self, request: dict, device: int | None = None, timeout_s: float | None = None) -> dict:
        """Send ``request`` to ``device``'s sandbox (the first device when None); never raises for
        what the sandbox does."""
        return self.sandboxes[self.devices[0] if device is None else device].call(request, timeout_s)

    @property
    def restarts(self) -> int:
        """Sandbox restarts so far, over every device."""
        return sum(box.restarts for box in self.sandboxes.values())

    def close(self) -> None:
        for box in self.sandboxes.values():
            box.close()

    def __enter__(self) -> "SandboxPool":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _per_device(log_path: Path | str | None, device: int, count: int) -> Path | str | None:
    """One log per device when there are several (``sandbox.log`` -> ``sandbox.1.log``)."""
    if log_path is None or count == 1:
        return log_path
    p = Path(log_path)
    return p.with_name(f"{p.stem}.{device}{p.suffix}")
