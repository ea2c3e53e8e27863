"""Fixtures shared by the test modules; plain helpers are in :mod:`tests.helpers`.

pytest puts the repository root on ``sys.path`` for this file (``tests`` is a package), so the test
modules import ``core``, ``store``, ``dashboard`` and ``tests.helpers`` without a ``sys.path`` edit.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import NVCC, toy_space as _toy_space


def _session_folder(tmp_path_factory, name: str) -> Path:
    """``name`` under the session's temporary root, one for all pytest-xdist workers (each worker's
    basetemp is a folder of that root), so a kernel any worker built is found by the others."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if base.name.startswith("popen-gw") else base
    folder = root / name
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory) -> Path:
    """One content-addressed compile cache for the session: a kernel two tests build is compiled once.
    One per pytest-xdist worker: the backend's per-key lock is a thread lock, not between processes."""
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture(scope="session")
def ptx_cache(tmp_path_factory) -> Path:
    """The session's ``nvcc -ptx`` outputs by source (:func:`tests.helpers.nvcc_ptx`)."""
    return _session_folder(tmp_path_factory, "ptx-cache")


@pytest.fixture
def nvcc() -> str:
    """The nvcc to compile CUDA C with; the test is skipped where none is installed."""
    if NVCC is None:
        pytest.skip("nvcc not installed: CUDA C sources cannot be compiled here")
    return NVCC


@pytest.fixture
def toy_space():
    """A fresh toy gene space (:func:`tests.helpers.toy_space`)."""
    return _toy_space()
