"""Free space for a run: the threshold below which a run pauses, and telling a full disk from other errors.

The worker (:mod:`core.run.worker`) asks :class:`DiskGuard` before every generation and every commit.
``$ABEBOT_MIN_FREE_BYTES`` sets the threshold (``0`` turns the check off, leaving only the ENOSPC
retry); ``$ABEBOT_DISK_POLL_S`` how often a paused run looks again.
"""
from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path

from store.runs import DB

MIN_FREE_ENV = "ABEBOT_MIN_FREE_BYTES"  # free-space threshold: bytes, or with a K/M/G suffix (powers of 1024)
DISK_POLL_ENV = "ABEBOT_DISK_POLL_S"  # how often a disk-full pause looks again (seconds)
MIN_FREE_FLOOR = 1 << 30
GENERATIONS_OF_HEADROOM = 8  # the default threshold keeps room for this many of the largest generations
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
RETRY_MARGIN = 64 << 20  # after ENOSPC, wait until at least this much more is free (a shared disk jitters)
RETRY_AFTER_POLLS = 60  # after ENOSPC, retry at least this often even if free space has not grown (quotas)


def parse_bytes(text: str) -> int:
    """``"1073741824"``, ``"512M"``, ``"1.5G"`` or ``"1GiB"`` -> bytes (K, M, G, T are powers of 1024)."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = 1
    if raw[-1:] in "KMGT" and raw[-1:]:
        scale, raw = 1 << (10 * ("KMGT".index(raw[-1]) + 1)), raw[:-1]
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"${MIN_FREE_ENV} must be a size such as 2G or 500M (got {text!r})") from None
    if not value >= 0:
        raise ValueError(f"${MIN_FREE_ENV} must not be negative (got {text!r})")
    return int(value * scale)


def disk_full(exc: BaseException | None) -> BaseException | None:
    """The exception in ``exc``'s chain (itself, or one it was raised from or during) that says the disk
    or quota is full, else None.

    DuckDB reports a failed WAL write as a TransactionException carrying the OS message, and the
    writer's ROLLBACK after it raises again, so the whole chain is searched."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return exc
        if any(os.strerror(e) in str(exc) for e in DISK_FULL_ERRNOS):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def size_text(n: float) -> str:
    """Bytes in the unit that keeps them readable: ``0 B``, ``512 B``, ``3.5 MiB``, ``1.25 GiB`` (a
    4 MiB threshold read ``0.00 GiB`` in GiB alone)."""
    n = max(0.0, float(n))
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}"
    return f"{int(n)} B"


class DiskGuard:
    """Free space on the filesystem of the runs folder, against the threshold below which runs pause."""

    def __init__(self, runs_dir: Path, run_dir: Path, env: dict | None = None):
        env = os.environ if env is None else env
        self.runs_dir, self.run_dir = runs_dir, run_dir
        raw = (env.get(MIN_FREE_ENV) or "").strip()
        self.fixed = parse_bytes(raw) if raw else None
        self.poll_s = float(env.get(DISK_POLL_ENV) or 2.0)
        self.gen_bytes = 0  # the largest growth of the run's database over one commit, in this process
        self.wanted = 0  # after a failed write: free space to wait for before retrying

    def threshold(self) -> int:
        if self.fixed is not None:
            return self.fixed
        return max(MIN_FREE_FLOOR, GENERATIONS_OF_HEADROOM * self.gen_bytes)

    def free(self) -> int:
        return shutil.disk_usage(self.runs_dir).free

    def shortage(self) -> tuple[int, int] | None:
        """(free bytes, bytes wanted) while space is short, else None."""
        free, need = self.free(), max(self.threshold(), self.wanted)
        return (free, need) if free < need else None

    def write_failed(self) -> None:
        """A write hit ENOSPC: wait for more room than there is now before trying again."""
        self.wanted = self.free() + max(GENERATIONS_OF_HEADROOM * self.gen_bytes, RETRY_MARGIN)

    def footprint(self) -> int:
        """Bytes of the run's database and its write-ahead log."""
        total = 0
        for name in (DB, f"{DB}.wal"):
            try:
                total += (self.run_dir / name).stat().st_size
            except OSError:
                pass
        return total

    def committed(self, before: int) -> None:
        """Record the growth of one commit (from the footprint ``before`` it)."""
        self.gen_bytes = max(self.gen_bytes, self.footprint() - before)
        self.wanted = 0


def wait_for_room(path: Path | str, margin: int = RETRY_MARGIN, env: dict | None = None) -> None:
    """Block until the filesystem of ``path`` has ``margin`` bytes more free than now, or
    :data:`RETRY_AFTER_POLLS` polls have passed (a quota frees nothing we can see): for a write
    that failed with ENOSPC, before it is tried again."""
    env = os.environ if env is None else env
    poll_s = float(env.get(DISK_POLL_ENV) or 2.0)
    try:
        want = shutil.disk_usage(path).free + margin
    except OSError:
        want = 0
    for _ in range(RETRY_AFTER_POLLS):
        time.sleep(poll_s)
        try:
            if shutil.disk_usage(path).free >= want:
                return
        except OSError:
            return


def space_short(paths: list[Path | str], floor: int = MIN_FREE_FLOOR) -> Path | None:
    """The first of ``paths`` whose filesystem has less than ``floor`` bytes free, else None: a
    write that failed with ENOSPC there was the machine's fault, not the writer's."""
    for path in paths:
        try:
            if shutil.disk_usage(path).free < floor:
                return Path(path)
        except OSError:
            continue
    return None
