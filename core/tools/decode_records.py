"""Where ``decode-bench --save`` puts its JSON records, and how they are read back.

A record is the dict :func:`core.tools.decode_bench.run` returns, one file per run of the
benchmark, named ``<UTC time>-<model>-<layers>L-ctx<context>.json``. Where it goes:

* ``--save DIR``: into ``DIR``;
* ``--save`` alone: beside the library (b) ran, in ``LIB/decode-bench/``, when that library lives
  in a lasting folder (``--library DIR`` or ``--library-out DIR``), so that a library and its decode
  figures travel together; otherwise (native ops, a library built in a temporary folder) in the
  decode folder, ``$ABEBOT_DECODE_DIR`` (default ``decode-bench/`` beside the runs folder, as
  ``libraries/`` is).

The dashboard's Benchmark page (:mod:`dashboard.decode`) lists the records of the decode folder and
of every library's ``decode-bench/``; ``benchmarks/tools/decode_report.py`` takes record files.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

FOLDER = "decode-bench"
REQUIRED = ("model", "layers", "model_layers", "context", "device", "a", "b")


def decode_dir() -> Path:
    """The decode folder: ``$ABEBOT_DECODE_DIR``, else ``decode-bench/`` beside the runs folder
    (``$ABEBOT_RUNS_DIR``, default ``./runs``)."""
    env = os.environ.get("ABEBOT_DECODE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    runs = Path(os.environ.get("ABEBOT_RUNS_DIR") or "runs").expanduser().resolve()
    return runs.parent / FOLDER


def save_folder(save: str, library_root: str | None) -> Path:
    """Where ``--save`` (``save`` is ``"auto"`` for the bare flag, else a folder) writes a record;
    ``library_root`` is (b)'s lasting library folder, None when it had none (module docstring)."""
    if save != "auto":
        return Path(save).expanduser()
    return Path(library_root) / FOLDER if library_root else decode_dir()


def record_name(record: dict) -> str:
    """``<UTC time>-<model>-<layers>L-ctx<context>.json`` of ``record``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(record.get("measured_at") or time.time()))
    model = "".join(c if c.isalnum() or c in ".-_" else "_" for c in str(record["model"]))
    return f"{stamp}-{model}-{record['layers']}L-ctx{record['context']}.json"


def save(record: dict, folder: Path) -> Path:
    """Write ``record`` into ``folder`` (created) under :func:`record_name`, atomically; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / record_name(record)
    n = 1
    while path.exists():  # two records in one second: keep both
        path, n = folder / record_name(record).replace(".json", f"-{n}.json"), n + 1
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)
    return path


def load(path: Path) -> dict | None:
    """The record in ``path``, or None when it is unreadable or not a decode-bench record."""
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or any(k not in rec for k in REQUIRED):
        return None
    if not all(isinstance(rec[w], dict) and "ms_per_step" in rec[w] for w in ("a", "b")):
        return None
    return rec


def find(folders: list[Path]) -> list[Path]:
    """Every ``*.json`` directly inside ``folders`` (missing ones skipped), newest name first."""
    found = [p for f in folders if f.is_dir() for p in f.glob("*.json")]
    return sorted(found, key=lambda p: p.name, reverse=True)
