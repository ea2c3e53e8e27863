"""Plotly figure builders for the dashboard. Each takes a small, already shaped frame."""
from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.search.retiming import NOISY_REL_SPREAD

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
    fig.update_xaxes(title="generation (from 0)", tick0=0, dtick=max(1, -(-span // 8)), tickformat="d")


def _x(df: pd.DataFrame, wall: bool) -> pd.Series:
    """The x values: the generation, or with ``wall`` the wall-clock time its commit finished."""
    if wall and "finished_at" in df:
        return pd.to_datetime(pd.to_numeric(df["finished_at"], errors="coerce"), unit="s", utc=True).dt.tz_convert(None)
    return df["generation"]


def _x_axis(fig: go.Figure, df: pd.DataFrame, wall: bool) -> None:
    if wall and "finished_at" in df:
        fig.update_xaxes(title="wall-clock time (UTC)")
    else:
        _generation_axis(fig, df["generation"])


def _layout(fig: go.Figure, title: str, height: int = 320, **kw) -> go.Figure:
    # Streamlit's own font and text colour, as its Plotly theme draws them (both renderers look alike).
    fig.update_layout(title=dict(text=title, x=0, font=dict(size=15, weight=600)), height=height,
                      font=dict(family='"Source Sans", "Source Sans Pro", sans-serif', color="#31333F"),
                      margin=dict(l=10, r=10, t=40, b=10),
                      # Under everything, the x-axis title included: anchored to the figure's bottom edge
                      # (not the plot area's), so Plotly makes room for it below the axis title.
                      legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left"),
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


CHANGE_MARKERS = 200  # the newest champion changes marked on the fitness chart


def fitness(curves: pd.DataFrame, wall: bool = False, changes: pd.DataFrame | None = None) -> go.Figure:
    """Best, mean and worst fitness per generation (the band between worst and best shaded), and a
    marker at each of the newest :data:`CHANGE_MARKERS` champion changes (``changes``:
    :func:`dashboard.data.champion_changes`); with ``wall``, against wall-clock time."""
    if curves.empty:
        return empty("Fitness per generation")
    x = _x(curves, wall)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=curves["worst_fitness"], name="worst", mode="lines",
                             line=dict(color=GREY, width=1)))
    fig.add_trace(go.Scatter(x=x, y=curves["best_fitness"], name="best", mode="lines+markers" if len(x) < 60 else "lines",
                             line=dict(color=BLUE, width=2.5), fill="tonexty", fillcolor="rgba(37,99,235,0.08)"))
    fig.add_trace(go.Scatter(x=x, y=curves["mean_fitness"], name="mean", mode="lines",
                             line=dict(color=ORANGE, width=1.5, dash="dot")))
    if changes is not None and not changes.empty:
        marked = changes.tail(CHANGE_MARKERS)
        fig.add_trace(go.Scatter(x=_x(marked, wall), y=marked["best_fitness"], name="champion changed", mode="markers",
                                 marker=dict(symbol="diamond", size=7, color=BLUE, line=dict(color="white", width=1)),
                                 customdata=marked[["champion_hash", "previous_hash"]].fillna("—").to_numpy(),
                                 hovertemplate="champion %{customdata[0]} (was %{customdata[1]})<extra></extra>"))
    _x_axis(fig, curves, wall)
    fig.update_yaxes(title="fitness", rangemode="tozero")
    return _layout(fig, "Fitness per generation")


def time_and_memory(df: pd.DataFrame, baseline: pd.DataFrame | None = None, wall: bool = False) -> go.Figure:
    """The best time and memory so far (:func:`dashboard.data.best_so_far`), on two axes; with
    ``baseline`` (:func:`dashboard.data.baseline_noise`), the baseline's time per generation on the
    time axis, its spread as a band and the noisy generations marked: the machine's noise at a glance."""
    if df.empty:
        return empty("Best time and memory so far")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = _x(df, wall)
    if "best_time_us" in df:
        fig.add_trace(go.Scatter(x=x, y=df["best_time_us"], name="best time so far (µs)", mode="lines",
                                 line=dict(color=BLUE, shape="hv")), secondary_y=False)
    if baseline is not None and not baseline.empty:
        _baseline_traces(fig, baseline, wall)
    unit, scale = byte_unit(df["best_memory_bytes"].max() if "best_memory_bytes" in df else 0)
    if "best_memory_bytes" in df:
        fig.add_trace(go.Scatter(x=x, y=df["best_memory_bytes"] / scale, name=f"least memory so far ({unit})",
                                 mode="lines", line=dict(color=GREEN, shape="hv", dash="dash")), secondary_y=True)
    _x_axis(fig, df, wall)
    fig.update_yaxes(title="time (µs)", secondary_y=False, rangemode="tozero")
    # From zero with Plotly's own round ticks: a narrow range would get ticks like 781.7, 810.2, and
    # plotly.js 4 syncs an overlaying axis' ticks to the first one's (37.4823 beside 100) unless told.
    fig.update_yaxes(title=f"memory ({unit})", secondary_y=True, showgrid=False, rangemode="tozero",
                     tickformat="~s", tickmode="auto")
    return _layout(fig, "Best time and memory so far")


def _baseline_traces(fig: go.Figure, b: pd.DataFrame, wall: bool = False) -> None:
    """The baseline's time (grey, dotted), a band of ± half its spread, noisy generations as red crosses."""
    x, t = _x(b, wall), b["baseline_time_us"]
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
        fig.add_trace(go.Scatter(x=_x(noisy, wall), y=noisy["baseline_time_us"], mode="markers",
                                 name=f"noisy generation (spread > {100 * NOISY_REL_SPREAD:g} %)",
                                 marker=dict(symbol="x", size=9, color=RED)), secondary_y=False)


# Above this many generations (or buckets) the lethal causes are stacked steps, one path per cause:
# 200 buckets of six causes as bars were 1,200 SVG paths, the Monitor's costliest chart to draw.
LETHAL_BARS_UP_TO = 50


def lethal(causes: pd.DataFrame) -> go.Figure:
    """Lethal candidates per generation by cause, stacked: bars for a short run, steps for a long one."""
    if causes.empty:
        return empty("Lethal candidates by cause", "no lethal candidates")
    fig = go.Figure()
    bars = causes["generation"].nunique() <= LETHAL_BARS_UP_TO
    for cause, part in causes.groupby("cause"):
        colour = CAUSE_COLOURS.get(str(cause))
        if bars:
            fig.add_trace(go.Bar(x=part["generation"], y=part["count"], name=str(cause), marker_color=colour))
        else:  # a generation where this cause is absent counts as zero in the stack (stackgaps "infer zero")
            fig.add_trace(go.Scatter(x=part["generation"], y=part["count"], name=str(cause), mode="lines",
                                     stackgroup="lethal", line=dict(shape="hv", width=0.5, color=colour),
                                     fillcolor=colour))
    fig.update_layout(barmode="stack", bargap=0.1)
    _generation_axis(fig, causes["generation"])
    fig.update_yaxes(title="candidates")
    return _layout(fig, "Lethal candidates by cause")


def diversity(df: pd.DataFrame, wall: bool = False) -> go.Figure:
    """Population diversity per generation."""
    if df.empty or "diversity" not in df:
        return empty("Population diversity")
    fig = go.Figure(go.Scatter(x=_x(df, wall), y=df["diversity"], mode="lines", name="diversity",
                               line=dict(color="#7c3aed")))
    _x_axis(fig, df, wall)
    fig.update_yaxes(title="diversity", rangemode="tozero")
    return _layout(fig, "Population diversity")


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values for a log axis from ``lo`` to ``hi``: 1, 2, 5 times powers of ten, thinned to
    powers of ten when that would be more than ten labels (Plotly labels every minor tick)."""
    import math

    if not (lo > 0 and hi > 0):
        return []
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
             for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
    return ticks if len(ticks) <= 10 else [t for t in ticks if str(t).lstrip("0.").startswith("1")]


def _padded(lo: float, hi: float, min_rel_span: float = 0.1) -> list[float]:
    """An axis range around [lo, hi] with room for markers at both ends; a span under
    ``min_rel_span`` of the values is widened to it, so a tiny difference is not drawn as a big one."""
    mid = (lo + hi) / 2
    half = max((hi - lo) / 2, abs(mid) * min_rel_span / 2) * 1.15
    return [max(0.0, mid - half) if lo >= 0 else mid - half, mid + half]


def pareto(points: pd.DataFrame, generation: int | None) -> go.Figure:
    """Time against memory of one generation, coloured by stability where it varies; the first front outlined."""
    title = f"Time vs memory, generation {generation}" if generation is not None else "Time vs memory"
    if points.empty:
        return empty(title, "no measured candidates in this generation")
    stability = pd.to_numeric(points["stability"], errors="coerce") if "stability" in points else None
    varies = stability is not None and stability.nunique(dropna=True) > 1
    front = points[points["pareto_rank"] == 0] if "pareto_rank" in points else points.iloc[0:0]
    unit, scale = byte_unit(points["memory_bytes"].max())
    hover = ("%{customdata[0]}<br>time %{x:.2f} µs<br>memory %{y:.3f} " + unit + "<br>fitness %{customdata[1]:.4f}"
             "<br>Pareto rank %{customdata[2]}<br>stability %{customdata[3]:.3f}<extra></extra>")
    custom = points.reindex(columns=["genome_hash", "fitness", "pareto_rank", "stability"]).to_numpy()
    marker = dict(size=10, line=dict(width=0.5, color="white"))
    if varies:
        marker.update(color=stability, colorscale="Viridis", cmin=0, cmax=1,
                      colorbar=dict(title="stability", thickness=12))
    else:  # one colour: a colour bar over a single value says nothing
        marker.update(color=BLUE)
    name = "candidates" if varies or stability is None else f"candidates (stability {stability.iloc[0]:.2f} for all)"
    fig = go.Figure(go.Scatter(x=points["time_us"], y=points["memory_bytes"] / scale, mode="markers", name=name,
                               marker=marker, customdata=custom, hovertemplate=hover, cliponaxis=False))
    if not front.empty:
        fig.add_trace(go.Scatter(x=front["time_us"], y=front["memory_bytes"] / scale, mode="markers",
                                 name="first Pareto front", hoverinfo="skip", cliponaxis=False,
                                 marker=dict(size=17, color="rgba(0,0,0,0)", line=dict(color=RED, width=2))))
    times = points["time_us"].astype(float)
    mem = points["memory_bytes"].astype(float) / scale
    wide = times.min() > 0 and times.max() / times.min() > 20  # one slow outlier would squash the rest
    if wide:
        ticks = log_ticks(times.min() / 1.2, times.max() * 1.2)
        fig.update_xaxes(title="time (µs, log scale)", type="log", tickvals=ticks,
                         ticktext=[f"{t:g}" for t in ticks])
    else:
        fig.update_xaxes(title="time (µs)", range=_padded(times.min(), times.max()))
    fig.update_yaxes(title=f"memory ({unit})", range=_padded(mem.min(), mem.max()))
    fig = _layout(fig, title, height=360)
    fig.update_layout(hovermode="closest")
    return fig


def benchmark_bars(table: pd.DataFrame, roofline_us: float | None) -> go.Figure:
    """Horizontal bars of time per implementation, the champion highlighted, the roofline as a line."""
    if table.empty:
        return empty("Time per implementation")
    colours = [BLUE if kind == "champion" else GREY for kind in table["kind"]]
    times = pd.to_numeric(table["time_us"], errors="coerce").astype(float)
    spread = pd.to_numeric(table.get("spread_us", pd.Series(0.0, index=table.index)), errors="coerce").fillna(0.0)
    # A time is never below zero: an error bar wider than its bar stops at zero (the spread is an
    # interquartile range, not a symmetric error), and the axis starts at zero.
    below = pd.concat([spread, times], axis=1).min(axis=1).clip(lower=0)
    fig = go.Figure(go.Bar(y=table["name"], x=times, orientation="h", marker_color=colours,
                           error_x=dict(type="data", array=spread.to_numpy(), arrayminus=below.to_numpy(), symmetric=False,
                                        visible=True, color="#475569"),
                           # inside, at the bar's base: the error bar sits at its end
                           text=[f"{t:,.1f} µs" for t in table["time_us"]], textposition="inside",
                           insidetextanchor="start", textfont=dict(color="white"),
                           hovertemplate="%{y}: %{x:.2f} µs<extra></extra>"))
    if roofline_us:
        fig.add_vline(x=roofline_us, line=dict(color=RED, dash="dash"), annotation_text="roofline",
                      annotation_position="top")
    top = float(max((times + spread).max(), roofline_us or 0.0)) if len(times) else 0.0
    fig.update_xaxes(title="time (µs, lower is better)", range=[0, top * 1.08 if top > 0 else 1])
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


def compare_runs(curves: dict[str, pd.DataFrame], labels: dict[str, str] | None = None) -> go.Figure:
    """Best fitness per generation of several runs on one chart (markers where a run has few points,
    so a one-generation run is a visible dot; the y-axis fits the data, not Plotly's default 0..10).
    ``labels``: the legend's text per run id (its name beside the id), shown as plain text."""
    if not curves:
        return empty("Best fitness per run", "select runs to compare")
    fig = go.Figure()
    for run_id, df in curves.items():
        label = html.escape((labels or {}).get(run_id) or run_id, quote=False)
        fig.add_trace(go.Scatter(x=df["generation"], y=df["best_fitness"], name=label,
                                 mode="lines+markers" if len(df) < 60 else "lines", marker=dict(size=8)))
    _generation_axis(fig, pd.concat([df["generation"] for df in curves.values()]))
    top = pd.concat([pd.to_numeric(df["best_fitness"], errors="coerce") for df in curves.values()]).max()
    fig.update_yaxes(title="best fitness", range=[0, float(top) * 1.1 if top and top > 0 else 1])
    return _layout(fig, "Best fitness per run", height=400)


def _short(name: str) -> str:
    return name.removeprefix("gene.").split(".", 1)[-1]


def importance(table: pd.DataFrame) -> go.Figure:
    """Horizontal bars of gene importance with their spread over the permutation repeats."""
    if table.empty:
        return empty("Gene importance for fitness", "too few distinct genomes (or no gene varies) yet")
    fig = go.Figure(go.Bar(y=[_short(g) for g in table["gene"]], x=table["importance"], orientation="h",
                           marker_color=BLUE, error_x=dict(type="data", array=table["spread"], color="#475569"),
                           customdata=table["gene"], hovertemplate="%{customdata}: %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title="drop of held-out R² when the gene is shuffled", rangemode="tozero")
    fig = _layout(fig, f"Gene importance for fitness (forest R² {table['r2'].iloc[0]:.2f} on held-out genomes)",
                  height=120 + 28 * len(table))
    fig.update_layout(hovermode="closest", showlegend=False)
    return fig
