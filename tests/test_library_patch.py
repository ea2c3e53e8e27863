"""``patch(model, library)`` on a tiny random Llama written here in plain PyTorch (2 layers, no
download): the patched model's logits match the unpatched model's, and the dispatch counts show
that every patched layer ran a C kernel from a library built in the test from seed genomes."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from core.backends import availability
from core.library import ops
from core.library.patch import LibraryMLP, LibraryRMSNorm, LibraryRotary, patch
from core.library.quant_linear import LibraryQuantLinear, QuantLinear, pack, unpack
from core.library.verify import VerifiedCache
from tests.test_library_dispatch_support import c_library
from tests.test_library_patch_model import TINY, TinyLlama
from tests.test_library_patch_model import library_specs as model_specs

HIDDEN, INTER, HEADS, KV_HEADS, HEAD = TINY.hidden, TINY.inter, TINY.heads, TINY.kv_heads, TINY.head
VOCAB, LAYERS, TOKENS = TINY.vocab, TINY.layers, 4


def library_specs() -> list[tuple[str, dict]]:
    """Every op and shape of the tiny model at M = TOKENS (fp32: the C backend's dtype)."""
    return model_specs(TINY, TOKENS)


needs_c = pytest.mark.skipif(availability("c") is not None, reason="no C compiler with OpenMP")


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


def test_quantlinear_packs_gptq_words_in_the_w4a16_workloads_layout():
    linear = nn.Linear(256, 24)
    q = QuantLinear.from_linear(linear)
    assert q.qweight.shape == (256 // 8, 24) and q.qweight.dtype == torch.int32
    values = torch.randint(0, 16, (256, 24))
    assert torch.equal(unpack(pack(values)), values)
    from core.workloads.w4a16 import dequantize  # the workload reads the same bytes as (groups, 16, N)

    ref = dequantize(torch, q.qweight.view(2, 16, 24), q.scales, None)
    torch.testing.assert_close(q.dequantize(), ref)
    assert (q.dequantize() - linear.weight.t()).abs().max() <= q.scales.max() / 2 + 1e-6


def test_quantlinear_with_zero_points_rounds_within_half_a_step():
    linear = nn.Linear(128, 8, bias=True)
    q = QuantLinear.from_linear(linear, zero_points=True)
    assert q.zeros.dtype == torch.uint8
    assert (q.dequantize() - linear.weight.t()).abs().max() <= q.scales.max() / 2 + 1e-6
    x = torch.randn(3, 128)
    torch.testing.assert_close(q(x), x @ q.dequantize() + linear.bias, atol=1e-5, rtol=1e-5)


def test_quantlinear_refuses_inputs_not_a_multiple_of_the_group():
    with pytest.raises(ValueError, match="multiple of 128"):
        QuantLinear(100, 8)


@needs_c
def test_patch_swaps_every_layer_and_the_logits_match_with_every_layer_on_library_kernels(tmp_path, compile_cache):
    torch.manual_seed(0)
    model = TinyLlama().eval()
    ids, positions = torch.randint(0, VOCAB, (TOKENS,)), torch.arange(TOKENS) + 3
    with torch.no_grad():
        want = model(ids, positions)
    lib = c_library(tmp_path / "lib", library_specs(), compile_cache, seed=1)
    report = patch(model, lib, verified=VerifiedCache(tmp_path / "verified.json"), build_dir=tmp_path / "builds")
    assert {k: len(v) for k, v in report.swapped.items()} == {"rmsnorm": 2 * LAYERS + 1, "rope": LAYERS,
                                                              "silu_mul": LAYERS, "w4a16": 5 * LAYERS, "attention": 0}
    assert isinstance(model.layers[0].mlp, LibraryMLP) and isinstance(model.layers[0].mlp.down_proj, LibraryQuantLinear)
    assert isinstance(model.norm, LibraryRMSNorm) and isinstance(model.layers[1].self_attn.rotary_emb, LibraryRotary)
    with torch.no_grad():
        got = model(ids, positions)
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)
    d = report.dispatcher
    assert not d.refused, d.refused
    for op in ("rmsnorm", "rope", "silu_mul", "w4a16"):
        assert set(d.calls_by(op)) == {"exact"}, (op, d.counts())
    assert d.calls_by("w4a16")["exact"] == 5 * LAYERS and d.calls_by("rmsnorm")["exact"] == 2 * LAYERS + 1
    assert d.calls_by("rope")["exact"] == LAYERS and d.calls_by("silu_mul")["exact"] == LAYERS


@needs_c
def test_a_patched_model_without_entries_for_its_shapes_runs_natively_and_logs_its_misses(tmp_path):
    torch.manual_seed(1)
    model = TinyLlama().eval()
    ids, positions = torch.randint(0, VOCAB, (TOKENS,)), torch.arange(TOKENS)
    with torch.no_grad():
        want = model(ids, positions)
    from core.library.manifest import Library

    empty = Library(root=tmp_path)
    report = patch(model, empty, verified=VerifiedCache(None), build_dir=tmp_path / "b")
    with torch.no_grad():
        torch.testing.assert_close(model(ids, positions), want, atol=1e-5, rtol=1e-5)
    assert set(report.dispatcher.calls_by()) == {"native"}
    misses = (tmp_path / "misses.jsonl").read_text().splitlines()
    assert len(misses) == len(library_specs())  # one line per distinct key, none twice


def test_patch_reports_a_hugging_face_style_rotary_as_skipped():
    class LlamaRotaryEmbedding(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", torch.ones(4))

        def forward(self, x, position_ids):
            return x, x

    model = nn.Sequential(LlamaRotaryEmbedding())
    from core.library.manifest import Library

    report = patch(model, Library())
    assert report.skipped and "cos and sin" in report.skipped[0][1]
    assert not any(report.swapped.values())


@needs_c
def test_a_patched_model_under_torch_compile_still_runs_the_library_kernels(tmp_path, compile_cache):
    torch.manual_seed(2)
    model = TinyLlama().eval()
    ids, positions = torch.randint(0, VOCAB, (TOKENS,)), torch.arange(TOKENS)
    with torch.no_grad():
        want = model(ids, positions)
    lib = c_library(tmp_path / "lib", library_specs(), compile_cache, seed=1)
    report = patch(model, lib, verified=VerifiedCache(tmp_path / "verified.json"), build_dir=tmp_path / "builds")
    compiled = torch.compile(model, backend="eager")
    try:
        with torch.no_grad():
            got = compiled(ids, positions)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)
    assert set(report.dispatcher.calls_by()) == {"exact"}
    assert report.dispatcher.calls_by()["exact"] == 5 * LAYERS + 2 * LAYERS + 1 + 2 * LAYERS
