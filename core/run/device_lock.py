"""One run per device: an exclusive ``flock`` on ``<runs_dir>/.locks/<kind>-<device>.lock``.

Timings are only worth something when nothing else runs on the device, so ``python -m core run``,
``resume``, ``bench`` (and ``check``) hold the lock of their device for the life of the process,
and the dashboard asks the same lock before it starts anything.

The key is the *physical* device, not the backend: the ``cuda`` and ``triton`` backends both drive
GPU 0, so both take ``gpu-0``; every CPU backend takes ``cpu-0``. A GPU index is translated through
``CUDA_VISIBLE_DEVICES`` when that is set (index 0 under ``CUDA_VISIBLE_DEVICES=3`` is ``gpu-3``).
The lock lives in the runs folder: runs that use different runs folders do not see each other.

The kernel releases an ``flock`` when its holder exits in any way (``kill -9`` included), so a
crashed run never leaves the device locked. The holder writes what it is (run id, pid, command,
since when) into the file, for the message of whoever is refused.

API::

    with hold_device(runs_dir, backend, device, what="run <id>"):  # DeviceBusy when taken
        ...
    lock = acquire_device(runs_dir, backend, device, what); ...; lock.release()
    device_holder(runs_dir, backend, device) -> str | None           # who holds it, without taking it
    cluster_devices(cluster, device) -> list[int] | None             # what a Dask run holds here

A run on a local Dask cluster (``--cluster local:N``) holds its device like any run: its N worker
processes evaluate on it, on this host.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

LOCK_DIR = ".locks"
RETRY_S = 1.0  # a busy check (the dashboard's) holds a shared lock for microseconds: retry that long


class DeviceBusy(ValueError):
    """The device is held by another run; the message names the holder. A ValueError, so the CLI
    reports it like bad input: one line on stderr, exit status 2."""

    def __init__(self, message: str, holder: dict | None = None):
        super().__init__(message)
        self.holder = holder or {}


def device_key(backend: str, device: int) -> str:
    """``cpu-0``, ``gpu-0``...: the backend's ``device_kind`` and the physical device index."""
    from core.backends import backend_class

    kind = backend_class(backend).device_kind
    ident = str(int(device))
    if kind == "gpu":
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if 0 <= int(device) < len(visible):
            ident = visible[int(device)]
    return f"{kind}-{re.sub(r'[^A-Za-z0-9_.-]', '_', ident)}"


def cluster_devices(cluster: str, device: int) -> list[int] | None:
    """The device indices of this host that a run on the Dask cluster ``cluster`` holds: ``local:N``
    starts its N workers here, each evaluating on ``device``, so that one; a scheduler address none
    (its workers' devices are on their own hosts). None for a run not on a cluster."""
    if not cluster:
        return None
    return [int(device)] if cluster.startswith("local:") else []


def lock_path(runs_dir: Path | str, backend: str, device: int) -> Path:
    return Path(runs_dir) / LOCK_DIR / f"{device_key(backend, device)}.lock"


class DeviceLock:
    """A held device lock; :meth:`release` (or the process's exit) frees it."""

    def __init__(self, path: Path, fd: int, holder: dict):
        self.path, self._fd, self.holder = path, fd, holder

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no stale holder left behind
        except OSError:
            pass
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> "DeviceLock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire_device(runs_dir: Path | str, backend: str, device: int, what: str, wait_s: float = RETRY_S) -> DeviceLock:
    """Take the device's lock (non-blocking, retried for ``wait_s``); DeviceBusy naming the holder."""
    path = lock_path(runs_dir, backend, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)  # never truncated before it is ours
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _read_holder(fd)
                os.close(fd)
                raise DeviceBusy(_busy_message(backend, device, holder), holder) from None
            time.sleep(0.05)
        except BaseException:
            os.close(fd)
            raise
    holder = {"what": what, "pid": os.getpid(), "host": socket.gethostname(),
              "command": " ".join(sys.argv) or sys.executable, "since": time.strftime("%Y-%m-%d %H:%M:%S"),
              "backend": backend, "device": int(device)}
    data = json.dumps(holder).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    return DeviceLock(path, fd, holder)


@contextlib.contextmanager
def hold_device(runs_dir: Path | str, backend: str, device: int, what: str) -> Iterator[DeviceLock]:
    """Hold the device's lock for the ``with`` block; DeviceBusy (naming the holder) when it is taken."""
    lock = acquire_device(runs_dir, backend, device, what)
    try:
        yield lock
    finally:
        lock.release()


def device_holder(runs_dir: Path | str, backend: str, device: int) -> str | None:
    """Who holds the device (one line), or None when it is free; takes nothing (a shared lock for a
    moment) and writes nothing."""
    try:
        path = lock_path(runs_dir, backend, device)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError, ImportError):  # no lock file: nobody ever held it
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _busy_message(backend, device, _read_holder(fd))
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _read_holder(fd: int) -> dict:
    try:
        raw = os.pread(fd, 1 << 16, 0)
        holder = json.loads(raw.decode()) if raw else {}
        return holder if isinstance(holder, dict) else {}
    except (OSError, ValueError):
        return {}


def _busy_message(backend: str, device: int, holder: dict) -> str:
    key = device_key(backend, device)
    if not holder:
        return f"device {key} ({backend}:{device}) is busy: another AbeBot process holds it"
    command = str(holder.get("command", ""))
    command = command if len(command) <= 120 else command[:117] + "..."
    on = f" on {holder['backend']}:{holder['device']}" if "backend" in holder else ""
    return (f"device {key} ({backend}:{device}) is busy: {holder.get('what', 'another process')}{on} "
            f"(pid {holder.get('pid', '?')}, since {holder.get('since', '?')}: {command}); "
            "wait for it to finish or stop it first")
