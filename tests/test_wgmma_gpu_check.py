"""benchmarks/tools/wgmma_gpu_check.py without a GPU: its configurations, its verdicts, its arguments."""
from __future__ import annotations

import torch

from benchmarks.tools import wgmma_gpu_check as check
from core.genome import Genome
from core.workloads.gemm.wgmma_source import violation


def test_every_configuration_is_a_valid_genome_and_the_simplest_comes_first():
    for name, genes in check.CONFIGS.items():
        assert violation(Genome(genes), "bfloat16") is None, name
    assert next(iter(check.CONFIGS)) == "simple_128x128x64"
    assert len({Genome(g) for g in check.CONFIGS.values()}) == len(check.CONFIGS)


def test_the_shapes_are_the_ones_the_issue_names():
    shapes = set(check.SHAPES)
    assert {(4096, 4096, 4096), (4095, 4097, 1023)} <= shapes
    assert {(m, n, k) for m in (64, 128, 256) for n, k in check.LLAMA_NK} <= shapes


def _case(m: int, n: int):
    buf = torch.full((m * n + 2 * check.GUARD,), float("nan"), dtype=torch.bfloat16)
    return buf, buf[check.GUARD:check.GUARD + m * n].view(m, n)


def test_a_right_output_passes_and_a_wrong_one_names_its_first_wrong_element():
    ref = torch.randn(8, 16)
    buf, c = _case(8, 16)
    c.copy_(ref.to(torch.bfloat16))
    assert check.check_output(c, ref, (1e-3, 1.6e-2), buf, 8, 16)["ok"]
    c[3, 5] = 100.0
    out = check.check_output(c, ref, (1e-3, 1.6e-2), buf, 8, 16)
    assert not out["ok"] and out["wrong"] == 1
    assert out["first_mismatch"]["row"] == 3 and out["first_mismatch"]["col"] == 5
    assert out["wrong_rows"] == [3, 3, 1] and out["wrong_cols"] == [5, 5, 1]
    assert out["map_16x16"] == ["+"]


def test_the_error_map_shows_which_blocks_are_wrong():
    bad = torch.zeros(40, 40, dtype=torch.bool)
    bad[16:32, :] = True
    bad[0, 33] = True
    assert check.error_map(bad) == ["..+", "###", "..."]


def test_an_unwritten_output_and_a_write_past_c_are_told_apart():
    ref = torch.randn(4, 8)
    buf, c = _case(4, 8)
    out = check.check_output(c, ref, (1e-3, 1.6e-2), buf, 4, 8)
    assert out["unwritten"] == 32 and "wrote nothing" in out["hint"]
    c.copy_(ref.to(torch.bfloat16))
    buf[check.GUARD + 32] = 0.0
    out = check.check_output(c, ref, (1e-3, 1.6e-2), buf, 4, 8)
    assert not out["ok"] and not out["guards_ok"] and "outside C" in out["hint"]


def test_stats_give_the_median_and_the_relative_spread():
    s = check.stats([10.0, 11.0, 12.0, 13.0, 100.0])
    assert s["median_us"] == 12.0 and s["min_us"] == 10.0 and s["max_us"] == 100.0
    assert abs(s["iqr_over_median"] - (13.0 - 11.0) / 12.0) < 1e-12


def test_an_unknown_configuration_is_refused_with_exit_status_2(capsys, tmp_path):
    assert check.main(["--out", str(tmp_path), "--only", "nope"]) == 2
    assert "unknown configuration(s) nope" in capsys.readouterr().err


class _Matmul:
    """A stand-in template whose kernel is torch.matmul (right), that writes one row too few, that
    writes nothing on its second launch (split-K counters not reset) or that rounds differently on it."""

    def __init__(self, short: bool = False, once: bool = False, wobble: bool = False):
        self.short, self.once, self.wobble = short, once, wobble

    def bind(self, kernel, t, shape):
        calls = []

        def launch():
            calls.append(1)
            if self.once and len(calls) > 1:
                return
            out = t["a"].float() @ t["b"].float()
            if self.wobble and len(calls) > 1:
                out[0, 0] += 0.02 * out[0, 0].abs() + 0.01  # other bits
            rows = shape["m"] - 1 if self.short else shape["m"]
            t["c"][:rows].copy_(out[:rows].to(torch.bfloat16))
        return launch


