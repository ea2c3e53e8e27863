"""Export champion kernels: one self-contained folder per kernel, or a zip of them all.

Each folder holds the kernel source (``kernel`` plus the backend's ``source_suffix``: ``kernel.c``,
``kernel.cu``, ``kernel.py``), ``launch.json``, ``genome.json``, ``report.json`` (measurements,
baseline, device, versions, verification) and ``run_kernel.py`` (a standalone script that
recompiles, re-verifies and re-times the kernel, from :mod:`core.evaluation.standalone`).

A running run is exported from its ``live/`` Parquet, like the dashboard reads it; a finished run
whose ``live/`` is gone is read from ``run.duckdb`` opened read-only for the moment of the copy.
"""
from __future__ import annotations

import io
import json
import logging
import platform
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

import pandas as pd

from core.backends import backend_class
from core.backends.base import KernelSource
from core.evaluation.record import SANDBOX_MEASURES
from core.objectives import OBJECTIVES
from store.reader import RunReader
from store.runs import CONFIG, DB, LIVE, atomic_write_json
from store.schema import StoreError, select_list

log = logging.getLogger(__name__)
WHICH = ("champion", "top", "pareto")
_MEASURES = ("fitness", *SANDBOX_MEASURES, *(o.column for o in OBJECTIVES), "pareto_rank", "compile_s", "eval_s")


