"""What the soak (:mod:`benchmarks.tools.soak`) reads of the machine: processes under the worker in
/proc (the sandbox, a compile in flight), their RSS and memory mappings, file sizes, and a filler
that takes a filesystem to ENOSPC."""
from __future__ import annotations

import errno
import os
from pathlib import Path

COMPILERS = {"cc", "gcc", "cc1", "as", "ld", "ld.bfd", "ld.gold", "collect2", "burst-cc.sh", "clang"}


def rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def maps(pid: int) -> int | None:
    """Memory mappings of ``pid`` (lines of /proc/<pid>/maps), None once it is gone."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    """Child processes of ``pid`` (every thread's, from /proc/<pid>/task/*/children)."""
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    except OSError:
        pass
    return out


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def sandbox_pid(worker: int) -> int | None:
    """The worker's sandbox: the descendant named abebot-sandbox or running core.evaluation.sandbox,
    else the multiprocessing child it is spawned as (the largest by RSS when there are several)."""
    procs = {p: (_comm(p), _cmdline(p)) for p in _descendants(worker)}
    found = [p for p, (comm, cmd) in procs.items()
             if comm.startswith("abebot-sandbox") or "core.evaluation.sandbox" in cmd]
    if not found:
        found = [p for p, (_, cmd) in procs.items() if "spawn_main" in cmd]
    return max(found, key=lambda p: rss(p) or 0) if found else None


def launcher_pid(under: int) -> int | None:
    """The kernel launcher under ``under`` (the worker or its sandbox): the process running
    ``core.evaluation.launcher``, which loads every kernel (the judge, the sandbox process, never does);
    the largest by RSS when there are several, None when there is none."""
    found = [p for p in _descendants(under) if "core.evaluation.launcher" in _cmdline(p)]
    return max(found, key=lambda p: rss(p) or 0) if found else None


def compilers(worker: int) -> list[int]:
    """Compiler processes started by the worker (a compile in flight: the driver is its child)."""
    return [p for p in _children(worker) if _comm(p) in COMPILERS or _comm(p).startswith("cc1")]


def fill_to_enospc(path: Path) -> int:
    """Grow ``path`` until its filesystem refuses more (ENOSPC): fallocate in halving chunks, then
    single pages written. Returns the bytes it holds."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    size, chunk = 0, 64 << 20
    try:
        while chunk >= 4096:
            try:
                os.posix_fallocate(fd, size, chunk)
                size += chunk
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                chunk //= 2
        page = b"\0" * 512
        while True:
            try:
                if os.pwrite(fd, page, size) <= 0:
                    break
                size += len(page)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                break
    finally:
        os.close(fd)
    return size


def read_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tree_size(path: Path) -> int:
    return sum(size(p) for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0
