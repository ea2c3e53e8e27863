"""``python -m core decode-bench`` on the CPU: the tiny model (2 layers, hidden 256) on C kernels from
a library built in the test from the templates' seed genomes, its logits checked against the float32
reference; the model's multi-token step is causal; bad input is one line and exit status 2."""
from __future__ import annotations

import pytest
import torch

from core.backends import availability
from core.cli import main
from core.cli_parser import build_parser
from core.library import ops
from core.library.decode_model import DecodeLlama, KVCache, int4_baseline, reference_step
from core.tools.decode_bench import TINY, run

needs_c = pytest.mark.skipif(availability("c") is not None, reason="no C compiler with OpenMP")


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


def _args(*extra: str):
    return build_parser().parse_args(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", "40",
                                      "--steps", "3", "--rounds", "1", "--iters", "1", *extra])


@needs_c
def test_the_tiny_step_runs_every_op_on_c_library_kernels_and_its_logits_match_the_fp32_reference(tmp_path):
    record = run(_args("--seed-library", "--library-out", str(tmp_path / "lib")))
    assert not record["refused"], record["refused"]
    # every layer's attention takes the library's op; a C library holds no attention entry (its
    # kernels cannot read the step's length on the device), so those calls run the native path
    assert record["patched"] == {"rmsnorm": 2 * 2 + 1, "rope": 2, "silu_mul": 2, "w4a16": 5 * 2, "attention": 2}
    assert set(record["dispatch_by_op"].pop("attention_decode")) == {"native"}
    for op, calls in record["dispatch_by_op"].items():
        assert set(calls) == {"exact"}, (op, record["dispatch"])
    logits = record["b"]["logits"]
    assert logits["steps"] == 3 and logits["max_abs_error"] < 1e-3
    assert logits["argmax_agree"] + logits["close_steps_agree"] == 3
    assert "seed genomes" in record["b"]["label"] and record["b"]["tokens_per_s"] > 0
    assert {e["genome"] for e in record["library_entries"]} == {"seed"}


def test_without_a_library_b_is_labelled_native_and_every_call_misses(tmp_path):
    record = run(_args("--verify", "2"))
    assert record["b"]["label"].startswith("native ops (no library)")
    assert {h for calls in record["dispatch_by_op"].values() for h in calls} == {"native"}
    assert record["verify"][0]["M"] == 3 and record["verify"][0]["b"]["ms"] > 0
    rows = record["verify_projection"]["rows"]
    assert [(p["K"], p["acceptance_length"]) for p in rows] == [(2, 2), (2, 3)]  # acceptance at most K + 1
    assert rows[0]["b_tokens_per_s"] == round(2000 / record["verify"][0]["b"]["ms"], 2)
    assert "projected" in record["verify_projection"]["note"]
    assert record["a"]["logits"]["max_abs_error"] < 1e-3 and record["b"]["logits"]["max_abs_error"] < 1e-3
    assert set(record["b"]["breakdown"]) >= {"by_kind", "top", "source"}


@torch.no_grad()
def test_a_verify_step_of_three_tokens_equals_three_one_token_steps():
    model = DecodeLlama(TINY, 2, capacity=64, dtype=torch.float32).eval()
    one, many = (KVCache(TINY, 2, 64, 20, torch.float32, "cpu") for _ in range(2))
    ids = torch.tensor([3, 7, 11])
    together = model(ids, torch.tensor([20, 21, 22]), many)
    apart = torch.cat([model(ids[i:i + 1], torch.tensor([20 + i]), one) for i in range(3)])
    torch.testing.assert_close(together, apart, atol=1e-4, rtol=1e-4)
    ref = reference_step(model, ids, torch.tensor([20, 21, 22]), KVCache(TINY, 2, 64, 20, torch.float32, "cpu"))
    torch.testing.assert_close(together, ref, atol=1e-4, rtol=1e-4)


def test_the_baseline_twin_shares_the_weights_it_does_not_repack():
    model = DecodeLlama(TINY, 1, capacity=64, dtype=torch.float32)
    twin, what = int4_baseline(model)
    assert "native" in what  # torch's int4 kernel is CUDA/bf16 only
    assert twin.layers[0].mlp.down_proj.qweight.data_ptr() == model.layers[0].mlp.down_proj.qweight.data_ptr()
    assert twin.lm_head.weight.data_ptr() == model.lm_head.weight.data_ptr()


