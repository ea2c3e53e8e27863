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
