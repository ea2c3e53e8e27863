"""Linux namespaces around the two places an unreviewed kernel's code runs: its compile and its sandbox.

Where bubblewrap (``bwrap``, Debian package ``bubblewrap``) works, and isolation is on
(:func:`enable`; ``python -m core check`` turns it on by default, ``--no-isolate`` off;
``$ABEBOT_ISOLATE=1`` turns it on for any command, runs included):

* **the sandbox process** (:func:`spawn_context`, used by :mod:`core.evaluation.sandbox`) starts under
  ``bwrap``: the whole file system read-only (``--ro-bind / /``), a private empty ``/tmp`` (the
  sandbox's working folder is made there; the compile cache stays readable), writable only its log
  file and, for Triton, Triton's JIT cache, a minimal ``/dev`` plus the NVIDIA device
  nodes when present, no network (``--unshare-net``: only a loopback interface that is down), its own
  PID, IPC and UTS namespaces (every process it leaves behind dies with it), a new session, and it
  dies with its parent (``--die-with-parent``);
* **the C compile** (:func:`core.backends.namespaces.compile_command`, used by
  :mod:`core.backends.c`: the backends' half, below this layer, on the same probe and switch) sees only
  the system's ``/usr`` (compiler, headers, libraries), ``/etc/alternatives`` and the loader cache, and
  its own folder (writable: the compile cache, where the ``.c`` is and the ``.so`` goes); no ``/home``,
  no ``/root``, no ``/etc`` beyond those, no runs folder, no network. The include guard
  (:mod:`core.backends.c_guard`) refuses an absolute or ``..`` include before the compiler runs, in
  every mode; an include it lets through that resolves outside those folders (a symbolic link planted
  in the cache) fails here with "No such file or directory" and quotes nothing.

Where only ``unshare`` works (util-linux, root or unprivileged user namespaces), the mode is
``unshare``: both run with ``unshare --net`` (no network) and nothing else is isolated. With neither,
the mode is ``none`` and :func:`describe` says so plainly. docs/security.md lists what each mode
isolates and the test that shows each claim (tests/test_isolation_namespaces.py).
"""
from __future__ import annotations

import contextlib
import io
import glob
import multiprocessing as mp
import os
import shutil
import signal
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from multiprocessing import popen_spawn_posix, reduction, spawn, util
from pathlib import Path
from typing import Iterable, Iterator

from core.backends import namespaces
from core.backends.namespaces import COMPILE_SYSTEM, ENV, MODES, compile_command  # noqa: F401 (one implementation)

WRITABLE_ENV = "ABEBOT_ISOLATE_WRITABLE"  # more folders the sandbox may write (os.pathsep-separated)
READABLE_ENV = "ABEBOT_ISOLATE_READABLE"  # folders under /tmp the sandbox must still read (the compile cache)
PID_NAMESPACE_ENV = "ABEBOT_SANDBOX_PID_NAMESPACE"  # set inside a bwrap sandbox: the pids it sees are its own


# ---- what the machine offers ---------------------------------------------------------------------

def mode() -> str:
    """``"bwrap"``, ``"unshare"`` or ``"none"``: what this machine offers
    (:func:`core.backends.namespaces.mode`, probed once per process)."""
    return namespaces.mode()


def why_not() -> str:
    """Why there is no full isolation here ("" when bwrap works)."""
    if mode() == "bwrap":
        return ""
    if shutil.which("bwrap") is None:
        found = "bubblewrap is not installed (apt-get install bubblewrap)"
    else:
        found = "bwrap is installed but cannot create namespaces here (a container without user namespaces?)"
    return found + ("; unshare --net works, so only the network is cut off" if mode() == "unshare" else "")


def describe(on: bool | None = None) -> str:
    """One plain line saying what a check will be isolated by, for ``core check`` and the Check page."""
    on = enabled() if on is None else on
    if not on and mode() != "none":
        return ("isolation off: the kernel compiles and runs as you, and can read and write your files and "
                "use the network")
    if mode() == "bwrap":
        return ("isolated with bubblewrap: no network, read-only file system, private /tmp, only its own "
                "folders writable, the compile sees no file outside the system's /usr")
    if mode() == "unshare":
        return f"isolated by unshare: no network only; files are NOT isolated ({why_not()})"
    return f"NOT isolated: {why_not()}; the kernel can read and write your files and use the network"