@pytest.mark.parametrize("flags, message", [
    (["--batch", "2"], "only batch 1"),
    (["--model", "no-such-model"], "unknown model"),
    (["--verify", "0"], "each K must be from 1 to 15"),
    (["--layers", "3"], "--layers must be from 1 to 2"),
    (["--seed-library", "--library", "x"], "one of --library"),
    (["--library", "/no/such/library"], "is not a folder"),
    (["--steps", "0"], "--steps must be from 1"),
])
def test_bad_decode_bench_input_is_one_line_and_exit_status_2(flags, message, capsys):
    assert main(["decode-bench", "--model", "tiny", "--device", "cpu", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@torch.no_grad()
def test_the_patched_rotary_gets_int32_positions_so_a_graph_replay_never_reads_a_stale_copy():
    from core.library.manifest import Library
    from core.library.patch import LibraryRotary, patch

    model = DecodeLlama(TINY, 2, capacity=64, dtype=torch.float32).eval()
    patch(model, Library(), log_misses=False)
    model(torch.tensor([3]), torch.tensor([20]), KVCache(TINY, 2, 64, 20, torch.float32, "cpu"))
    rotaries = [m for m in model.modules() if isinstance(m, LibraryRotary)]
    assert len(rotaries) == 2 and all(r._positions[0] is None for r in rotaries)  # no int64 -> int32 copy cached


def test_the_champion_file_names_every_part_the_decode_library_looks_up_but_silu_mul_and_attention():
    from core.tools.decode_library import decode_specs, load_champions

    champions = load_champions("benchmarks/suites/cold_recheck_genomes.json", "cuda")
    from core.library.models import load_model

    parts = {part for _, _, part in decode_specs(load_model("llama-3.1-70b"), 1, "bfloat16", 1e-5, 1088)}
    assert parts - set(champions) == {"silu_mul_1", "attention_1"}  # (built from their fast seeds)
    assert all(isinstance(g, dict) for g in champions.values())


def test_a_missing_champion_file_is_one_line_and_exit_status_2(tmp_path, capsys):
    assert main(["decode-bench", "--model", "tiny", "--device", "cpu", "--champions", str(tmp_path / "none.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_the_baseline_with_each_layer_compiled_matches_the_reference_as_the_position_moves():
    from core.tools.decode_bench import _run_layer
    from core.tools.decode_engine import Step, check_logits

    model = DecodeLlama(TINY, 2, capacity=64, dtype=torch.float32).eval()
    twin, _ = int4_baseline(model)
    cache = KVCache(TINY, 2, 64, 20, torch.float32, "cpu")
    try:
        step = Step(twin, cache, [20], graphs=False, layer_fn=torch.compile(_run_layer, backend="aot_eager"))
        r = check_logits(step, model, cache.like(torch.float32), 20, 3, 1e-3)
    finally:
        torch._dynamo.reset()
    assert r["max_abs_error"] < 1e-4 and r["argmax_agree"] + r["close_steps_agree"] == 3


def test_every_tensor_of_the_rotary_embedding_is_made_on_the_models_device():
    """The H200's first decode step failed on a CPU ``inv_freq`` beside CUDA positions (call 66)."""
    from core.library.decode_model import RotaryEmbedding

    assert RotaryEmbedding(64, 128, device="meta").inv_freq.device.type == "meta"


def test_the_decode_library_holds_one_attention_entry_per_kv_cache_capacity():
    """The attention kernels split the cache they are given: a run over contexts 1k, 8k and 32k keeps a
    cache per context, and each needs its own entry (one built for the largest would leave the others
    a single split, or a miss)."""
    from core.library.models import load_model
    from core.tools.decode_library import decode_specs

    specs = decode_specs(load_model("llama-3.1-70b"), 1, "bfloat16", 1e-5, 32832, (), (1088, 8256, 32832))
    assert [p["context"] for op, p, _ in specs if op == "attention_decode"] == [1088, 8256, 32832]
    assert [p["max_positions"] for op, p, _ in specs if op == "rope"] == [32832]
