#!/usr/bin/env python3
"""A new Monitor tab, one version of the dashboard against another, interleaved tab by tab (issue 11, B7).

Two dashboards on the same run folder, each started as ``scripts/dashboard.sh`` starts it
(``python -m dashboard.serve``) and opened once its warm-up has finished: ``--before`` and
``--after`` (commits, each checked out in a temporary git worktree; ``--after`` defaults to this
working tree). In one headless Chromium, each
server's Monitor is opened once in a browser context of its own (its HTTP cache then warm), then
new tabs of those contexts alternate between the two servers; each tab is timed from navigation
until the five charts are drawn (``monitor_render.MONITOR_DRAWN``). A new tab is a new renderer:
it evaluates Streamlit's and Plotly's JavaScript again. For every tab the script also reports when
the browser requested Streamlit's Plotly chunk, from the navigation's start.

    python -m benchmarks.tools.monitor_new_tab --runs-dir /tmp/mr5000 --before main --after monitor-preload-plotly [--tabs 9]

The run folder is built first when it holds no run (5,000 generations x 64, the benchmark's size).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.tools.monitor_render import CHROMIUM_FLAGS, MONITOR_DRAWN, streamlit_server  # noqa: E402

PLOTLY_REQUESTED = ("(() => { const e = performance.getEntriesByType('resource')"
                    ".find(r => r.name.includes('/PlotlyChart.')); return e ? e.startTime : null; })()")


@contextmanager
def worktree(ref: str):
    """``ref`` checked out beside this repository, removed on the way out."""
    path = Path(tempfile.mkdtemp(prefix="abebot-before-"))
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT, check=True, capture_output=True)
    if (path / "scripts" / "front_end.sh").is_file():  # the front-end files scripts/dashboard.sh installs
        subprocess.run(["bash", "scripts/front_end.sh"], cwd=path, check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs-dir", type=Path, required=True)
    ap.add_argument("--before", required=True, help="the commit to compare with (git rev)")
    ap.add_argument("--after", help="the commit compared (git rev; default: this working tree)")
    ap.add_argument("--tabs", type=int, default=9, help="new tabs per version")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from dashboard.synthetic import build_run
    from store.runs import list_runs

    args.runs_dir.mkdir(parents=True, exist_ok=True)
    runs = list_runs(args.runs_dir)
    run_id = runs[0]["run_id"] if runs else build_run(args.runs_dir, 5000, 64)
    revs = {name: subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True, capture_output=True,
                                 text=True).stdout.strip() if ref else "this working tree"
            for name, ref in (("before", args.before), ("after", args.after))}
    times: dict[str, list[tuple[float, float | None]]] = {"before": [], "after": []}
    with ExitStack() as stack:
        old = stack.enter_context(worktree(args.before))
        new = stack.enter_context(worktree(args.after)) if args.after else ROOT
        env = dict(os.environ, ABEBOT_RUNS_DIR=str(args.runs_dir))
        urls = {name: stack.enter_context(streamlit_server(Path("app.py"), tree, env, serve=True, after_warm_up=True))
                for name, tree in (("before", old), ("after", new))}
        p = stack.enter_context(sync_playwright())
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        stack.callback(browser.close)
        contexts = {}
        for name, url in urls.items():  # each version's first visit: its HTTP cache warm, not timed
            contexts[name] = browser.new_context(viewport={"width": 1500, "height": 1200})
            first = contexts[name].new_page()
            first.goto(f"{url}/monitor?run={run_id}")
            first.wait_for_function(MONITOR_DRAWN, timeout=120_000)
        for i in range(args.tabs):
            for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
                time.sleep(1)
                tab = contexts[name].new_page()
                t0 = time.perf_counter()
                tab.goto(f"{urls[name]}/monitor?run={run_id}")
                tab.wait_for_function(MONITOR_DRAWN, timeout=120_000)
                times[name].append((time.perf_counter() - t0, tab.evaluate(PLOTLY_REQUESTED)))
                tab.close()
                print(f"{name:6s} tab {i + 1}: {times[name][-1][0] * 1e3:,.0f} ms", flush=True)
    load = os.getloadavg()[0]
    print(f"\nrun {run_id}; before = {revs['before']}, after = {revs['after']}; 1-minute load at the end {load:.1f}")
    print("| version | new tabs (ms) | median | Plotly chunk requested at (ms from navigation), median |")
    print("|---|---|---:|---:|")
    for name, rows in times.items():
        asked = [a for _, a in rows if a is not None]
        when = f"{statistics.median(asked):,.0f}" if asked else "not requested"
        tabs = " / ".join(f"{t * 1e3:,.0f}" for t, _ in rows)
        print(f"| {name} | {tabs} | {statistics.median(t for t, _ in rows) * 1e3:,.0f} | {when} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