# ---- on or off -----------------------------------------------------------------------------------

def enable(on: bool, writable: Iterable[str | Path] = (), readable: Iterable[str | Path] = ()) -> None:
    """Turn isolation on or off for this process and the processes it starts (through the environment:
    the dashboard's ``core check`` subprocess and spawned workers inherit it). ``writable``: folders the
    sandbox may write besides its own (Triton's JIT cache); ``readable``: folders it must read although
    they may lie under /tmp, which it sees empty (the compile cache, where its kernels are)."""
    os.environ[ENV] = "1" if on else "0"
    for key, paths in ((WRITABLE_ENV, writable), (READABLE_ENV, readable)):
        extra = [str(Path(p).absolute()) for p in paths]
        if extra:  # added to what the user listed there
            listed = [p for p in os.environ.get(key, "").split(os.pathsep) if p]
            os.environ[key] = os.pathsep.join(dict.fromkeys([*listed, *extra]))


@contextlib.contextmanager
def turned(on: bool, writable: Iterable[str | Path] = (), readable: Iterable[str | Path] = ()) -> Iterator[None]:
    """:func:`enable` for the duration of a ``with`` block; the environment is restored after it."""
    saved = {k: os.environ.get(k) for k in (ENV, WRITABLE_ENV, READABLE_ENV)}
    enable(on, writable, readable)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def enabled() -> bool:
    """Whether isolation is asked for (``$ABEBOT_ISOLATE=1``); it applies where :func:`mode` is not ``none``."""
    return namespaces.enabled()


def active() -> str:
    """The mode commands are wrapped in now: ``"none"`` when isolation is off or unavailable."""
    return mode() if enabled() else "none"


# ---- the sandbox process ---------------------------------------------------------------------------

def sandbox_prefix(writable: Iterable[str | Path] = (), spec: dict | None = None) -> list[str]:
    """The command prefix the sandbox process starts under ([] when isolation is not active).
    ``writable``: files or folders it may write (a file is created empty first, so it can be bound);
    ``spec``: the sandbox's spec, whose ``cache_dir`` (the compile cache) it reads, and where its
    backend's runtime writes while loading a kernel (:meth:`core.backends.base.Backend.load_writes`:
    Triton's JIT cache) it writes."""
    how = active()
    if how == "unshare":
        return [*namespaces.unshare_base(), "--"]
    if how != "bwrap":
        return []
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
    for node in sorted(glob.glob("/dev/nvidia*")):  # the GPU's device nodes (nvidia0, nvidiactl, nvidia-uvm, caps)
        args += ["--dev-bind", node, node]
    args += ["--proc", "/proc", "--tmpfs", "/tmp"]
    cache = (spec or {}).get("cache_dir")
    for path in _under_tmp_to_read([cache] if cache else []):
        args += ["--ro-bind", path, path]
    extra = [p for p in os.environ.get(WRITABLE_ENV, "").split(os.pathsep) if p]
    extra += _load_writes(spec or {})
    for path in (*map(str, writable), *extra):
        target = Path(path).absolute()
        if str(target).startswith("/dev/"):  # os.devnull: the fresh /dev has it already
            continue
        if not target.exists():
            if target.suffix:  # a file (the log): create it, then bind it
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            else:
                target.mkdir(parents=True, exist_ok=True)
        args += ["--bind", str(target), str(target)]
    args += ["--unshare-net", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--die-with-parent",
             "--new-session", "--setenv", "TMPDIR", "/tmp", "--setenv", PID_NAMESPACE_ENV, "1", "--"]
    return args


def _load_writes(spec: dict) -> list[str]:
    """The folders the spec's backend writes while loading its kernels, asked of the backend (its
    kernels are compiled into ``<cache_dir>/<backend>/``, :class:`core.evaluation.evaluator.Evaluator`)."""
    backend, cache = spec.get("backend"), spec.get("cache_dir")
    if not backend or not cache:
        return []
    try:
        from core.backends import backend_class

        return [str(p) for p in backend_class(backend).load_writes(Path(cache) / backend)]
    except (ImportError, ValueError):  # an unknown or broken backend: the sandbox will say so itself
        return []


