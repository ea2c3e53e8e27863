"""The dashboard's pages and navigation, set up by ``app.py`` (and by a page run on its own)."""
from __future__ import annotations

import importlib
import logging
import sys
import threading
import time

import streamlit as st

from dashboard.settings import runs_dir

# Material icons ship with Streamlit's own font: emoji render as empty boxes on a minimal Debian.
PAGES = (  # (file, title, icon, url path)
    ("pages/launch.py", "Launch", ":material/rocket_launch:", "launch"),
    ("pages/monitor.py", "Monitor", ":material/monitoring:", "monitor"),
    ("pages/individuals.py", "Individuals", ":material/table_view:", "individuals"),
    ("pages/genomes.py", "Genomes", ":material/genetics:", "genomes"),
    ("pages/benchmark.py", "Benchmark", ":material/timer:", "benchmark"),
    ("pages/check.py", "Check a kernel", ":material/fact_check:", "check"),
    ("pages/export.py", "Export", ":material/package_2:", "export"),
    ("pages/library.py", "Library", ":material/library_books:", "library"),
    ("pages/replay.py", "Replay", ":material/replay:", "replay"),
    ("pages/runs.py", "Runs", ":material/folder_open:", "runs"),
)

_last_page_run: float | None = None  # time.monotonic() when setup() last ran: a page run of a browser session


def _home() -> None:
    """The root URL: Launch. Launch is not the default page itself, because Streamlit serves the
    default page only at ``/``, so ``/launch`` would be "Page not found"."""
    st.switch_page(PAGES[0][0], query_params=st.query_params.to_dict())


def setup():
    """Page config, ``st.navigation`` over :data:`PAGES` and the sidebar footer; returns the current page."""
    global _last_page_run
    _last_page_run = time.monotonic()
    start_warm_up()
    st.set_page_config(page_title="AbeBot", page_icon=":material/genetics:", layout="wide")
    pages = [st.Page(_home, title="AbeBot", url_path="home", default=True, visibility="hidden")]
    pages += [st.Page(path, title=title, icon=icon, url_path=url) for path, title, icon, url in PAGES]
    page = st.navigation(pages)
    st.sidebar.caption(f"Runs folder: `{runs_dir()}`")
    return page


def run(page) -> None:
    """Run ``page`` (from :func:`setup`), with a line saying it is loading shown at once on the first
    visit of that page in this session: until a page's first element arrives the browser shows the
    previous page faded, or nothing at all (on 2 loaded cores the Launch page stayed blank for ~3 s).
    The line is removed when the page has run, however it ends (``st.stop``, a switch, an error).
    Its slot is there on every run, empty after the first, so the page's elements keep their places."""
    slot = st.empty()
    first = st.session_state.get("_page_shown") != page.url_path
    if first:
        slot.caption(f":material/hourglass_top: Loading {page.title}…")
    try:
        page.run()
    finally:
        st.session_state["_page_shown"] = page.url_path
        if first:
            slot.empty()


