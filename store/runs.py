"""The runs folder: run ids, safe run paths, atomic files, liveness, and the list of runs.

Layout of one run (``<runs_dir>/<run_id>/``)::

    config.json      the RunConfig as JSON (written once)
    run.duckdb       the database; only the worker opens it while the run is alive
    live/            Parquet mirrors of committed generations (derived; rebuilt from the DB)
    heartbeat.json   the worker's pid, status, progress (atomic)
    control.json     pause/resume/stop from the dashboard (atomic)
    worker.log       the worker's log
    worker.lock      flock'd by the writer

Nothing here opens DuckDB, so the dashboard can list runs while they are written.
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

# A run id is a folder name: no separators, no dots, so it can never leave the runs folder.
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

CONFIG, DB, LIVE, HEARTBEAT, CONTROL, LOG, LOCK = (
    "config.json", "run.duckdb", "live", "heartbeat.json", "control.json", "worker.log", "worker.lock")
STATUSES = ("running", "paused", "finished", "stopped", "failed")
# A worker heartbeats at least once per generation and during long evaluations; a heartbeat this
# old means the worker is gone or hung even when its pid lives (another host, pid reuse). A worker
# with slower heartbeats widens it by writing ``stale_after_s`` into its heartbeat.
STALE_AFTER_S = 15 * 60
# A run folder with config.json but no heartbeat yet is "starting" for this long, then "dead".
START_GRACE_S = 120


def new_run_id(workload: str, backend: str) -> str:
    """A fresh, sortable run id such as ``20261129-204512-gemm-c-a1b2`` (matches RUN_ID_RE)."""
    def clean(s: str) -> str:
        return "".join(ch for ch in s if ch.isascii() and (ch.isalnum() or ch == "_"))[:20] or "x"
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{clean(workload)}-{clean(backend)}-{secrets.token_hex(2)}"
    assert RUN_ID_RE.match(run_id), run_id
    return run_id


def run_dir(runs_dir: Path | str, run_id: str) -> Path:
    """``runs_dir/run_id``; ValueError unless ``run_id`` is a valid id that stays inside ``runs_dir``.

    Symlinks are resolved, so a run folder that links elsewhere is refused too.
    """
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise ValueError(f"invalid run id {run_id!r}")
    root = Path(runs_dir).resolve()
    path = (root / run_id).resolve()
    if path.parent != root:
        raise ValueError(f"run id {run_id!r} resolves outside {root}")
    return path


def atomic_write_bytes(path: Path | str, data: bytes, durable: bool = True, fsync_folder: bool | None = None) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never a torn one.

    ``durable`` also fsyncs the file and (unless ``fsync_folder`` is False) its folder so the new
    version survives a power cut; heartbeats skip it (an old or missing heartbeat after a power cut
    is harmless).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable and fsync_folder is not False:
        fsync_dir(path.parent)


def atomic_write_json(path: Path | str, obj: Any, durable: bool = True) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=1, sort_keys=True, default=str).encode(), durable)


HEARTBEAT_RESERVE = 8192  # the heartbeat file's size: its blocks are reused when the disk is full


def write_reserved(path: Path | str, data: bytes, reserve: int = HEARTBEAT_RESERVE) -> None:
    """Replace ``path`` with ``data`` padded with spaces to a multiple of ``reserve`` bytes, atomically
    (a temp file and a rename). When the disk is full (ENOSPC, EDQUOT) the file's own blocks are
    overwritten in place instead, so a worker paused for space still shows it (readers retry the
    rare torn read: :func:`read_json`). JSON ignores the padding."""
    path = Path(path)
    try:
        size = max(path.stat().st_size, 0)
    except OSError:
        size = 0
    size = max(-(-(len(data) + 1) // reserve) * reserve, size if size % reserve == 0 else 0)
    padded = data + b" " * (size - len(data) - 1) + b"\n"
    try:
        atomic_write_bytes(path, padded, durable=False)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError:
            raise exc from None
        try:
            if os.fstat(fd).st_size < len(padded):
                raise exc from None
            os.pwrite(fd, padded, 0)
        finally:
            os.close(fd)


def fsync_dir(path: Path | str) -> None:
    """Make a rename in ``path`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_json(path: Path | str, tries: int = 3) -> Any:
    """Parsed JSON, or None when the file is missing or not valid JSON (read ``tries`` times, a few
    ms apart, before it is called invalid: a heartbeat rewritten in place may be caught torn)."""
    for attempt in range(tries):
        try:
            return json.loads(Path(path).read_text())
        except OSError:
            return None
        except ValueError:
            if attempt < tries - 1:
                time.sleep(0.005)
    return None


def lock_holder(path: Path | str) -> int | None:
    """The pid holding the flock on ``path/worker.lock`` (Linux ``/proc/locks``), else None.

    Read without touching the lock: taking it, even shared and for a moment, could make a worker
    starting at that instant fail to get it.
    """
    try:
        st = (Path(path) / LOCK).stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in text.splitlines():  # "1: FLOCK  ADVISORY  WRITE <pid> <maj>:<min>:<inode> 0 EOF"
        fields = line.split()  # (a waiter's line has "->" second, and is skipped)
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5].rsplit(":", 1)[-1] != str(st.st_ino):
            continue  # the inode alone: on overlayfs the lock names the upper file's device, not the stat's
        try:
            return int(fields[4])
        except ValueError:
            return -1
    return None


def process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux), to tell a live worker from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counted after "pid (comm)"


def pid_alive(pid: int, start: str | None = None) -> bool:
    """Whether ``pid`` runs on this host (and, when ``start`` is given, is the same process)."""
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError, TypeError):
        return False
    if start is not None:
        now = process_start(int(pid))
        if now is not None and now != start:
            return False
    return True


def this_process() -> dict:
    """Identity fields a heartbeat carries so others can check the writer is alive."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "pid_start": process_start(os.getpid())}


def effective_status(path: Path | str, heartbeat: dict | None = None, now: float | None = None) -> str:
    """The run's status as the dashboard should show it.

    The recorded status, except ``dead`` when it says running/paused but its worker is gone: the pid
    is not alive on this host (or is a different process now), or the heartbeat is older than
    ``STALE_AFTER_S`` (or the heartbeat's own ``stale_after_s``). ``starting`` when there is no
    heartbeat yet and config.json is younger than ``START_GRACE_S``.
    """
    path = Path(path)
    now = time.time() if now is None else now
    hb = read_json(path / HEARTBEAT) if heartbeat is None else heartbeat
    if not isinstance(hb, dict):
        try:
            young = now - (path / CONFIG).stat().st_mtime < START_GRACE_S
        except OSError:
            young = False
        return "starting" if young else _held_status(path, None)
    status = str(hb.get("status") or "dead")
    if status not in ("running", "paused"):
        return status
    stale = float(hb.get("stale_after_s") or STALE_AFTER_S)
    if now - float(hb.get("updated_at") or 0) > stale:
        return _held_status(path, status)
    if hb.get("host") in (None, socket.gethostname()) and not pid_alive(hb.get("pid"), hb.get("pid_start")):
        return _held_status(path, status)
    return status


def _held_status(path: Path, recorded: str | None) -> str:
    """``dead``, unless a process still holds the run's worker.lock: a worker that is suspended,
    hung, or paused on a full disk it cannot write its heartbeat to. Then ``paused`` when the last
    line of worker.log says so, else the recorded status (``running`` without one)."""
    if lock_holder(path) is None:
        return "dead"
    last = _last_log_line(path / LOG)
    if " paused" in last and " resumed" not in last:
        return "paused"
    return recorded if recorded in ("running", "paused") else "running"


def _last_log_line(path: Path, size: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def list_runs(runs_dir: Path | str) -> list[dict]:
    """Every run in ``runs_dir``, newest first, without opening any database.

    Keys: run_id, workload, backend, status, generation, created_at, updated_at, total_generations,
    message, and the champion's figure (:func:`champion_figure`: best_fitness, champion_speedup...). Folders that are not runs (``.cache``, stray files) are skipped; a
    run whose config.json is unreadable is listed with status ``corrupt``.
    """
    root = Path(runs_dir)
    out: list[dict] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return out
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False) or not RUN_ID_RE.match(entry.name):
            continue
        path = Path(entry.path)
        if not (path / CONFIG).exists():
            continue
        cfg = read_json(path / CONFIG)
        hb = read_json(path / HEARTBEAT)
        hb = hb if isinstance(hb, dict) else None
        try:
            mtime = (path / CONFIG).stat().st_mtime
        except OSError:
            continue
        row = {
            "run_id": entry.name,
            "workload": cfg.get("workload") if isinstance(cfg, dict) else None,
            "backend": cfg.get("backend") if isinstance(cfg, dict) else None,
            "status": effective_status(path, hb) if isinstance(cfg, dict) else "corrupt",
            "generation": (hb or {}).get("generation"),
            **champion_figure(path),
            "created_at": (hb or {}).get("created_at", mtime),
            "updated_at": (hb or {}).get("updated_at", mtime),
            "total_generations": (hb or {}).get("total_generations",
                                                cfg.get("generations") if isinstance(cfg, dict) else None),
            "message": (hb or {}).get("message", "" if isinstance(cfg, dict) else "config.json unreadable"),
        }
        out.append(row)
    out.sort(key=lambda r: (r["created_at"] or 0, r["run_id"]), reverse=True)
    return out


CHAMPION_FIELDS = ("best_fitness", "champion_hash", "champion_speedup", "champion_speedup_spread", "champion_noisy",
                   "champion_samples", "cache")


def champion_figure(path: Path) -> dict:
    """The run's champion as every view shows it -- ``core runs``, Runs, Monitor, the heartbeat and
    Export alike: the latest generation's champion, its fitness (``best_fitness``: that generation's
    best, scored from the median of the champion's re-measurements, not the best single timing of
    any generation), its paired speed-up over the primary baseline (the median of its
    re-measurements), their spread, the noisy mark and the cache policy. Columns a run from before
    them lacks are None."""
    import pyarrow.parquet as pq

    from store.live_files import generation_files

    out: dict = dict.fromkeys(CHAMPION_FIELDS)
    table = None
    for _ in range(3):
        files = generation_files(path / LIVE)
        if not files:
            return out
        try:  # the last part holds the latest generation
            table = pq.read_table(files[-1])
            break
        except FileNotFoundError:  # merged into a chunk since the listing: list again
            continue
        except (OSError, ValueError, KeyError):
            return out
    if table is None or not table.num_rows:
        return out
    for name in CHAMPION_FIELDS:
        if name in table.column_names:
            out[name] = table.column(name)[table.num_rows - 1].as_py()
    return out


def speedup_text(fig: dict) -> str:
    """``1.48x ±0.01, 3 timings, cold`` (``NOISY`` appended when marked); "" without a paired speed-up."""
    if fig.get("champion_speedup") is None:
        return ""
    spread, n = fig.get("champion_speedup_spread"), fig.get("champion_samples")
    return (f"{fig['champion_speedup']:.3f}x" + (f" ±{spread:.3f}" if spread is not None else "")
            + (f", {n} timing{'s' if n != 1 else ''}" if n else "") + (f", {fig['cache']}" if fig.get("cache") else "")
            + (" NOISY" if fig.get("champion_noisy") else ""))


def champion_text(fig: dict) -> str:
    """``2.8978 (1.48x ±0.01, 3 timings, cold)``; ``-`` without a champion."""
    if fig.get("best_fitness") is None:
        return "-"
    speed = speedup_text(fig)
    return f"{fig['best_fitness']:.4f}" + (f" ({speed})" if speed else "")
