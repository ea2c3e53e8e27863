"""The Runs page's data and actions: configuration columns, configuration diff, archive, delete.

Every action takes a run id that :func:`store.runs.run_dir` resolves inside the runs folder and
refuses a run that is live (running, paused, starting, or a worker this dashboard started).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from dashboard import data
from dashboard.meta import load_meta
from dashboard.runs import generations_done, load_json
from dashboard.settings import LIVE_STATUSES
from store.runs import effective_status, lock_holder, run_dir, speedup_text

ARCHIVE = ".archive"  # a dot folder: list_runs never lists it


def table(rows: list[dict]) -> pd.DataFrame:
    """One row per run: name, status, progress, best fitness and the configuration's main settings."""
    out = []
    for r in rows:
        folder = Path(r["path"])
        cfg = load_json(folder / "config.json") or {}
        base = load_json(folder / "live" / "baseline.json") or {}
        out.append({
            "run_id": r["run_id"], "name": load_meta(folder)["name"], "status": r.get("status"),
            "workload": r.get("workload"), "backend": r.get("backend"), "device": cfg.get("device"),
            "done": f"{generations_done(r.get('generation'))} / {r.get('total_generations') or '∞'}",
            "best_fitness": r.get("best_fitness"), "champion": speedup_text(r) or None,
            "population": cfg.get("population"),
            "selection": cfg.get("selection"), "weights": data.fmt_weights(cfg),
            "problem": data.fmt_problem(cfg.get("problem")),
            "baseline": (f"{base.get('primary')} {data.fmt_time_us(base.get('time_us'))}" if base.get("primary") else ""),
            "created_at": r.get("created_at"), "updated_at": r.get("updated_at")})
    cols = ["run_id", "name", "status", "workload", "backend", "device", "done", "best_fitness", "champion", "population",
            "selection", "weights", "problem", "baseline", "created_at", "updated_at"]
    return pd.DataFrame(out, columns=cols)


def config_diff(a: dict, b: dict) -> pd.DataFrame:
    """Settings of two run configurations side by side, the differing ones first."""
    flat_a, flat_b = _flatten(a), _flatten(b)
    rows = [{"setting": k, "A": flat_a.get(k, ""), "B": flat_b.get(k, ""), "differs": flat_a.get(k) != flat_b.get(k)}
            for k in sorted(set(flat_a) | set(flat_b))]
    df = pd.DataFrame(rows, columns=["setting", "A", "B", "differs"])
    return df.sort_values(["differs", "setting"], ascending=[False, True], ignore_index=True)


def _flatten(cfg: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (cfg or {}).items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value)
    return out


def live_reason(runs: Path, run_id: str, launched_alive: bool = False) -> str | None:
    """Why ``run_id`` must not be archived or deleted now, or None. A process holding the run's
    worker.lock (a worker suspended, hung, or paused on a full disk with a stale or torn heartbeat)
    keeps it, whatever the heartbeat says."""
    folder = run_dir(runs, run_id)
    status = effective_status(folder)
    if status in LIVE_STATUSES or launched_alive:
        return f"Run {run_id} is {status if status in LIVE_STATUSES else 'starting'}: stop it on Monitor first."
    holder = lock_holder(folder)
    if holder is not None:
        return f"Run {run_id} is still held by its worker (pid {holder}): stop it on Monitor first."
    return None


def _refuse_live(runs: Path, run_id: str) -> None:
    reason = live_reason(runs, run_id)
    if reason:
        raise ValueError(reason)


def archive(runs: Path, run_id: str) -> Path:
    """Move a run folder to ``<runs>/.archive/<run_id>`` (out of every list, files kept); ValueError
    for a live run (checked again here: the page's check may be seconds old)."""
    _refuse_live(runs, run_id)
    source = run_dir(runs, run_id)
    target_root = Path(runs).resolve() / ARCHIVE
    target_root.mkdir(exist_ok=True)
    target = target_root / source.name
    if target.exists():
        raise FileExistsError(f"{target} already exists")
    shutil.move(str(source), str(target))
    return target


def delete(runs: Path, run_id: str) -> None:
    """Delete a run folder and everything in it; ValueError for a live run (checked again here)."""
    _refuse_live(runs, run_id)
    shutil.rmtree(run_dir(runs, run_id))
