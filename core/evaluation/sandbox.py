"""The sandboxed evaluator process and its watchdog.

A bad kernel may segfault, loop forever or (on a GPU) leave a sticky CUDA error that poisons its
process. So kernels run only in a child process started with the ``spawn`` method (never ``fork``:
a forked CUDA context is unusable), and the parent talks to it over a :class:`multiprocessing.Pipe`,
one request and one reply at a time, so each candidate's result comes back on its own.

The child builds its *server* once (``spec["server"]``, ``"module:callable"``, called with the spec;
the evaluator's is :class:`core.evaluation.protocol.Protocol`), then answers requests with ``server.handle``.
The Protocol is a *judge* that never loads a kernel: it starts a launcher process of its own
(:mod:`core.evaluation.judge`, :mod:`core.evaluation.launcher`) that loads and launches kernels on the
judge's shared buffers. The launcher is the child's descendant: everything below applies to it (its
kernels' processes are swept, its death is the reply's ``crashed``), and the child is not dumpable, so the
launcher cannot reach into it.
The parent's :class:`Sandbox` turns every way the child can fail into a reply dict:

* no reply within the timeout -> ``{"status": "timeout"}``; the child is killed and restarted;
* the child dies (a signal such as SIGSEGV, or an exit) -> ``{"status": "crashed", "cause": ...}``
  with the signal's name; the child is restarted;
* the reply asks for ``"restart": True`` (a sticky device error) -> the reply as is, then a restart;
* the child is killed from outside (SIGKILL, say by the OOM killer, or SIGTERM: signals no limit
  and no candidate fault sends; the watchdog's own kills are timeouts) -> the request is sent once
  more to a fresh child, and only a second such death is the candidate's ``crashed``.

The child's stdout and stderr (C ``printf`` too, and faulthandler's traceback on a crash) go to a
log file, never to the terminal; it ignores SIGINT so Ctrl-C reaches only the parent.

Nothing a kernel starts outlives its request (:mod:`core.evaluation.descendants`): the child leads a
process group of its own and is a child subreaper, so every process a kernel forks, double-forks or
``setsid()`` stays its descendant. After each request it kills and reaps them all, and a reply
becomes ``crashed: left a process running (pid N (name))`` when any was found running. A child
killed on a timeout or at close has its descendants and its process group killed by the parent; one
that died has its process group killed, and every descendant the parent saw while it worked
(:class:`~core.evaluation.descendants.Watch`).

Under bubblewrap (:mod:`core.evaluation.isolation`) the parent's child is ``bwrap``, and the sandbox
runs below it in a PID namespace of its own, as a session leader. Its sweep works the same there, on
that namespace's pids (the verdict says so); the parent's kills of the tree and the watch work on host
pids below ``bwrap`` (its process-group kill finds no group: bwrap leads none); and whatever is still
in the namespace when the sandbox ends, a crash included, dies with the namespace.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from core.evaluation.descendants import Watch, become_subreaper, descendants, kill_group, kill_tree, sweep
from core.evaluation.limits import limit_address_space as _limit_address_space
from core.evaluation.limits import rearm_cpu_time as _limit_cpu_time
from core.evaluation.limits import set_limit as _set_limit
from core.evaluation.workdir import fresh_workdir as _fresh_workdir
from core.evaluation.workdir import remove_workdir as _remove_workdir

STARTUP_TIMEOUT_S = 180.0  # spawning and importing a GPU stack (torch, triton) can take a while
# Signals that end a child without a limit or a candidate fault behind them: the OOM killer's SIGKILL
# (the CPU-time limit is soft: it sends SIGXCPU), or someone's SIGTERM. A kernel may still send one to
# itself: its request is then retried once and is crashed the second time.
OUTSIDE_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM})


_DEAD = object()  # _receive's answer when the child has gone


class SandboxError(RuntimeError):
    """The sandbox itself cannot work (its server fails to start); not a verdict on a kernel."""


class Sandbox:
    """Parent-side handle on one evaluator process.

    ``spec`` is a picklable dict passed to the child's server factory (backend, device, workload,
    problem...; ``"server"`` names the factory). ``timeout_s`` bounds each :meth:`call`;
    ``log_path`` receives the child's output (appended).
    """

    def __init__(self, spec: dict, timeout_s: float, log_path: Path | str | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.spec = dict(spec)
        self.timeout_s = float(timeout_s)
        self.log_path = str(log_path) if log_path else os.devnull
        self.startup_timeout_s = startup_timeout_s
        self.info: dict = {}  # what the server reported when it became ready
        self.restarts = 0
        self.outside_kills = 0  # deaths by a signal from outside (each retried once)
        self._watch = Watch()  # the child's descendants, seen while it works on a request
        self._proc: mp.process.BaseProcess | None = None
        self._conn: Any = None

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> dict:
        """Start the child and wait until its server is built; SandboxError if it cannot be."""
        if self.alive():
            return self.info
        from core.evaluation.isolation import spawn_context  # Linux namespaces when isolation is on (issue 35)
        ctx = spawn_context([self.log_path], self.spec)  # mp.get_context("spawn") when it is off
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_child_main, args=(child_conn, self.spec, self.log_path),
                           name="abebot-sandbox", daemon=True)
        proc.start()
        child_conn.close()  # only the child holds its end now, so its death reads as EOF here
        self._proc, self._conn = proc, parent_conn
        reply = self._receive(self.startup_timeout_s)
        if not isinstance(reply, dict) or reply.get("status") != "ready":
            reply = reply if isinstance(reply, dict) else {}
            proc.join(1.0)
            why = reply.get("cause") or (describe_exit(proc.exitcode) if not proc.is_alive() else "no answer")
            detail = reply.get("traceback", "")
            self._kill()
            raise SandboxError(f"sandbox server failed to start: {why}\n{detail}".rstrip())
        self.info = reply.get("info", {})
        return self.info

    def restart(self) -> dict:
        """Kill the child (if any) and start a fresh one."""
        self._kill()
        self.restarts += 1
        return self.start()

    def close(self) -> None:
        """Ask the child to exit, then make sure it has."""
        if self._proc is None:
            return
        try:
            self._conn.send({"op": "exit"})
            self._proc.join(2.0)
        except (OSError, EOFError, BrokenPipeError):
            pass
        self._kill()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def __enter__(self) -> "Sandbox":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- requests --------------------------------------------------------------------------------
    def call(self, request: dict, timeout_s: float | None = None) -> dict:
        """Send one request, return its reply; never raises for what the child does.

        A timeout or a dead child gives a ``timeout``/``crashed`` reply and a fresh child. A child
        killed from outside (:data:`OUTSIDE_SIGNALS`) is not the candidate's fault on its own: the
        request is sent again, once, to the fresh child, and its reply is the answer.
        """
        reply = self._call_once(request, timeout_s)
        if not reply.pop("killed_from_outside", False):
            return reply
        self.outside_kills += 1
        first = reply.get("cause", "")
        print(f"[sandbox] {first} from outside during a request: retried once in a fresh sandbox", flush=True)
        reply = self._call_once(request, timeout_s)
        if reply.pop("killed_from_outside", False):
            self.outside_kills += 1
            reply["cause"] = f"{reply.get('cause', '')} twice, the second time in a fresh sandbox"
        return reply

    def _call_once(self, request: dict, timeout_s: float | None) -> dict:
        if self._proc is None:
            self.start()
        elif not self.alive():
            self.restart()
        limit = self.timeout_s if timeout_s is None else timeout_s
        self._watch.seen.clear()  # the last request's were swept by the child
        try:
            self._conn.send(request)
        except (OSError, BrokenPipeError):
            return self._after_death()
        reply = self._receive(limit)
        if reply is _DEAD:
            return self._after_death()
        if reply is None:
            self.restart()
            return {"status": "timeout", "cause": f"no result within {limit:g} s (killed)"}
        if reply.get("restart"):
            self.restart()
        return reply

    def _receive(self, limit: float) -> Any:
        """The next message; None on timeout, ``_DEAD`` when the child is gone."""
        deadline = time.monotonic() + limit
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                if self._conn.poll(min(left, 0.5)):
                    return self._conn.recv()
            except (EOFError, OSError):
                return _DEAD
            self._watch.look(self._proc.pid)
            if not self._proc.is_alive():
                try:
                    return self._conn.recv() if self._conn.poll(0) else _DEAD
                except (EOFError, OSError):
                    return _DEAD

    def _after_death(self) -> dict:
        self._proc.join(5.0)
        code = self._proc.exitcode
        kill_group(self._proc.pid)  # what its kernels left in its process group (now orphans of init)
        killed = self._watch.kill_survivors()  # and those that left the group, seen while it worked
        if killed:
            print(f"[sandbox] killed {len(killed)} process(es) its kernel left running: pids "
                  f"{', '.join(map(str, killed))}", flush=True)
        self.restart()
        reply = {"status": "crashed", "cause": describe_exit(code)}
        if code is not None and code < 0 and -code in OUTSIDE_SIGNALS:
            reply["killed_from_outside"] = True
        return reply

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return
        if proc.is_alive():
            kill_tree(proc.pid)  # its kernels' processes first, while they are still its descendants
            proc.terminate()
            proc.join(2.0)
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
        kill_group(proc.pid)
        self._watch.kill_survivors()


def describe_exit(exitcode: int | None) -> str:
    """``-11`` -> ``"killed by SIGSEGV"``; a positive code -> ``"exited with status N"``."""
    if exitcode is None:
        return "sandbox process vanished"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}"
    return f"sandbox process exited with status {exitcode}"


# -- child side ----------------------------------------------------------------------------------
def _child_main(conn: Any, spec: dict, log_path: str) -> None:
    """Entry point of the evaluator process: isolate, build the server, serve until told to exit.

    ``spec["limits"]`` (optional; the evaluator passes ``core.evaluation.bounds.sandbox_limits``, empty on a
    GPU) bounds the process: ``file_size_bytes`` (RLIMIT_FSIZE, from the start), ``address_space_bytes``
    (RLIMIT_AS: what is mapped once the server is built plus this; never for a GPU backend) and
    ``cpu_seconds`` (RLIMIT_CPU, re-armed before each request). A limit that fires kills the child
    (SIGXFSZ, SIGXCPU) or fails an allocation; either way the parent reports the candidate lethal.
    """
    from core.evaluation.devices import pin

    # torch.compile's baselines compile in this process, not in a pool of workers: on the H200 the pool,
    # started by a second-method timing, was 16 processes "left running" by the kernel being timed.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    pin(spec.get("cores") or ())  # a CPU core set: before the server imports numpy, torch, OpenMP
    limits = dict(spec.get("limits") or {})
    workdir = _isolate(log_path, spec)
    keep: frozenset[int] = frozenset()
    server: Any = None
    try:
        try:
            server = _load(spec.get("server", "core.evaluation.protocol:Protocol"))(spec)
            info = server.info() if hasattr(server, "info") else {}
        except BaseException as exc:  # report any setup failure to the parent, then exit
            conn.send({"status": "error", "cause": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
            return
        _limit_address_space(limits, spec)  # after the server is built: imports are not the kernels' budget
        keep = frozenset(descendants(os.getpid()))  # the server's own (none so far); any later one is a kernel's
        conn.send({"status": "ready", "info": info})
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            if request.get("op") == "exit":
                return
            _limit_cpu_time(limits)
            try:
                reply = server.handle(request)
            except Exception as exc:  # the server should catch its own; this keeps the child serving
                traceback.print_exc()
                reply = {"status": "crashed", "cause": f"{type(exc).__name__}: {exc}"}
            if request.get("op") == "baseline":
                # Library code, not a candidate's: what it starts and keeps (torch.compile's pool of compile
                # workers, started at its first compile) is the server's own from now on. On the H200 the
                # first baseline timing of every torch.compile'd baseline was otherwise "left a process running".
                keep = frozenset(descendants(os.getpid()))
            else:
                left = sweep(keep)
                if left and isinstance(reply, dict):
                    reply = _left_running(reply, left)
            conn.send(reply)
    finally:
        if hasattr(server, "close"):  # the judge's launcher, asked to exit before the sweep
            try:
                server.close()
            except Exception:
                traceback.print_exc()
        sweep(keep)
        _remove_workdir(workdir)


def _left_running(reply: dict, left: list[str]) -> dict:
    """The reply of a request after which processes its kernel started were found running (and killed)."""
    cause = f"left a process running: {', '.join(left[:4])}" + (f" and {len(left) - 4} more" if len(left) > 4 else "")
    if os.environ.get("ABEBOT_SANDBOX_PID_NAMESPACE") == "1":  # under bwrap (core/evaluation/isolation.py)
        cause += " (pids in the sandbox's PID namespace)"
    print(f"[sandbox] {cause}; killed", flush=True)
    if reply.get("status") not in (None, "ok"):
        cause = f"{cause}; {reply.get('status')}: {reply.get('cause', '')}"
    return {**reply, "status": "crashed", "cause": cause}


def _isolate(log_path: str, spec: dict | None = None) -> str | None:
    """Detach from the terminal and the caller's folder; return the fresh working directory.

    Ignores SIGINT, disables core dumps, sends stdout/stderr to the log, applies the file-size
    limit and the first CPU-time budget of ``spec["limits"]``, and moves into a new empty temporary
    directory (removed when the child exits; one left by a killed child is removed by the next), so
    a kernel's relative writes land there and not in the repository or the runs folder.
    """
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.setpgid(0, 0)  # a process group of its own: its kernels' processes are killed with it
    except OSError:
        pass
    become_subreaper()  # orphans of its kernels' processes come back to it, to be swept
    _undumpable()  # its launcher, which runs the kernels, can neither ptrace it nor open its memory
    limits = dict((spec or {}).get("limits") or {})
    _set_limit("RLIMIT_CORE", 0)  # a crashing kernel must not dump a core per candidate
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    log_size = os.fstat(fd).st_size
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    import faulthandler

    # The Python stack of a segfault (or abort) lands in the log: the crashing thread's only. The
    # handler reads other threads' states without the GIL, so a thread starting or exiting meanwhile
    # can crash it, and the process then dies by SIGSEGV instead of its own signal (SIGABRT, say).
    faulthandler.enable(file=sys.stderr, all_threads=False)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True, name="orphan-guard").start()
    applied = []
    if limits.get("file_size_bytes"):
        # Python ignores SIGXFSZ (a write past the limit would only fail with EFBIG, and a kernel
        # ignoring that would pass): the default action kills the child, so the attempt is lethal.
        # The limit is counted from the log's size: the log is appended to past it otherwise.
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        if _set_limit("RLIMIT_FSIZE", log_size + int(limits["file_size_bytes"])):
            applied.append(f"file size {int(limits['file_size_bytes']) >> 20} MiB")
    if _limit_cpu_time(limits):
        applied.append(f"cpu {int(limits['cpu_seconds'])} s per request")
    sys.path[:] = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]  # imports survive the chdir
    workdir = _fresh_workdir()
    print(f"[sandbox {os.getpid()}] started {time.strftime('%Y-%m-%d %H:%M:%S')} in {workdir or os.getcwd()}"
          + (f"; limits: {', '.join(applied)}" if applied else ""), flush=True)
    return workdir


def _undumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)``: a process of the same user without CAP_SYS_PTRACE (the launcher drops
    it, :func:`core.evaluation.launcher.drop_privileges`) can no longer ptrace this one or open its
    ``/proc/<pid>/mem``. The launcher, started by ``exec``, is dumpable again (its own parent may watch it)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _exit_with_parent(parent: int) -> None:
    """Exit when the parent is gone (killed with -9, say), even while a kernel spins in C:
    ctypes releases the GIL during a call, so this thread still runs."""
    while os.getppid() == parent:
        time.sleep(1.0)
    try:
        sweep()
    finally:
        os._exit(1)


def _load(target: str) -> Any:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)