def _under_tmp_to_read(readable: list[str]) -> list[str]:
    """What the sandbox must still read under /tmp (a checkout, a runs folder there): ``readable`` and
    the folders of ``$ABEBOT_ISOLATE_READABLE``, this interpreter's import path, the working folder and
    the main script."""
    import sys

    listed = [*map(str, readable), *(p for p in os.environ.get(READABLE_ENV, "").split(os.pathsep) if p)]
    for path in listed:  # made now if missing (a compile cache not yet written): bwrap binds only what exists
        Path(path).mkdir(parents=True, exist_ok=True)
    main = getattr(sys.modules.get("__main__"), "__file__", None)  # spawn re-runs a main script by its path
    found = []
    for path in (*listed, *sys.path, os.getcwd(), *([main] if main else [])):
        p = Path(path or os.getcwd()).absolute()
        if p.is_relative_to("/tmp") and p != Path("/tmp") and p.exists() and str(p) not in found:
            found.append(str(p))
    return found


def spawn_context(writable: Iterable[str | Path] = (), spec: dict | None = None) -> mp.context.BaseContext:
    """A ``multiprocessing`` context like ``get_context("spawn")`` whose processes start under
    :func:`sandbox_prefix` (the plain spawn context when isolation is not active)."""
    prefix = sandbox_prefix(writable, spec)
    if not prefix:
        return mp.get_context("spawn")
    return _IsolatedContext(prefix)


class _IsolatedPopen(popen_spawn_posix.Popen):
    """multiprocessing's spawn launcher with a command prefix (CPython's ``_launch``, whose one exec line
    gains the process's ``_abebot_prefix``). A child killed by a signal reads as killed by it: bwrap
    exits with 128 + the signal's number instead."""

    def __init__(self, process_obj):
        self.prefix = list(getattr(process_obj, "_abebot_prefix", []))
        super().__init__(process_obj)

    def _launch(self, process_obj):
        from multiprocessing import resource_tracker
        from multiprocessing.context import set_spawning_popen

        tracker_fd = resource_tracker.getfd()
        self._fds.append(tracker_fd)
        prep_data = spawn.get_preparation_data(process_obj._name)
        fp = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, fp)
            reduction.dump(process_obj, fp)
        finally:
            set_spawning_popen(None)
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            cmd = [*self.prefix, *spawn.get_command_line(tracker_fd=tracker_fd, pipe_handle=child_r)]
            self._fds.extend([child_r, child_w])
            exe = os.fsencode(shutil.which(cmd[0]) or cmd[0])
            self.pid = _launcher().submit(util.spawnv_passfds, exe, cmd, self._fds).result()
            self.sentinel = parent_r
            with open(parent_w, "wb", closefd=False) as f:
                f.write(fp.getbuffer())
        finally:
            self.finalizer = util.Finalize(self, util.close_fds, [fd for fd in (parent_r, parent_w) if fd is not None])
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)

    def poll(self, flag=os.WNOHANG):
        code = super().poll(flag)
        if code is not None and code > 128 and (code - 128) in {s.value for s in signal.Signals}:
            self.returncode = code = -(code - 128)
        return code


@lru_cache(maxsize=1)
def _launcher() -> ThreadPoolExecutor:
    """The one thread that forks every isolated process. ``bwrap --die-with-parent`` (PR_SET_PDEATHSIG)
    kills the sandbox when the *thread* that forked it ends, not the process: a sandbox (re)started from
    a short-lived thread (a pool's worker) would die with it. This thread lives as long as the process."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="abebot-isolated-launcher")


class IsolatedProcess(mp.context.SpawnProcess):
    """A spawned process started under its ``_abebot_prefix`` (set by :class:`_IsolatedContext`)."""

    _abebot_prefix: list[str] = []

    @staticmethod
    def _Popen(process_obj):
        return _IsolatedPopen(process_obj)


class _IsolatedContext(mp.context.SpawnContext):
    def __init__(self, prefix: list[str]):
        super().__init__()
        self._prefix = list(prefix)

    def Process(self, *args, **kwargs) -> IsolatedProcess:  # noqa: N802 (multiprocessing's name)
        proc = IsolatedProcess(*args, **kwargs)
        proc._abebot_prefix = list(self._prefix)
        return proc
