"""The warm-up's read-ahead (dashboard.prefetch, dashboard.nav): the pages find their caches filled
with the very keys they ask for, and the read-ahead never runs while a page is being drawn."""
from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard import importance, live, nav, prefetch, ui
from dashboard import individuals as IX
from dashboard.static_preload import URL_ENV
from dashboard.synthetic import build_run
from store import queries, reader

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    """A runs folder whose newest run has 30 generations of 8 (enough genomes for the importance)."""
    folder = tmp_path / "runs"
    build_run(folder, generations=4, population=8, seed=1)
    time.sleep(0.01)  # created_at orders the runs: the next one is the newest
    build_run(folder, generations=30, population=8, seed=2)
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(folder))
    monkeypatch.delenv(URL_ENV, raising=False)  # charts as st.plotly_chart, which AppTest can read
    st.cache_data.clear()
    st.cache_resource.clear()
    return folder


def count_calls(monkeypatch, owner, name: str) -> list:
    """Record each call of ``owner.name`` (still calling it)."""
    calls, real = [], getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_the_pages_find_what_the_read_ahead_read(runs, monkeypatch):
    newest = prefetch.newest_run(runs)
    assert newest is not None and len(list((newest / "live" / "individuals").iterdir())) > 0
    steps = prefetch.steps(runs)
    assert [s.__name__ for s in steps] == ["monitor", "table", "importance"]
    for step in steps:
        step()
    generations = count_calls(monkeypatch, reader.RunReader, "generations")
    tables = count_calls(monkeypatch, queries.IndividualsTable, "__init__")
    fits = count_calls(monkeypatch, importance, "gene_importance")
    built = count_calls(monkeypatch, live, "run_charts")
    # The Individuals page opened on the default (newest) run: table and importance from the caches.
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/individuals.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(c.proto.id.endswith("-chart_parallel") for c in at.get("plotly_chart"))
    assert not tables and not fits
    # The Monitor page too: its generations and its charts were read ahead with the same signature.
    at.switch_page("pages/monitor.py").run()
    assert not at.exception and not generations and not built
    assert len([c for c in at.get("plotly_chart") if c.proto.id.endswith(("-chart_fitness", "-chart_pareto"))]) == 2
    # With the x-axis in wall-clock time the charts are other charts: built once.
    at.toggle(key="x_wall").set_value(True).run()
    assert not at.exception and len(built) == 1
    # A filter the read-ahead did not compute is computed, as before.
    at.switch_page("pages/individuals.py").run()
    at.multiselect(key="ind_status").set_value(["ok"]).run()
    assert len(fits) == 1 and not tables


def test_the_read_ahead_of_an_empty_runs_folder_or_when_turned_off_is_nothing(tmp_path, runs, monkeypatch):
    assert prefetch.newest_run(tmp_path / "empty") is None and prefetch.steps(tmp_path / "empty") == []
    monkeypatch.setenv("ABEBOT_READ_AHEAD", "0")
    assert prefetch.newest_run(runs) is not None and prefetch.steps(runs) == []


def test_the_unfiltered_filter_is_what_the_page_builds_with_nothing_chosen(runs):
    table = IX.load_table(str(prefetch.newest_run(runs)), IX.run_identity(prefetch.newest_run(runs)))
    lo, hi = table.generation_span()
    # the widgets' values with nothing chosen: multiselects [], the slider's (lo, hi), no minimum, no prefix
    assert IX.filters([], (lo, hi), None, "  ", {}) == IX.unfiltered(table)
    assert IX.filters(("ok",), [lo, hi], 0.5, "ab", {"gene.x": ("1",)}) == {
        "status": ["ok"], "generation": (lo, hi), "fitness_min": 0.5, "hash": "ab", "in": {"gene.x": ["1"]}}


def test_reading_ahead_waits_until_no_page_started_for_the_quiet_time(monkeypatch):
    ran = []
    monkeypatch.setattr(nav, "_last_page_run", time.monotonic())
    worker = threading.Thread(target=nav._when_idle, args=(lambda: ran.append(time.monotonic()), 0.6))
    worker.start()
    time.sleep(0.3)
    nav._last_page_run = time.monotonic()  # a page started meanwhile: the quiet time starts again
    worker.join(timeout=10)
    assert ran and ran[0] - nav._last_page_run >= 0.6
    assert nav._when_idle(lambda: 1 / 0) is None  # a failing step is left to the page


def test_warm_up_reads_ahead_after_the_imports(monkeypatch):
    import gc

    done = []
    monkeypatch.setattr(nav, "WARM_MODULES", ("json", "dashboard.charts"))
    monkeypatch.setattr(nav, "_first_element_check", lambda: done.append("check"))
    monkeypatch.setattr(gc, "freeze", lambda: done.append("freeze"))
    monkeypatch.setattr(nav, "PREFETCH_QUIET_S", 0.2)
    monkeypatch.setattr(nav, "_last_page_run", None)
    monkeypatch.setattr(nav, "_prefetch_steps", lambda: [lambda: done.append("read"), lambda: 1 / 0,
                                                         lambda: done.append("read again")])
    t0 = time.monotonic()
    nav.warm_up()
    assert done == ["check", "freeze", "read", "read again"]
    assert time.monotonic() - t0 >= 0.2  # the warm-up's own start counts as a page started


def _database_pid(queue) -> None:
    con = reader.query_connection()
    queue.put((reader._DATABASE[0], con.execute("SELECT 42").fetchone()[0]))


def test_readers_share_one_database_and_a_forked_child_opens_its_own():
    a, b = reader.query_connection(), reader.query_connection()
    assert a is not b and a.execute("SELECT 1").fetchone() == (1,)
    parent = reader._DATABASE
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_database_pid, args=(queue,))
    child.start()
    pid, answer = queue.get(timeout=60)
    child.join(timeout=60)
    assert pid == child.pid != parent[0] and answer == 42
    assert reader._DATABASE is parent