def export_champions(run_dir: Path | str, out_dir: Path | str, which: str = "champion", k: int = 5,
                     library: bool = False, runs_dir: Path | str | None = None) -> Path:
    """Export the run's best kernels into ``out_dir`` (created; refused if it exists and is not empty).

    ``which``: ``champion`` (the fittest ok individual), ``top`` (the ``k`` fittest distinct
    genomes) or ``pareto`` (the last generation's first Pareto front, fittest first, at most ``k``).
    With ``library`` the champion is re-timed (under the device lock of ``runs_dir``, default the
    run's parent) and written as a one-entry kernel library instead (docs/library.md).
    Returns ``out_dir``. StoreError when the run has nothing to export.
    """
    if which not in WHICH:
        raise ValueError(f"which must be one of {', '.join(WHICH)} (got {which!r})")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise StoreError(f"export folder {out} exists and is not empty")
    if library:
        from core.tools.library_entry import export_library

        if which != "champion":
            raise ValueError("a library export holds the champion only (--which champion)")
        return export_library(Path(run_dir), out, Path(runs_dir) if runs_dir else Path(run_dir).parent)
    run = Path(run_dir)
    with tempfile.TemporaryDirectory(prefix="abebot-export-") as scratch:
        reader = readable_run(run, Path(scratch))
        rows = _choose(reader, which, k)
        if not rows:
            raise StoreError(f"run {run.name} has no successful individual to export")
        cfg, baseline = reader.config(), reader.baseline() or {}
        out.mkdir(parents=True, exist_ok=True)
        index = []
        for rank, row in enumerate(rows, 1):
            folder = out / f"{rank:02d}_{row['genome_hash']}"
            problem = _export_one(folder, row, reader.kernel(row["source_hash"]) if row.get("source_hash") else None,
                                  cfg, baseline, run.name, which, rank)
            index.append({"folder": folder.name, **{k_: row.get(k_) for k_ in
                                                    ("generation", "genome_hash", "fitness", "time_us", "memory_bytes")},
                          **({"standalone_error": problem} if problem else {})})
        atomic_write_json(out / "index.json", {"run_id": run.name, "which": which, "kernels": index,
                                               "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        backend = str(cfg.get("backend") or "")
        (out / "requirements.txt").write_text(requirements_text(backend))
        (out / "README.md").write_text(readme_text(run.name, cfg, baseline, index))
    return out


def readable_run(run: Path, scratch: Path) -> RunReader:
    """A reader of the run at ``run``: its ``live/`` mirror, or for a finished run whose ``live/`` is
    gone a copy of its tables from ``run.duckdb`` (opened read-only, briefly) under ``scratch``."""
    reader = RunReader(run)
    if reader.generations(["generation"]).empty and (run / DB).exists() and reader.status() not in (
            "running", "paused", "starting"):
        reader = RunReader(_mirror_from_db(run, scratch))
    return reader


# What run_kernel.py imports, per backend (beside the copy of AbeBot's evaluation code it carries).
def _needs(backend: str) -> tuple[str, ...]:
    """The packages a backend's exported kernel imports, from the backend's capabilities."""
    from core.backends import backend_class

    cls = backend_class(backend)
    if cls.device_kind == "cpu":
        return ("numpy",)
    return ("numpy", "torch", "triton") if cls.language == "python" else ("numpy", "cupy-cuda13x", "torch")


def requirements_text(backend: str) -> str:
    """A requirements.txt for the exported kernels, pinned to the versions AbeBot itself pins."""
    pins = {}
    try:
        for line in (Path(__file__).resolve().parents[2] / "requirements.txt").read_text().splitlines():
            name = line.split("==")[0].strip()
            if "==" in line and not line.lstrip().startswith("#"):
                pins[name] = line.strip()
    except OSError:
        pass
    try:
        needs = _needs(backend)
    except ValueError:  # an unknown backend name in an old configuration
        needs = ("numpy",)
    lines = [pins.get(name, name) for name in needs]
    note = "# and a C compiler with OpenMP (gcc) on the PATH\n" if needs == ("numpy",) else ""
    optional = ""
    if "torch" not in needs:
        optional = ("# Optional: the torch baselines (timed beside numpy's) need torch; without it run_kernel.py\n"
                    "# skips them with one line. For them: pip install torch --index-url "
                    "https://download.pytorch.org/whl/cpu\n")
    return ("# run_kernel.py's imports; install with: pip install -r requirements.txt\n" + note + optional
            + "\n".join(lines) + "\n")


def readme_text(run_id: str, cfg: dict, baseline: dict, index: list[dict]) -> str:
    """The export's README: what is in it, how to run it, and the shape its kernels were tuned for."""
    problem = cfg.get("problem") or {}
    shape = baseline.get("shape") or {k: v for k, v in problem.items() if isinstance(v, int)}
    shape_text = ", ".join(f"{k}={v}" for k, v in shape.items()) or "the run's problem"
    rows = "\n".join(f"| `{k['folder']}` | {k.get('generation')} | {k.get('fitness') or 0:.4f} | "
                      f"{k.get('time_us') or 0:.2f} |" for k in index)
    return f"""# Kernels exported from AbeBot run `{run_id}`

Workload **{cfg.get('workload')}** on backend **{cfg.get('backend')}**, problem `{json.dumps(problem, sort_keys=True)}`.

> **Tuned for one shape.** These kernels were evolved and timed on {shape_text} only. On other shapes
> they are verified but not tuned, and can be much slower than the library: a CPU GEMM champion of
> 256³ ran at 0.37–0.56× numpy on the other verification shapes. Re-check before using one elsewhere,
> giving any of this workload's settings (those of `problem` above):
> `python run_kernel.py --problem '{_example(cfg)}'`.

| folder | generation | fitness | time (µs) |
|---|---:|---:|---:|
{rows}

Each folder holds the kernel source, `launch.json` (entry point, compiler flags, launch settings),
`genome.json`, `report.json` (measurements, baseline, device, versions, verification) and
`run_kernel.py`, which recompiles the kernel, re-verifies it against a float64 reference and times it
beside every baseline with the copy of AbeBot's evaluation code stored beside it (`abebot/core`).

```bash
pip install -r requirements.txt
cd {index[0]['folder'] if index else '01_<hash>'} && python run_kernel.py   # exit status 1 when verification fails
```
"""


def _example(cfg: dict) -> str:
    """A ``--problem`` override in the run's workload's own settings (JSON), for the README."""
    try:
        from core.evaluation.standalone import example_problem

        return json.dumps(example_problem(str(cfg.get("workload")), str(cfg.get("backend")), cfg.get("problem") or {}))
    except Exception:  # an unknown workload or backend in an old configuration: the settings themselves
        sizes = {k: v for k, v in (cfg.get("problem") or {}).items() if isinstance(v, int) and not isinstance(v, bool)}
        return json.dumps(dict(list(sizes.items())[:1]))


def export_zip(run_dir: Path | str, which: str = "champion", k: int = 5) -> bytes:
    """The same export as a zip archive (for a download button); entries under ``<run_id>-<which>/``."""
    run = Path(run_dir)
    with tempfile.TemporaryDirectory(prefix="abebot-zip-") as tmp:
        folder = export_champions(run, Path(tmp) / "export", which, k)
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    zf.write(path, f"{run.name}-{which}/{path.relative_to(folder)}")
        return buf.getvalue()


def _choose(reader: RunReader, which: str, k: int) -> list[dict]:
    if which == "champion":
        best = reader.champion()
        return [best] if best else []
    if which == "top":
        frame = reader.top(k)
    else:
        gens = reader.generations(["generation"])
        if gens.empty:
            return []
        last = reader.individuals(int(gens["generation"].iloc[-1]))
        ok = last[(last["status"] == "ok") & last["pareto_rank"].notna()]
        if ok.empty:
            return _choose(reader, "champion", k)
        front = ok[ok["pareto_rank"] == ok["pareto_rank"].min()]
        frame = front.drop_duplicates("genome_hash").sort_values("fitness", ascending=False).head(k)
    return [_plain(r) for r in frame.to_dict("records")]


def _export_one(folder: Path, row: dict, kernel: dict | None, cfg: dict, baseline: dict, run_id: str,
                which: str, rank: int) -> str | None:
    """Write one kernel's folder; returns why run_kernel.py is missing, if it is."""
    folder.mkdir()
    if kernel is None:
        raise StoreError(f"run {run_id}: kernel {row.get('source_hash')} of {row['genome_hash']} is not stored")
    backend = kernel.get("backend") or cfg.get("backend") or ""
    flags, launch, resources = (_loads(kernel.get(key), default) for key, default in
                                (("flags", []), ("launch", {}), ("resources", {})))
    (folder / _source_name(backend)).write_text(kernel["source"])
    _dump(folder / "launch.json", {"backend": backend, "entry": kernel.get("entry"), "flags": flags,
                                   "launch": launch, "resources": resources})
    _dump(folder / "genome.json", _loads(row.get("genome"), {}))
    device_raw = baseline.get("device") or {}
    report = {
        "run_id": run_id, "selection": which, "rank": rank, "generation": row.get("generation"),
        "genome_hash": row["genome_hash"], "source_hash": row.get("source_hash"), "origin": row.get("origin"),
        "parents": _loads(row.get("parents"), []),
        "measurements": {key: row.get(key) for key in _MEASURES},
        "verification": {"status": row.get("status"), "cause": row.get("cause"), "max_abs_err": row.get("max_abs_err"),
                         "rel_err": row.get("rel_err"), "stability": row.get("stability"), "reused": row.get("reused"),
                         "compile_log": kernel.get("compile_log")},
        "vs_baseline": _ratios(row, baseline),
        "baseline": {key: v for key, v in baseline.items() if key != "device"},
        "device": device_raw,
        "versions": {"device": device_raw.get("versions", {}), **_versions()},
        "config": cfg,
    }
    try:
        from core.evaluation.standalone import write_standalone

        write_standalone(folder, KernelSource.from_row(kernel, backend), cfg["workload"], cfg.get("problem") or {})
    except Exception as exc:  # the export stays useful without the script; say why it is missing
        report["standalone_error"] = f"{type(exc).__name__}: {exc}"
        log.warning("run %s: no run_kernel.py for %s: %s", run_id, row["genome_hash"], report["standalone_error"])
    _dump(folder / "report.json", report)
    return report.get("standalone_error")


def _source_name(backend: str) -> str:
    """``kernel`` plus the backend's source suffix; ``kernel.txt`` for a backend this version lacks."""
    try:
        return "kernel" + backend_class(backend).source_suffix
    except (ValueError, ImportError, AttributeError):
        return "kernel.txt"


def _ratios(row: dict, baseline: dict) -> dict:
    """The kernel against the primary baseline: its paired speed-up (the median of its
    re-measurements' pair ratios, as every view shows it) where it has one, else the ratio of the
    two medians; the memory ratio."""
    out = {}
    if row.get("speedup") is not None and row.get("speedup") == row.get("speedup"):
        out.update(speedup=row["speedup"], speedup_spread=row.get("speedup_spread"), noisy=row.get("noisy"),
                   cache=row.get("cache"), speedup_samples=_loads(row.get("speedup_samples"), []),
                   timed_beside=row.get("pair_baseline"))
    elif row.get("time_us") and baseline.get("time_us"):
        out["speedup"] = baseline["time_us"] / row["time_us"]
    if row.get("memory_bytes") and baseline.get("memory_bytes"):
        out["memory_ratio"] = row["memory_bytes"] / baseline["memory_bytes"]
    return out


def _versions() -> dict:
    import duckdb
    import pyarrow

    return {"python": platform.python_version(), "platform": platform.platform(), "duckdb": duckdb.__version__,
            "pandas": pd.__version__, "pyarrow": pyarrow.__version__}


def _mirror_from_db(run: Path, scratch: Path) -> Path:
    """Copy a finished run's tables to a scratch run folder as live/ Parquet (DB open read-only, briefly)."""
    import duckdb

    dest = scratch / run.name
    (dest / LIVE / "individuals").mkdir(parents=True)
    (dest / LIVE / "kernels").mkdir(parents=True)
    (dest / LIVE / "generations").mkdir(parents=True)
    shutil.copy(run / CONFIG, dest / CONFIG)
    try:
        con = duckdb.connect(str(run / DB), read_only=True)
    except duckdb.Error as exc:
        raise StoreError(f"run {run.name}: cannot read run.duckdb ({str(exc).splitlines()[0]})") from None
    try:
        for table, target in (("individuals", "individuals/chunk_00000000_99999999.parquet"),
                              ("kernels", "kernels/chunk_00000000_99999999.parquet"),
                              ("generations", "generations/chunk_00000000_99999999.parquet")):
            con.execute(f"COPY (SELECT {select_list(table)} FROM {table} ORDER BY generation, rowid) "
                        f"TO '{dest / LIVE / target}' (FORMAT parquet)")
        base = (con.execute("SELECT baseline FROM runs").fetchall() or [None])[0]
    finally:
        con.close()
    if base and base[0]:
        atomic_write_json(dest / LIVE / "baseline.json", json.loads(base[0]))
    return dest


def _loads(value, default):
    if value is None or (isinstance(value, float) and value != value):
        return default
    return json.loads(value) if isinstance(value, str) else value


def _plain(row: dict) -> dict:
    return {k: (None if v is pd.NA or (isinstance(v, float) and v != v) else (v.item() if hasattr(v, "item") else v))
            for k, v in row.items()}


def _dump(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
