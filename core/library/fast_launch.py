"""The compiled launcher (``fast_launch.c``): built with the system C compiler at first use, cached.

:func:`module` returns the ``abebot_fast_launch`` extension: its ``Launch`` holds one kernel's
``CUfunction``, grid, block, dynamic shared memory and packed arguments, and one call writes the
call's data pointers into them and calls the driver's ``cuLaunchKernel`` through a pointer (no
ctypes conversion, no CUDA headers). It is compiled from the C source next to this file with
``$CC`` (default ``cc``) and Python's headers into ``$ABEBOT_CACHE_DIR/fast_launch/`` (default
``~/.cache/abebot/``) under a name keyed by the sha256 of the source, the compiler command and the
Python ABI, written atomically, so that an edited source or another Python builds anew and two
processes never load a half-written file. Where it cannot be built (no compiler, no Python
headers) :func:`module` warns once (:class:`FastLaunchWarning`) and returns None: the library then
launches through ctypes (:class:`core.library.launch.CudaLaunch`), a few microseconds slower.

:func:`driver_launch` is ``cuLaunchKernel``'s address, resolved once from ``libcuda.so.1`` with
``dlopen``; tests point it at a stub library that records what it gets.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fast_launch.c")
NAME = "abebot_fast_launch"
DRIVER = "libcuda.so.1"


class FastLaunchWarning(UserWarning):
    """The compiled launcher could not be built here; launches go through ctypes."""


class LaunchArgumentError(TypeError):
    """A launch got the wrong number of sources, or a tensor of another dtype or device than bound."""


def cache_dir() -> Path:
    """``$ABEBOT_CACHE_DIR/fast_launch``, else ``~/.cache/abebot/fast_launch``."""
    root = os.environ.get("ABEBOT_CACHE_DIR") or str(Path.home() / ".cache" / "abebot")
    return Path(root) / "fast_launch"


def compiler() -> list[str]:
    """The C compiler command: ``$CC`` split like a shell would, else ``cc``."""
    return shlex.split(os.environ.get("CC") or "cc")


def built_path(cc: list[str] | None = None) -> Path:
    """Where the extension for this source, compiler and Python lives in the cache."""
    cc = compiler() if cc is None else cc
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = hashlib.sha256(SOURCE.read_bytes() + repr((cc, sys.version, suffix)).encode()).hexdigest()[:16]
    return cache_dir() / f"{NAME}-{key}{suffix}"


def build(cc: list[str] | None = None) -> Path:
    """Compile the extension into the cache (if it is not there) and return its path; raises
    OSError or CalledProcessError with the compiler's message when it cannot."""
    cc = compiler() if cc is None else cc
    out = built_path(cc)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        include = sysconfig.get_paths()["include"]
        cmd = [*cc, "-O2", "-shared", "-fPIC", "-std=c11", f"-I{include}", str(SOURCE), "-o", tmp, "-ldl"]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def load(path: Path) -> Any:
    """Import the extension at ``path`` (its init function is ``PyInit_abebot_fast_launch``)."""
    loader = importlib.machinery.ExtensionFileLoader(NAME, str(path))
    spec = importlib.util.spec_from_file_location(NAME, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    mod.set_argument_error(LaunchArgumentError)
    return mod


@lru_cache(maxsize=1)
def module() -> Any:
    """The compiled extension, or None (with one :class:`FastLaunchWarning`) where it cannot be
    built or loaded here."""
    try:
        return load(build())
    except subprocess.CalledProcessError as exc:
        why = (exc.stderr or exc.stdout or "").strip().splitlines()
        reason = f"{shlex.join(compiler())} failed: {why[0] if why else exc}"
    except (OSError, ImportError, subprocess.SubprocessError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    warnings.warn(f"abebot library: the compiled launcher cannot be built here ({reason}); kernels launch "
                  "through ctypes, a few microseconds slower per call", FastLaunchWarning, stacklevel=2)
    return None


@lru_cache(maxsize=4)
def driver_launch(path: str = DRIVER) -> int:
    """The address of ``cuLaunchKernel`` in the driver library ``path`` (dlopen, dlsym; once)."""
    mod = module()
    if mod is not None:
        return mod.resolve(path, "cuLaunchKernel")
    import ctypes

    return ctypes.cast(ctypes.CDLL(path).cuLaunchKernel, ctypes.c_void_p).value
