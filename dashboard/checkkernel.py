"""The Check page's runner: ``python -m core check --json`` on an uploaded kernel file.

The same command the CLI documents, so the dashboard checks a kernel exactly as ``core check``
does, under the same device lock (``core check`` takes it; a busy device is its exit status 2).
The upload is written under ``<runs>/.check/<random>/`` under its own base name reduced to letters,
digits, ``.``, ``-`` and ``_`` (so a compiler's log names the user's file); nothing else the user
typed becomes a path, and the command is an argument list, never a shell line. An empty or binary
upload is refused before anything runs, and every message names the user's own file (the upload's
name), never the internal path or a command-line flag.
"""
from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

from dashboard.settings import REPO_ROOT

MAX_BYTES = 1 << 20  # a kernel source, not a data file
TIMEOUT_S = 600


def check_argv(runs: Path, kernel: Path, workload: str, backend: str, problem: str = "", launch: str = "",
               device: int = 0, isolate: bool | None = None) -> list[str]:
    """The argument list of ``python -m core check`` for these inputs (JSON texts pass through as
    arguments; ``core check`` validates them and says what is wrong). ``isolate``: ``--isolate`` or
    ``--no-isolate``; None leaves ``core check``'s default (isolated where the machine can)."""
    argv = [sys.executable, "-m", "core", "check", "--workload", workload, "--backend", backend,
            "--kernel", str(kernel), "--runs-dir", str(runs), "--device", str(int(device)), "--json"]
    if isolate is not None:
        argv.append("--isolate" if isolate else "--no-isolate")
    if problem.strip():
        argv += ["--problem", problem.strip()]
    if launch.strip():
        argv += ["--launch", launch.strip()]
    return argv


def save_upload(runs: Path, backend: str, data: bytes, name: str = "the upload") -> Path:
    """Write the uploaded source to ``<runs>/.check/<random>/kernel<suffix>`` and return the path.
    ValueError naming ``name`` (the user's file) when it is too big, empty, binary or not UTF-8."""
    if len(data) > MAX_BYTES:
        raise ValueError(f"{name} is {len(data):,} bytes; a kernel source above {MAX_BYTES:,} is refused")
    if b"\x00" in data:
        raise ValueError(f"{name} is a binary file, not kernel source code")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name} is not a UTF-8 text file (a kernel is source code)") from None
    if not text.strip():
        raise ValueError(f"{name} is empty: there is no kernel to check")
    folder = Path(runs).resolve() / ".check" / f"upload-{secrets.token_hex(6)}"
    folder.mkdir(parents=True)
    base = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name).lstrip(".")[:80]
    path = folder / (base if base and "." in base else f"kernel{_suffix(backend)}")
    path.write_bytes(data)
    return path


def drop_upload(path: Path) -> None:
    """Remove a saved upload and its folder (the compile cache keeps what is worth keeping)."""
    shutil.rmtree(Path(path).parent, ignore_errors=True)


def run_check(argv: list[str], name: str = "") -> dict:
    """Run the check; ``{"exit": status, "result": dict or None, "report": text, "error": one line}``.
    With ``name`` (the user's file name), the upload's internal path and the ``--kernel`` flag in
    what comes back read as that name."""
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    kernel = argv[argv.index("--kernel") + 1] if "--kernel" in argv else ""
    stdout, stderr = (_as_name(t, kernel, name) for t in (proc.stdout, proc.stderr))
    result = None
    if proc.returncode in (0, 1):
        try:
            result = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            result = None
    error = stderr.strip().splitlines()[-1] if proc.returncode == 2 and stderr.strip() else ""
    return {"exit": proc.returncode, "result": result, "report": stderr if result else "", "error": error}


def _as_name(text: str, kernel: str, name: str) -> str:
    """``text`` with the upload's path (and the file name the CLI put in a compiler log) as ``name``."""
    if not (name and kernel and text):
        return text
    for said in (f"kernel file {kernel}", f"--kernel {kernel}", kernel, json.dumps(kernel)[1:-1]):
        text = text.replace(said, name)
    return text


def placeholders(workload: str, backend: str) -> tuple[str, str]:
    """Example texts for the Problem and Launch fields in this workload's own terms: its default
    size settings on ``backend`` and two of its seed kernel's launch keys."""
    from core.tools.contract import contract

    try:
        c = contract(workload, backend)
    except Exception:  # noqa: BLE001 - a hint only: an empty field is still valid
        return "{}", "{}"
    sizes = {k: v for k, v in c["problem"].items() if isinstance(v, int) and not isinstance(v, bool)}
    launch = {k: v for k, v in c["launch"].items() if k != "argtypes" and isinstance(v, (int, bool))}
    return json.dumps(sizes), json.dumps(dict(list(launch.items())[:2]))


def _suffix(backend: str) -> str:
    """The source suffix the backend declares (".c", ".cu", ".py"); ".txt" for an unknown name."""
    from core.backends import backend_class

    try:
        return backend_class(backend).source_suffix
    except ValueError:
        return ".txt"
