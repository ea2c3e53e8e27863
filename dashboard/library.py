"""The Library page's data: the libraries found, their coverage grid, their misses, and the build launch.

Libraries are folders holding a ``manifest.json`` (docs/library.md) inside the libraries folders:
``$ABEBOT_LIBRARIES_DIR`` (default ``libraries/`` beside the runs folder) and the repository's
``libraries/`` (the committed ones). The page never takes a typed path. "Build the missing entries"
starts ``python -m core library build --from-misses LIB/misses.jsonl`` in its own session, like a
run: its runs hold the device lock one by one, and the dashboard counts the build as busy on the
device (:func:`dashboard.launch.busy_reason`) while it lives.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pandas as pd

from core.library.manifest import MANIFEST, MISSES, Library
from dashboard.settings import REPO_ROOT


def library_folders(runs: Path) -> list[Path]:
    """The folders searched for libraries: ``$ABEBOT_LIBRARIES_DIR`` (default ``<runs>/../libraries``)
    and the repository's ``libraries/``, each once."""
    first = Path(os.environ.get("ABEBOT_LIBRARIES_DIR") or runs.parent / "libraries").expanduser().resolve()
    return list(dict.fromkeys([first, (REPO_ROOT / "libraries").resolve()]))


def find_libraries(runs: Path) -> list[Path]:
    """Every library folder (one holding a manifest.json) directly inside :func:`library_folders`."""
    found = []
    for folder in library_folders(runs):
        if folder.is_dir():
            found += sorted(p for p in folder.iterdir() if (p / MANIFEST).is_file())
    return found


def run_link(run_id: str | None, text: str) -> str | None:
    """A relative link to the run on the Monitor page that shows ``text`` (the grid's
    ``LinkColumn`` displays the part after ``#``)."""
    return None if not run_id else f"monitor?run={run_id}#{text}"


def part_of(entry) -> str:
    """The model part an entry serves (``qkv``, ``down``...), else its op."""
    return str((entry.provenance or {}).get("part") or entry.op)


def coverage(lib: Library) -> pd.DataFrame:
    """One row per (part, op, fmt, N, K, device), one column per M bucket (``M=1``...): each cell the
    entry's speed-up over its fastest baseline and that baseline, as a link to its run."""
    rows: dict[tuple, dict] = {}
    ms = sorted({e.shape["M"] for e in lib.entries})
    for e in lib.entries:
        key = (part_of(e), e.op, e.fmt, e.shape["N"], e.shape["K"], e.device.get("name"))
        row = rows.setdefault(key, dict(zip(("part", "op", "fmt", "N", "K", "device"), key)))
        f = e.figures or {}
        text = f"{f.get('speedup', 0):.2f}x {f.get('primary', '?')}" + (" noisy" if f.get("noisy") else "")
        row[f"M={e.shape['M']}"] = run_link((e.provenance or {}).get("run_id"), text) or text
    columns = ["part", "op", "fmt", "N", "K", "device", *(f"M={m}" for m in ms)]
    return pd.DataFrame(list(rows.values()), columns=columns)


def read_misses(root: Path) -> list[dict]:
    """The dispatcher's miss records in ``root/misses.jsonl`` (unreadable lines skipped)."""
    try:
        lines = (root / MISSES).read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and all(k in rec for k in ("op", "fmt", "N", "K", "M")):
            out.append(rec)
    return out


def missing(lib: Library, root: Path) -> pd.DataFrame:
    """The distinct missed keys no entry of the library has (on any device), with how often missed
    and when last."""
    have = {(e.op, e.fmt, e.shape["N"], e.shape["K"], e.shape["M"]) for e in lib.entries}
    rows: dict[tuple, dict] = {}
    for rec in read_misses(root):
        key = (rec["op"], rec["fmt"], rec["N"], rec["K"], rec["M"])
        if key in have:
            continue
        row = rows.setdefault(key, {"op": key[0], "fmt": key[1], "N": key[2], "K": key[3], "M": key[4],
                                    "device": rec.get("device"), "misses": 0, "last": None})
        row["misses"] += 1
        when = _when(rec.get("time"))
        if when is not None and (row["last"] is None or when > row["last"]):
            row["last"] = when
    return pd.DataFrame(list(rows.values()), columns=["op", "fmt", "N", "K", "M", "device", "misses", "last"])


def _when(value) -> pd.Timestamp | None:
    """A miss's time: epoch seconds or ISO-8601 text, as a UTC timestamp (None when neither)."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return pd.Timestamp(value, unit="s", tz="UTC")
        if isinstance(value, str):
            stamp = pd.Timestamp(value)
            return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    except (ValueError, OverflowError):
        pass
    return None


def build_argv(root: Path, runs: Path, backend: str, device: int, budget: str) -> list[str]:
    """The command line of "Build the missing entries" (no shell; every value a separate argument)."""
    return [sys.executable, "-m", "core", "library", "build", "--from-misses", str(root / MISSES), "--out", str(root),
            "--backend", backend, "--device", str(int(device)), "--budget", budget, "--runs-dir", str(runs)]


def start_build(root: Path, runs: Path, backend: str, device: int, budget: str):
    """Start the build in its own session (its output in ``<runs>/.launch/library-<name>.log``) and
    register it with :mod:`dashboard.launch`, so the device counts as busy while it lives; the handle."""
    from dashboard import launch

    log = runs / ".launch" / f"library-{root.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = launch._spawn(build_argv(root, runs, backend, device, budget), log)
    item = launch.Launched(f"library build {root.name}", backend, int(device), proc, time.time())
    with launch._lock:
        launch._launched[f"library:{root}"] = item
    return item


def build_running(root: Path):
    """The build this dashboard started for ``root`` while it is alive, else None."""
    from dashboard import launch

    with launch._lock:
        item = launch._launched.get(f"library:{root}")
    return item if item is not None and item.alive() else None
