"""The sandbox's working directory: a fresh empty temporary folder per sandbox process
(``$TMPDIR/abebot-sandbox-work-<pid>-*``), removed when it exits or, after a kill, by the next one."""
from __future__ import annotations

import os
from pathlib import Path

WORKDIR_PREFIX = "abebot-sandbox-work-"


def fresh_workdir() -> str | None:
    """chdir into a new empty temporary directory (after removing those of dead sandboxes)."""
    import tempfile

    root = Path(tempfile.gettempdir())
    try:
        for old in root.glob(f"{WORKDIR_PREFIX}*"):
            pid = old.name[len(WORKDIR_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)) and not old.is_symlink() and old.is_dir() \
                    and old.stat().st_uid == os.getuid():
                remove_workdir(str(old))
        workdir = tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-")
        os.chdir(workdir)
        return workdir
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def remove_workdir(workdir: str | None) -> None:
    if not workdir:
        return
    import shutil

    try:
        if os.getcwd() == workdir:
            os.chdir(Path(workdir).parent)
    except OSError:
        pass
    shutil.rmtree(workdir, ignore_errors=True)
