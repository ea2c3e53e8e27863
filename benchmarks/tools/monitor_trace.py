"""Where the Monitor page's time goes in the browser: a Chromium trace of the page in a new tab.

It starts the dashboard as ``scripts/dashboard.sh`` does (``python -m dashboard.serve``), waits for its
warm-up, opens the Monitor page once, then in ``--tabs`` new tabs of the same browser. It prints each
tab's time until the five charts are drawn (:data:`monitor_render.MONITOR_DRAWN`), when the page's
WebSocket opened and its JavaScript chunks were requested, and for the last tab (traced) the renderer
main thread's time by event and its long tasks::

    python -m benchmarks.tools.monitor_trace /tmp/mr_run RUN_ID --tabs 3
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import benchmarks.tools.monitor_render as mr  # noqa: E402


def main_thread_summary(trace: Path) -> list[str]:
    """Self time by event name on the busiest renderer main thread, and its tasks over 50 ms."""
    raw = json.loads(trace.read_text())
    events = raw["traceEvents"] if isinstance(raw, dict) else raw
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    complete = [e for e in events if e.get("ph") == "X" and "dur" in e]
    busy = collections.Counter((e["pid"], e["tid"]) for e in complete)
    mains = [k for k, v in names.items() if v == "CrRendererMain"]
    main = max(mains, key=lambda k: busy[k])
    xs = sorted((e for e in complete if (e["pid"], e["tid"]) == main), key=lambda e: e["ts"])
    own: collections.Counter = collections.Counter()
    stack: list[dict] = []
    for e in xs:  # exclusive time: a child's time is taken from its parent's
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            own[stack[-1]["name"]] -= min(e["dur"], stack[-1]["ts"] + stack[-1]["dur"] - e["ts"])
        own[e["name"]] += e["dur"]
        stack.append(e)
    t0 = xs[0]["ts"]
    lines = [f"  {d / 1e3:8.1f} ms  {n}" for n, d in own.most_common(12)]
    lines.append("  tasks over 50 ms (start ms, length ms, what is inside):")
    for e in xs:
        if e["name"] in ("RunTask", "ThreadControllerImpl::RunTask") and e["dur"] > 50e3:
            inside = collections.Counter(c["name"] for c in xs if e["ts"] < c["ts"] and c["ts"] + c["dur"] <= e["ts"] + e["dur"]
                                         and c["dur"] > 10e3)
            lines.append(f"    {(e['ts'] - t0) / 1e3:7.0f} {e['dur'] / 1e3:7.0f}  {', '.join(n for n, _ in inside.most_common(3))}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_dir", type=Path)
    ap.add_argument("run_id")
    ap.add_argument("--tabs", type=int, default=3)
    o = ap.parse_args(argv)
    env = dict(os.environ, ABEBOT_RUNS_DIR=str(o.runs_dir))
    url_path = f"/monitor?run={o.run_id}"
    with tempfile.TemporaryDirectory() as tmp, mr.chromium_on(Path("app.py"), mr.ROOT, env, serve=True,
                                                              after_warm_up=True) as (page, url):
        t0 = time.perf_counter()
        page.goto(url + url_path)
        page.wait_for_function(mr.MONITOR_DRAWN, timeout=120_000)
        print(f"first visit: {time.perf_counter() - t0:.2f} s")
        trace = Path(tmp) / "trace.json"
        for i in range(o.tabs):
            time.sleep(1)
            tab = page.context.new_page()
            seen: list[tuple[float, str]] = []
            tab.on("websocket", lambda ws: seen.append((time.perf_counter(), "WebSocket open")))
            tab.on("request", lambda r: r.url.endswith(".js") and seen.append((time.perf_counter(), r.url.rsplit("/", 1)[-1])))
            traced = i == o.tabs - 1
            if traced:
                page.context.browser.start_tracing(page=tab, path=str(trace), categories=[
                    "devtools.timeline", "disabled-by-default-devtools.timeline", "v8.execute", "v8", "loading"])
            t0 = time.perf_counter()
            tab.goto(url + url_path)
            tab.wait_for_function(mr.MONITOR_DRAWN, timeout=120_000)
            print(f"new tab {i + 1}: {time.perf_counter() - t0:.2f} s" + (" (traced)" if traced else ""))
            if traced:
                page.context.browser.stop_tracing()
            for t, what in seen:
                if what == "WebSocket open" or what.startswith(("index.", "PlotlyChart", "DataFrame")):
                    print(f"    {t - t0:6.2f} s  {what}")
            tab.close()
        print("renderer main thread of the traced tab, self time by event:")
        print("\n".join(main_thread_summary(trace)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
