"""AbeBot dashboard: ``streamlit run app.py`` (binds 127.0.0.1; runs folder from $ABEBOT_RUNS_DIR), or
``python -m dashboard.serve`` (what scripts/dashboard.sh runs: the same, warmed up at server start)."""
from __future__ import annotations

import streamlit as st

# `core`, `store`, `dashboard` come from the installed project (`pip install -e .`, which
# scripts/dashboard.sh and scripts/test.sh run), or from the repo root when started there.
from dashboard.nav import run, setup
from store.reader import LiveDamaged

# Streamlit runs this file as __main__. A sandbox started from the same process by multiprocessing's spawn
# (a check from a test of the pages, say) imports it again as __mp_main__: it must not draw pages there.
if __name__ == "__main__":
    try:
        run(setup())  # a "Loading <page>…" line at once on a page's first visit, until the page has run
    except LiveDamaged as exc:  # a damaged live/ file: one line until the worker (or a resume, or repair) rewrites it
        st.info(str(exc), icon=":material/build:")
