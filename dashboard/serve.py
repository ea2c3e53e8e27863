"""Start the dashboard warmed up: ``python -m dashboard.serve [streamlit run options]``.

The same server as ``streamlit run app.py`` (in this process, from any directory), plus
:func:`dashboard.nav.warm_up` in a background thread from the start. ``streamlit run`` runs none of
the app's code until the first browser session connects, so without this the first page opened
after a start pays every first import (pandas, Plotly's figure classes, DuckDB, scikit-learn: about
1.5 s of CPU, benchmarks/MONITOR_RESULTS.md); here they are done a couple of seconds after the
start, and the server says so on stderr ("warm-up finished"). Its front end also starts loading
Plotly on the chart pages as soon as they open (:mod:`dashboard.static_preload`): plotly.js's
basic bundle where ``npm ci`` installed it, and the pages then draw with it (:mod:`dashboard.plotly_basic`).
``scripts/dashboard.sh`` starts the dashboard this way.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app.py"


def _warm_when_served() -> None:
    """Warm up once Streamlit's runtime exists (our modules declare ``st.cache_data`` functions,
    which want it), unless :func:`dashboard.nav.setup` started the warm-up first."""
    from streamlit import runtime

    t0 = time.monotonic()
    while not runtime.exists() and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    from dashboard import nav

    nav.start_warm_up(announce=True)


def main(argv: list[str] | None = None) -> int:
    from streamlit.web import cli

    from dashboard import static_preload
    from dashboard.settings import runs_dir

    static_preload.install(runs_dir() / ".cache" / "streamlit")
    threading.Thread(target=_warm_when_served, name="warm-up", daemon=True).start()
    sys.argv = ["streamlit", "run", str(APP), *(sys.argv[1:] if argv is None else argv)]
    return cli.main()


if __name__ == "__main__":
    raise SystemExit(main())
