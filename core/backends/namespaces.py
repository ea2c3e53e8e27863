"""Linux namespaces for the commands a backend runs on unreviewed source: whether isolation is on,
what the machine offers, and the compile's command line (issue 35, item 4).

This is the part of isolation the compiler needs; it lives here because backends sit below the
evaluation layer. :mod:`core.evaluation.isolation` builds the sandbox's namespaces on the same
probe and switch, and says in words what each mode isolates.

* :func:`mode` -- ``"bwrap"`` where bubblewrap works, else ``"unshare"`` where ``unshare --net`` works,
  else ``"none"`` (probed once per process);
* :func:`enabled` -- whether isolation is asked for (``$ABEBOT_ISOLATE=1``, which the processes a
  check or a run starts inherit); :func:`active` -- the mode commands are wrapped in now;
* :func:`compile_command` -- a compiler command line as it should run: under ``bwrap`` it sees only
  the system's ``/usr`` (compiler, headers, libraries), ``/etc/alternatives``, the loader cache and its
  own folder (writable); no ``/home``, ``/root``, other ``/etc`` files, runs or network. An include
  that :mod:`core.backends.c_guard` lets through (a relative name) but that resolves outside those
  (a symbolic link planted in the cache) fails with "No such file or directory" and quotes nothing.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

ENV = "ABEBOT_ISOLATE"  # "1": isolate where the machine can; anything else: do not
MODES = ("bwrap", "unshare", "none")
# What the compile sees of the system: the toolchain, its headers and libraries, the loader's cache.
COMPILE_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/alternatives",
                  "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
_PROBE_TIMEOUT_S = 10


@lru_cache(maxsize=1)
def mode() -> str:
    """``"bwrap"`` where bubblewrap can build the sandbox here, else ``"unshare"`` where ``unshare --net``
    works, else ``"none"`` (probed once per process by running ``true`` under each)."""
    if _works([*bwrap_base(), "--", "true"]):
        return "bwrap"
    if _works([*unshare_base(), "--", "true"]):
        return "unshare"
    return "none"


def enabled() -> bool:
    """Whether isolation is asked for (``$ABEBOT_ISOLATE=1``); it applies where :func:`mode` is not ``none``."""
    return os.environ.get(ENV, "").strip() == "1"


def active() -> str:
    """The mode commands are wrapped in now: ``"none"`` when isolation is off or unavailable."""
    return mode() if enabled() else "none"


def compile_command(cmd: list[str], folder: str | Path) -> list[str]:
    """``cmd`` (a compiler command line) as it should run: unchanged when isolation is not active;
    under ``bwrap`` it sees the system's toolchain and ``folder`` (writable) only; under ``unshare`` it
    has no network."""
    how = active()
    if how == "unshare":
        return [*unshare_base(), "--", *cmd]
    if how != "bwrap":
        return list(cmd)
    folder = str(Path(folder).absolute())
    args = ["bwrap"]
    for path in COMPILE_SYSTEM:
        args += _system_bind(path)
    tool = shutil.which(cmd[0]) if cmd else None
    if tool and not Path(tool).resolve().is_relative_to("/usr"):  # a $CC outside /usr: its folder, read-only
        args += ["--ro-bind", str(Path(tool).resolve().parent), str(Path(tool).resolve().parent)]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--bind", folder, folder, "--chdir", folder,
             "--unshare-all", "--die-with-parent", "--new-session", "--setenv", "TMPDIR", "/tmp", "--"]
    return [*args, *cmd]


def bwrap_base() -> list[str]:
    """The namespaces every bwrap sandbox gets (the probe runs ``true`` under them)."""
    return ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-net", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--die-with-parent", "--new-session"]


def unshare_base() -> list[str]:
    """``unshare --net`` (mapping the user to root where it is not root already)."""
    return ["unshare", "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"])


def _system_bind(path: str) -> list[str]:
    """A system path as the compile sees it: a symbolic link as the same link (/bin -> usr/bin), a
    file or folder bound read-only, nothing when it is not there."""
    p = Path(path)
    if p.is_symlink():
        return ["--symlink", os.readlink(p), path]
    return ["--ro-bind", path, path] if p.exists() else []


def _works(cmd: list[str]) -> bool:
    if not cmd or shutil.which(cmd[0]) is None:
        return False
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=_PROBE_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
