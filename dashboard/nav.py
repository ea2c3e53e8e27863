"""The dashboard's pages and navigation, set up by ``app.py`` (and by a page run on its own)."""
from __future__ import annotations

import sys

import streamlit as st

from dashboard.settings import runs_dir

PAGES = (  # (file, title, icon, url path)
    ("pages/launch.py", "Launch", "🚀", "launch"),
    ("pages/monitor.py", "Monitor", "📈", "monitor"),
    ("pages/genomes.py", "Genomes", "🧬", "genomes"),
    ("pages/benchmark.py", "Benchmark", "⏱️", "benchmark"),
    ("pages/export.py", "Export", "📦", "export"),
    ("pages/runs.py", "Runs", "🗂️", "runs"),
)


def setup():
    """Page config, ``st.navigation`` over :data:`PAGES` and the sidebar footer; returns the current page."""
    st.set_page_config(page_title="AbeBot", page_icon="🧬", layout="wide")
    page = st.navigation([st.Page(path, title=title, icon=icon, url_path=url, default=i == 0)
                          for i, (path, title, icon, url) in enumerate(PAGES)])
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
