"""The Individuals page's parallel-coordinates chart: every gene an axis, fitness the last, one line
per genome coloured by its fitness band (drawn as SVG scatter traces, see :func:`parallel`)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.charts import _layout, _short, empty

PARALLEL_BANDS = 16  # fitness colour bands of the parallel-coordinates lines (one SVG trace each)
PARALLEL_LABELS = 12  # at most this many value labels per gene axis
PARALLEL_LABEL_CHARS = 10  # a value label's length: it must end before the axis to its left does


def _levels(values: pd.Series) -> list[str]:
    """A gene's distinct values in axis order: numerically when they all read as numbers, else by
    length then text (so "8" < "16" < "32" for numbers stored as text)."""
    levels = list(values.unique())
    numbers = pd.to_numeric(pd.Series(levels, dtype=object), errors="coerce")
    if len(levels) and not numbers.isna().any():
        return [v for _, v in sorted(zip(numbers, levels))]
    return sorted(levels, key=lambda v: (len(v), v))


def parallel(frame: pd.DataFrame, genes: list[str]) -> go.Figure:
    """Parallel coordinates of ``genes`` and fitness: one vertical axis per gene (each value at its
    rank, labelled by value) and fitness last, one line per row of ``frame`` coloured by fitness.

    Drawn in SVG with ordinary ``go.Scatter`` traces rather than Plotly's ``parcoords``, which is
    WebGL only: a headless or GPU-less browser draws WebGL in software, and with 500 ``parcoords``
    lines it added 1.2-3.0 s to the Individuals page there, this one 0.2-0.6 s
    (benchmarks/MONITOR_RESULTS.md, ``--compare-parallel``). Here every line of one fitness
    band (``PARALLEL_BANDS`` bands of the fitness range, fittest drawn last, on top) is one trace with
    NaN breaks between rows, so the browser lays out about twenty SVG paths whatever the number of
    rows. The dots on the fitness axis carry the continuous colour scale, its colour bar and, on
    hover, each row's genes. What ``parcoords`` had and this has not: dragging a range on an axis
    and reordering axes in the browser; the page filters the rows instead (the chart follows it)."""
    import numpy as np
    from plotly.colors import sample_colorscale

    genes = [g for g in genes if g in frame]
    if "fitness" in frame:
        fit = pd.to_numeric(frame["fitness"], errors="coerce").astype(float)
        frame, fit = frame[fit.notna()], fit[fit.notna()].to_numpy()
    if frame.empty or not genes or "fitness" not in frame:
        return empty("Genes against fitness", "no rows match the filter")
    n, k = len(frame), len(genes)
    ys, ticks = [], []  # per axis: every row's height in [0, 1]; the (height, label) pairs shown
    values = frame[genes].astype(str)
    for g in genes:
        levels = _levels(values[g])
        height = {v: i / (len(levels) - 1) if len(levels) > 1 else 0.5 for i, v in enumerate(levels)}
        ys.append(values[g].map(height).to_numpy(float))
        shown = levels if len(levels) <= PARALLEL_LABELS else levels[:: -(-len(levels) // PARALLEL_LABELS)]
        ticks.append([(height[v], v if len(v) <= PARALLEL_LABEL_CHARS else v[:PARALLEL_LABEL_CHARS - 1] + "…")
                      for v in shown])
    lo, hi = float(fit.min()), float(fit.max())
    span = hi - lo if hi > lo else 0.0
    fit_y = (fit - lo) / span if span else np.full(n, 0.5)
    ys.append(fit_y)
    ticks.append([((t - lo) / span if span else 0.5, f"{t:.4g}") for t in (np.linspace(lo, hi, 5) if span else [lo])])
    heights = np.column_stack(ys)  # n rows x (k + 1) axes
    axes_x = np.arange(k + 1, dtype=float)
    band = np.minimum((fit_y * PARALLEL_BANDS).astype(int), PARALLEL_BANDS - 1)
    colours = sample_colorscale("Viridis", [(b + 0.5) / PARALLEL_BANDS for b in range(PARALLEL_BANDS)])
    order = np.argsort(fit, kind="stable")  # the fittest last: drawn on top
    fig = go.Figure()
    for b in range(PARALLEL_BANDS):
        rows = order[band[order] == b]
        if len(rows):
            y = np.column_stack([heights[rows], np.full(len(rows), np.nan)]).ravel()
            x = np.tile(np.append(axes_x, np.nan), len(rows))
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line=dict(color=colours[b], width=1), opacity=0.6,
                                     hoverinfo="skip", showlegend=False, name=f"fitness band {b + 1}"))
    rule_x = np.repeat(axes_x, 3)
    rule_x[2::3] = np.nan
    fig.add_trace(go.Scatter(x=rule_x, y=np.tile([0.0, 1.0, np.nan], k + 1), mode="lines", name="axes",
                             line=dict(color="#334155", width=1.2), hoverinfo="skip", showlegend=False))
    fig.add_trace(go.Scatter(x=[i for i, axis in enumerate(ticks) for _ in axis], y=[h for axis in ticks for h, _ in axis],
                             text=[t for axis in ticks for _, t in axis], mode="text", textposition="middle left",
                             textfont=dict(size=10, color="#0f172a"), hoverinfo="skip", showlegend=False,
                             cliponaxis=False, name="values"))
    hover = "<br>".join([f"{_short(g)} %{{customdata[{i}]}}" for i, g in enumerate(genes)])
    fig.add_trace(go.Scatter(x=np.full(n, float(k)), y=fit_y, mode="markers", name="genomes", showlegend=False,
                             customdata=values.to_numpy(), cliponaxis=False,
                             marker=dict(size=6, color=fit, colorscale="Viridis", cmin=lo, cmax=hi if span else lo + 1,
                                         colorbar=dict(title="fitness", thickness=12)),
                             hovertemplate="fitness %{marker.color:.4f}<br>" + hover + "<extra></extra>"))
    fig.update_xaxes(tickvals=list(axes_x), ticktext=[_short(g) for g in genes] + ["fitness"], side="top",
                     range=[-0.7, k + 0.2], tickangle=0, showgrid=False, zeroline=False, fixedrange=True)
    fig.update_yaxes(visible=False, range=[-0.04, 1.04], fixedrange=True)
    fig = _layout(fig, f"Genes against fitness ({n:,} rows)", height=420)
    fig.update_layout(hovermode="closest", margin=dict(l=10, r=10, t=70, b=10))
    return fig
