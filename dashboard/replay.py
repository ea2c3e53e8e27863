"""The Replay page's data: recorded sweeps under the runs folder's ``sweeps/`` and their saved replays.

A sweep folder (``python -m core sweep --out <runs>/sweeps/NAME``) holds a table; ``python -m core
replay ... --save`` writes its replay records to ``replays/`` inside it (core/tools/replay.py). The
page only lists what is there: no path is ever typed in.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from core.search.table import HEADER, TableError, read_header, read_rows


def sweeps_dir(runs: Path) -> Path:
    return Path(runs) / "sweeps"


def find_sweeps(runs: Path) -> list[Path]:
    """Sweep folders (with a header) under ``<runs>/sweeps/``, by name."""
    root = sweeps_dir(runs)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / HEADER).is_file())


def table_frame(folder: Path) -> pd.DataFrame:
    """The table's rows, fastest first, with the genome as text (TableError when unreadable)."""
    rows = read_rows(folder)
    frame = pd.DataFrame([{k: r[k] for k in ("genome_hash", "status", "time_us", "speedup", "cause", "genome")}
                          | {"samples": len(r.get("time_samples_us") or [])} for r in rows])
    return frame.sort_values("time_us", na_position="last").reset_index(drop=True) if not frame.empty else frame


def replays(folder: Path) -> dict[str, dict]:
    """Saved replay records of a sweep, by file name (an unreadable one is left out)."""
    out = {}
    for path in sorted((Path(folder) / "replays").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "summary" in record and "runs" in record:
            out[path.stem] = record
    return out


def summary_frame(record: dict) -> pd.DataFrame:
    """One row per strategy: the numbers ``python -m core replay`` prints."""
    rows = []
    for name, m in record["summary"]["strategies"].items():
        wins = m.get("wins_over_random") or {}
        rows.append({"strategy": name, "seeds": m["seeds"], "evals to 2% (median)": m["evals_to_2pct_median"],
                     "reached 2%": m["reached_2pct"], "evals to 5% (median)": m["evals_to_5pct_median"],
                     "reached 5%": m["reached_5pct"], "score vs random": round(m["score_median"], 3),
                     "wins@25": wins.get("25", wins.get(25)), "wins@50": wins.get("50", wins.get(50)),
                     "surrogate hit rate": m.get("surrogate_hit_rate_median")})
    return pd.DataFrame(rows)


def curves_figure(record: dict) -> go.Figure:
    """Median best-so-far (as a multiple of the best known time) per strategy, with its interquartile band,
    and random search's exact expectation."""
    best = record["summary"]["best_known_us"]
    worst = record["summary"]["worst_ok_us"]
    fig = go.Figure()
    by: dict[str, list[list[float]]] = {}
    for run in record["runs"]:
        by.setdefault(run["strategy"], []).append([(worst if v is None else v) / best for v in run["curve"]])
    for name, curves in by.items():
        n = min(len(c) for c in curves)
        frame = pd.DataFrame([c[:n] for c in curves])
        x = list(range(1, n + 1))
        fig.add_scatter(x=x, y=frame.quantile(0.5).tolist(), mode="lines", name=f"{name} (median)")
        fig.add_scatter(x=x + x[::-1], y=frame.quantile(0.75).tolist() + frame.quantile(0.25).tolist()[::-1],
                        fill="toself", opacity=0.15, line={"width": 0}, showlegend=False, hoverinfo="skip",
                        name=f"{name} IQR")
    expected = record["summary"]["expected_random_curve"]
    fig.add_scatter(x=list(range(1, len(expected) + 1)), y=[v / best for v in expected], mode="lines",
                    line={"dash": "dot"}, name="random (expected)")
    fig.add_hline(y=1.02, line={"dash": "dash", "width": 1}, annotation_text="within 2%")
    fig.update_layout(xaxis_title="evaluations", yaxis_title="best so far / best known", height=420,
                      margin={"l": 10, "r": 10, "t": 30, "b": 10})
    return fig


__all__ = ["TableError", "curves_figure", "find_sweeps", "read_header", "replays", "summary_frame", "table_frame"]
