"""(b)'s fusion of RMSNorm into the QKV GEMV (``decode-bench --fuse norm-qkv``, the rmsnorm_w4a16 workload
wired in as ``abebot::rmsnorm_w4a16``) on the CPU: the same logits as the float32 reference, on C library
kernels and on the native path; bad input is one line."""
from __future__ import annotations

import pytest
import torch

from core.backends import availability
from core.cli import main
from core.cli_parser import build_parser
from core.library import ops
from core.library.decode_model import DecodeLlama, KVCache, reference_step
from core.library.manifest import Library
from core.library.models import load_model
from core.library.patch import patch
from core.tools.decode_bench import TINY, run
from core.tools.decode_fuse import NormQuantLinear, ResidualOnly, fuse_norm_qkv
from core.tools.decode_library import decode_specs

needs_c = pytest.mark.skipif(availability("c") is not None, reason="no C compiler with OpenMP")


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


@torch.no_grad()
def test_the_fused_model_on_the_native_path_gives_the_references_logits_over_several_steps():
    model = DecodeLlama(TINY, 2, capacity=64, dtype=torch.float32).eval()
    patch(model, Library(), log_misses=False)
    assert len(fuse_norm_qkv(model)) == 2
    assert isinstance(model.layers[1].input_layernorm, ResidualOnly)
    assert isinstance(model.layers[1].self_attn.qkv_proj, NormQuantLinear)
    cache, cache32 = KVCache(TINY, 2, 64, 20, torch.float32, "cpu"), KVCache(TINY, 2, 64, 20, torch.float32, "cpu")
    for i, token in enumerate((3, 9, 27)):
        ids, pos = torch.tensor([token]), torch.tensor([20 + i])
        torch.testing.assert_close(model(ids, pos, cache), reference_step(model, ids, pos, cache32),
                                   atol=1e-4, rtol=1e-4)


def test_fusing_twice_changes_nothing_more():
    model = DecodeLlama(TINY, 2, capacity=64, dtype=torch.float32).eval()
    patch(model, Library(), log_misses=False)
    fuse_norm_qkv(model)
    assert fuse_norm_qkv(model) == []


@needs_c
def test_the_fused_tiny_step_runs_the_rmsnorm_w4a16_c_kernel_and_matches_the_reference(tmp_path):
    args = build_parser().parse_args(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", "40",
                                      "--steps", "3", "--rounds", "1", "--iters", "1", "--seed-library",
                                      "--library-out", str(tmp_path / "lib"), "--fuse", "norm-qkv"])
    record = run(args)
    assert record["fused"] == {"norm-qkv": 2} and "fused: RMSNorm into the QKV GEMV" in record["b"]["label"]
    assert set(record["dispatch_by_op"]["rmsnorm_w4a16"]) == {"exact"}
    assert {e["part"] for e in record["library_entries"]} >= {"fused_qkv_m1"}
    lg = record["b"]["logits"]
    assert lg["max_abs_error"] < 1e-3 and lg["argmax_agree"] + lg["close_steps_agree"] == 3
    kinds = {row["op"]: row["kind"] for row in record["b"]["ops"]["rows"]}
    assert kinds["self_attn.qkv_proj"] == "rmsnorm + w4a16 GEMV (fused)"


def test_the_fused_library_has_one_rmsnorm_w4a16_entry_in_place_of_the_qkv_gemv_and_the_plain_norm():
    parts = {part: op for op, _, part in decode_specs(load_model("llama-3.1-70b"), 1, "bfloat16", 1e-5, 1088,
                                                       ("norm-qkv",))}
    assert parts["fused_qkv_m1"] == "rmsnorm_w4a16" and "qkv_m1" not in parts and "rmsnorm_1" not in parts
    assert "rmsnorm_res_1" in parts


def test_an_unknown_fusion_is_one_line_and_exit_status_2(capsys):
    assert main(["decode-bench", "--model", "tiny", "--device", "cpu", "--fuse", "silu-down"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown fusion 'silu-down'" in err and len(err.splitlines()) == 1
