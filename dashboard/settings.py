"""Where the dashboard finds its runs, how often live views refresh, and whether it reads ahead."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LIVE_STATUSES = ("running", "paused", "starting")


def runs_dir() -> Path:
    """The runs folder: ``$ABEBOT_RUNS_DIR`` or ``./runs``, resolved and created if missing."""
    path = Path(os.environ.get("ABEBOT_RUNS_DIR") or "runs").expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def refresh_seconds() -> float:
    """Refresh period of the Monitor page's live fragment (``$ABEBOT_REFRESH_S``, default 2 s)."""
    try:
        return max(0.5, float(os.environ.get("ABEBOT_REFRESH_S", "2")))
    except ValueError:
        return 2.0


def read_ahead() -> bool:
    """Whether the warm-up reads the newest run ahead (:mod:`dashboard.prefetch`): ``$ABEBOT_READ_AHEAD``,
    on unless ``0``. Off, a dashboard that is never asked for the Individuals page does not hold that
    run's table (about 180 MiB for 320,000 individuals)."""
    return os.environ.get("ABEBOT_READ_AHEAD", "1").strip() != "0"
