"""Plotly figure builders for the dashboard. Each takes a small, already shaped frame."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.retiming import NOISY_REL_SPREAD

BLUE, GREY, RED, GREEN, ORANGE = "#2563eb", "#94a3b8", "#dc2626", "#16a34a", "#ea580c"
CAUSE_COLOURS = {"compile_error": "#7c3aed", "resource_exceeded": "#ea580c", "wrong_result": "#dc2626",
                 "crashed": "#111827", "timeout": "#ca8a04", "unstable": "#0891b2",
                 "suspect": "#be185d"}


def byte_unit(largest: float | None) -> tuple[str, float]:
    """The unit (B, KiB, MiB, GiB) that keeps ``largest`` readable, and its size in bytes."""
    largest = float(largest or 0)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if largest >= 2 * scale:
            return unit, scale
    return "B", 1


def _generation_axis(fig: go.Figure, generations: pd.Series) -> None:
    """Whole-number generation ticks (Plotly would otherwise label 0.5, 1.5 on short runs)."""
    span = int(generations.max() - generations.min()) if len(generations) else 0
    fig.update_xaxes(title="generation", tick0=0, dtick=max(1, -(-span // 8)), tickformat="d")


def _layout(fig: go.Figure, title: str, height: int = 320, **kw) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0, font=dict(size=15)), height=height,
                      margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.2),
                      hovermode="x unified", template="plotly_white", **kw)
    return fig


def empty(title: str, message: str = "no data yet") -> go.Figure:
    """A placeholder figure with a centred message."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, font=dict(size=14, color=GREY), x=0.5, y=0.5,
                       xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, height=260)


def fitness(curves: pd.DataFrame) -> go.Figure:
    """Best, mean and worst fitness per generation (the band between worst and best shaded)."""
    if curves.empty:
        return empty("Fitness per generation")
    x = curves["generation"]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=curves["worst_fitness"], name="worst", mode="lines",
                             line=dict(color=GREY, width=1)))
    fig.add_trace(go.Scatter(x=x, y=curves["best_fitness"], name="best", mode="lines+markers" if len(x) < 60 else "lines",
                             line=dict(color=BLUE, width=2.5), fill="tonexty", fillcolor="rgba(37,99,235,0.08)"))
    fig.add_trace(go.Scatter(x=x, y=curves["mean_fitness"], name="mean", mode="lines",
                             line=dict(color=ORANGE, width=1.5, dash="dot")))
    _generation_axis(fig, x)
    fig.update_yaxes(title="fitness", rangemode="tozero")
    return _layout(fig, "Fitness per generation")


def time_and_memory(df: pd.DataFrame, baseline: pd.DataFrame | None = None) -> go.Figure:
    """Best kernel time and best memory per generation, on two axes; with ``baseline``
    (:func:`dashboard.data.baseline_noise`), the baseline's time per generation on the time axis,
    its spread as a band and the noisy generations marked: the machine's noise at a glance."""
    if df.empty:
        return empty("Best time and memory")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    if "best_time_us" in df:
        fig.add_trace(go.Scatter(x=df["generation"], y=df["best_time_us"], name="best time (µs)", mode="lines",
                                 line=dict(color=BLUE, shape="hv")), secondary_y=False)
    if baseline is not None and not baseline.empty:
        _baseline_traces(fig, baseline)
    unit, scale = byte_unit(df["best_memory_bytes"].max() if "best_memory_bytes" in df else 0)
    if "best_memory_bytes" in df:
        fig.add_trace(go.Scatter(x=df["generation"], y=df["best_memory_bytes"] / scale, name=f"best memory ({unit})",
                                 mode="lines", line=dict(color=GREEN, shape="hv", dash="dash")), secondary_y=True)
    _generation_axis(fig, df["generation"])
    fig.update_yaxes(title="time (µs)", secondary_y=False)
    fig.update_yaxes(title=f"memory ({unit})", secondary_y=True, showgrid=False, tickformat=".4~g")
    return _layout(fig, "Best time and memory")


def _baseline_traces(fig: go.Figure, b: pd.DataFrame) -> None:
    """The baseline's time (grey, dotted), a band of ± half its spread, noisy generations as red crosses."""
    x, t = b["generation"], b["baseline_time_us"]
    half = b["baseline_spread_us"].fillna(0) / 2
    fig.add_trace(go.Scatter(x=x, y=t + half, mode="lines", line=dict(width=0), hoverinfo="skip", showlegend=False),
                  secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=(t - half).clip(lower=0), mode="lines", line=dict(width=0), fill="tonexty",
                             fillcolor="rgba(148,163,184,0.25)", hoverinfo="skip", name="baseline spread"),
                  secondary_y=False)
    fig.add_trace(go.Scatter(x=x, y=t, name="baseline (µs)", mode="lines", line=dict(color=GREY, dash="dot"),
                             customdata=(100 * b["baseline_rel_spread"].fillna(0)).to_numpy(),
                             hovertemplate="baseline %{y:.2f} µs ±%{customdata:.1f} %<extra></extra>"),
                  secondary_y=False)
    noisy = b[b["noisy"].astype(bool)]
    if not noisy.empty:
        fig.add_trace(go.Scatter(x=noisy["generation"], y=noisy["baseline_time_us"], mode="markers",
                                 name=f"noisy generation (spread > {100 * NOISY_REL_SPREAD:g} %)",
                                 marker=dict(symbol="x", size=9, color=RED)), secondary_y=False)


