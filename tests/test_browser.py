"""The real browser test: Debian's Chromium, driven by Playwright, against ``python -m dashboard.serve``.

It launches a small CPU run from the form (the real worker through the real launch path), watches
the Monitor page gain generations without reloading, pauses and stops the run, reads a genome diff
and downloads the export zip. The server and the worker's process group are always killed at the end.
"""
from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from dashboard.static_preload import BASIC_BUNDLE, usable_bundle

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
ROOT = Path(__file__).resolve().parents[1]
GENERATIONS = 60  # the budget of the launched run; it is stopped long before

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} missing: apt-get install chromium"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("streamlit did not become healthy")


def kill_group(pid: int | None) -> None:
    if not pid:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture
def server(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    port = free_port()
    env = dict(os.environ, ABEBOT_RUNS_DIR=str(runs), ABEBOT_REFRESH_S="1")
    log = open(tmp_path / "streamlit.log", "wb")
    # What scripts/dashboard.sh starts: `streamlit run app.py` with the warm-up and the served front end.
    # Without the token (the host and origin checks stay): the token is tested at the end of this file.
    proc = subprocess.Popen([sys.executable, "-m", "dashboard.serve", "--server.port", str(port),
                             "--server.headless", "true", "--server.address", "127.0.0.1",
                             "--browser.gatherUsageStats", "false", "--no-token"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url, runs
    finally:
        for hb in runs.glob("*/heartbeat.json"):  # the worker runs in its own session: kill its group
            try:
                kill_group(int(json.loads(hb.read_text()).get("pid") or 0))
            except (OSError, ValueError):
                pass
        kill_group(proc.pid)
        proc.wait(timeout=10)
        log.close()


def metric(page, label: str):
    return page.locator('[data-testid="stMetric"]').filter(
        has=page.get_by_text(label, exact=True)).locator('[data-testid="stMetricValue"]')


def generations_shown(page) -> int:
    text = metric(page, "Generations done").inner_text(timeout=10_000)
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else -1


def wait_for(predicate, timeout_s: float, what: str, interval: float = 0.5):
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # an element between two renders
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def click_until(page, button: str, status: str, timeout_s: float = 90) -> None:
    """Click ``button`` and wait for the Status metric to say ``status``; click again if the click
    landed while the live fragment was being redrawn."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        page.get_by_role("button", name=button).click()
        try:
            wait_for(lambda: status in metric(page, "Status").inner_text(), min(20, deadline - time.time()),
                     f"status {status}")
            return
        except AssertionError:
            continue
    raise AssertionError(f"the run never became {status}")


TRUNCATED_JS = """(sel) => [...document.querySelectorAll(sel)].flatMap(e => [e, ...e.querySelectorAll('*')])
    .filter(e => e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1).map(e => e.innerText)"""


def truncated(page, selector: str) -> list[str]:
    """Texts under ``selector`` that are cut off (wider than their box)."""
    return page.evaluate(TRUNCATED_JS, selector)


def test_launch_watch_pause_stop_diff_export(server, tmp_path):
    from playwright.sync_api import sync_playwright

    url, runs = server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            # 1280 px: the narrowest width the walk-through found metrics cut off at.
            page = browser.new_page(viewport={"width": 1280, "height": 1000}, accept_downloads=True)
            page.set_default_timeout(30_000)
            page.goto(url + "/launch")
            page.get_by_role("button", name="Start run").wait_for()
            assert page.get_by_text("Page not found").count() == 0  # /launch is a page, not the default's alias
            assert not truncated(page, '[data-testid="stSelectbox"]'), truncated(page, '[data-testid="stSelectbox"]')
            page.get_by_role("spinbutton", name="Population").fill("4")
            page.get_by_role("spinbutton", name="Generations").fill(str(GENERATIONS))
            page.get_by_role("textbox", name="Problem (JSON)").fill('{"m": 64, "n": 64, "k": 64}')
            page.get_by_role("button", name="Start run").click()

            # The launch page switches to Monitor once the worker has created its run folder.
            page.wait_for_url(re.compile(r".*/monitor\?run=.+"), timeout=60_000)
            run_id = page.url.split("run=")[1].split("&")[0]
            assert (runs / run_id / "config.json").exists()
            cfg = json.loads((runs / run_id / "config.json").read_text())
            assert (cfg["population"], cfg["generations"], cfg["problem"]["m"]) == (4, GENERATIONS, 64)

            # Live: the fragment refreshes; the page is never reloaded.
            first = wait_for(lambda: generations_shown(page) >= 1 and generations_shown(page), 90, "generation 1")
            page.evaluate("window.__not_reloaded = true")
            later = wait_for(lambda: (n := generations_shown(page)) > first and n, 60, "another generation")
            assert later > first
            assert page.evaluate("window.__not_reloaded === true")
            # The fitness chart's "best" trace has a point per generation shown. The chart is redrawn a
            # moment after the metrics of the same refresh (a CI run caught it one generation behind).
            best_points = ("() => { const g = document.querySelector('.js-plotly-plot');"
                           " return g && g.calcdata ? g.calcdata[1].length : -1 }")
            points = wait_for(lambda: (n := page.evaluate(best_points)) >= later and n, 15,
                              f"a fitness-chart point for each of the {later} generations shown")
            assert points >= later, points
            # Drawn by plotly.js's basic bundle where npm installed it (scripts/front_end.sh), else by
            # Streamlit's own Plotly: never both; the mode bar is there either way.
            loaded = page.evaluate("[...performance.getEntriesByType('resource')].map(r => r.name)")
            basic = usable_bundle(BASIC_BUNDLE) is not None
            assert any("/abebot/plotly-basic." in n for n in loaded) == basic, loaded
            assert any("/PlotlyChart." in n for n in loaded) == (not basic), loaded
            # The import waited for the app's WebSocket (dashboard.static_preload), and gave the class back.
            assert page.evaluate("WebSocket.toString().includes('[native code]')")
            assert page.locator('[data-testid="stMain"] .js-plotly-plot .modebar').count() >= 5

            # Headline metrics and the run picker are not cut off at 1280 px.
            page.get_by_text("Live log").click()
            page.get_by_text(re.compile(r"gen \d+ \(\d+/\d+ done\)")).first.wait_for()  # the live log tail shows worker.log
            assert not truncated(page, '[data-testid="stMetricValue"]'), truncated(page, '[data-testid="stMetricValue"]')
            assert not truncated(page, '[data-testid="stSidebar"] [data-testid="stSelectbox"]')
            # The champion changes' table is drawn when asked for (and not before), and stays while the run goes on.
            assert page.locator('[data-testid="stMain"] [data-testid="stDataFrame"]').count() == 0
            page.get_by_text("Show them as a table").click()
            page.locator('[data-testid="stMain"] [data-testid="stDataFrame"]').first.wait_for()

            # Pause, then stop: the worker obeys between generations.
            click_until(page, "Pause", "paused")
            paused_at = generations_shown(page)
            time.sleep(3)
            assert generations_shown(page) == paused_at
            click_until(page, "Stop", "stopped")
            assert page.evaluate("window.__not_reloaded === true")

            # Genomes: two individuals with a unified diff of their kernel sources.
            page.get_by_role("link", name="Genomes").click()
            page.get_by_text("Lineage of the champion").wait_for()
            code = page.locator('[data-testid="stCode"]').first.inner_text()
            assert code.startswith("--- A/") and "+++ B/" in code and "@@" in code, code[:400]

            # Export: download the champion zip and look inside.
            page.get_by_role("link", name="Export").click()
            with page.expect_download(timeout=60_000) as info:
                page.get_by_role("button", name="Download zip").click()
            target = tmp_path / "export.zip"
            info.value.save_as(target)
            names = zipfile.ZipFile(io.BytesIO(target.read_bytes())).namelist()
            base = {n.rsplit("/", 1)[-1] for n in names}
            assert {"kernel.c", "genome.json", "report.json", "run_kernel.py"} <= base, names
            report = json.loads(zipfile.ZipFile(target).read(next(n for n in names if n.endswith("report.json"))))
            assert report["run_id"] == run_id and report["verification"]["status"] == "ok"
            page.screenshot(path=str(tmp_path / "export.png"))

            # The new views on the real run: the individuals table, and Runs opening Monitor in this tab.
            page.get_by_role("link", name="Individuals").click()
            page.get_by_text(re.compile(r"\d+ of \d+ individuals match")).wait_for()
            # Its parallel coordinates of genes against fitness, drawn in SVG (no WebGL, which a
            # GPU-less browser draws slowly): the lines, each axis' value labels, one dot per genome.
            parallel = page.locator(".js-plotly-plot", has_text="Genes against fitness")
            parallel.locator(".scatterlayer .js-line").first.wait_for(timeout=60_000)
            drawn = int(re.search(r"\((\d+) rows\)", parallel.locator(".gtitle").text_content()).group(1))
            assert parallel.locator(".scatterlayer .textpoint").count() > 0
            assert parallel.locator(".scatterlayer .trace").last.locator(".point").count() == drawn > 0
            page.get_by_role("link", name="Runs").click()
            page.get_by_role("button", name="Open in Monitor").click()
            page.wait_for_url(re.compile(r".*/monitor\?run=" + run_id))
            metric(page, "Generations done").wait_for()
            assert len(page.context.pages) == 1  # same tab, same session
        finally:
            browser.close()


# ---- DNS rebinding (issue 35): a foreign host name resolved to 127.0.0.1 gets nothing -------------------

ATTACKER_PAGE = """<!doctype html><script>
window.verdict = new Promise(done => {
  const ws = new WebSocket("ws://127.0.0.1:%d/_stcore/stream");
  ws.onopen = () => done("open"); ws.onerror = () => done("refused");
});
</script>"""


@pytest.fixture
def guarded_server(tmp_path):
    """``python -m dashboard.serve`` as scripts/dashboard.sh starts it, token on; (url, token)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    port = free_port()
    log = open(tmp_path / "streamlit.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "dashboard.serve", "--server.port", str(port),
                             "--server.headless", "true", "--server.address", "127.0.0.1",
                             "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, env=dict(os.environ, ABEBOT_RUNS_DIR=str(runs)), stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield port, (runs / ".secrets" / "dashboard-token").read_text().strip()
    finally:
        kill_group(proc.pid)
        proc.wait(timeout=10)
        log.close()


# ---- the walk-through's pages on synthetic runs: charts at two widths, navigation, stale state ------

SHOTS = os.environ.get("ABEBOT_SHOTS")  # a folder to keep the screenshots in (else the test's tmp folder)

# Every Plotly chart of the page: its title, legend and axis titles as boxes, each axis' range and
# title, and the value labels of the parallel-coordinates plot, for the checks in chart_problems().
CHARTS_JS = """() => [...document.querySelectorAll('.js-plotly-plot')].filter(g => g._fullLayout).map(g => {
  const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                     return r.width > 0 ? {l: r.left, r: r.right, t: r.top, b: r.bottom, text: e.textContent} : null };
  const L = g._fullLayout, axes = {};
  for (const k of Object.keys(L)) if (/^[xy]axis\\d*$/.test(k) && L[k].visible !== false)
    axes[k] = {range: L[k].range, type: L[k].type, title: (L[k].title || {}).text || ''};
  return {title: (L.title || {}).text || '', plot: box(g), gtitle: box(g.querySelector('.gtitle')),
          legend: box(g.querySelector('.legend .bg')) || box(g.querySelector('.legend')),
          axistitles: [...g.querySelectorAll('.xtitle, .ytitle, .y2title')].map(box).filter(Boolean),
          xticks: [...g.querySelectorAll('.xtick text')].map(box).filter(Boolean),
          values: [...g.querySelectorAll('.textpoint text')].map(box).filter(Boolean), axes};
})"""


def _overlap(a: dict, b: dict, slack: float = 1.0) -> bool:
    return a["l"] < b["r"] - slack and b["l"] < a["r"] - slack and a["t"] < b["b"] - slack and b["t"] < a["b"] - slack


def chart_problems(charts: list[dict]) -> list[str]:
    """What reads badly in the charts of one page: a title cut off, a legend on an axis title, a time
    axis below zero, overlapping axis names or stacked value labels."""
    out = []
    for c in charts:
        name, plot, title = c["title"][:40], c["plot"], c["gtitle"]
        if title and (title["l"] < plot["l"] - 1 or title["r"] > plot["r"] + 1 or title["t"] < plot["t"] - 1):
            out.append(f"{name}: title cut off ({title}, chart {plot})")
        for t in c["axistitles"]:
            if c["legend"] and _overlap(c["legend"], t):
                out.append(f"{name}: legend over the axis title {t['text']!r}")
        for key, axis in c["axes"].items():
            if "time" in axis["title"] and "wall" not in axis["title"] and axis["type"] == "linear" \
                    and axis["range"] and axis["range"][0] < 0:
                out.append(f"{name}: {key} ({axis['title']}) starts at {axis['range'][0]:.3g}, below zero")
        for group in ("xticks", "values"):
            boxes = c[group]
            for i, a in enumerate(boxes):
                for b in boxes[i + 1:]:
                    if _overlap(a, b):
                        out.append(f"{name}: {group} {a['text']!r} and {b['text']!r} overlap")
    return out


def _wide_bench(runs: Path, run_id: str) -> None:
    """A re-measurement of the run's champion whose spreads are wider than its times (a loaded
    machine): the Benchmark page's error bars would reach below zero."""
    from store.reader import RunReader

    champ = RunReader(runs / run_id).champion()
    base = RunReader(runs / run_id).baseline()
    (runs / run_id / "bench.json").write_text(json.dumps({
        **{k: base[k] for k in ("device", "shape", "flops", "io_bytes", "roofline_us")},
        "genome_hash": champ["genome_hash"], "measured_at": time.time(), "rounds": 3, "primary": "numpy",
        "champion": {"time_us": 60.0, "spread_us": 5000.0, "memory_bytes": 49152, "rounds_us": [60.0, 61.0, 59.0]},
        "baselines": {"numpy": {"time_us": 100.0, "spread_us": 3000.0, "memory_bytes": 49152,
                                "rounds_us": [100.0, 101.0, 99.0]}}}))


@pytest.fixture(scope="module")
def synthetic_server(tmp_path_factory):
    """The dashboard over two finished synthetic runs (the older one named, re-measured on a loaded
    machine) and one live run with a long log line."""
    from dashboard.meta import save_meta
    from dashboard.synthetic import build_run

    tmp = tmp_path_factory.mktemp("walk")
    runs = tmp / "runs"
    runs.mkdir()
    older = build_run(runs, generations=8, population=10, seed=3, run_id="a-older-run")
    save_meta(runs / older, "tile sweep with a long name that wraps", "")
    _wide_bench(runs, older)
    newer = build_run(runs, generations=4, population=8, seed=5, run_id="b-newer-run")
    live = build_run(runs, generations=6, population=6, seed=7, status="running", run_id="c-live-run")
    with open(runs / live / "worker.log", "a") as log:
        log.write("gen 3 (4/6 done) " + "a-long-worker-log-line-" * 12 + "THE-END\n")
    port = free_port()
    env = dict(os.environ, ABEBOT_RUNS_DIR=str(runs), ABEBOT_REFRESH_S="1", ABEBOT_NO_TOKEN="1")
    log = open(tmp / "streamlit.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "dashboard.serve", "--server.port", str(port),
                             "--server.headless", "true", "--server.address", "127.0.0.1",
                             "--browser.gatherUsageStats", "false"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield {"url": url, "runs": runs, "older": older, "newer": newer, "live": live, "shots": Path(SHOTS or tmp)}
    finally:
        kill_group(proc.pid)
        proc.wait(timeout=10)
        log.close()


@pytest.fixture
def attacker_site(tmp_path):
    """A page on another port of this machine that opens a WebSocket to the dashboard; its port."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = (ATTACKER_PAGE % self.server.dashboard_port).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    try:
        yield site
    finally:
        site.shutdown()


def test_a_rebound_host_name_gets_no_dashboard_and_the_token_url_opens_it(guarded_server, attacker_site):
    from playwright.sync_api import sync_playwright

    port, token = guarded_server
    attacker_site.dashboard_port = port
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=[*FLAGS, "--host-resolver-rules=MAP evil.example 127.0.0.1"])
        try:
            context = browser.new_context()
            page = context.new_page()
            page.set_default_timeout(30_000)
            # The rebinding: evil.example resolves to the dashboard's address; it answers 403, no app.
            response = page.goto(f"http://evil.example:{port}/")
            assert response.status == 403
            assert "does not answer to that host name" in page.content()
            assert page.locator('[data-testid="stApp"]').count() == 0
            # Without the token: the login page, not the app.
            response = page.goto(f"http://127.0.0.1:{port}/launch")
            assert response.status == 401 and page.locator('input[name="token"]').count() == 1
            # The URL the start command prints: a cookie, then the clean URL, then the app.
            page.goto(f"http://127.0.0.1:{port}/?token={token}")
            page.get_by_role("button", name="Start run").wait_for()
            assert "token" not in page.url
            cookie = next(c for c in page.context.cookies() if c["name"] == f"abebot-token-{port}")
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and token not in cookie["value"]
            # A page of another origin cannot open the app's WebSocket, even once the user is logged in.
            attacker = context.new_page()
            attacker.goto(f"http://evil.example:{attacker_site.server_address[1]}/")
            assert attacker.evaluate("window.verdict") == "refused"
        finally:
            browser.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


def wait_charts(page, count: int, timeout_s: float = 60) -> list[dict]:
    """The charts of the page once ``count`` of them are drawn (and have stopped changing)."""
    wait_for(lambda: len(page.evaluate(CHARTS_JS)) >= count, timeout_s, f"{count} charts drawn")
    time.sleep(1.0)
    return page.evaluate(CHARTS_JS)


CHART_PAGES = [("monitor", "a-older-run", 5), ("individuals", "a-older-run", 2), ("benchmark", "a-older-run", 2),
               ("runs", "a-older-run", 1)]


def shoot_charts(page, folder: Path, stem: str) -> None:
    """One screenshot per chart of the page (Streamlit scrolls its own container: a page screenshot
    would hold only the first screen)."""
    for i in range(page.locator(".js-plotly-plot").count()):
        chart = page.locator(".js-plotly-plot").nth(i)
        chart.scroll_into_view_if_needed()
        chart.screenshot(path=str(folder / f"{stem}-{i}.png"))


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_chart_reads_well_at_1280_and_1920_px(synthetic_server, browser, width):
    s = synthetic_server
    page = browser.new_page(viewport={"width": width, "height": 1100})
    page.set_default_timeout(30_000)
    problems = []
    try:
        for name, run, count in CHART_PAGES:
            page.goto(f"{s['url']}/{name}?run={run}")
            charts = wait_charts(page, count)
            shoot_charts(page, s["shots"], f"{name}-{width}")
            problems += [f"{name} @ {width}px: {p}" for p in chart_problems(charts)]
            if name == "monitor":  # wall-clock mode: other axis titles, the same legends
                page.get_by_text("Wall-clock time on the x-axis").click()
                wait_for(lambda: any("wall-clock" in a["title"] for c in page.evaluate(CHARTS_JS)
                                     for a in c["axes"].values()), 30, "wall-clock axes")
                charts = wait_charts(page, count)
                shoot_charts(page, s["shots"], f"{name}-wall-{width}")
                problems += [f"{name} (wall clock) @ {width}px: {p}" for p in chart_problems(charts)]
                page.get_by_text("Wall-clock time on the x-axis").click()
                # The sidebar: the run's full id and name under the picker, never cut off.
                caption = page.locator('[data-testid="stSidebar"] [data-testid="stCaptionContainer"]').last.inner_text()
                assert run in caption and "tile sweep with a long name that wraps" in caption, caption
                problems += [f"sidebar @ {width}px: cut off: {t!r}" for t in
                             truncated(page, '[data-testid="stSidebar"] [data-testid="stCaptionContainer"]')]
            if name == "individuals":  # gene filters: labels never squashed letter by letter
                pick = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Filter on genes")
                pick.scroll_into_view_if_needed()
                for _ in range(6):
                    page.wait_for_timeout(800)  # each pick reruns the page
                    pick.locator('input').click()
                    page.locator('[role="option"]').first.click(timeout=10_000)
                    page.keyboard.press("Escape")
                wait_for(lambda: page.locator('[data-testid="stMultiSelect"]').count() >= 8, 30, "six gene filters")
                labels = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stMultiSelect"] label')]
                    .map(l => ({text: l.innerText, h: l.getBoundingClientRect().height}))""")
                problems += [f"individuals @ {width}px: gene filter label {lb['text']!r} squashed ({lb['h']:.0f} px tall)"
                             for lb in labels if lb["text"] and lb["h"] > 30]
                page.locator('[data-testid="stMain"]').screenshot(path=str(s["shots"] / f"{name}-filters-{width}.png"))
        # The live log: long lines wrap instead of being cut off.
        page.goto(f"{s['url']}/monitor?run={s['live']}")
        page.get_by_text("Live log").click()
        page.get_by_text("THE-END").wait_for()
        problems += [f"live log @ {width}px: cut off: {t[:60]!r}…" for t in truncated(page, '[data-testid="stCode"] code')]
    finally:
        page.close()
    assert not problems, "\n".join(problems)


def sidebar_run(page) -> str:
    return page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"] input').input_value()


@pytest.mark.parametrize("how", ["address", "picker"])
def test_monitor_opens_the_diff_of_the_run_being_viewed(synthetic_server, browser, how):
    """Monitor's "Open the diff in Genomes" opens that run, not the newest, whether the run came from
    the address or from the sidebar's picker."""
    s = synthetic_server
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(30_000)
    try:
        if how == "address":
            page.goto(f"{s['url']}/monitor?run={s['newer']}")
        else:
            page.goto(f"{s['url']}/monitor?run={s['live']}")
            page.get_by_text("Champion changes").wait_for()
            page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"] input').click()
            page.get_by_role("option", name=s["newer"]).click()
            page.wait_for_url(re.compile(rf".*/monitor\?run={s['newer']}"))
        wait_for(lambda: sidebar_run(page) == s["newer"], 30, "the run on Monitor")
        page.get_by_role("button", name="Open the diff in Genomes").click()
        page.wait_for_url(re.compile(r".*/genomes\?.*"))
        page.get_by_text("Lineage of the champion").wait_for()
        assert f"run={s['newer']}" in page.url
        assert sidebar_run(page) == s["newer"], page.url
    finally:
        page.close()


def test_the_sidebar_follows_a_live_run_and_population_text_blocks_start(synthetic_server, browser):
    """The sidebar's caption is refreshed with the run (paused at 4 of 6, not what the page first
    saw); on Launch, a Population that is not a number blocks Start and says why."""
    from store.runs import atomic_write_json, read_json

    s = synthetic_server
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(30_000)
    hb_path = s["runs"] / s["live"] / "heartbeat.json"
    hb = read_json(hb_path)
    try:
        atomic_write_json(hb_path, {**hb, "status": "running", "generation": 1})
        page.goto(f"{s['url']}/monitor?run={s['live']}")
        caption = page.locator('[data-testid="stSidebar"] [data-testid="stCaptionContainer"]').last
        wait_for(lambda: "running · 2 of 6" in caption.inner_text(), 30, "the caption of a running run")
        atomic_write_json(hb_path, {**hb, "status": "paused", "generation": 3})
        wait_for(lambda: "paused · 4 of 6" in caption.inner_text(), 30, "the caption of the paused run")

        page.goto(f"{s['url']}/launch")
        population = page.get_by_role("spinbutton", name="Population")
        population.click()
        population.press("Control+a")
        page.keyboard.type("abc")  # the browser's number field takes no letters: it is left empty
        population.press("Tab")
        page.get_by_text("Population must be a number").wait_for()
        assert page.get_by_role("button", name="Start run").is_disabled()
    finally:
        atomic_write_json(hb_path, hb)
        page.close()


def test_a_page_says_it_is_loading_at_once(synthetic_server, browser):
    """A page's first visit shows "Loading <page>…" until it has run (Individuals fits a forest), and
    the line is gone after."""
    s = synthetic_server
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(30_000)
    try:
        page.goto(f"{s['url']}/runs")
        page.get_by_text("Compare runs").wait_for()
        # Seen by a DOM observer, not by polling: a page the warm-up already read ahead can run in less
        # time than a poll takes, and the line must still have been shown.
        # A page that draws within a frame or two of the click needs no line (the browser may apply both
        # deltas at once, and did on CI once the warm-up had read the run ahead); a slower one must show it.
        page.evaluate("""() => { window.__sawLoading = false; window.__drawnAfter = null;
            new MutationObserver(() => { const text = document.body.innerText;
                if (text.includes("Loading Individuals…")) window.__sawLoading = true;
                if (window.__drawnAfter === null && text.includes("Which genes matter"))
                    window.__drawnAfter = performance.now() - window.__clicked; }).observe(document.body,
                {childList: true, subtree: true, characterData: true}); }""")
        page.evaluate("() => { window.__clicked = performance.now(); }")
        page.get_by_role("link", name="Individuals").click()
        page.get_by_text("Which genes matter").wait_for()
        page.get_by_text("Loading Individuals…").wait_for(state="detached")
        drawn_after_ms = page.evaluate("window.__drawnAfter")
        assert page.evaluate("window.__sawLoading") or drawn_after_ms < 100, drawn_after_ms
    finally:
        page.close()
