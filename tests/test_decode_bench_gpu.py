"""``decode-bench`` on the GPU (skipped without CUDA and the cuda backend; the lead runs it on the H200):
one Llama-3.1-8B-shaped layer, context 256, (a) torch's int4 kernel under torch.compile and (b) a CUDA C
library built from the templates' seed genomes, both replayed as CUDA graphs, logits checked, the op
replay's sum near the step; and two contexts from one model, each over its own KV cache."""
from __future__ import annotations

import pytest
import torch

from core.backends import availability
from core.cli_parser import build_parser
from core.library import ops
from core.tools.decode_bench import run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or availability("cuda") is not None,
                                reason="needs a CUDA GPU and the cuda backend (the lead runs it on the H200)")


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


def test_one_8b_layer_replays_as_graphs_on_library_kernels_and_its_logits_agree(tmp_path):
    args = build_parser().parse_args(["decode-bench", "--model", "llama-3.1-8b", "--layers", "1", "--context", "256",
                                      "--steps", "8", "--rounds", "2", "--iters", "5", "--seed-library",
                                      "--library-out", str(tmp_path / "lib"), "--verify", "4", "--tolerance", "0.2"])
    r = run(args)
    assert not r["refused"], r["refused"]
    assert r["copies"] > 1  # one 8B layer is ~110 MB of int4: the rotation keeps it off the L2
    assert "torch._weight_int4pack_mm" in r["a"]["label"] and "torch.compile per layer" in r["a"]["label"]
    assert {how for op in ("rmsnorm", "rope", "silu_mul") for how in r["dispatch_by_op"][op]} <= {"exact", "nearest",
                                                                                                 "native"}
    assert "exact" in r["dispatch_by_op"]["w4a16"]
    for w in ("a", "b"):
        lg = r[w]["logits"]
        assert lg["max_error_over_std"] < 0.1, (w, lg)
        assert lg["argmax_agree"] == lg["argmax_counted"], (w, lg)
        assert r[w]["tokens_per_s"] > 0 and r[w]["breakdown"]["top"], (w, r[w]["breakdown"])
    assert r["verify"][0]["M"] == 5
    for w in ("a", "b"):  # the op replay: every op timed alone, their sum near the whole step (launch gaps aside)
        ops_ = r[w]["ops"]
        assert {row["op"] for row in ops_["rows"]} >= {"self_attn.qkv_proj", "self_attn.cache_attn", "lm_head"}
        assert 0.5 < ops_["sum_over_step"] < 3.0, (w, ops_["sum_ms"], ops_["step_ms"])


def test_two_contexts_from_one_8b_layer_each_attend_over_their_own_cache(tmp_path):
    from core.tools.decode_bench import run_all

    args = build_parser().parse_args(["decode-bench", "--model", "llama-3.1-8b", "--layers", "1", "--context",
                                      "512,8192", "--steps", "4", "--rounds", "2", "--iters", "5", "--no-compile",
                                      "--tolerance", "0.2"])
    short, long = run_all(args)
    assert (short["kv_capacity"], long["kv_capacity"]) == (576, 8256)
    for r in (short, long):
        assert r["peak_memory_bytes"] < r["memory_estimate_bytes"]
        for w in ("a", "b"):
            assert r[w]["logits"]["argmax_agree"] == r[w]["logits"]["argmax_counted"], (r["context"], w)


def test_one_8b_layer_with_rmsnorm_fused_into_qkv_runs_the_fused_cuda_kernel_and_its_logits_agree(tmp_path):
    args = build_parser().parse_args(["decode-bench", "--model", "llama-3.1-8b", "--layers", "1", "--context", "256",
                                      "--steps", "8", "--rounds", "2", "--iters", "5", "--seed-library", "--no-compile",
                                      "--library-out", str(tmp_path / "lib"), "--fuse", "norm-qkv", "--tolerance", "0.2"])
    r = run(args)
    assert not r["refused"], r["refused"]
    assert r["fused"] == {"norm-qkv": 1} and "exact" in r["dispatch_by_op"]["rmsnorm_w4a16"]
    lg = r["b"]["logits"]
    assert lg["max_error_over_std"] < 0.1 and lg["argmax_agree"] == lg["argmax_counted"], lg
