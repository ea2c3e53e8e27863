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
from core.library.quant_linear import GROUP, LibraryQuantLinear, QuantLinear, pack, unpack
from core.library.verify import VerifiedCache
from tests.test_library_dispatch_support import c_library

HIDDEN, INTER, HEADS, KV_HEADS, HEAD, VOCAB, LAYERS, TOKENS, EPS = 256, 512, 4, 2, 64, 512, 2, 4, 1e-6


class RMSNorm(nn.Module):
    """vLLM's convention: ``forward(x, residual=None)``; with a residual, adds it first."""

    def __init__(self, hidden: int, eps: float = EPS):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.variance_epsilon = eps

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight
        return out if residual is None else (out, residual)


class RotaryEmbedding(nn.Module):
    """NeoX rotary embedding, vLLM's ``forward(positions, query, key)``."""

    def __init__(self, head: int, max_position_embeddings: int = 128, base: float = 10000.0):
        super().__init__()
        self.head, self.max_position_embeddings = head, max_position_embeddings
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, head, 2).float() / head), persistent=False)

    def forward(self, positions, query, key):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]

        def rotate(x):
            x = x.view(x.shape[0], -1, self.head)
            x1, x2 = x[..., : self.head // 2], x[..., self.head // 2:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(1)

        return rotate(query), rotate(key)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_proj = QuantLinear.from_linear(nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD, bias=False))
        self.o_proj = QuantLinear.from_linear(nn.Linear(HEADS * HEAD, HIDDEN, bias=False))
        self.rotary_emb = RotaryEmbedding(HEAD)

    def forward(self, positions, x):
        q, k, v = self.qkv_proj(x).split([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        q, k, v = (t.reshape(t.shape[0], -1, HEAD).transpose(0, 1) for t in (q, k, v))
        k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=0) for t in (k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(0, 1).reshape(x.shape[0], -1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = QuantLinear.from_linear(nn.Linear(HIDDEN, INTER, bias=False))
        self.up_proj = QuantLinear.from_linear(nn.Linear(HIDDEN, INTER, bias=False))
        self.down_proj = QuantLinear.from_linear(nn.Linear(INTER, HIDDEN, bias=False))
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        self.self_attn, self.mlp = Attention(), MLP()

    def forward(self, positions, hidden, residual):
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class TinyLlama(nn.Module):
    """Llama's decoder, vLLM-style (tokens flattened, fused residual norms), 4-bit projections."""

    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids, positions):
        hidden, residual = self.embed_tokens(ids), None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual)
        hidden, _ = self.norm(hidden, residual)
        return self.lm_head(hidden)


def library_specs() -> list[tuple[str, dict]]:
    """Every op and shape of TinyLlama at M = TOKENS (fp32: the C backend's dtype)."""
    shapes = {((HEADS + 2 * KV_HEADS) * HEAD, HIDDEN), (HIDDEN, HEADS * HEAD), (INTER, HIDDEN), (HIDDEN, INTER)}
    w4 = [("w4a16", {"m": TOKENS, "n": n, "k_groups": k // GROUP, "zero_points": False}) for n, k in sorted(shapes)]
    return w4 + [("rmsnorm", {"rows": TOKENS, "cols": HIDDEN, "residual": r, "eps": EPS}) for r in (False, True)] + [
        ("rope", {"tokens": TOKENS, "q_heads": HEADS, "kv_heads": KV_HEADS, "half_dim": HEAD // 2, "max_positions": 128}),
        ("silu_mul", {"tokens": TOKENS, "hidden": INTER})]


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
                                                              "silu_mul": LAYERS, "w4a16": 5 * LAYERS}
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
