"""The Check page's runner: ``python -m core check --json`` on an uploaded kernel file.

The same command the CLI documents, so the dashboard checks a kernel exactly as ``core check``
does, under the same device lock (``core check`` takes it; a busy device is its exit status 2).
The upload is written under ``<runs>/.check/`` with a generated name; nothing the user typed
becomes a path, and the command is an argument list, never a shell line.
"""
from __future__ import annotations

import json
import secrets
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


def save_upload(runs: Path, backend: str, data: bytes) -> Path:
    """Write the uploaded source to ``<runs>/.check/<random><suffix>`` and return the path."""
    if len(data) > MAX_BYTES:
        raise ValueError(f"the file is {len(data):,} bytes; a kernel source above {MAX_BYTES:,} is refused")
    folder = Path(runs).resolve() / ".check"
    folder.mkdir(exist_ok=True)
    path = folder / f"upload-{secrets.token_hex(6)}{_suffix(backend)}"
    path.write_bytes(data)
    return path


def run_check(argv: list[str]) -> dict:
    """Run the check; ``{"exit": status, "result": dict or None, "report": text, "error": one line}``."""
    proc = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=TIMEOUT_S,
                          stdin=subprocess.DEVNULL)
    result = None
    if proc.returncode in (0, 1):
        try:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            result = None
    error = proc.stderr.strip().splitlines()[-1] if proc.returncode == 2 and proc.stderr.strip() else ""
    return {"exit": proc.returncode, "result": result, "report": proc.stderr if result else "", "error": error}


def _suffix(backend: str) -> str:
    """The source suffix the backend declares (".c", ".cu", ".py"); ".txt" for an unknown name."""
    from core.backends import backend_class

    try:
        return backend_class(backend).source_suffix
    except ValueError:
        return ".txt"
