"""Who may talk to the dashboard: an ASGI layer around Streamlit's server (Starlette on uvicorn).

The dashboard launches runs and checks uploaded kernels, so a request that reaches it can run code.
Binding 127.0.0.1 is not enough: a web page on another site can make the browser send requests to
127.0.0.1, and with DNS rebinding (``evil.example`` resolved to 127.0.0.1) the browser even treats
the dashboard as that site's own. :class:`Guard` wraps the whole application and, before Streamlit
sees anything:

* refuses (403, a one-line body) every HTTP request and WebSocket upgrade whose ``Host`` is not
  ``localhost``, ``127.0.0.1`` or ``[::1]`` or a host the user listed (``--allow-host``,
  ``$ABEBOT_ALLOWED_HOSTS``): a rebound name arrives as ``Host: evil.example:8501``;
* refuses a WebSocket upgrade whose ``Origin`` is not the host it was sent to (or a listed host);
* asks for the install's token, as Jupyter does: ``?token=...`` on any page sets a cookie (HttpOnly,
  SameSite=Strict, named after the port) and redirects to the same URL without the token; a request
  without a valid cookie, ``?token=`` or ``Authorization: token ...`` header gets a small login page
  (401) where the token can be pasted, and a WebSocket without one is refused (403). Streamlit's
  static files (``/static/*``, ``/favicon.png``) and ``/_stcore/health`` (which answers "ok") stay
  open; every other endpoint, ``/_stcore/*``, ``/media`` and ``/component`` included, needs it.

The token is generated once per runs folder (:func:`install_token`, 0600 under ``<runs>/.secrets/``)
and compared in constant time. ``token=None`` turns the token off (``--no-token``), for a dashboard
fronted by an authenticating proxy; the host and origin checks stay.
"""
from __future__ import annotations

import hashlib
import hmac
import html
import os
import secrets
from pathlib import Path
from typing import Awaitable, Callable, Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit

LOOPBACK = ("localhost", "127.0.0.1", "::1")
HOSTS_ENV = "ABEBOT_ALLOWED_HOSTS"
NO_TOKEN_ENV = "ABEBOT_NO_TOKEN"
TOKEN_FILE = Path(".secrets") / "dashboard-token"
OPEN_PREFIXES = ("/static/",)
OPEN_PATHS = ("/favicon.png", "/_stcore/health")
MAX_LOGIN_BODY = 4096

Scope = dict
Receive = Callable[[], Awaitable[dict]]
Send = Callable[[dict], Awaitable[None]]


def host_name(value: str | None) -> str | None:
    """The host of a ``Host`` header or of a listed host, lowercased and without its port:
    ``"[::1]:8501"`` -> ``"::1"``, ``"LocalHost:80"`` -> ``"localhost"``; None when there is none."""
    if not value:
        return None
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 1 else None
    if value.count(":") > 1:  # a bare IPv6 address (as a user may list it)
        return value
    return value.split(":", 1)[0] or None


def listed_hosts(flags: Iterable[str] = (), env: dict | None = None) -> tuple[str, ...]:
    """The hosts the user allows beyond loopback: ``--allow-host`` values and ``$ABEBOT_ALLOWED_HOSTS``
    (separated by commas or spaces)."""
    env = os.environ if env is None else env
    raw = [*flags, *env.get(HOSTS_ENV, "").replace(",", " ").split()]
    return tuple(dict.fromkeys(h for h in (host_name(r) for r in raw) if h))


def install_token(runs: Path) -> str:
    """This runs folder's dashboard token: read from ``<runs>/.secrets/dashboard-token``, or generated
    (32 random bytes, hex) and written there with mode 0600 (its folder 0700) the first time. A file
    readable by others is narrowed to 0600."""
    path = Path(runs) / TOKEN_FILE
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        token = path.read_text().strip()
        if len(token) >= 32:
            return token
        path.unlink()  # empty or cut short: make a new one
        return install_token(runs)
    with os.fdopen(fd, "w") as f:
        token = secrets.token_hex(32)
        f.write(token + "\n")
    return token


def no_token_requested(flag: bool = False, env: dict | None = None) -> bool:
    """``--no-token`` or ``$ABEBOT_NO_TOKEN`` set to anything but ``0`` or empty."""
    value = (os.environ if env is None else env).get(NO_TOKEN_ENV, "").strip()
    return flag or value not in ("", "0")


def cookie_value(token: str) -> str:
    """What the cookie holds: derived from the token (the token itself never sits in the browser's store)."""
    return hmac.new(token.encode(), b"abebot-dashboard-cookie", hashlib.sha256).hexdigest()


