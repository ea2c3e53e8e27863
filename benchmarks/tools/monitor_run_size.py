#!/usr/bin/env python3
"""The first pages after a dashboard start on a long run against a short one, interleaved (issue 11, B7).

What a page costs because the run is long (5,000 generations x 64) is the difference between the two:
the rest is what any run's page costs on this machine (Streamlit's front end starting in a browser,
the page's elements and charts drawn). For each round and each runs folder, a fresh dashboard is
started as ``scripts/dashboard.sh`` starts it (``python -m dashboard.serve``), and once it has said its
warm-up finished (plus 1 s), a fresh headless Chromium opens the pages of
:func:`monitor_after_start.first_pages` on that folder's newest run. The folders alternate server by
server, so both see the same machine load. A folder with no run gets a synthetic one
(:func:`dashboard.synthetic.build_run`): 5,000 x 64 for ``--long``, 30 x 8 for ``--short``.

    python -m benchmarks.tools.monitor_run_size --long /tmp/mr5000 --short /tmp/mr30 [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.tools.monitor_after_start import first_pages, newest_run, round_line, table  # noqa: E402
from benchmarks.tools.monitor_render import streamlit_server  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--long", type=Path, required=True, help="runs folder of the long run (made: 5,000 x 64)")
    ap.add_argument("--short", type=Path, required=True, help="runs folder of the short run (made: 30 x 8)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    runs = {"long": (args.long, newest_run(args.long, 5000, 64)), "short": (args.short, newest_run(args.short, 30, 8))}
    times: dict[str, list[list[float]]] = {"long": [], "short": []}
    with sync_playwright() as p:
        for i in range(args.rounds):
            for name in (("long", "short") if i % 2 == 0 else ("short", "long")):
                folder, run_id = runs[name]
                env = dict(os.environ, ABEBOT_RUNS_DIR=str(folder))
                with streamlit_server(Path("app.py"), ROOT, env, serve=True, after_warm_up=True) as url:
                    time.sleep(1)
                    times[name].append(first_pages(p, url, run_id))
                print(round_line(name, i, times[name][-1]), flush=True)
    print(f"\nlong: {runs['long'][1]} in {args.long}; short: {runs['short'][1]} in {args.short}")
    print(table(times, {"long": "long run", "short": "short run"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