def test_a_small_shape_is_checked_and_not_timed(monkeypatch):
    monkeypatch.setattr(check, "DEVICE", "cpu")
    lines = []
    res = check.run_shape(lines.append, _Matmul(), None, (40, 24, 72), 60 << 20)
    assert res["ok"] and "kernel" not in res and "40x24x72: ok" in lines[0]
    res = check.run_shape(lines.append, _Matmul(short=True), None, (40, 24, 72), 60 << 20)
    assert not res["ok"] and res["unwritten"] == 24 and res["first_mismatch"]["row"] == 39
    assert "WRONG" in lines[1] and '"first_mismatch"' in lines[2]


def test_the_tma_probe_expects_a_swizzled_permutation_and_zeros_past_the_matrix():
    from benchmarks.tools import wgmma_tma_probe as probe

    a = [[r * probe.COLS + c for c in range(probe.COLS)] for r in range(probe.ROWS)]
    for s in (128, 64, 32):
        inside = probe.expected(a, s, 0, 0)
        plain = probe.expected(a, s, 0, 0, swizzled=False)
        assert sorted(inside) == sorted(plain) and inside != plain  # the same elements, moved
        corner = probe.expected(a, s, probe.COLS - 8, probe.ROWS - 40)
        assert corner.count(0) == probe.BOX_ROWS * s // 2 - 40 * 8  # 40 rows x 8 columns lie inside


def test_the_tma_probe_kernel_compiles_for_sm_90a(tmp_path):
    import shutil
    import subprocess

    import pytest

    from benchmarks.tools import wgmma_tma_probe as probe

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    src = tmp_path / "probe.cu"
    src.write_text(probe.SOURCE)
    res = subprocess.run(["nvcc", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-o",
                          str(tmp_path / "probe.cubin"), str(src)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_a_second_launch_must_write_the_same_bits_again(monkeypatch):
    monkeypatch.setattr(check, "DEVICE", "cpu")
    lines = []
    assert check.run_shape(lines.append, _Matmul(), None, (40, 24, 72), 60 << 20)["repeat_identical"]
    res = check.run_shape(lines.append, _Matmul(once=True), None, (40, 24, 72), 60 << 20)
    assert not res["ok"] and res["unwritten_on_repeat"] == 40 * 24 and "counters" in res["hint"]
    res = check.run_shape(lines.append, _Matmul(wobble=True), None, (40, 24, 72), 60 << 20)
    assert not res["ok"] and res["repeat_differs"] >= 1 and res["unwritten_on_repeat"] == 0


def test_split_k_configurations_are_checked_on_the_small_shapes_whose_slices_can_be_empty():
    split = {name: Genome(g)["parallel_config"]["split_k"] for name, g in check.CONFIGS.items()}
    assert sorted(v for v in split.values() if v > 1) == [2, 2, 4, 8, 8]
    assert (128, 256, 64) in check.SHAPES  # one k-tile of 64: 7 of 8 slices add zeros


def test_the_goal_summary_takes_each_configurations_geomean_and_the_best_per_shape():
    goal = [(m, n, k) for m in (64, 128, 256) for n, k in check.LLAMA_NK]
    fast = {"config": "fast", "shapes": [{"m": m, "n": n, "k": k, "ok": True, "speedup_vs_cublas": 2.0} for m, n, k in goal[:6]]
            + [{"m": 4096, "n": 4096, "k": 4096, "ok": True, "speedup_vs_cublas": 9.0}]}  # not one of the goal's shapes
    even = {"config": "even", "shapes": [{"m": m, "n": n, "k": k, "ok": True, "speedup_vs_cublas": 1.0} for m, n, k in goal]}
    wrong = {"config": "wrong", "shapes": [{"m": 64, "n": 8192, "k": 8192, "ok": False}]}
    out = check.goal_summary([fast, even, wrong])
    assert out["per_config"]["fast"] == {"geomean": 2.0, "min": 2.0, "shapes": 6}
    assert out["per_config"]["even"]["geomean"] == 1.0 and "wrong" not in out["per_config"]
    assert len(out["best"]) == 12 and out["best"]["64x10240x8192"] == {"config": "fast", "speedup": 2.0}
    assert out["best"]["256x8192x28672"]["config"] == "even"
    assert any("geomean 1.414x, min 1.000x over 12 of 12 shapes" in line for line in out["lines"])
    assert any("fast: geomean 2.000x, min 2.000x (6 shapes not timed)" in line for line in out["lines"])
