"""Run names beside run ids (sidebar, Monitor, compare legend, ``core runs``), never rendered as
Markdown or HTML, and archived runs listed and restored."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from core.cli import main
from dashboard import archive as A
from dashboard import charts, manage
from dashboard.meta import save_meta
from dashboard.names import md, titled
from dashboard.synthetic import build_run
from tests.test_app import APP, TIMEOUT, app, texts

PIXEL = "![x](http://127.0.0.1:9/pixel.png) **bold** :red[red] <img src=x>"


@pytest.fixture
def named(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(runs))
    plain = build_run(runs, generations=2, population=4, seed=1, run_id="plain-run")
    fancy = build_run(runs, generations=2, population=4, seed=2, run_id="named-run")
    save_meta(runs / fancy, "tile sweep " + PIXEL, "")
    return runs, plain, fancy


def test_core_runs_lists_the_names(named, capsys):
    runs, plain, fancy = named
    assert main(["runs", "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    header, *lines = out.splitlines()
    assert header.split()[:2] == ["run_id", "name"]
    assert any(line.startswith(fancy) and "tile sweep" in line for line in lines)
    assert any(line.startswith(plain) and " - " in line for line in lines)


def test_markdown_in_a_name_is_shown_as_typed():
    escaped = md(PIXEL)
    assert "![x](" not in escaped and "\\!\\[x\\]\\(" in escaped and "\\:red\\[" in escaped
    legend = charts.compare_runs({"r": __import__("pandas").DataFrame({"generation": [0], "best_fitness": [1.0]})},
                                 {"r": "<a href='http://x'>click</a> (r)"})
    assert "<a " not in legend.data[0].name and "&lt;a" in legend.data[0].name


def test_names_in_the_sidebar_picker_monitor_title_and_compare_legend(named):
    runs, plain, fancy = named
    at = app("monitor", {"run": fancy})
    picker = at.sidebar.selectbox(key="run_select")
    assert picker.format_func(fancy).startswith("tile sweep") and fancy in picker.format_func(fancy)
    assert picker.format_func(plain) == plain
    title = at.title[0].value
    assert "tile sweep" in title and "![x](" not in title  # escaped: no image fetched, no bold, no colour
    every = texts(at) + "\n".join(c.value for c in at.sidebar.caption)
    assert "](http" not in every.replace("\\](http", "") and ":red[" not in every.replace("\\:red\\[", "")
    at = app("runs")
    legend = [t["name"] for t in __import__("json").loads(
        next(c for c in at.get("plotly_chart") if c.proto.id.endswith("-compare_chart")).proto.spec)["data"]]
    assert any(name.startswith("tile sweep") and fancy in name for name in legend), legend
    assert plain in legend


def test_an_archived_run_is_listed_and_can_be_restored(named):
    runs, plain, fancy = named
    at = app("runs")
    at.selectbox(key="runs_pick").set_value(plain).run()
    at.checkbox(key=f"confirm_{plain}").check().run()
    at.button(key="archive_run").click().run()
    assert not at.exception
    assert any("archived" in s.value and "Archived runs" in s.value for s in at.success), [s.value for s in at.success]
    assert [r["run_id"] for r in A.archived(runs)] == [plain] and not (runs / plain).exists()
    assert "Archived runs (1)" in [e.label for e in at.expander]
    at.button(key=f"restore_{plain}").click().run()
    assert not at.exception and (runs / plain / "config.json").exists() and A.archived(runs) == []
    assert plain in at.selectbox(key="runs_pick").options


def test_restore_refuses_what_is_not_archived(named):
    runs, plain, _ = named
    with pytest.raises(ValueError):
        A.restore(runs, "../etc")
    with pytest.raises(ValueError):
        A.restore(runs, plain)
    manage.archive(runs, plain)
    build_run(runs, generations=1, population=4, seed=9, run_id=plain)  # a new run took the id
    with pytest.raises(FileExistsError):
        A.restore(runs, plain)
    assert titled(plain, runs / plain) == plain
