"""dashboard.static_preload: Streamlit's index.html with Plotly's chunk imported early on chart pages."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from dashboard import static_preload as sp
from dashboard.nav import PAGES
from dashboard.plotly_basic import URL_ENV

ROOT = Path(__file__).resolve().parents[1]
INDEX = '<html><head><script type="module" src="./static/js/index.X1.js"></script></head><body></body></html>'


def _static(tmp_path: Path, chunks=("PlotlyChart.Ab_9-z.js",), index: str = INDEX) -> Path:
    d = tmp_path / "streamlit-static"
    (d / "static" / "js").mkdir(parents=True)
    (d / "index.html").write_text(index)
    (d / "favicon.png").write_bytes(b"png")
    for c in chunks:
        (d / "static" / "js" / c).write_text("export default 1;")
    return d


def test_the_index_imports_the_chunk_after_streamlits_entry_on_the_chart_pages_only():
    html = sp.patched_index(INDEX, "./static/js/PlotlyChart.Ab_9-z.js")
    script = re.search(r'<script type="module" id="abebot-plotly-preload">(.*?)</script>', html, re.S).group(1)
    assert html.index("index.X1.js") < html.index("abebot-plotly-preload") < html.index("</head>")
    assert 'import("./static/js/PlotlyChart.Ab_9-z.js")' in script
    # Imported as the app opens its WebSocket (the class wrapped for that one construction), not before.
    assert script.index("super(...args)") < script.index("window.WebSocket = Native;") < script.index("import(")
    pages = json.loads(re.search(r"(\[.*?\])\.includes", script).group(1))
    assert pages == list(sp.PLOTLY_PAGES)
    assert sp.patched_index(html, "./static/js/PlotlyChart.Ab_9-z.js") == html  # once
    assert sp.patched_index("<html><body></body></html>", "./static/js/PlotlyChart.a.js") == "<html><body></body></html>"


def test_the_chart_pages_are_the_pages_that_draw_plotly_charts():
    drawing = {url for path, _title, _icon, url in PAGES if "plotly_basic.chart(" in (ROOT / path).read_text()}
    assert drawing == set(sp.PLOTLY_PAGES)


def test_the_served_folder_mirrors_streamlits_with_the_patched_index_made_once_per_content(tmp_path):
    stock, cache = _static(tmp_path), tmp_path / "cache"
    served = sp.preloading_static_dir(stock, cache)
    assert served is not None and served.parent == cache
    assert (served / "favicon.png").is_symlink() and (served / "favicon.png").read_bytes() == b"png"
    assert (served / "static" / "js" / "PlotlyChart.Ab_9-z.js").read_text() == "export default 1;"
    assert "abebot-plotly-preload" in (served / "index.html").read_text()
    assert (stock / "index.html").read_text() == INDEX  # Streamlit's own is left alone
    made = (served / "index.html").stat().st_mtime_ns
    assert sp.preloading_static_dir(stock, cache) == served and (served / "index.html").stat().st_mtime_ns == made
    assert [p.name for p in cache.iterdir()] == [served.name]  # no half-made folder left behind
    (stock / "index.html").write_text(INDEX.replace("X1", "X2"))  # a new Streamlit: a new folder
    assert sp.preloading_static_dir(stock, cache) not in (None, served)


@pytest.mark.parametrize("chunks", [(), ("PlotlyChart.a.js", "PlotlyChart.b.js")])
def test_streamlit_is_served_unchanged_unless_exactly_one_plotly_chunk_is_found(tmp_path, chunks):
    assert sp.preloading_static_dir(_static(tmp_path, chunks), tmp_path / "cache") is None
    assert not (tmp_path / "cache").exists()


def test_the_installed_streamlit_has_the_chunk_this_relies_on():
    """A Streamlit upgrade that renames the chunk would turn the preload off silently: fail here instead."""
    from streamlit import file_util

    assert sp.plotly_chunk(Path(file_util.get_static_dir())) is not None


def test_install_points_streamlits_static_folder_at_the_preloading_one(tmp_path, monkeypatch):
    from streamlit import file_util

    stock = _static(tmp_path)
    monkeypatch.setattr(file_util, "get_static_dir", lambda: str(stock))
    monkeypatch.delenv(URL_ENV, raising=False)
    served = sp.install(tmp_path / "cache", basic=None)
    assert served is not None and file_util.get_static_dir() == str(served)
    monkeypatch.setattr(file_util, "get_static_dir", lambda: str(stock))
    (tmp_path / "ro").write_text("a file where the cache folder would go")
    assert sp.install(tmp_path / "ro" / "cache", basic=None) is None and file_util.get_static_dir() == str(stock)
    assert URL_ENV not in os.environ  # the pages draw with st.plotly_chart


BUNDLE = b"/**\n* plotly.js (basic - minified) v4.1.1\n*/\n" + b"x" * 400 + b"\nwindow.Plotly = Plotly;\nreturn Plotly;\n}));\n"


def _bundle(tmp_path: Path, content: bytes = BUNDLE) -> Path:
    f = tmp_path / "node_modules" / "plotly-basic.min.js"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(content)
    return f


def test_with_the_basic_bundle_the_folder_serves_a_copy_named_by_content_and_the_index_imports_it(tmp_path):
    stock, cache, bundle = _static(tmp_path), tmp_path / "cache", _bundle(tmp_path)
    served = sp.preloading_static_dir(stock, cache, bundle)
    url = sp.basic_url(bundle)
    assert re.fullmatch(r"\./static/abebot/plotly-basic\.[0-9a-f]{16}\.js", url)
    copy = served / url
    assert copy.read_bytes() == BUNDLE and not copy.is_symlink()  # a reinstall under node_modules cannot change it
    # Beside Streamlit's own bundles, which stay links, under the path Streamlit serves without gzip.
    assert url.startswith("./static/") and not (served / "static").is_symlink() and (served / "static" / "js").is_symlink()
    assert sorted(p.name for p in (served / "static" / "js").iterdir()) == sorted(p.name for p in (stock / "static" / "js").iterdir())
    index = (served / "index.html").read_text()
    assert f"import({json.dumps(url)})" in index and "PlotlyChart" not in index  # one Plotly per tab, not two
    assert sp.preloading_static_dir(stock, cache, None) != served  # Streamlit's chunk: a folder of its own
    bundle.write_bytes(BUNDLE.replace(b"x", b"y"))  # another version: another name, another folder
    assert sp.basic_url(bundle) != url and sp.preloading_static_dir(stock, cache, bundle) not in (None, served)


@pytest.mark.parametrize("content", [b"", BUNDLE[:200], b"window.Plotly = Plotly" + BUNDLE[40:], b"<html>404</html>"])
def test_only_a_whole_basic_bundle_is_used(tmp_path, content):
    assert sp.usable_bundle(_bundle(tmp_path, content)) is None
    assert sp.usable_bundle(_bundle(tmp_path)) is not None
    assert sp.usable_bundle(tmp_path / "missing.js") is None and sp.usable_bundle(None) is None


def test_install_tells_the_pages_the_bundles_url_only_when_it_serves_it(tmp_path, monkeypatch):
    from streamlit import file_util

    stock = _static(tmp_path)
    monkeypatch.setattr(file_util, "get_static_dir", lambda: str(stock))
    monkeypatch.delenv(URL_ENV, raising=False)
    assert sp.install(tmp_path / "cache", basic=_bundle(tmp_path, b"half")) is not None
    assert URL_ENV not in os.environ
    monkeypatch.setattr(file_util, "get_static_dir", lambda: str(stock))
    served = Path(sp.install(tmp_path / "cache", basic=_bundle(tmp_path)))
    assert os.environ[URL_ENV] == sp.basic_url(_bundle(tmp_path)) and (served / os.environ[URL_ENV]).is_file()
