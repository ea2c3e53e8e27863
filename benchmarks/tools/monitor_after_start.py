#!/usr/bin/env python3
"""The first pages after a dashboard start, one version against another, interleaved (issue 11, B7).

For each round and each version (``--before`` and ``--after``: commits, each checked out in a
temporary git worktree as :mod:`monitor_new_tab` does; ``--after`` defaults to this working tree), a
fresh dashboard is started as ``scripts/dashboard.sh`` starts it (``python -m dashboard.serve``) on
the run folder, and once it has said its warm-up finished (plus 1 s), a fresh headless Chromium
opens, in order:

1. the Monitor page (an empty browser cache), until its five charts are drawn;
2. the Monitor page in a new tab (the browser's cache warm), the same;
3. in that tab, the Individuals page, until the importance and parallel-coordinates charts are drawn.

The versions alternate server by server, so both see the same machine load.

    python -m benchmarks.tools.monitor_after_start --runs-dir /tmp/mr5000 --before main [--after HEAD] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.tools.monitor_new_tab import worktree  # noqa: E402
from benchmarks.tools.monitor_render import CHARTS_DRAWN, CHROMIUM_FLAGS, MONITOR_DRAWN, streamlit_server  # noqa: E402

ROWS = ("Monitor, empty browser cache", "Monitor, new tab", "then Individuals in that tab")


def drawn_after(page, url: str, path: str, drawn: str) -> float:
    """Seconds from navigating ``page`` to ``url/path`` until ``drawn`` holds."""
    t0 = time.perf_counter()
    page.goto(url + path)
    page.wait_for_function(drawn, timeout=300_000)
    return time.perf_counter() - t0


def first_pages(p, url: str, run_id: str) -> list[float]:
    """Seconds until drawn, for each of :data:`ROWS`, in a fresh Chromium."""
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
    try:
        context = browser.new_context(viewport={"width": 1500, "height": 1200})
        out = [drawn_after(context.new_page(), url, f"/monitor?run={run_id}", MONITOR_DRAWN)]
        time.sleep(1)
        tab = context.new_page()
        out.append(drawn_after(tab, url, f"/monitor?run={run_id}", MONITOR_DRAWN))
        out.append(drawn_after(tab, url, f"/individuals?run={run_id}", CHARTS_DRAWN))
        return out
    finally:
        browser.close()


def newest_run(runs: Path, generations: int, population: int) -> str:
    """The id of ``runs``' newest run (the one the dashboard's warm-up reads ahead), made first if there
    is none."""
    from dashboard import prefetch
    from dashboard.synthetic import build_run

    runs.mkdir(parents=True, exist_ok=True)
    folder = prefetch.newest_run(runs)
    return folder.name if folder else build_run(runs, generations, population)


def round_line(name: str, i: int, got: list[float]) -> str:
    """One round's seconds of :data:`ROWS`, in ms, with the machine's load."""
    return (f"{name:6s} round {i + 1}: " + " / ".join(f"{t * 1e3:,.0f}" for t in got)
            + f" ms (1-minute load {os.getloadavg()[0]:.1f})")


def table(times: dict[str, list[list[float]]], headings: dict[str, str]) -> str:
    """A Markdown table of every round's ms of :data:`ROWS` and their median, one pair of columns per
    ``times`` key, headed by ``headings`` (key: heading)."""
    lines = ["| page | " + " | ".join(f"{h} (ms) | median" for h in headings.values()) + " |",
             "|---|" + "---|---:|" * len(headings)]
    for k, row in enumerate(ROWS):
        cells = []
        for name in headings:
            got = [r[k] * 1e3 for r in times[name]]
            cells += [" / ".join(f"{t:,.0f}" for t in got), f"{statistics.median(got):,.0f}"]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs-dir", type=Path, required=True)
    ap.add_argument("--before", required=True, help="the commit to compare with (git rev)")
    ap.add_argument("--after", help="the commit compared (git rev; default: this working tree)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    run_id = newest_run(args.runs_dir, 5000, 64)
    env = dict(os.environ, ABEBOT_RUNS_DIR=str(args.runs_dir))
    times: dict[str, list[list[float]]] = {"before": [], "after": []}
    with ExitStack() as stack, sync_playwright() as p:
        trees = {"before": stack.enter_context(worktree(args.before)),
                 "after": stack.enter_context(worktree(args.after)) if args.after else ROOT}
        for i in range(args.rounds):
            for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
                with streamlit_server(Path("app.py"), trees[name], env, serve=True, after_warm_up=True) as url:
                    time.sleep(1)
                    times[name].append(first_pages(p, url, run_id))
                print(round_line(name, i, times[name][-1]), flush=True)
    revs = {name: subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True
                                 ).stdout.strip() if ref else "this working tree"
            for name, ref in (("before", args.before), ("after", args.after))}
    print(f"\nrun {run_id}; before = {revs['before']}, after = {revs['after']}")
    print(table(times, {"before": "before", "after": "after"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
