"""Plotly charts drawn by plotly.js's basic bundle where ``python -m dashboard.serve`` serves it.

Streamlit's ``st.plotly_chart`` loads its own build of plotly.js, every trace type in 4.7 MB, and a
new tab's renderer spends about 0.85 s of its main thread evaluating that module before the first
chart can draw (benchmarks/MONITOR_RESULTS.md). The dashboard draws only scatter and bar traces,
which Plotly's own basic bundle (npm ``plotly.js-basic-dist-min``: bar, pie and scatter, 1.2 MB) has.
So where the server serves that bundle (:mod:`dashboard.static_preload` makes it a static file and
imports it as a chart page opens), :func:`chart` draws the figure with it, in a Streamlit v2
component (no iframe: the same document, the same ``window.Plotly``), with ``Plotly.react``: the
same figure JSON, the same mode bar, hover and legend. Anywhere else (``streamlit run app.py``,
AppTest, a figure with another trace type) it is ``st.plotly_chart``.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import plotly.io as pio
import streamlit as st

from dashboard.static_preload import URL_ENV

TRACES = frozenset({"scatter", "bar", "pie"})  # what the basic bundle registers

# Streamlit calls the default export with each new ``data`` and the cleanup on unmount. Every chart
# imports the same URL, so the module is evaluated once per tab (index.html has usually started it).
_JS = """
export default function ({ parentElement, data }) {
  let el = parentElement.querySelector("div.abebot-plotly");
  if (!el) {
    el = document.createElement("div");
    el.className = "abebot-plotly";
    parentElement.appendChild(el);
  }
  const fig = JSON.parse(data.figure);
  const draw = () => window.Plotly.react(el, fig.data, fig.layout, data.config);
  (window.Plotly ? Promise.resolve() : import(new URL(data.src, document.baseURI).href))
    .then(draw)
    .catch((err) => { el.textContent = "This chart could not be drawn: " + err; });
  return () => { if (window.Plotly) window.Plotly.purge(el); };
}
"""

_component = None


def _mount():
    global _component
    if _component is None:
        # isolate_styles=False: Plotly puts its CSS in the document's head, which a shadow root would not see.
        _component = st.components.v2.component("abebot_plotly", js=_JS, isolate_styles=False)
    return _component


def served_url() -> str | None:
    """The basic bundle's URL when this server serves it, else None."""
    return os.environ.get(URL_ENV) or None


def _trace_types(fig: Any) -> set[str]:
    """The trace types of a figure or of its JSON."""
    if isinstance(fig, str):
        return {t.get("type", "scatter") for t in json.loads(fig).get("data", [])}
    return {t.type for t in fig.data}


def chart(container: Any, fig: Any, key: str) -> None:
    """Draw ``fig`` (a Plotly figure, or its JSON as :func:`plotly.io.to_json` writes it) in
    ``container`` (``st`` or a column), without Plotly's logo in the mode bar: with the basic bundle
    where it is served and has every trace type of ``fig``, else with ``st.plotly_chart``."""
    config = {"displaylogo": False}
    url = served_url()
    if url is None or not _trace_types(fig) <= TRACES:
        container.plotly_chart(pio.from_json(fig) if isinstance(fig, str) else fig, key=key, config=config)
        return
    config["responsive"] = True
    figure = fig if isinstance(fig, str) else pio.to_json(fig, validate=False)
    with contextlib.nullcontext() if container is st else container:  # `st` itself is no context manager
        _mount()(key=key, data={"figure": figure, "config": config, "src": url})
