"""AbeBot dashboard: ``streamlit run app.py`` (binds 127.0.0.1; runs folder from $ABEBOT_RUNS_DIR), or
``python -m dashboard.serve`` (what scripts/dashboard.sh runs: the same, warmed up at server start)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `core`, `store`, `dashboard` from any cwd

from dashboard.nav import setup  # noqa: E402

setup().run()
