"""The decode step's per-op breakdown (core/tools/decode_ops.py) on the CPU: every op of the step is
recorded with the step's own inputs, replays alone to the step's own outputs, and the hooks go away."""
from __future__ import annotations

import pytest
import torch

from core.library import decode_model, ops
from core.library.decode_model import DecodeLlama, KVCache
from core.tools.decode_bench import TINY
from core.tools.decode_ops import UNITS, op_breakdown, record_ops


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


def model_and_cache(copies: int = 1, patched: bool = False):
    model = DecodeLlama(TINY, 2, capacity=64, copies=copies, dtype=torch.float32).eval()
    if patched:
        from core.library.manifest import Library
        from core.library.patch import patch

        patch(model, Library(), log_misses=False)
    return model, KVCache(TINY, 2, 64, 20, torch.float32, "cpu")


@pytest.mark.parametrize("patched", [False, True])
def test_every_op_of_the_step_is_recorded_once_per_layer_and_copy(patched):
    model, cache = model_and_cache(copies=2, patched=patched)
    by_copy = record_ops(model, cache, [20])
    assert len(by_copy) == 2
    for copy in by_copy:
        assert set(copy) == set(UNITS)
        assert {u: len(c) for u, c in copy.items()} == {u: 1 if u in ("embed_tokens", "step_meta", "norm", "lm_head")
                                                       else 2 for u in UNITS}
    first, second = (c["mlp.down_proj"][0][0] for c in by_copy)
    assert first is not second  # the second copy's own weights, as the step rotates them


@torch.no_grad()
def test_a_recorded_op_replayed_alone_gives_the_steps_own_output():
    model, cache = model_and_cache()
    ids, pos = torch.zeros(1, dtype=torch.long), torch.tensor([20])
    want = model(ids, pos, KVCache(TINY, 2, 64, 20, torch.float32, "cpu"))
    (calls,) = record_ops(model, cache, [20])
    fn, args, kwargs = calls["lm_head"][0]
    torch.testing.assert_close(fn(*args, **kwargs), want)


def test_recording_leaves_no_hook_and_no_wrapped_function_behind():
    model, cache = model_and_cache(patched=True)
    before = (decode_model.gated, decode_model.step_meta, ops.silu_mul)
    record_ops(model, cache, [20])
    assert (decode_model.gated, decode_model.step_meta, ops.silu_mul) == before
    assert not any(m._forward_pre_hooks for m in model.modules())


def test_the_breakdown_names_its_method_and_compares_its_sum_with_the_step():
    model, cache = model_and_cache()
    r = op_breakdown(model, cache, [20], step_ms=2.0, device=torch.device("cpu"), rounds=1, iters=2)
    assert "op replay" in r["method"] and r["step_ms"] == 2.0
    assert [row["op"] for row in r["rows"]] == list(UNITS)
    assert abs(sum(row["ms"] for row in r["rows"]) - r["sum_ms"]) < 1e-3
    assert abs(r["sum_over_step"] - r["sum_ms"] / 2.0) < 1e-3
    assert r["by_kind"]["w4a16 GEMV"]["ms"] > 0 and "attention (KV write + SDPA)" in r["by_kind"]


def test_each_op_says_how_many_weight_bytes_it_reads_per_step():
    model, cache = model_and_cache()
    r = op_breakdown(model, cache, [20], step_ms=1.0, device=torch.device("cpu"), rounds=1, iters=1)
    rows = {row["op"]: row for row in r["rows"]}
    words, scales = (256 // 8) * 512 * 4, (256 // 128) * 512 * 4  # qkv: K 256 -> N 512, float32 scales
    assert rows["self_attn.qkv_proj"]["weight_bytes"] == 2 * (words + scales)  # two layers
    assert rows["lm_head"]["weight_bytes"] == 512 * 256 * 4
    assert rows["step_meta"]["weight_bytes"] == 0
    assert {row["weights_from_memory"] for row in r["rows"]} == {None}  # no L2 to speak of on a CPU


def test_a_failed_op_replay_costs_the_breakdown_not_the_steps_figures(monkeypatch):
    from core.cli_parser import build_parser
    from core.tools import decode_ops
    from core.tools.decode_bench import run

    def fails(*args, **kwargs):
        raise RuntimeError("capture refused")

    monkeypatch.setattr(decode_ops, "op_breakdown", fails)
    r = run(build_parser().parse_args(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", "30",
                                       "--steps", "1", "--rounds", "1", "--iters", "1"]))
    assert r["b"]["ops"] == {"error": "RuntimeError: capture refused"} and r["b"]["tokens_per_s"] > 0
    assert r["b"]["logits"]["steps"] == 1
