"""The dashboard's pages and navigation, set up by ``app.py`` (and by a page run on its own)."""
from __future__ import annotations

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
    _warm_imports()
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


def _warm_imports() -> None:
    """Import scikit-learn's forest in the background, once per server process: its first import
    takes about 1.1 s, which the Individuals page's importance chart would otherwise pay on its first
    visit (benchmarks/MONITOR_RESULTS.md)."""
    if _WARMED.is_set():
        return
    _WARMED.set()

    def load() -> None:
        try:
            import sklearn.ensemble  # noqa: F401
            import sklearn.inspection  # noqa: F401
        except Exception:  # noqa: BLE001 - the page reports a missing library itself
            pass

    threading.Thread(target=load, name="warm-imports", daemon=True).start()