def ensure_navigation() -> None:
    """Hand control to ``app.py``'s navigation when Streamlit ran a page file directly.

    With a ``pages/`` folder beside ``app.py``, a fresh Streamlit server starts in its legacy
    multipage mode: if its first request is ``/<x>``, it runs ``pages/<x>.py`` directly, without
    app.py's page config and navigation. Streamlit leaves that mode for the whole process the first
    time ``st.navigation`` is called; we leave it here and rerun, so app.py runs and routes to the
    same page (page hashes come from the same url path in both modes). This happens once per server
    process, on a first page load, which carries no widget events to lose.

    AppTest restarts the legacy mode before every run; a rerun there would swallow the widget events
    under test, so under AppTest pages simply render as they are.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit without the legacy mode
        return
    under_apptest = "streamlit.testing.v1.local_script_runner" in sys.modules
    if getattr(PagesManager, "uses_pages_directory", False) and not under_apptest:
        PagesManager.uses_pages_directory = False
        st.rerun()


_WARMED = threading.Event()
WARM_UP_THREAD = "warm-up"

# What the pages import between them, cheapest first; scikit-learn (about 1 s of CPU) last.
WARM_MODULES = (
    "pandas", "pyarrow.parquet", "duckdb", "plotly.graph_objects", "plotly.subplots", "plotly.io",
    "store.reader", "store.control", "store.queries", "core.backends", "core.config", "core.tools.export",
    "dashboard.charts", "dashboard.data", "dashboard.live", "dashboard.ui", "dashboard.launch", "dashboard.devices",
    "dashboard.genomes", "dashboard.importance", "dashboard.individuals", "dashboard.benchmark",
    "dashboard.checkkernel", "dashboard.manage",
    "sklearn.ensemble", "sklearn.inspection", "sklearn.model_selection", "sklearn.preprocessing",
)


def _script_running() -> bool:
    """Whether a Streamlit script run (a page being computed for a browser) is in progress."""
    return any(t.name == "ScriptRunner.scriptThread" and t.is_alive() for t in threading.enumerate())


def _first_element_check() -> None:
    """The first element a Streamlit process sends calls ``inspect.stack()`` once (to tell a REPL),
    which maps every loaded module to its file: about 0.1 s with the modules above loaded."""
    from streamlit import env_util

    env_util.is_repl()


def _prefetch_steps() -> list:
    from dashboard import prefetch

    return prefetch.steps(runs_dir())


PREFETCH_QUIET_S = 5.0  # a page run, then the browser drawing what it sent: 1.5-3.5 s on 2 cores


def _when_idle(step, quiet: float = 0.0):
    """``step()`` once no script run is in progress and no page run (nor the warm-up) started in the
    last ``quiet`` seconds; its result, or None if it raised."""
    while _script_running() or (_last_page_run is not None and time.monotonic() - _last_page_run < quiet):
        time.sleep(0.05)
    try:
        return step()
    except Exception:  # noqa: BLE001
        return None


def warm_up(announce: bool = False) -> float:
    """Do once, in the background, what the first visit of a page would otherwise pay (about 1.5 s
    of CPU in all): import what the pages import, build one throwaway Plotly figure (Plotly loads
    its figure and validator classes on first use), Streamlit's one-off first-element check; then
    ``gc.freeze()`` what is loaded by then, so that the full garbage collection Streamlit runs after
    every script run (``runner.postScriptGC``) stops walking those 200,000 module-level objects each
    time (0.1 s a run, measured; 0.06 s of it without scikit-learn). What is frozen is left to
    reference counting alone: module-level objects, and under a bare ``streamlit run app.py`` also
    whatever the first page still holds at that moment (a one-off, bounded by that page's caches).
    Last, it reads the newest run ahead into the pages' caches (:mod:`dashboard.prefetch`), each
    read once neither the warm-up nor a page has started for :data:`PREFETCH_QUIET_S`.

    Each step waits until no script run is in progress: two threads importing at once share one
    interpreter lock, so warming up *during* a page's run slows that page by as much as it saves
    the next (benchmarks/MONITOR_RESULTS.md, 2026-12-01). Errors are left to the page that needs
    the module, which reports them itself. Returns the seconds it took."""
    import gc

    global _last_page_run
    if _last_page_run is None:  # a browser may be loading its first page: it counts as one started now
        _last_page_run = time.monotonic()
    t0 = time.perf_counter()
    steps = [lambda name=name: importlib.import_module(name) for name in WARM_MODULES]
    steps.insert(WARM_MODULES.index("dashboard.charts") + 1,
                 lambda: importlib.import_module("dashboard.charts").empty("warm-up").to_json())
    steps += [_first_element_check, gc.freeze]
    for step in steps:
        _when_idle(step)
    # Reading ahead is worth it only while no browser is drawing a page: on two cores it would
    # slow that page by more than it saves the next (benchmarks/MONITOR_RESULTS.md, 2026-12-02).
    for step in _when_idle(_prefetch_steps, PREFETCH_QUIET_S) or []:
        _when_idle(step, PREFETCH_QUIET_S)
    took = time.perf_counter() - t0
    if announce:
        print(f"AbeBot dashboard: warm-up finished in {took:.1f} s", file=sys.stderr, flush=True)
    return took


def start_warm_up(announce: bool = False) -> bool:
    """Run :func:`warm_up` in a background thread, once per process (False if it was started before).

    ``python -m dashboard.serve`` (what ``scripts/dashboard.sh`` runs) starts it with the server,
    before any browser connects. Under a bare ``streamlit run app.py`` none of our code runs before
    the first browser session, so :func:`setup` starts it then, and it begins once that first run
    has finished: the first page pays its own imports, the pages after it do not. Not under
    AppTest (tests, benchmarks/monitor_render.py): that process is no server, and a warm-up there
    would only run beside what it measures.
    """
    if _WARMED.is_set() or "streamlit.testing.v1.local_script_runner" in sys.modules:
        return False
    _WARMED.set()
    logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(_no_session_warning)
    threading.Thread(target=warm_up, args=(announce,), name=WARM_UP_THREAD, daemon=True).start()
    return True


def _no_session_warning(record: logging.LogRecord) -> bool:
    """Drop Streamlit's "missing ScriptRunContext" warning from the warm-up thread: its reads call the
    pages' cached functions outside any browser session on purpose (their spinners have no page)."""
    return record.threadName != WARM_UP_THREAD