def lethal(causes: pd.DataFrame) -> go.Figure:
    """Stacked bars: lethal candidates per generation by cause."""
    if causes.empty:
        return empty("Lethal candidates by cause", "no lethal candidates")
    fig = go.Figure()
    for cause, part in causes.groupby("cause"):
        fig.add_trace(go.Bar(x=part["generation"], y=part["count"], name=str(cause),
                             marker_color=CAUSE_COLOURS.get(str(cause))))
    fig.update_layout(barmode="stack", bargap=0.1)
    _generation_axis(fig, causes["generation"])
    fig.update_yaxes(title="candidates")
    return _layout(fig, "Lethal candidates by cause")


def diversity(df: pd.DataFrame) -> go.Figure:
    """Population diversity per generation."""
    if df.empty or "diversity" not in df:
        return empty("Population diversity")
    fig = go.Figure(go.Scatter(x=df["generation"], y=df["diversity"], mode="lines", name="diversity",
                               line=dict(color="#7c3aed")))
    _generation_axis(fig, df["generation"])
    fig.update_yaxes(title="diversity", rangemode="tozero")
    return _layout(fig, "Population diversity")


def pareto(points: pd.DataFrame, generation: int | None) -> go.Figure:
    """Time against memory of one generation, coloured by stability; the first front outlined."""
    title = f"Time vs memory, generation {generation}" if generation is not None else "Time vs memory"
    if points.empty:
        return empty(title, "no measured candidates in this generation")
    stability = points["stability"] if "stability" in points else None
    front = points[points["pareto_rank"] == 0] if "pareto_rank" in points else points.iloc[0:0]
    unit, scale = byte_unit(points["memory_bytes"].max())
    hover = ("%{customdata[0]}<br>time %{x:.2f} µs<br>memory %{y:.2f} " + unit + "<br>fitness %{customdata[1]:.4f}"
             "<br>Pareto rank %{customdata[2]}<extra></extra>")
    custom = points[[c for c in ("genome_hash", "fitness", "pareto_rank") if c in points]].to_numpy()
    fig = go.Figure(go.Scatter(
        x=points["time_us"], y=points["memory_bytes"] / scale, mode="markers", name="candidates",
        marker=dict(size=10, color=stability, colorscale="Viridis", cmin=0, cmax=1,
                    colorbar=dict(title="stability", thickness=12), line=dict(width=0.5, color="white")),
        customdata=custom, hovertemplate=hover))
    if not front.empty:
        fig.add_trace(go.Scatter(x=front["time_us"], y=front["memory_bytes"] / scale, mode="markers",
                                 name="first Pareto front", hoverinfo="skip",
                                 marker=dict(size=17, color="rgba(0,0,0,0)", line=dict(color=RED, width=2))))
    times = points["time_us"].astype(float)
    wide = times.min() > 0 and times.max() / times.min() > 20  # one slow outlier would squash the rest
    fig.update_xaxes(title="time (µs, log scale)" if wide else "time (µs)", type="log" if wide else "linear")
    fig.update_yaxes(title=f"memory ({unit})")
    fig = _layout(fig, title, height=360)
    fig.update_layout(hovermode="closest")
    return fig


def benchmark_bars(table: pd.DataFrame, roofline_us: float | None) -> go.Figure:
    """Horizontal bars of time per implementation, the champion highlighted, the roofline as a line."""
    if table.empty:
        return empty("Time per implementation")
    colours = [BLUE if kind == "champion" else GREY for kind in table["kind"]]
    fig = go.Figure(go.Bar(y=table["name"], x=table["time_us"], orientation="h", marker_color=colours,
                           error_x=dict(type="data", array=table.get("spread_us"), visible=True, color="#475569"),
                           text=[f"{t:,.1f} µs" for t in table["time_us"]], textposition="auto",
                           hovertemplate="%{y}: %{x:.2f} µs<extra></extra>"))
    if roofline_us:
        fig.add_vline(x=roofline_us, line=dict(color=RED, dash="dash"), annotation_text="roofline",
                      annotation_position="top")
    fig.update_xaxes(title="time (µs, lower is better)", rangemode="tozero")
    fig.update_yaxes(autorange="reversed")
    fig = _layout(fig, "Time per implementation", height=120 + 45 * len(table))
    fig.update_layout(hovermode="closest", showlegend=False)
    return fig


def memory_bars(table: pd.DataFrame) -> go.Figure:
    """Horizontal bars of memory per implementation."""
    if table.empty or "memory_bytes" not in table:
        return empty("Memory per implementation")
    colours = [GREEN if kind == "champion" else GREY for kind in table["kind"]]
    unit, scale = byte_unit(table["memory_bytes"].max())
    fig = go.Figure(go.Bar(y=table["name"], x=table["memory_bytes"] / scale, orientation="h", marker_color=colours,
                           hovertemplate="%{y}: %{x:.2f} " + unit + "<extra></extra>"))
    fig.update_xaxes(title=f"memory ({unit}, lower is better)", rangemode="tozero")
    fig.update_yaxes(autorange="reversed")
    fig = _layout(fig, "Memory per implementation", height=120 + 45 * len(table))
    fig.update_layout(hovermode="closest", showlegend=False)
    return fig


def compare_runs(curves: dict[str, pd.DataFrame]) -> go.Figure:
    """Best fitness per generation of several runs on one chart."""
    if not curves:
        return empty("Best fitness per run", "select runs to compare")
    fig = go.Figure()
    for run_id, df in curves.items():
        fig.add_trace(go.Scatter(x=df["generation"], y=df["best_fitness"], name=run_id, mode="lines"))
    _generation_axis(fig, pd.concat([df["generation"] for df in curves.values()]))
    fig.update_yaxes(title="best fitness", rangemode="tozero")
    return _layout(fig, "Best fitness per run", height=400)
