"""Streamlit's front end, with Plotly's chunk imported as soon as a chart page opens.

Streamlit loads its 4.7 MB Plotly chunk lazily, when the first chart's delta arrives, about 0.9 s
after a new tab navigates; evaluating it then takes about 0.8 s of the browser's main thread before
the first chart can draw (benchmarks/MONITOR_RESULTS.md). An element of the page cannot start it
sooner: the page's deltas arrive together. So ``python -m dashboard.serve`` serves Streamlit's own
``index.html`` with one more module script, after Streamlit's entry module, that imports the same
chunk (the same URL, so the browser evaluates it once) as the app opens its WebSocket, while the server
runs the page, on the pages that draw charts only.

Where the repository holds plotly.js's basic bundle (``npm ci`` puts it in ``node_modules``), the
served folder also holds a copy of it, named by its content, and ``index.html`` imports that instead:
the chart pages then draw with it (:mod:`dashboard.plotly_basic`), and a new tab evaluates 1.2 MB of
Plotly instead of 4.7 MB.

The rest of Streamlit's static folder is served as installed, through symbolic links (Streamlit's
static handler follows them), from a folder under the runs folder's cache named by the content it
holds. If a Streamlit release names the chunk differently, or the cache cannot be written, Streamlit
is served unchanged.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

# The url paths (dashboard.nav.PAGES) of the pages that draw Plotly charts.
PLOTLY_PAGES = ("monitor", "individuals", "benchmark", "runs")
BASIC_BUNDLE = Path(__file__).resolve().parent.parent / "node_modules" / "plotly.js-basic-dist-min" / "plotly-basic.min.js"
# The served folder's own files, beside Streamlit's bundles under ``static/``: served as they are,
# like them (Streamlit gzips other paths afresh on every request: 45 ms of its event loop for this one).
BASIC_FOLDER = "static/abebot"
# Set by install when the server serves the bundle, for the pages (dashboard.plotly_basic): its URL.
URL_ENV = "ABEBOT_PLOTLY_BASIC_URL"
_CHUNK = re.compile(r"PlotlyChart\.[A-Za-z0-9_-]+\.js")
_MARK = "abebot-plotly-preload"


def plotly_chunk(static_dir: Path) -> str | None:
    """The file name of Streamlit's Plotly chunk in its static folder; None unless exactly one."""
    names = [p.name for p in (static_dir / "static" / "js").glob("PlotlyChart.*.js") if _CHUNK.fullmatch(p.name)]
    return names[0] if len(names) == 1 else None


def usable_bundle(bundle: Path | None) -> Path | None:
    """``bundle`` if it is whole: plotly.js's basic build from its head to the line that ends it
    (a half-written install would otherwise be served, and every chart fail); else None."""
    try:
        with open(bundle, "rb") as f:
            head = f.read(200)
            f.seek(max(0, f.seek(0, os.SEEK_END) - 300))
            tail = f.read()
    except (OSError, TypeError):
        return None
    return bundle if b"plotly.js (basic" in head and b"window.Plotly = Plotly" in tail else None


def basic_url(bundle: Path) -> str:
    """The URL, relative to the app's root, that the served folder gives ``bundle``: named by its content."""
    return f"./{BASIC_FOLDER}/plotly-basic.{hashlib.sha256(bundle.read_bytes()).hexdigest()[:16]}.js"


# The import starts when the app opens its WebSocket to the server, not when the page loads: with an
# empty browser cache Plotly's evaluation (0.15 s of the main thread) came before the connection; now it
# overlaps the server's run of the page (benchmarks/MONITOR_RESULTS.md). The WebSocket class is wrapped
# for that one construction and then given back.
_SCRIPT = """    <script type="module" id="{mark}">
      if ({pages}.includes(location.pathname.split("/").filter(Boolean).pop())) {{
        const Native = window.WebSocket;
        window.WebSocket = class extends Native {{
          constructor(...args) {{
            super(...args);
            window.WebSocket = Native;
            import({module});
          }}
        }};
      }}
    </script>
"""


def patched_index(html: str, module: str, pages: tuple[str, ...] = PLOTLY_PAGES) -> str:
    """``index.html`` with a module script, last in ``<head>``, that imports ``module`` (a URL relative
    to the app's root) as the app opens its WebSocket, when the URL's last path segment is one of
    ``pages``. Relative URLs, as Streamlit's own, so a base URL path works."""
    if _MARK in html or "</head>" not in html:
        return html
    script = _SCRIPT.format(mark=_MARK, pages=json.dumps(list(pages)), module=json.dumps(module))
    return html.replace("</head>", script + "  </head>", 1)


def _link_children(source: Path, target: Path, but: tuple[str, ...] = ()) -> None:
    """``target`` (made) with a symbolic link to each entry of ``source`` except those named in ``but``."""
    target.mkdir(exist_ok=True)
    for entry in source.iterdir():
        if entry.name not in but:
            (target / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())


def preloading_static_dir(static_dir: Path, cache: Path, basic: Path | None = None) -> Path | None:
    """A folder in ``cache`` that mirrors ``static_dir`` (links) with the patched ``index.html`` and,
    given ``basic`` (plotly.js's basic bundle), a copy of it at :func:`basic_url`; made once per
    content. None when the chunk or the index is not where this module expects them."""
    index = static_dir / "index.html"
    chunk = plotly_chunk(static_dir)
    if chunk is None or not index.is_file():
        return None
    html = index.read_text(encoding="utf-8")
    module = basic_url(basic) if basic is not None else f"./static/js/{chunk}"
    patched = patched_index(html, module)
    if patched == html:
        return None
    key = hashlib.sha256(f"{static_dir.resolve()}\0{patched}".encode()).hexdigest()[:16]
    target = cache / key
    if (target / "index.html").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=cache))  # renamed whole: never seen half made
    try:
        _link_children(static_dir, tmp, but=("index.html", "static") if basic is not None else ("index.html",))
        if basic is not None:
            _link_children(static_dir / "static", tmp / "static")
            (tmp / module).parent.mkdir()
            shutil.copyfile(basic, tmp / module)
        (tmp / "index.html").write_text(patched, encoding="utf-8")
        tmp.rename(target)
    except OSError:
        if not (target / "index.html").is_file():  # not another server's folder, made meanwhile
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def install(cache: Path, basic: Path | None = BASIC_BUNDLE) -> Path | None:
    """Make this process's Streamlit server (not started yet) serve the preloading static folder,
    kept in ``cache``, with ``basic`` where that file is whole (and then tell the pages its URL,
    :data:`URL_ENV`); returns the folder, or None when Streamlit is served as installed."""
    from streamlit import file_util

    basic = usable_bundle(basic)
    try:
        served = preloading_static_dir(Path(file_util.get_static_dir()), cache, basic)
    except OSError:
        return None
    if served is not None:
        file_util.get_static_dir = lambda: str(served)
        if basic is not None:
            os.environ[URL_ENV] = basic_url(basic)
    return served
