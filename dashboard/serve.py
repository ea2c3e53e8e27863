"""Start the dashboard warmed up: ``python -m dashboard.serve [streamlit run options]``.

The same server as ``streamlit run app.py`` (in this process, from any directory), plus
:func:`dashboard.nav.warm_up` in a background thread from the start. ``streamlit run`` runs none of
the app's code until the first browser session connects, so without this the first page opened
after a start pays every first import (pandas, Plotly's figure classes, DuckDB, scikit-learn: about
1.5 s of CPU, benchmarks/MONITOR_RESULTS.md); here they are done a couple of seconds after the
start, and the server says so on stderr ("warm-up finished"). Its front end also starts loading
Plotly on the chart pages as soon as they open (:mod:`dashboard.static_preload`): plotly.js's
basic bundle where ``npm ci`` installed it, and the pages then draw with it (:mod:`dashboard.plotly_basic`).
``scripts/dashboard.sh`` starts the dashboard this way.

It also puts :class:`dashboard.guard.Guard` in front of Streamlit's server: requests for other host
names, cross-origin WebSockets and (unless ``--no-token`` or ``$ABEBOT_NO_TOKEN``) requests without
the install's token are refused, and the server prints the URL carrying the token once it listens.
Its own options, taken out before the rest go to ``streamlit run``: ``--allow-host HOST`` (repeatable;
also ``$ABEBOT_ALLOWED_HOSTS``) and ``--no-token``.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app.py"


def _warm_when_served() -> None:
    """Warm up once Streamlit's runtime exists (our modules declare ``st.cache_data`` functions,
    which want it), unless :func:`dashboard.nav.setup` started the warm-up first."""
    from streamlit import runtime

    t0 = time.monotonic()
    while not runtime.exists() and time.monotonic() - t0 < 60:
        time.sleep(0.05)
    from dashboard import nav

    nav.start_warm_up(announce=True)


def split_options(argv: list[str]) -> tuple[list[str], list[str], bool]:
    """(hosts from ``--allow-host``, the arguments left for ``streamlit run``, whether ``--no-token``)."""
    hosts, rest, no_token = [], [], False
    args = iter(argv)
    for arg in args:
        if arg == "--no-token":
            no_token = True
        elif arg == "--allow-host":
            value = next(args, None)
            if not value:
                raise SystemExit("dashboard.serve: --allow-host needs a host name")
            hosts.append(value)
        elif arg.startswith("--allow-host="):
            hosts.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return hosts, rest, no_token


def install_guard(hosts: list[str], token: str | None) -> None:
    """Wrap the app this process's Streamlit server will create in :class:`dashboard.guard.Guard`,
    and print the URL to open (with ``?token=``) after Streamlit's own start message."""
    from streamlit import config
    from streamlit.web import bootstrap
    from streamlit.web.server.starlette import starlette_server

    from dashboard.guard import Guard

    create = starlette_server.create_starlette_app

    def guarded(runtime):
        return Guard(create(runtime), hosts=hosts, token=token,
                     base_path=config.get_option("server.baseUrlPath") or "")

    starlette_server.create_starlette_app = guarded
    print_url = bootstrap._print_url

    def print_with_token(is_running_hello: bool) -> None:
        print_url(is_running_hello)
        print(f"  Open the dashboard: {dashboard_url(token)}\n", flush=True)

    bootstrap._print_url = print_with_token


def dashboard_url(token: str | None) -> str:
    """The URL the start command prints: the bound loopback address (or localhost), the port, the token."""
    from streamlit import config

    address = config.get_option("server.address") or "localhost"
    if address in ("0.0.0.0", "::", ""):
        address = "localhost"
    host = f"[{address}]" if ":" in address else address
    base = (config.get_option("server.baseUrlPath") or "").strip("/")
    url = f"http://{host}:{config.get_option('server.port')}/{base + '/' if base else ''}"
    return url + (f"?token={token}" if token else "")


def main(argv: list[str] | None = None) -> int:
    from streamlit.web import cli

    from dashboard import guard, static_preload
    from dashboard.settings import runs_dir

    hosts, rest, no_token = split_options(sys.argv[1:] if argv is None else list(argv))
    token = None if guard.no_token_requested(no_token) else guard.install_token(runs_dir())
    install_guard([*guard.listed_hosts(hosts)], token)
    static_preload.install(runs_dir() / ".cache" / "streamlit")
    threading.Thread(target=_warm_when_served, name="warm-up", daemon=True).start()
    sys.argv = ["streamlit", "run", str(APP), *rest]
    return cli.main()


if __name__ == "__main__":
    raise SystemExit(main())
