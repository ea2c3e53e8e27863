"""The dashboard's guard (dashboard/guard.py): host names, WebSocket origins, the install's token.

The guard is plain ASGI, so these tests call it with hand-made requests: no server, no sockets.
tests/test_browser.py replays a DNS-rebinding page against the real server in Chromium.
"""
from __future__ import annotations

import asyncio
import stat

import pytest

from dashboard import guard as G
from dashboard.serve import split_options

TOKEN = "t" * 64


async def _app(scope, receive, send):  # what Streamlit would answer: 200 "app"
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"app"})


def call(g: G.Guard, path: str = "/", host: str | None = "127.0.0.1:8501", kind: str = "http", method: str = "GET",
         query: str = "", headers: dict | None = None, body: bytes = b"") -> dict:
    """Send one request through ``g``; {"status", "headers", "body"} (a WebSocket: 101 accepted, 403 refused)."""
    raw = [(b"host", host.encode())] if host is not None else []
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": kind, "path": path, "query_string": query.encode(), "headers": raw, "method": method,
             "root_path": ""}
    incoming = [{"type": "websocket.connect"}] if kind == "websocket" else \
        [{"type": "http.request", "body": body, "more_body": False}]
    out: dict = {"status": None, "headers": {}, "body": b""}

    async def receive():
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")
        elif message["type"] == "websocket.accept":
            out["status"] = 101
        elif message["type"] == "websocket.close":
            out["status"] = 403

    asyncio.run(g(scope, receive, send))
    return out


@pytest.fixture
def guard():
    return G.Guard(_app, token=TOKEN)


def authed(extra: dict | None = None) -> dict:
    return {"Authorization": f"token {TOKEN}", **(extra or {})}


@pytest.mark.parametrize("host", ["127.0.0.1:8501", "localhost:8501", "LOCALHOST", "[::1]:8501", "127.0.0.1"])
def test_loopback_host_names_are_served(guard, host):
    assert call(guard, host=host, headers=authed())["status"] == 200


@pytest.mark.parametrize("host", ["evil.example:8501", "evil.example", "127.0.0.1.evil.example", "0.0.0.0:8501",
                                  "localhost.evil.example:8501", "[::2]:8501", "", None])
def test_a_request_for_another_host_name_is_refused_with_a_short_body(guard, host):
    r = call(guard, host=host, headers=authed())
    assert r["status"] == 403 and r["body"] == b"this dashboard does not answer to that host name\n"


def test_a_websocket_for_another_host_name_is_refused(guard):
    assert call(guard, "/_stcore/stream", host="evil.example:8501", kind="websocket", headers=authed())["status"] == 403


def test_the_host_check_holds_without_a_token_too():
    g = G.Guard(_app, token=None)
    assert call(g, host="evil.example:8501")["status"] == 403
    assert call(g)["status"] == 200


def test_a_listed_host_is_served():
    g = G.Guard(_app, hosts=["dash.example.org"], token=None)
    assert call(g, host="dash.example.org:8501")["status"] == 200
    assert call(g, host="other.example.org:8501")["status"] == 403


def test_listed_hosts_come_from_the_flag_and_the_environment():
    hosts = G.listed_hosts(["Box.Lan:8501"], env={G.HOSTS_ENV: "a.example, [::5] b.example"})
    assert hosts == ("box.lan", "a.example", "::5", "b.example")


@pytest.mark.parametrize("origin", ["http://evil.example:8501", "http://127.0.0.1:9999", "http://localhost:8501",
                                    "null", "file://", "https://evil.example"])
def test_a_websocket_from_another_origin_is_refused(guard, origin):
    r = call(guard, "/_stcore/stream", kind="websocket", headers=authed({"Origin": origin}))
    assert r["status"] == 403


def test_a_websocket_from_its_own_origin_with_the_token_is_accepted(guard):
    r = call(guard, "/_stcore/stream", kind="websocket", headers=authed({"Origin": "http://127.0.0.1:8501"}))
    assert r["status"] == 101


def test_a_websocket_without_the_token_is_refused(guard):
    r = call(guard, "/_stcore/stream", kind="websocket", headers={"Origin": "http://127.0.0.1:8501"})
    assert r["status"] == 403


@pytest.mark.parametrize("path", ["/", "/monitor", "/_stcore/stream", "/_stcore/upload_file/x/y", "/_stcore/host-config",
                                  "/media/abc.png", "/component/x/index.html", "/_stcore/script-health-check"])
def test_a_request_without_the_token_gets_the_login_page(guard, path):
    r = call(guard, path)
    assert r["status"] == 401 and b'<form method="post">' in r["body"] and b"app" != r["body"]
    assert TOKEN.encode() not in r["body"]


@pytest.mark.parametrize("path", ["/static/js/index.abc.js", "/favicon.png", "/_stcore/health"])
def test_static_files_and_the_health_check_stay_open(guard, path):
    assert call(guard, path)["status"] == 200


def test_the_right_token_in_the_url_sets_a_strict_httponly_cookie_and_redirects_to_the_clean_url(guard):
    r = call(guard, "/monitor", query=f"run=abc&token={TOKEN}")
    assert r["status"] == 303 and r["headers"]["location"] == "/monitor?run=abc"
    cookie = r["headers"]["set-cookie"]
    name, value = cookie.split(";")[0].split("=")
    assert name == "abebot-token-8501" and value == G.cookie_value(TOKEN) and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert call(guard, "/monitor", headers={"Cookie": f"other=1; {name}={value}"})["body"] == b"app"
    ws = call(guard, "/_stcore/stream", kind="websocket", headers={"Cookie": f"{name}={value}",
                                                                   "Origin": "http://127.0.0.1:8501"})
    assert ws["status"] == 101


def test_a_wrong_token_or_cookie_is_refused(guard):
    r = call(guard, "/", query="token=" + "u" * 64)
    assert r["status"] == 401 and b"not this dashboard" in r["body"] and "set-cookie" not in r["headers"]
    assert call(guard, "/", headers={"Cookie": "abebot-token-8501=" + G.cookie_value("u" * 64)})["status"] == 401
    assert call(guard, "/", headers={"Authorization": "token nope"})["status"] == 401


def test_the_login_form_posts_the_token_and_gets_the_cookie(guard):
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    r = call(guard, "/launch", method="POST", headers=form, body=f"token={TOKEN}".encode())
    assert r["status"] == 303 and r["headers"]["location"] == "/launch" and "set-cookie" in r["headers"]
    assert call(guard, "/launch", method="POST", headers=form, body=b"token=bad")["status"] == 401


def test_without_a_token_every_path_is_served_to_loopback():
    g = G.Guard(_app, token=None)
    assert call(g, "/_stcore/host-config")["body"] == b"app"


def test_the_install_token_is_made_once_and_only_its_owner_can_read_it(tmp_path):
    first = G.install_token(tmp_path)
    path = tmp_path / G.TOKEN_FILE
    assert len(first) == 64 and G.install_token(tmp_path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.chmod(0o644)
    assert G.install_token(tmp_path) == first and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_no_token_comes_from_the_flag_or_the_environment():
    assert G.no_token_requested(True, env={})
    assert G.no_token_requested(False, env={G.NO_TOKEN_ENV: "1"})
    assert not G.no_token_requested(False, env={G.NO_TOKEN_ENV: "0"})


def test_serve_takes_its_own_options_out_of_streamlits():
    hosts, rest, no_token = split_options(["--server.port", "8600", "--allow-host", "a.lan", "--no-token",
                                           "--allow-host=b.lan"])
    assert (hosts, rest, no_token) == (["a.lan", "b.lan"], ["--server.port", "8600"], True)
