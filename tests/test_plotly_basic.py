"""dashboard.plotly_basic: the charts drawn by plotly.js's basic bundle where the server serves it,
by st.plotly_chart anywhere else (the browser test draws them in Chromium)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.plotly_basic import TRACES, URL_ENV
from dashboard.synthetic import build_run

ROOT = Path(__file__).resolve().parents[1]
URL = "./static/abebot/plotly-basic.0123456789abcdef.js"


def three_charts():
    import plotly.graph_objects as go
    import plotly.io as pio
    import streamlit as st

    from dashboard import plotly_basic

    plotly_basic.chart(st, go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout=dict(title="lines")), "a")
    left, right = st.columns(2)
    # The last two as the JSON the pages cache (dashboard.live.run_charts_json).
    plotly_basic.chart(left, pio.to_json(go.Figure(go.Heatmap(z=[[1, 2]]), layout=dict(title="heat"))), "b")
    plotly_basic.chart(right, pio.to_json(go.Figure(go.Bar(x=[1], y=[2]), layout=dict(title="bars"))), "c")


def components(at: AppTest) -> list[dict]:
    """The data of each chart drawn through the basic bundle, in page order."""
    return [json.loads(e.proto.json) for e in at.get("bidi_component") if e.proto.component_name == "abebot_plotly"]


def test_without_the_bundle_every_chart_is_streamlits_plotly_chart(monkeypatch):
    monkeypatch.delenv(URL_ENV, raising=False)
    at = AppTest.from_function(three_charts).run()
    assert not at.exception
    assert len(at.get("plotly_chart")) == 3 and components(at) == []


def test_with_the_bundle_scatter_and_bar_go_through_it_and_other_traces_stay_with_streamlit(monkeypatch):
    monkeypatch.setenv(URL_ENV, URL)
    at = AppTest.from_function(three_charts).run()
    assert not at.exception
    drawn = components(at)
    assert [json.loads(d["figure"])["layout"]["title"]["text"] for d in drawn] == ["lines", "bars"]
    assert all(d["src"] == URL and d["config"] == {"displaylogo": False, "responsive": True} for d in drawn)
    assert [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")] == ["heat"]
    assert {"scatter", "bar"} <= TRACES and "heatmap" not in TRACES


@pytest.fixture(scope="module")
def a_run(tmp_path_factory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("runs")
    return folder, build_run(folder, generations=6, population=8, seed=5)


@pytest.mark.parametrize("page, titles", [
    ("monitor", ["Fitness per generation", "Best time and memory so far", "Lethal candidates by cause",
                 "Population diversity", "Time vs memory, generation 5"]),
    ("benchmark", ["Time per implementation", "Memory per implementation"]),
])
def test_the_pages_draw_every_chart_through_the_bundle_when_it_is_served(a_run, monkeypatch, page, titles):
    folder, run_id = a_run
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(folder))
    monkeypatch.setenv(URL_ENV, URL)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.query_params.update({"run": run_id})
    at.run()
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [json.loads(d["figure"])["layout"]["title"]["text"] for d in components(at)] == titles
    assert at.get("plotly_chart") == []
