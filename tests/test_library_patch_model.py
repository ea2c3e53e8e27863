"""A random Llama in plain PyTorch for the library's patch tests (no test of its own; no download).

vLLM's layout of the decoder: tokens flattened to (tokens, hidden), RMSNorm with a fused residual
(``forward(x, residual=None)``), a rotary module ``forward(positions, query, key)`` (NeoX), fused
QKV, a gated SiLU MLP, and every projection a 4-bit :class:`~core.library.quant_linear.QuantLinear`.
Sizes come from a :class:`LlamaShape`: :data:`TINY` for the CPU, :data:`LLAMA_70B` for the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from core.library.quant_linear import GROUP, QuantLinear


@dataclass(frozen=True)
class LlamaShape:
    hidden: int
    inter: int
    heads: int
    kv_heads: int
    head: int
    vocab: int
    layers: int = 2
    eps: float = 1e-6
    max_positions: int = 128


TINY = LlamaShape(hidden=256, inter=512, heads=4, kv_heads=2, head=64, vocab=512)
LLAMA_70B = LlamaShape(hidden=8192, inter=28672, heads=64, kv_heads=8, head=128, vocab=4096, eps=1e-5,
                       max_positions=4096)  # the real vocabulary is 128256; the LM head is not patched


class RMSNorm(nn.Module):
    """In float32 as Hugging Face computes it, with vLLM's optional residual (added first)."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.variance_epsilon = eps

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        h = x.float()
        out = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype) * self.weight
        return out if residual is None else (out, residual)


class RotaryEmbedding(nn.Module):
    """NeoX rotary embedding, vLLM's ``forward(positions, query, key)``; cos and sin in the query's dtype."""

    def __init__(self, head: int, max_position_embeddings: int, base: float = 10000.0):
        super().__init__()
        self.head, self.max_position_embeddings = head, max_position_embeddings
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, head, 2).float() / head), persistent=False)

    def forward(self, positions, query, key):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        cos, sin = (f.to(query.dtype)[:, None, :] for f in (freqs.cos(), freqs.sin()))

        def rotate(x):
            x = x.reshape(x.shape[0], -1, self.head)
            x1, x2 = x[..., : self.head // 2], x[..., self.head // 2:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(1)

        return rotate(query), rotate(key)


def _quant(k: int, n: int, dtype: torch.dtype, device) -> QuantLinear:
    return QuantLinear.from_linear(nn.Linear(k, n, bias=False, device=device, dtype=torch.float32), dtype=dtype)


class Attention(nn.Module):
    def __init__(self, s: LlamaShape, dtype, device):
        super().__init__()
        self.s = s
        self.qkv_proj = _quant(s.hidden, (s.heads + 2 * s.kv_heads) * s.head, dtype, device)
        self.o_proj = _quant(s.heads * s.head, s.hidden, dtype, device)
        self.rotary_emb = RotaryEmbedding(s.head, s.max_positions)

    def forward(self, positions, x):
        s = self.s
        q, k, v = self.qkv_proj(x).split([s.heads * s.head, s.kv_heads * s.head, s.kv_heads * s.head], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        q, k, v = (t.reshape(t.shape[0], -1, s.head).transpose(0, 1) for t in (q, k, v))
        k, v = (t.repeat_interleave(s.heads // s.kv_heads, dim=0) for t in (k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(0, 1).reshape(x.shape[0], -1))


class MLP(nn.Module):
    def __init__(self, s: LlamaShape, dtype, device):
        super().__init__()
        self.gate_proj = _quant(s.hidden, s.inter, dtype, device)
        self.up_proj = _quant(s.hidden, s.inter, dtype, device)
        self.down_proj = _quant(s.inter, s.hidden, dtype, device)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, s: LlamaShape, dtype, device):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(s.hidden, s.eps), RMSNorm(s.hidden, s.eps)
        self.self_attn, self.mlp = Attention(s, dtype, device), MLP(s, dtype, device)

    def forward(self, positions, hidden, residual):
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class TinyLlama(nn.Module):
    """Llama's decoder at ``shape``'s sizes, its projections quantised to 4 bits."""

    def __init__(self, shape: LlamaShape = TINY, dtype: torch.dtype = torch.float32, device: str = "cpu"):
        super().__init__()
        self.embed_tokens = nn.Embedding(shape.vocab, shape.hidden)
        self.layers = nn.ModuleList(DecoderLayer(shape, dtype, device) for _ in range(shape.layers))
        self.norm = RMSNorm(shape.hidden, shape.eps)
        self.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False)
        self.to(device=device, dtype=dtype)  # QuantLinear's int buffers keep their dtypes
        for m in self.modules():
            if isinstance(m, RotaryEmbedding):
                m.inv_freq = m.inv_freq.float()  # frequencies stay float32, as models keep them

    def forward(self, ids, positions):
        hidden, residual = self.embed_tokens(ids), None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual)
        hidden, _ = self.norm(hidden, residual)
        return self.lm_head(hidden)


def library_specs(s: LlamaShape, tokens: int) -> list[tuple[str, dict]]:
    """Every op and shape of the model at M = ``tokens`` (the workloads' problems, dtype left to
    the backend's default unless the caller adds it)."""
    shapes = {((s.heads + 2 * s.kv_heads) * s.head, s.hidden), (s.hidden, s.heads * s.head), (s.inter, s.hidden),
              (s.hidden, s.inter)}
    w4 = [("w4a16", {"m": tokens, "n": n, "k_groups": k // GROUP, "zero_points": False}) for n, k in sorted(shapes)]
    norms = [("rmsnorm", {"rows": tokens, "cols": s.hidden, "residual": r, "eps": s.eps}) for r in (False, True)]
    return w4 + norms + [
        ("rope", {"tokens": tokens, "q_heads": s.heads, "kv_heads": s.kv_heads, "half_dim": s.head // 2,
                  "max_positions": s.max_positions}),
        ("silu_mul", {"tokens": tokens, "hidden": s.inter})]