class Guard:
    """ASGI middleware: host, origin and token checks in front of ``app`` (see the module docstring).

    ``hosts``: hosts allowed beyond loopback; ``token``: the install's token, or None for none;
    ``base_path``: Streamlit's ``server.baseUrlPath`` (open paths are matched below it).
    """

    def __init__(self, app: Callable, *, hosts: Iterable[str] = (), token: str | None = None, base_path: str = ""):
        self.app = app
        self.listed = tuple(h for h in (host_name(h) for h in hosts) if h)
        self.allowed = frozenset((*LOOPBACK, *self.listed))
        self.token = token
        self._cookie = cookie_value(token) if token else ""
        self.base = "/" + base_path.strip("/") if base_path.strip("/") else ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = _headers(scope)
        host = headers.get("host")
        if host_name(host) not in self.allowed:
            return await _refuse(scope, receive, send, "this dashboard does not answer to that host name")
        if scope["type"] == "websocket" and not self.origin_allowed(headers.get("origin"), host):
            return await _refuse(scope, receive, send, "cross-origin WebSocket refused")
        if self.token is None or self._open(scope.get("path", "")) or self._authenticated(headers):
            return await self.app(scope, receive, send)
        return await self._login(scope, receive, send, headers)

    # -- checks --------------------------------------------------------------------------------
    def origin_allowed(self, origin: str | None, host: str | None) -> bool:
        """No Origin (not a browser) or an Origin naming the very host the request was sent to, or a
        listed host; never ``null`` or another site."""
        if origin is None:
            return True
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        name = host_name(parts.netloc)
        same = parts.netloc.lower() == (host or "").strip().lower() and name in self.allowed
        return same or name in self.listed

    def _open(self, path: str) -> bool:
        if self.base and path.startswith(self.base):
            path = path[len(self.base):] or "/"
        return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)

    def _authenticated(self, headers: dict) -> bool:
        cookies = _cookies(headers.get("cookie", ""))
        if any(hmac.compare_digest(v.encode(), self._cookie.encode()) for k, v in cookies.items()
               if k.startswith("abebot-token-")):
            return True
        scheme, _, value = headers.get("authorization", "").partition(" ")
        return scheme.lower() == "token" and self.valid(value.strip())

    def valid(self, token: str | None) -> bool:
        """Whether ``token`` is this install's token (constant time)."""
        return bool(token) and self.token is not None and hmac.compare_digest(token.encode(), self.token.encode())

    # -- answers -------------------------------------------------------------------------------
    async def _login(self, scope: Scope, receive: Receive, send: Send, headers: dict) -> None:
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = next((v for k, v in query if k == "token"), None)
        if scope["type"] == "websocket":
            if self.valid(given):
                return await self.app(scope, receive, send)
            return await _refuse(scope, receive, send, "token required")
        if scope.get("method") == "POST" and "x-www-form-urlencoded" in headers.get("content-type", ""):
            given = dict(parse_qsl((await _body(receive)).decode("latin-1"))).get("token", "").strip()
        if given is None:
            return await _page(send, 401, _login_page(""))
        if not self.valid(given):
            return await _page(send, 401, _login_page("That token is not this dashboard's."))
        rest = urlencode([(k, v) for k, v in query if k != "token"])
        location = (scope.get("root_path", "") + scope.get("path", "/")) + (f"?{rest}" if rest else "")
        cookie = (f"{_cookie_name(headers.get('host'))}={self._cookie}; Path=/; HttpOnly; SameSite=Strict; "
                  f"Max-Age={30 * 86400}")
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode()),
                                (b"cache-control", b"no-store"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


def _headers(scope: Scope) -> dict:
    out: dict[str, str] = {}
    for k, v in scope.get("headers", []):
        name = k.decode("latin-1").lower()
        out.setdefault(name, v.decode("latin-1"))  # the first one counts: a second Host is not read
    return out


def _cookies(raw: str) -> dict:
    out = {}
    for part in raw.split(";"):
        name, eq, value = part.strip().partition("=")
        if eq:
            out[name] = value
    return out


def _cookie_name(host: str | None) -> str:
    """One cookie per port: two dashboards on one machine (different runs folders) keep their own."""
    try:
        port = urlsplit("//" + (host or "")).port
    except ValueError:
        port = None
    return f"abebot-token-{port or 80}"


async def _body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body") or len(body) > MAX_LOGIN_BODY:
            return body[:MAX_LOGIN_BODY]


async def _refuse(scope: Scope, receive: Receive, send: Send, why: str) -> None:
    """403 with a one-line body; for a WebSocket, a close before the accept (the server answers 403)."""
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008})
        return
    await _page(send, 403, (why + "\n").encode(), b"text/plain; charset=utf-8")


async def _page(send: Send, status: int, body: bytes, kind: bytes = b"text/html; charset=utf-8") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), (b"x-frame-options", b"DENY")]})
    await send({"type": "http.response.body", "body": body})


def _login_page(message: str) -> bytes:
    note = f'<p class="err">{html.escape(message)}</p>' if message else ""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>AbeBot: token</title>
<style>body{{font-family:sans-serif;max-width:32em;margin:4em auto}}input{{width:100%;padding:.4em}}.err{{color:#b91c1c}}</style>
</head><body><h1>AbeBot dashboard</h1>
<p>This dashboard needs its token. The command that started it printed a URL carrying it
(<code>?token=...</code>); it is also in <code>&lt;runs&gt;/.secrets/dashboard-token</code>.</p>{note}
<form method="post"><label>Token <input name="token" type="password" autofocus autocomplete="off"></label>
<p><button type="submit">Open the dashboard</button></p></form></body></html>""".encode()
