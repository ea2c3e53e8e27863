"""The dashboard's pages and navigation, set up by ``app.py`` (and by a page run on its own)."""
from __future__ import annotations

import os
import sys
import threading

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
    ("pages/runs.py", "Runs", ":material/folder_open:", "runs"),
)


def _home() -> None:
    """The root URL: Launch. Launch is not the default page itself, because Streamlit serves the
    default page only at ``/``, so ``/launch`` would be "Page not found"."""
    st.switch_page(PAGES[0][0], query_params=st.query_params.to_dict())


def setup():
    """Page config, ``st.navigation`` over :data:`PAGES` and the sidebar footer; returns the current page."""
    warm_up_after_this_run()
    st.set_page_config(page_title="AbeBot", page_icon=":material/genetics:", layout="wide")
    pages = [st.Page(_home, title="AbeBot", url_path="home", default=True, visibility="hidden")]
    pages += [st.Page(path, title=title, icon=icon, url_path=url) for path, title, icon, url in PAGES]
    page = st.navigation(pages)
    st.sidebar.caption(f"Runs folder: `{runs_dir()}`")
    return page


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

# What the pages import between them, cheapest first; scikit-learn (about 1 s on 2 cores) last.
WARM_MODULES = (
    "pandas", "pyarrow.parquet", "duckdb", "plotly.graph_objects", "plotly.subplots", "plotly.io",
    "store.reader", "store.control", "store.queries", "core.backends", "core.config", "core.export",
    "dashboard.charts", "dashboard.data", "dashboard.live", "dashboard.ui", "dashboard.launch", "dashboard.devices",
    "dashboard.genomes", "dashboard.importance", "dashboard.benchmark", "dashboard.checkkernel", "dashboard.manage",
    "sklearn.ensemble", "sklearn.inspection", "sklearn.model_selection", "sklearn.preprocessing",
)


def warm_up() -> None:
    """Import what the pages import and build one throwaway Plotly figure (Plotly loads its figure and
    validator classes on first use): what the first visit of each page would otherwise pay. Errors are
    left to the page that needs the module, which reports them itself."""
    import importlib

    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            pass
        if name == "dashboard.charts":
            try:
                from dashboard import charts

                charts.empty("warm-up").to_json()
            except Exception:  # noqa: BLE001
                pass


def warm_up_after_this_run() -> None:
    """Start :func:`warm_up` once per server process, in a background thread, **after** the script
    run that calls this (and any rerun it asks for) has finished.

    ``streamlit run app.py`` runs none of our code before the first browser session, so this is
    the first chance; but warming up *during* that first run would compete with it for the GIL and
    the two cores (importing scikit-learn alone is about 1 s of CPU): the first page measured
    1 s slower with it (benchmarks/MONITOR_RESULTS.md, 2026-12-01 06:00). Instead the thread
    waits for the script thread to end, then warms up while the browser draws the first page, so
    that the next page visited (and every session after) finds everything imported.
    """
    if _WARMED.is_set():
        return
    _WARMED.set()
    script = threading.current_thread()

    def after_run() -> None:
        if script is not threading.main_thread():  # a Streamlit script thread ends with its run
            script.join()
        try:  # Linux: this thread only, at the lowest priority (a browser on this machine draws the page)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        warm_up()

    threading.Thread(target=after_run, name="warm-up", daemon=True).start()
