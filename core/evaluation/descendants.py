"""The processes a sandbox's kernels start, found and killed (issue 35, item 3).

A kernel may ``fork``, double-fork, or ``setsid()`` and keep running after its launch returned, after
the check said ``ok`` and after the sandbox exited. So the sandbox puts itself in a process group of
its own and makes itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``): an orphaned
descendant, however it detached, is re-parented to the sandbox instead of to init. After each request
:func:`sweep` kills every descendant the sandbox did not have when its server was built, reaps them, and
names them, and the verdict says ``crashed: left a process running``.

Under bubblewrap the sandbox is inside a PID namespace with its own ``/proc``: :func:`sweep` (run by
the sandbox) sees and names that namespace's pids, while :func:`kill_tree` and :class:`Watch` (run by
the parent, whose child is ``bwrap``) see host pids. Both are right where they run.

Linux only (``/proc``); elsewhere nothing is found and nothing is killed.
"""
from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
SWEEP_SECONDS = 5.0  # a fork bomb is killed in passes; past this the sweep gives up and says so


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; False where it cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's), from ``/proc/<pid>/task/*/children``, else
    by scanning every process's parent."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    readable = False
    for task in tasks:
        try:
            found.extend(int(x) for x in (task / "children").read_text().split())
            readable = True
        except (OSError, ValueError):
            continue
    if readable:
        return sorted(set(found))
    return [p for p in _all_pids() if _stat(p)[1] == pid]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` in the process tree, parents before their children."""
    out, todo, seen = [], [pid], {pid}
    while todo:
        for child in children(todo.pop(0)):
            if child not in seen:
                seen.add(child)
                out.append(child)
                todo.append(child)
    return out


def describe(pid: int) -> str:
    """``"pid 123 (sleep)"``."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        comm = "?"
    return f"pid {pid} ({comm})"


def running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    return _stat(pid)[0] not in ("", "Z", "X")


def sweep(keep: frozenset[int] = frozenset()) -> list[str]:
    """Kill every descendant of this process but ``keep`` (and theirs), reap the ones that become this
    process's children, and return a description of each found running (an empty list: none)."""
    me = os.getpid()
    named: dict[int, str] = {}
    deadline = time.monotonic() + SWEEP_SECONDS
    while True:
        found = [p for p in descendants(me) if p not in keep]
        alive = [p for p in found if running(p)]
        for p in alive:
            named.setdefault(p, describe(p))
            _signal(p, signal.SIGKILL)
        reaped = _reap([p for p in children(me) if p not in keep])
        if not alive and not reaped and not [p for p in children(me) if p not in keep]:
            return [named[p] for p in sorted(named)]
        if time.monotonic() > deadline:
            return [named[p] for p in sorted(named)] + ["more still being started when the sweep gave up"]
        if not reaped:
            time.sleep(0.005)  # a killed process is still dying, or being re-parented to us


def kill_tree(pid: int) -> None:
    """From outside: SIGKILL every descendant of ``pid`` (they are reaped by their own parents or,
    once ``pid`` is gone, by init), then the process group ``pid`` leads, if it still has members."""
    for p in descendants(pid):
        _signal(p, signal.SIGKILL)
    kill_group(pid)


class Watch:
    """The parent's record of a child's descendants, taken while it waits on a request, so that those
    still running after the child died (a crash right after a kernel ``setsid()``-forked: re-parented
    to init, out of the child's reach) can still be killed. Each is known by its pid *and* start time,
    so a pid reused by an unrelated process since is never signalled. A process that lives less than
    one look (half a second) before the crash escapes it."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}

    def look(self, pid: int) -> None:
        for p in descendants(pid):
            if p not in self.seen:
                start = _start_time(p)
                if start is not None:
                    self.seen[p] = start

    def kill_survivors(self) -> list[int]:
        """SIGKILL every recorded process still running with its recorded start time; their pids."""
        killed = [p for p, start in self.seen.items() if _start_time(p) == start and running(p)]
        for p in killed:
            _signal(p, signal.SIGKILL)
        self.seen.clear()
        return killed


def _start_time(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        return int(text[text.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def kill_group(pgid: int) -> None:
    """SIGKILL what is left of the process group ``pgid`` (nothing when it is gone). A group's id is
    not reused while it has members, so this reaches no stranger."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _reap(pids: list[int]) -> int:
    done = 0
    for p in pids:
        try:
            got, _ = os.waitpid(p, os.WNOHANG)
            done += got == p
        except ChildProcessError:
            continue
    return done


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stat(pid: int) -> tuple[str, int]:
    """(state letter, parent pid) of ``pid``; ("", 0) when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
        fields = text[text.rindex(")") + 2:].split()
        return fields[0], int(fields[1])
    except (OSError, ValueError, IndexError):
        return "", 0


def _all_pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
