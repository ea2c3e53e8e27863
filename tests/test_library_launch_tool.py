"""benchmarks/tools/library_overhead.py on the CPU (the C backend): every path is timed, the check
runs on the fast path, bad input exits 2. (On the H200: ``--device cuda``, run by the lead.)"""
from __future__ import annotations

import json

import pytest

from benchmarks.tools import library_overhead
from core.backends import availability


def test_bad_arguments_exit_2_with_one_line(capsys):
    assert library_overhead.main(["--ops", "gemm"]) == 2
    assert library_overhead.main(["--calls", "0"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 2


@pytest.mark.skipif(availability("c") is not None, reason="no C compiler with OpenMP")
def test_one_command_reports_every_path_and_checks_a_launched_entry(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ABEBOT_CACHE_DIR", str(tmp_path / "cache"))
    assert library_overhead.main(["--device", "cpu", "--ops", "silu_mul", "--calls", "3", "--rounds", "4"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out[out.index("{"):])
    row = report["ops"]["silu_mul"]
    assert row["fast_path"] and row["how"] == {"exact": 1}
    for path in ("op_us", "custom_op_us", "dispatcher_us", "plan_call_us", "alloc_us", "backend_us", "native_us"):
        lo, hi = row[path]["iqr"]
        assert 0 < lo <= row[path]["median"] <= hi, path
    assert report["check"] == {**report["check"], "op": "silu_mul", "library_calls": 2, "fast_path": True, "ok": True}
