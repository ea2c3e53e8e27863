"""Packaging (pyproject.toml): the ``abebot`` console script and the ``abebot.workloads`` /
``abebot.backends`` entry-point groups that let another package add a workload or a backend."""
from __future__ import annotations

import importlib.metadata
import logging
import shutil
import subprocess
import sys

import pytest

import core.backends as backends
import core.workloads as workloads


def test_abebot_help():
    exe = shutil.which("abebot")
    if exe is None:
        pytest.skip("the `abebot` console script is not on PATH (run `pip install -e .`)")
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage: abebot" in out.stdout and "run" in out.stdout


def test_python_m_core_help():
    out = subprocess.run([sys.executable, "-m", "core", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout


def _fake_entry_points(group_eps):
    def entry_points(*, group=None, **kw):
        return [importlib.metadata.EntryPoint(name=n, value=v, group=group) for n, v in group_eps.get(group, [])]
    return entry_points


def test_fake_workload_entry_point_is_loaded(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", _fake_entry_points(
        {"abebot.workloads": [("fake_gemm", "core.workloads.gemm:GemmWorkload"),
                              ("gemm", "not.this:Overrides")]}))  # a built-in name is not replaced
    registry = dict(workloads.WORKLOADS)
    monkeypatch.setattr(workloads, "WORKLOADS", registry)
    workloads.load_entry_points(registry, workloads.ENTRY_POINT_GROUP)
    assert registry["fake_gemm"] == "core.workloads.gemm:GemmWorkload"
    assert registry["gemm"] == "core.workloads.gemm:GemmWorkload"
    assert type(workloads.get_workload("fake_gemm")).__name__ == "GemmWorkload"


def test_fake_backend_entry_point_is_loaded(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", _fake_entry_points(
        {"abebot.backends": [("c2", "core.backends.c:CBackend")]}))
    registry = dict(backends.BACKENDS)
    monkeypatch.setattr(backends, "BACKENDS", registry)
    backends.load_entry_points(registry, backends.ENTRY_POINT_GROUP)
    assert backends.backend_class("c2") is backends.backend_class("c")


def test_broken_entry_points_give_one_clear_message(monkeypatch, caplog):
    monkeypatch.setattr(importlib.metadata, "entry_points", _fake_entry_points(
        {"abebot.workloads": [("no_colon", "somepkg.module"), ("missing", "no_such_pkg.mod:Thing")],
         "abebot.backends": [("gone", "no_such_pkg.backend:Backend")]}))
    wl = dict(workloads.WORKLOADS)
    monkeypatch.setattr(workloads, "WORKLOADS", wl)
    with caplog.at_level(logging.WARNING):
        workloads.load_entry_points(wl, workloads.ENTRY_POINT_GROUP)
    assert "no_colon" not in wl and "broken abebot.workloads entry point 'no_colon'" in caplog.text
    with pytest.raises(ValueError, match=r"workload 'missing' \(no_such_pkg.mod:Thing\) cannot be loaded"):
        workloads.get_workload("missing")
    assert type(workloads.get_workload("gemm")).__name__ == "GemmWorkload"  # the rest still works

    be = dict(backends.BACKENDS)
    monkeypatch.setattr(backends, "BACKENDS", be)
    backends.load_entry_points(be, backends.ENTRY_POINT_GROUP)
    assert backends.availability("gone").startswith("cannot import: backend 'gone'")
    assert backends.availability("c") is None or "gone" not in backends.availability("c")


def test_entry_points_that_cannot_be_read_do_not_crash(monkeypatch, caplog):
    def boom(**kw):
        raise RuntimeError("bad metadata")
    monkeypatch.setattr(importlib.metadata, "entry_points", boom)
    registry = {"x": "a:b"}
    with caplog.at_level(logging.WARNING):
        assert workloads.load_entry_points(registry, "abebot.workloads") == {"x": "a:b"}
    assert "bad metadata" in caplog.text
