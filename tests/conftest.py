"""Fixtures shared by the test modules; plain helpers are in :mod:`tests.helpers`.

pytest puts the repository root on ``sys.path`` for this file (``tests`` is a package), so the test
modules import ``core``, ``store``, ``dashboard`` and ``tests.helpers`` without a ``sys.path`` edit.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import NVCC, toy_space as _toy_space


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory) -> Path:
    """One content-addressed compile cache for the session: a kernel two tests build is compiled once."""
    return tmp_path_factory.mktemp("compile-cache")


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
