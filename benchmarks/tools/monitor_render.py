"""How long the Monitor and Individuals pages take for a run of 5,000 generations x 64 individuals (target: < 2 s).

The run is written with the real store writer (``RunWriter.commit_generation``, one transaction and
one live/ Parquet mirror per generation, as the worker does) through
:func:`dashboard.synthetic.build_run`; measuring a real 72-hour run is not practical. Then:

1. the data-loading functions the page calls, on a fresh reader (cold);
2. the whole Monitor page through Streamlit's AppTest: the first render with empty caches, a rerun
   with warm caches (what every live refresh costs while no generation lands), and a rerun after
   a new generation was committed (the caches keyed on the run's files are invalidated);
3. the Individuals page's data path (every individual into one DuckDB table, a filtered sorted
   query, the gene importance forest) and the whole page through AppTest;
4. with ``--browser``, the time Chromium needs from navigation until all five Monitor charts are
   drawn, and until the Individuals table and its two charts are drawn, on a server started with
   ``streamlit run app.py`` and opened the moment ``/_stcore/health`` answers; then (not with
   ``--only individuals``) the Monitor page on servers started as ``scripts/dashboard.sh`` starts them
   (``python -m dashboard.serve``, which warms up at start), opened at once and once the server said
   its warm-up finished, and in a new tab of the same browser, then the Individuals page in that tab,
   which the warm-up read ahead (:func:`browser_starts`); then the Monitor and Individuals pages after
   a restart of the dashboard, in a browser that stayed open, and the Monitor page after the browser is
   restarted too (:func:`browser_restart`);
5. with ``--compare-parallel``, each way of drawing the parallel coordinates that was weighed (Plotly
   ``parcoords`` in WebGL with 500 and 200 lines, Vega-Lite, Plotly SVG scatter lines) on a page of
   its own beside the importance chart, in Chromium.

    python -m benchmarks.tools.monitor_render [--runs-dir DIR] [--generations 5000] [--population 64]
                                        [--browser] [--compare-parallel] [--only individuals]
                                        [--write benchmarks/reports/MONITOR_RESULTS.md | --append ...]

``--runs-dir`` keeps the built run, so later measurements skip the build.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]

from dashboard import charts, data, parallel_chart  # noqa: E402
from dashboard.synthetic import build_run  # noqa: E402
from store.reader import RunReader  # noqa: E402
from store.runs import list_runs  # noqa: E402


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    """Median seconds of ``repeat`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def ensure_run(runs: Path, generations: int, population: int) -> tuple[str, float | None]:
    """An existing run of the requested size in ``runs``, or a new one (and its build time)."""
    for row in list_runs(runs):
        gens = RunReader(runs / row["run_id"]).generations(["generation"])
        if len(gens) == generations:
            return row["run_id"], None
    t0 = time.perf_counter()
    run_id = build_run(runs, generations=generations, population=population, seed=1, status="finished")
    return run_id, time.perf_counter() - t0


def data_loading(folder: Path) -> list[tuple[str, float]]:
    """The Monitor page's data path, function by function, each on a fresh reader (no caches)."""
    rows = []
    t, gens = timed(lambda: RunReader(folder).generations())
    rows.append((f"RunReader.generations() ({len(gens)} rows)", t))
    latest = int(gens["generation"].max())
    t, inds = timed(lambda: RunReader(folder).individuals(latest))
    rows.append((f"RunReader.individuals({latest}) ({len(inds)} rows)", t))
    t, _ = timed(lambda: RunReader(folder).status())
    rows.append(("RunReader.status() + heartbeat()", t))
    t, curves = timed(lambda: data.fitness_curves(gens))
    rows.append((f"fitness curves, bucketed to {len(curves)} points", t))
    t, _ = timed(lambda: (data.series(gens, ["best_time_us", "best_memory_bytes"], "min"), data.lethal_causes(gens),
                          data.series(gens, ["diversity"], "mean")))
    rows.append(("time/memory, lethal causes, diversity series", t))
    t, _ = timed(lambda: [f.to_json() for f in (
        charts.fitness(curves), charts.time_and_memory(data.series(gens, ["best_time_us", "best_memory_bytes"], "min")),
        charts.lethal(data.lethal_causes(gens)), charts.diversity(data.series(gens, ["diversity"], "mean")),
        charts.pareto(data.pareto_points(inds), latest))])
    rows.append(("build + serialise the 5 Plotly figures", t))
    t, _ = timed(lambda: RunReader(folder).individuals(None, columns=["generation", "genome_hash", "parents", "fitness"]),
                 repeat=3)
    rows.append(("(Genomes page) all individuals, 4 columns", t))
    return rows


def individuals_loading(folder: Path) -> list[tuple[str, float]]:
    """The Individuals page's data path: the table build (once per dashboard process and run), the
    per-rerun refresh, a page of a filtered sorted query, the importance samples and fit."""
    from dashboard import importance
    from store.queries import IndividualsTable

    rows = []
    t, table = timed(lambda: IndividualsTable(folder), repeat=3)
    rows.append((f"IndividualsTable: every individual into DuckDB ({table.rows:,} rows, {len(table.genes)} genes)", t))
    t, _ = timed(table.refresh)
    rows.append(("IndividualsTable.refresh() with no new generation (every rerun pays it)", t))
    gene = table.genes[0]
    value = table.distinct(gene)[0]
    filters = {"status": ["ok"], "in": {gene: [value]}}
    t, _ = timed(lambda: (table.count(filters), table.query(filters, sort="time_us", descending=False, limit=100)))
    rows.append(("filter (status + one gene) + sort + page 1 of 100 rows + count", t))
    t, _ = timed(lambda: table.query(filters, sort="time_us", descending=False, limit=100, offset=20_000))
    rows.append(("same, page 201 (OFFSET 20,000)", t))
    t, frame = timed(lambda: table.latest_sample(None, ["fitness", *table.genes], importance.MAX_ROWS), repeat=3)
    rows.append((f"latest row of each genome, sampled in DuckDB, for importance ({len(frame):,} rows)", t))
    t, best = timed(lambda: table.latest_sample(None, ["fitness", *table.genes], importance.PARALLEL_TOP,
                                                fittest=True), repeat=3)
    rows.append((f"the {importance.PARALLEL_TOP} fittest distinct genomes, for the parallel coordinates", t))
    t, imp = timed(lambda: importance.gene_importance(frame, table.genes), repeat=3)
    rows.append((f"gene importance (random forest + permutation, {importance.MAX_ROWS:,} genomes sampled)", t))
    par = importance.parallel_frame(frame, table.genes, fittest=best)
    t, _ = timed(lambda: (charts.importance(imp).to_json(), parallel_chart.parallel(par, table.genes[:8]).to_json()))
    rows.append((f"build + serialise the importance and parallel-coordinates ({len(par)} lines) figures", t))
    t, _ = timed(lambda: len(table.export(None, "csv")), repeat=1)
    rows.append((f"CSV download of all {table.rows:,} rows (built only when clicked)", t))
    return rows


def apptest_individuals(runs: Path, run_id: str) -> list[tuple[str, float]]:
    """The whole Individuals page through AppTest: cold (table build + importance) and warm."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ["ABEBOT_RUNS_DIR"] = str(runs)
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["run"] = run_id
    at.run()
    at.switch_page("pages/individuals.py")
    t0 = time.perf_counter()
    at.run()
    cold = time.perf_counter() - t0
    assert not at.exception, [e.value for e in at.exception]
    warm = []
    for _ in range(3):
        t0 = time.perf_counter()
        at.run()
        warm.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    at.number_input(key="ind_page").set_value(2).run()
    page2 = time.perf_counter() - t0
    assert "page 2 of" in " ".join(c.value for c in at.caption)
    t0 = time.perf_counter()
    at.toggle(key="ind_importance").set_value(True).run()
    importance_on = time.perf_counter() - t0
    t0 = time.perf_counter()
    at.multiselect(key="ind_status").set_value(["ok"]).run()
    refilter = time.perf_counter() - t0
    return [("Individuals page, first render (table build + gene importance)", cold),
            ("Individuals page, rerun with warm caches (median of 3)", statistics.median(warm)),
            ("Individuals page, next page of the table", page2),
            ("Individuals page, gene importance toggle rerun (cached)", importance_on),
            ("Individuals page, a new filter (query + importance refit)", refilter)]


def apptest(runs: Path, run_id: str) -> list[tuple[str, float]]:
    """The whole Monitor page through AppTest: cold, warm, and after a new generation."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ["ABEBOT_RUNS_DIR"] = str(runs)
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["run"] = run_id
    at.run()
    at.switch_page("pages/monitor.py")
    t0 = time.perf_counter()
    at.run()
    cold = time.perf_counter() - t0
    assert not at.exception, [e.value for e in at.exception]
    assert any(m.label == "Generations done" for m in at.metric)
    warm = []
    for _ in range(5):
        t0 = time.perf_counter()
        at.run()
        warm.append(time.perf_counter() - t0)
    # A new generation: touch the run's live files so every signature-keyed cache misses.
    folder = runs / run_id
    now = time.time()
    for name in ("heartbeat.json", "live"):
        os.utime(folder / name, (now, now))
    t0 = time.perf_counter()
    at.run()
    fresh = time.perf_counter() - t0
    return [("Monitor page, first render (empty caches)", cold),
            ("Monitor page, rerun with warm caches (median of 5)", statistics.median(warm)),
            ("Monitor page, rerun after a new generation", fresh)]


CHARTS_DRAWN = """() => {
  // The importance bars, and the parallel coordinates' SVG lines and value labels.
  const bars = document.querySelectorAll('.js-plotly-plot .barlayer .point').length;
  const par = [...document.querySelectorAll('.js-plotly-plot')].find(
    p => (p.querySelector('.gtitle') || {}).textContent?.startsWith('Genes against fitness'));
  const lines = par ? par.querySelectorAll('.scatterlayer .js-line').length : 0;
  const labels = par ? par.querySelectorAll('.scatterlayer .textpoint').length : 0;
  const busy = document.querySelector('[data-testid="stStatusWidget"]');
  return bars > 0 && lines > 1 && labels > 0 && !busy;
}"""


# The Monitor page's five charts in the main area, each drawn. Until 2026-12-01 the rows waited for five
# .main-svg elements, but a Plotly chart has three of them, so that was met once the second chart was drawn.
MONITOR_DRAWN = ("(() => { const p = document.querySelectorAll('[data-testid=\"stMain\"] .js-plotly-plot');"
                 " return p.length >= 5 && [...p].every(e => e.querySelector('.main-svg')); })()")
WARMED_LINE = "warm-up finished"  # what dashboard.nav.warm_up prints on stderr under `python -m dashboard.serve`


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def free_port() -> int:
    """A local TCP port nobody listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def streamlit_server(app: Path, cwd: Path, env: dict | None = None, serve: bool = False,
                     after_warm_up: bool = False, port: int | None = None) -> Iterator[str]:
    """A Streamlit server for ``app`` on ``port`` (a free local one by default): yields its URL as soon as
    ``/_stcore/health`` answers; its process group is killed on the way out. ``serve``: start it as
    ``scripts/dashboard.sh`` does (``python -m dashboard.serve``, which warms up at start) instead of
    ``streamlit run app``; ``after_warm_up``: with ``serve``, yield only once the server has said its
    warm-up finished."""
    import urllib.request

    port = port or free_port()
    launch = [sys.executable, "-m", *(("dashboard.serve",) if serve else ("streamlit", "run", str(app)))]
    log = tempfile.TemporaryFile()
    env = dict(env, ABEBOT_NO_TOKEN="1")  # dashboard.guard: these time pages, not the one-time token redirect
    server = subprocess.Popen([*launch, "--server.port", str(port), "--server.headless", "true"], cwd=cwd, env=env,
                              stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(url + "/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        for _ in range(1200 if after_warm_up else 0):
            log.seek(0)
            if WARMED_LINE.encode() in log.read():
                break
            time.sleep(0.1)
        else:
            if after_warm_up:
                raise RuntimeError("the server never said its warm-up finished")
        yield url
    finally:
        os.killpg(server.pid, 9)
        server.wait()
        log.close()


@contextmanager
def chromium_on(app: Path, cwd: Path, env: dict | None = None, serve: bool = False,
                after_warm_up: bool = False) -> Iterator[tuple[object, str]]:
    """:func:`streamlit_server` and a headless Chromium page: yields (page, url) once both are up;
    the browser is closed on the way out."""
    from playwright.sync_api import sync_playwright

    with streamlit_server(app, cwd, env, serve, after_warm_up) as url, sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        try:
            yield b.new_context(viewport={"width": 1500, "height": 1200}).new_page(), url
        finally:
            b.close()


def browser(runs: Path, run_id: str) -> list[tuple[str, float]]:
    """Chromium: navigation to all five charts drawn, on a fresh server (cold) and a reload (warm); the
    server started as ``scripts/dashboard.sh`` starts it (``python -m dashboard.serve``, which serves
    plotly.js's basic bundle where npm installed it), opened at once."""
    out = []
    with chromium_on(Path("app.py"), ROOT, dict(os.environ, ABEBOT_RUNS_DIR=str(runs)), serve=True) as (page, url):
        for label in ("Chromium: Monitor until 5 charts drawn (fresh server)", "Chromium: same, reload (warm)"):
            t0 = time.perf_counter()
            page.goto(f"{url}/monitor?run={run_id}")
            page.wait_for_function(MONITOR_DRAWN, timeout=120_000)
            out.append((label, time.perf_counter() - t0))
        for visit in ("first visit", "reload, warm"):
            t0 = time.perf_counter()
            page.goto(f"{url}/individuals?run={run_id}")
            page.get_by_text("individuals match").wait_for(timeout=300_000)
            page.wait_for_function("document.querySelector('[data-testid=\"stDataFrame\"] canvas')",
                                   timeout=300_000)
            out.append((f"Chromium: Individuals until the table is drawn ({visit})", time.perf_counter() - t0))
            # Each chart on its own (one Plotly chart has two .main-svg layers): the importance
            # bars, then the parallel coordinates' SVG lines and axis labels.
            page.wait_for_function(CHARTS_DRAWN, timeout=300_000)
            out.append((f"Chromium: Individuals until importance + parallel coordinates drawn ({visit})",
                        time.perf_counter() - t0))
        t0 = time.perf_counter()
        box = page.get_by_label("Page", exact=True)
        box.fill("2")
        box.press("Enter")
        page.get_by_text("(page 2 of").wait_for(timeout=300_000)
        page.wait_for_function(CHARTS_DRAWN, timeout=300_000)
        out.append(("Chromium: Individuals, next page of the table (until redrawn)", time.perf_counter() - t0))
    return out


def browser_starts(runs: Path, run_id: str) -> list[tuple[str, float]]:
    """What the "fresh server" row above is made of. The dashboard started as ``scripts/dashboard.sh``
    starts it (``python -m dashboard.serve``: warm-up at server start), then the Monitor page opened at
    once, as above, and on another fresh server once that server has said its warm-up finished (a user
    who opens the page a few seconds after starting the dashboard). Last, on that warm server, the
    Monitor page in a new tab of the same browser: server and browser cache warm, the browser's own
    cost of a new tab (a new renderer process evaluates Streamlit's and Plotly's JavaScript again);
    then, in that tab, the Individuals page's first visit on that server, which the warm-up read ahead
    (:mod:`dashboard.prefetch`: the benchmark's run is the runs folder's newest)."""
    out = []
    env = dict(os.environ, ABEBOT_RUNS_DIR=str(runs))
    for label, warm in (("opened at once", False), ("opened once its start-up warm-up had finished", True)):
        with chromium_on(Path("app.py"), ROOT, env, serve=True, after_warm_up=warm) as (page, url):
            t0 = time.perf_counter()
            page.goto(f"{url}/monitor?run={run_id}")
            page.wait_for_function(MONITOR_DRAWN, timeout=120_000)
            out.append((f"Chromium: Monitor, fresh server started by `python -m dashboard.serve`, {label}",
                        time.perf_counter() - t0))
            if warm:
                time.sleep(1)
                tab = page.context.new_page()  # same browser, same HTTP cache, a new renderer
                t0 = time.perf_counter()
                tab.goto(f"{url}/monitor?run={run_id}")
                tab.wait_for_function(MONITOR_DRAWN, timeout=120_000)
                out.append(("Chromium: Monitor in a new tab (server and browser cache warm)", time.perf_counter() - t0))
                t0 = time.perf_counter()
                tab.goto(f"{url}/individuals?run={run_id}")
                tab.wait_for_function(CHARTS_DRAWN, timeout=300_000)
                out.append(("Chromium: Individuals, first visit on that server, until importance + parallel coordinates"
                            " drawn (the warm-up read the newest run ahead)", time.perf_counter() - t0))
    return out


def browser_restart(runs: Path, run_id: str) -> list[tuple[str, float]]:
    """The dashboard restarted under a browser that used it before. A browser (its profile kept on
    disk) opens the Monitor page on a server started as ``scripts/dashboard.sh`` starts it; that server
    is stopped and another started on the same port (a user's http://127.0.0.1:8501), and once its
    warm-up finished the browser, still open, opens the Monitor page in a new tab, then the Individuals
    page in that tab; last, the browser is closed and started again on the same profile and opens the
    Monitor page. Streamlit's scripts come from the browser's cache; the server is new."""
    from playwright.sync_api import sync_playwright

    out, port = [], free_port()
    env = dict(os.environ, ABEBOT_RUNS_DIR=str(runs))

    def drawn(page, path: str, done: str) -> float:
        t0 = time.perf_counter()
        page.goto(f"{url}/{path}?run={run_id}")
        page.wait_for_function(done, timeout=300_000)
        return time.perf_counter() - t0

    def browser(p, profile: str):
        return p.chromium.launch_persistent_context(profile, executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS,
                                                     viewport={"width": 1500, "height": 1200})

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        context = browser(p, profile)
        try:
            with streamlit_server(Path("app.py"), ROOT, env, serve=True, after_warm_up=True, port=port) as url:
                drawn(context.pages[0] if context.pages else context.new_page(), "monitor", MONITOR_DRAWN)
            with streamlit_server(Path("app.py"), ROOT, env, serve=True, after_warm_up=True, port=port) as url:
                tab = context.new_page()
                out.append(("Chromium: Monitor after a restart of the dashboard, in a new tab of the browser left "
                            "open (opened once the warm-up finished)", drawn(tab, "monitor", MONITOR_DRAWN)))
                out.append(("Chromium: then Individuals, until importance + parallel coordinates drawn",
                            drawn(tab, "individuals", CHARTS_DRAWN)))
                context.close()
                context = browser(p, profile)
                out.append(("Chromium: Monitor on that server, the browser closed and started again (its cache on disk)",
                            drawn(context.pages[0] if context.pages else context.new_page(), "monitor", MONITOR_DRAWN)))
        finally:
            context.close()
    return out


# -- --compare-parallel: the parallel-coordinates renderers weighed, each alone on a page ---------------
PARALLEL_VARIANTS = {  # name: (what the row says, lines drawn, JavaScript true once the variant is drawn)
    "none": ("importance chart alone (baseline)", 0, ""),
    "parcoords": ("+ Plotly parcoords (WebGL), the old chart", 500,
                  "document.querySelectorAll('.parcoords .y-axis').length > 1"
                  " && document.querySelectorAll('.gl-container canvas').length > 0"),
    "parcoords200": ("+ Plotly parcoords (WebGL), fewer lines", 200,
                     "document.querySelectorAll('.parcoords .y-axis').length > 1"
                     " && document.querySelectorAll('.gl-container canvas').length > 0"),
    "altair": ("+ Vega-Lite (st.altair_chart: fold-style long frame, line + rule + text layers)", 500,
               "(document.querySelectorAll('.vega-embed .mark-line path').length > 0 || (() => {"
               " const c = document.querySelector('.vega-embed canvas'); if (!c || !c.width) return false;"
               " const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
               " for (let i = 3; i < d.length; i += 388) if (d[i]) return true; return false; })())"),
    "svg": ("+ Plotly go.Scatter in SVG (dashboard.charts.parallel, the page's chart)", 500,
            "document.querySelectorAll('.scatterlayer .js-line').length > 1"
            " && document.querySelectorAll('.scatterlayer .textpoint').length > 0"),
}

PARALLEL_APP = """
import sys
sys.path[:0] = [{root!r}]  # this app runs from a temporary folder
import pandas as pd
import streamlit as st
import benchmarks.tools.monitor_render as M
from dashboard import charts, parallel_chart
st.set_page_config(layout="wide")
par, imp = pd.read_pickle({par!r}), pd.read_pickle({imp!r})
v = st.query_params.get("v", "none")
left, right = st.columns([2, 3])
left.plotly_chart(charts.importance(imp), key="imp")
genes = list(imp["gene"][:8])
lines = M.PARALLEL_VARIANTS[v][1]
if v.startswith("parcoords"):
    right.plotly_chart(M.parcoords(par.head(lines), genes), key="par")
elif v == "altair":
    right.altair_chart(M.vega_parallel(par.head(lines), genes), key="par", width="stretch")
elif v == "svg":
    right.plotly_chart(parallel_chart.parallel(par.head(lines), genes), key="par")
"""


def parcoords(frame, genes):
    """The old chart (before 2026-12-01): Plotly's WebGL ``parcoords``, kept here to measure it."""
    import plotly.graph_objects as go

    dims = []
    for g in genes:
        values = frame[g].astype(str)
        levels = sorted(values.unique(), key=lambda v: (len(v), v))
        shown = levels if len(levels) <= 12 else levels[:: -(-len(levels) // 12)]
        dims.append(dict(label=charts._short(g), values=values.map({v: i for i, v in enumerate(levels)}),
                         tickvals=[levels.index(v) for v in shown], ticktext=[v[:14] for v in shown]))
    dims.append(dict(label="fitness", values=frame["fitness"].astype(float)))
    fig = go.Figure(go.Parcoords(line=dict(color=frame["fitness"].astype(float), colorscale="Viridis",
                                           showscale=True), dimensions=dims))
    return charts._layout(fig, f"Genes against fitness ({len(frame):,} rows)", height=420)


def vega_parallel(frame, genes):
    """The Vega-Lite alternative that was measured: each axis scaled to [0, 1] in pandas (a gene's
    values at their rank), a long frame of (row, axis, height), lines + axis rules + value labels."""
    import altair as alt
    import numpy as np
    import pandas as pd

    names, cols, ticks = [charts._short(g) for g in genes] + ["fitness"], {}, []
    for name, g in zip(names, genes):
        values = frame[g].astype(str)
        levels = charts._levels(values)
        height = {v: i / (len(levels) - 1) if len(levels) > 1 else 0.5 for i, v in enumerate(levels)}
        cols[name] = values.map(height).to_numpy(float)
        shown = levels if len(levels) <= 12 else levels[:: -(-len(levels) // 12)]
        ticks += [(name, height[v], v[:14]) for v in shown]
    fit = frame["fitness"].astype(float).to_numpy()
    lo, hi = fit.min(), fit.max()
    cols["fitness"] = (fit - lo) / ((hi - lo) or 1)
    ticks += [("fitness", (t - lo) / ((hi - lo) or 1), f"{t:.4g}") for t in np.linspace(lo, hi, 5)]
    wide = pd.DataFrame(cols).assign(row=np.arange(len(frame)), fit=fit)
    long = wide.melt(id_vars=["row", "fit"], var_name="axis", value_name="y")
    x = alt.X("axis:N", sort=names, title=None, axis=alt.Axis(orient="top", labelAngle=0))
    lines = alt.Chart(long).mark_line(opacity=0.6, strokeWidth=1).encode(
        x=x, y=alt.Y("y:Q", axis=None), detail="row:N", order="fit:Q",
        color=alt.Color("fit:Q", scale=alt.Scale(scheme="viridis"), title="fitness"))
    rules = alt.Chart(pd.DataFrame({"axis": names})).mark_rule(color="#334155").encode(x=x)
    labels = alt.Chart(pd.DataFrame(ticks, columns=["axis", "y", "label"])).mark_text(
        align="right", dx=-3, fontSize=10).encode(x=x, y="y:Q", text="label:N")
    return (lines + rules + labels).properties(height=380, title=f"Genes against fitness ({len(frame):,} rows)")


def compare_parallel(folder: Path, reps: int = 5) -> list[tuple[str, float]]:
    """Each parallel-coordinates renderer on a page of its own next to the importance chart (as on
    the Individuals page), the same genomes the page would draw, on a warm server: the median over
    ``reps`` navigations until drawn. The baseline row is the importance chart alone."""
    from dashboard import importance
    from store.queries import IndividualsTable

    table = IndividualsTable(folder)
    frame = table.latest_sample(None, ["fitness", *table.genes], importance.MAX_ROWS)
    best = table.latest_sample(None, ["fitness", *table.genes], importance.PARALLEL_TOP, fittest=True)
    work = Path(tempfile.mkdtemp(prefix="abebot-parallel-"))
    importance.parallel_frame(frame, table.genes, fittest=best).to_pickle(work / "par.pkl")
    importance.gene_importance(frame, table.genes).to_pickle(work / "imp.pkl")
    (work / "app.py").write_text(PARALLEL_APP.format(root=str(ROOT),
                                                     par=str(work / "par.pkl"), imp=str(work / "imp.pkl")))
    times: dict[str, list[float]] = {v: [] for v in PARALLEL_VARIANTS}
    bars = "document.querySelectorAll('.barlayer .point').length > 0"
    with chromium_on(work / "app.py", work) as (page, url):
        for v, (_, _, drawn) in PARALLEL_VARIANTS.items():  # warm-up: the server's imports, each JS chunk
            page.goto(f"{url}/?v={v}")
            page.wait_for_function(f"() => {bars}" + (f" && {drawn}" if drawn else ""), timeout=120_000)
        for _ in range(reps):  # interleaved, so a burst of load elsewhere hits every variant alike
            for v, (_, _, drawn) in PARALLEL_VARIANTS.items():
                t0 = time.perf_counter()
                page.goto(f"{url}/?v={v}")
                page.wait_for_function(f"() => {bars}" + (f" && {drawn}" if drawn else ""), timeout=120_000,
                                       polling=20)
                times[v].append(time.perf_counter() - t0)
    return [(f"Chromium probe: {what}" + (f", {lines} lines" if lines else "") + f" (median of {reps})",
             statistics.median(times[v])) for v, (what, lines, _) in PARALLEL_VARIANTS.items()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs-dir", type=Path, default=None, help="keep (or reuse) the built run here")
    ap.add_argument("--generations", type=int, default=5000)
    ap.add_argument("--population", type=int, default=64)
    ap.add_argument("--browser", action="store_true", help="also time Chromium drawing the page")
    ap.add_argument("--write", type=Path, default=None, help="write the results as Markdown to this file")
    ap.add_argument("--append", type=Path, default=None, help="append the results as a dated section to this file")
    ap.add_argument("--compare-parallel", action="store_true",
                    help="also time each parallel-coordinates renderer (parcoords, Vega-Lite, SVG) alone in Chromium")
    ap.add_argument("--only", choices=("all", "individuals"), default="all",
                    help="individuals: only the Individuals page's rows (and its Chromium rows with --browser)")
    args = ap.parse_args()
    tmp = None
    runs = args.runs_dir
    if runs is None:
        tmp = tempfile.TemporaryDirectory(prefix="abebot-bench-")
        runs = Path(tmp.name)
    runs.mkdir(parents=True, exist_ok=True)
    run_id, build_s = ensure_run(runs, args.generations, args.population)
    folder = runs / run_id
    size = sum(p.stat().st_size for p in (folder / "live").rglob("*") if p.is_file())
    print(f"run {run_id}: {args.generations} generations x {args.population} individuals, live/ {size / 2**20:.1f} MiB"
          + (f", built in {build_s:.0f} s" if build_s else " (reused)"), flush=True)
    rows = []
    load_before = os.getloadavg()
    steps = (lambda: data_loading(folder), lambda: apptest(runs, run_id))[: 2 if args.only == "all" else 0] + (
        lambda: individuals_loading(folder), lambda: apptest_individuals(runs, run_id))
    steps += ((lambda: browser(runs, run_id)),) * args.browser
    steps += ((lambda: browser_starts(runs, run_id)), (lambda: browser_restart(runs, run_id))) * (
        args.browser and args.only == "all")
    steps += ((lambda: compare_parallel(folder)),) * args.compare_parallel
    for step in steps:
        got = step()
        for name, secs in got:
            print(f"{name}: {secs * 1000:.1f} ms", flush=True)
        rows += got
    width = max(len(r[0]) for r in rows)
    for name, secs in rows:
        print(f"{name.ljust(width)}  {secs * 1000:8.1f} ms")
    if args.append:
        cmd = "python -m benchmarks.tools.monitor_render " + " ".join(a for a in sys.argv[1:])
        section = [
            "", f"## Measurement {time.strftime('%Y-%m-%d %H:%M %Z')} ({args.generations:,} x {args.population} = "
            f"{args.generations * args.population:,} rows)", "",
            f"On {platform.node()} ({os.cpu_count()} CPU cores, Python {platform.python_version()}); load average "
            f"{load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after (1-minute).", "",
            f"Command: `{cmd.strip()}`", "", "| what | time |", "|---|---:|",
            *[f"| {name} | {secs * 1000:,.0f} ms |" for name, secs in rows], ""]
        with open(args.append, "a") as f:
            f.write("\n".join(section))
        print(f"appended to {args.append}")
    if args.write:
        cmd = "python -m benchmarks.tools.monitor_render " + " ".join(
            a for a in sys.argv[1:] if not a.startswith("--runs-dir") and not a.startswith("/"))
        lines = [
            "# Monitor and Individuals page render time, 5,000 generations x 64 individuals",
            "",
            f"Measured {time.strftime('%Y-%m-%d %H:%M %Z')} on {platform.node()} ({os.cpu_count()} CPU cores, "
            f"Python {platform.python_version()}, {platform.machine()}); target: under 2 s.",
            "",
            f"Command: `{cmd.strip()}`",
            "",
            f"The run (`{args.generations}` generations x `{args.population}` individuals = "
            f"{args.generations * args.population:,} rows, live/ Parquet {size / 2**20:.1f} MiB) was written with the "
            "real `store.writer.RunWriter.commit_generation`, one generation at a time, by "
            "`dashboard.synthetic.build_run`" + (f" in {build_s:.0f} s." if build_s else
                                                  " (built by an earlier invocation with the same `--runs-dir`)."),
            "",
            "| what | time |",
            "|---|---:|",
            *[f"| {name} | {secs * 1000:,.0f} ms |" for name, secs in rows],
            "",
            "Data-loading rows are medians of several calls on a fresh `RunReader` (no cache). The AppTest rows run "
            "the whole Monitor page script (status, metrics, controls, data loading, building and serialising all "
            "five Plotly figures); AppTest does not draw them, the Chromium rows do. Curves are bucketed to at most "
            "1,000 points (best of bests, mean of means, worst of worsts per bucket) and the Pareto scatter shows one "
            "generation, so the page's cost grows with the number of generations only through the one "
            "5,000-row `generations.parquet` read.",
            "",
            "The Chromium \"fresh server\" row is a one-off per dashboard process: it includes the server's first "
            "imports (Streamlit, pandas, Plotly, DuckDB, the engine), the switch out of Streamlit's legacy multipage "
            "mode (see `dashboard/nav.py`) and the browser fetching Streamlit's JavaScript. Every later visit costs "
            "the reload row (a new browser session on a running server); a live refresh re-runs only the Monitor "
            "fragment, which costs about the AppTest rerun rows. The machine is shared with other work, so single "
            "figures vary by tens of percent between runs.",
            "",
        ]
        args.write.write_text("\n".join(lines))
        print(f"wrote {args.write}")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
