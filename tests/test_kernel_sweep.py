"""benchmarks/tools/gpu_kernel_sweep.py --rounds: a genome's variants through the GA's own protocol, run
here on the C backend (the same code path drives the GPU backends on the device)."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.backends import availability

ROOT = Path(__file__).resolve().parents[1]
SEED = {"instruction_sequence": {"stages": ["LOAD", "SQUARE_ACC", "REDUCE", "SCALE", "WEIGHT", "STORE"]},
        "memory_pattern": {"pointer_hints": "none", "row_reuse": "reload", "store": "normal", "vector_width": 1,
                           "vectorize": "vector_ext"},
        "parallel_config": {"rows_per_chunk": 1, "schedule": "static", "threads": 1},
        "register_allocation": {"register_map": {"acc_type": "float", "accumulators": 1, "scale": "divide", "unroll": 1}}}


def test_variants_and_baselines_are_timed_in_interleaved_rounds_by_the_protocol(tmp_path):
    if availability("c"):
        pytest.skip(f"c backend unavailable: {availability('c')}")
    out = subprocess.run([sys.executable, "-m", "benchmarks.tools.gpu_kernel_sweep", "rmsnorm", '{"rows": 64, "cols": 256}',
                          json.dumps(SEED), "--backend", "c", "--vary", "memory_pattern.vector_width=1,8",
                          "--vary", "register_allocation.register_map.accumulators=4", "--rounds", "2",
                          "--runs-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "skip vector_width=1: the same kernel as an earlier variant" in text  # the base itself, not timed twice
    assert len(re.findall(r"^round \d/2: base [\d.]+ us, vector_width=8 [\d.]+ us, accumulators=4 [\d.]+ us$", text, re.M)) == 2
    rows = {m[0]: (float(m[1]), float(m[2])) for m in re.findall(r"^(\S+)\s+([\d.]+)\s+[\d.]+\s+([\d.]+)x", text, re.M)}
    assert {"base", "vector_width=8", "accumulators=4", "numpy"} <= set(rows), text
    fastest = min(t for name, (t, _) in rows.items() if name in ("numpy", "torch_rms_norm"))
    for name, (t, ratio) in rows.items():
        assert ratio == pytest.approx(fastest / t, rel=0.01), (name, text)
    best = json.loads(text.split("best genome:", 1)[1])
    genes = {"base": (1, 1), "vector_width=8": (8, 1), "accumulators=4": (1, 4)}
    fastest_variant = min(genes, key=lambda name: rows[name][0])
    assert (best["memory_pattern"]["vector_width"], best["register_allocation"]["register_map"]["accumulators"]) \
        == genes[fastest_variant]
    assert (tmp_path / ".locks").is_dir()  # it held the runs folder's device lock, as core check does


def test_vary_values_may_be_json_lists_or_bare_strings():
    spec = importlib.util.spec_from_file_location("gpu_kernel_sweep", ROOT / "benchmarks" / "tools" / "gpu_kernel_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    base = {"instruction_sequence": {"body": ["A", "B"]}, "memory_pattern": {"load": ""}}
    out = sweep.variants(base, ['instruction_sequence.body=["B","A"],["A","B"]', "memory_pattern.load=,.nc,.cs"], False)
    assert [d["instruction_sequence"]["body"] for _, d in out[1:3]] == [["B", "A"], ["A", "B"]]
    assert [d["memory_pattern"]["load"] for _, d in out[3:]] == ["", ".nc", ".cs"]
