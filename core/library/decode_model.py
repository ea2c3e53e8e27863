"""A Llama-style decoder with random 4-bit weights and a KV cache, for timing decode steps.

What ``python -m core decode-bench`` runs (:mod:`core.tools.decode_bench`). The layout is vLLM's
and the one :func:`core.library.patch.patch` recognises: tokens flattened to (tokens, hidden),
``RMSNorm.forward(x, residual=None)`` with the residual add fused, a NeoX rotary module
``forward(positions, query, key)``, a fused QKV projection, a gated SiLU MLP (``gate_proj``,
``up_proj``, ``down_proj``, ``act_fn``), every projection a GPTQ-layout
:class:`~core.library.quant_linear.QuantLinear` (group 128, symmetric), and a bf16 (or the model
dtype's) LM head that is not quantised.

Attention is torch's ``scaled_dot_product_attention`` over a :class:`KVCache` of fixed capacity,
with a boolean mask ``key position <= query position``: one step (or a speculative verify step of M
tokens, causal among them) has static shapes and replays as a CUDA graph at any position. GQA is
folded into the query rows (each KV head attends for its group of query heads), so no K/V copy.

Weights are random, not a checkpoint: the 4-bit words uniformly random, scales set so that each
projection keeps activations of unit scale. :meth:`DecodeLlama.forward` runs layer copy ``copy``
(``copies`` sets of ``layers`` physical layers), so successive steps can read different weights.
:func:`reference_step` is the same step in float32 over the dequantised weights, and
:func:`int4_baseline` the same model whose projections are torch's int4 kernel (the baseline).
"""
from __future__ import annotations

import copy as _copy
import math

import torch
from torch import nn
from torch.nn import functional as F

from core.library.models import ModelShape
from core.library.quant_linear import GROUP, QuantLinear
from core.workloads.w4a16 import dequantize, int4pack


class RMSNorm(nn.Module):
    """RMSNorm in float32 (Hugging Face's arithmetic) with vLLM's optional residual, added first."""

    def __init__(self, hidden: int, eps: float, dtype: torch.dtype, device):
        super().__init__()
        self.weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden, device=device)).to(dtype), requires_grad=False)
        self.variance_epsilon = eps

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        h = x.float()
        out = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype) * self.weight
        return out if residual is None else (out, residual)


class RotaryEmbedding(nn.Module):
    """NeoX rotary embedding, vLLM's ``forward(positions, query, key) -> (query, key)``."""

    def __init__(self, head: int, max_position_embeddings: int, base: float = 500000.0, device=None):
        super().__init__()
        self.head, self.max_position_embeddings = head, max_position_embeddings
        # On the model's device: a CPU inv_freq beside CUDA positions failed the H200's first step (call 66).
        inv_freq = 1.0 / base ** (torch.arange(0, head, 2, device=device).float() / head)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions, query, key):
        cos, sin = _cos_sin(positions, self.inv_freq, query.dtype)
        return _rotate(query, cos, sin, self.head), _rotate(key, cos, sin, self.head)


def _cos_sin(positions, inv_freq, dtype):
    freqs = positions.float()[:, None] * inv_freq.float()[None, :]
    return freqs.cos().to(dtype)[:, None, :], freqs.sin().to(dtype)[:, None, :]


def _rotate(x, cos, sin, head):
    x = x.reshape(x.shape[0], -1, head)
    x1, x2 = x[..., : head // 2], x[..., head // 2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(1)


def random_quant(k: int, n: int, dtype: torch.dtype, device) -> QuantLinear:
    """A (k -> n) :class:`QuantLinear` with uniformly random 4-bit words and scales that give the
    dequantised weights a standard deviation near 1/sqrt(k) (unit-scale outputs)."""
    q = QuantLinear(k, n, dtype=dtype, device=device)
    q.qweight.copy_(torch.randint(-2 ** 31, 2 ** 31 - 1, q.qweight.shape, dtype=torch.int32, device=device))
    std_q = math.sqrt((16 ** 2 - 1) / 12)  # of (q - 8), q uniform in [0, 16)
    scales = (0.5 + torch.rand(q.scales.shape, device=device)) / (std_q * math.sqrt(k))
    q.scales.copy_(scales.to(dtype))
    return q


def attention(q, k_cache, v_cache, mask, heads: int, kv_heads: int, head: int):
    """SDPA of ``q`` (M, heads * head) over the cache (kv_heads, capacity, head) under ``mask``
    (group * M, capacity) bool (:func:`step_meta`), GQA folded into the rows; returns (M, heads * head)."""
    m, group = q.shape[0], heads // kv_heads
    rows = q.reshape(m, kv_heads, group, head).permute(1, 2, 0, 3).reshape(1, kv_heads, group * m, head)
    out = F.scaled_dot_product_attention(rows, k_cache[None], v_cache[None], attn_mask=mask[None, None])
    return out.reshape(kv_heads, group, m, head).permute(2, 0, 1, 3).reshape(m, heads * head)


class CacheAttention(nn.Module):
    """The KV-cache write at ``positions`` and SDPA over the cache (a module of its own, so that the
    op breakdown of :mod:`core.tools.decode_ops` can replay it alone)."""

    def __init__(self, heads: int, kv_heads: int, head: int):
        super().__init__()
        self.heads, self.kv_heads, self.head = heads, kv_heads, head
        # True: the attention through the library's op (core.library.attention), set by ``patch``
        self.library_attention = False

    def forward(self, positions, q, k, v, k_cache, v_cache, mask, lengths=None):
        kv, d = self.kv_heads, self.head
        k_cache.index_copy_(1, positions, k.reshape(-1, kv, d).transpose(0, 1))
        v_cache.index_copy_(1, positions, v.reshape(-1, kv, d).transpose(0, 1))
        if self.library_attention and lengths is not None:
            from core.library.attention import attention_decode

            return attention_decode(q.contiguous(), k_cache, v_cache, lengths)
        return attention(q, k_cache, v_cache, mask, self.heads, kv, d)


class Attention(nn.Module):
    """QKV projection, rotary, KV-cache write at ``positions``, SDPA, O projection."""

    def __init__(self, s: ModelShape, dtype, device, max_positions: int):
        super().__init__()
        self.heads, self.kv_heads, self.head = s.heads, s.kv_heads, s.head_dim
        self.qkv_proj = random_quant(s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim, dtype, device)
        self.o_proj = random_quant(s.heads * s.head_dim, s.hidden, dtype, device)
        self.rotary_emb = RotaryEmbedding(s.head_dim, max_positions, device=device)
        self.cache_attn = CacheAttention(s.heads, s.kv_heads, s.head_dim)

    def forward(self, positions, x, k_cache, v_cache, meta):
        h, kv, d = self.heads, self.kv_heads, self.head
        mask, positions32, lengths = meta
        q, k, v = self.qkv_proj(x).split([h * d, kv * d, kv * d], dim=-1)
        q, k = self.rotary_emb(positions32, q, k)
        return self.o_proj(self.cache_attn(positions, q, k, v, k_cache, v_cache, mask, lengths))


def step_meta(positions: torch.Tensor, capacity: int, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What every layer of a step shares, computed once per step inside the step (so a graph
    replay recomputes it from the static ``positions``): the attention mask, ``key position <= query
    position``, repeated for the ``group`` query heads of a KV head (group * M, capacity), and the positions as int32 for the rotary module (the
    library's kernels take int32; given int64, ``LibraryRotary`` converts once and caches the copy
    outside any graph, which a replay at new positions would then read stale), and the keys filled
    once this step's are written (the last position + 1, int32 (1,)), for the library's attention."""
    mask = torch.arange(capacity, device=positions.device)[None, :] <= positions[:, None]
    return mask.repeat(group, 1), positions.to(torch.int32), (positions[-1:] + 1).to(torch.int32)


class MLP(nn.Module):
    """``down(silu(gate(x)) * up(x))``."""

    def __init__(self, s: ModelShape, dtype, device):
        super().__init__()
        self.gate_proj = random_quant(s.hidden, s.intermediate, dtype, device)
        self.up_proj = random_quant(s.hidden, s.intermediate, dtype, device)
        self.down_proj = random_quant(s.intermediate, s.hidden, dtype, device)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(gated(self.act_fn, self.gate_proj(x), self.up_proj(x)))


def gated(act, gate, up):
    """``act(gate) * up``, the MLP's SiLU·mul: a function of its own (looked up at each call), so that
    the op breakdown can record and replay it."""
    return act(gate) * up


class DecoderLayer(nn.Module):
    def __init__(self, s: ModelShape, eps: float, dtype, device, max_positions: int):
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden, eps, dtype, device)
        self.post_attention_layernorm = RMSNorm(s.hidden, eps, dtype, device)
        self.self_attn, self.mlp = Attention(s, dtype, device, max_positions), MLP(s, dtype, device)

    def forward(self, positions, hidden, residual, k_cache, v_cache, meta):
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden, k_cache, v_cache, meta)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class KVCache:
    """Per logical layer, K and V of shape (kv_heads, capacity, head); positions below ``context``
    hold random values (the prompt), the rest zeros until a step writes them."""

    def __init__(self, s: ModelShape, layers: int, capacity: int, context: int, dtype, device, seed: int = 0):
        gen = torch.Generator(device=device).manual_seed(seed)
        shape = (s.kv_heads, capacity, s.head_dim)
        self.k, self.v = [], []
        for _ in range(layers):
            for store in (self.k, self.v):
                t = torch.zeros(shape, dtype=dtype, device=device)
                t[:, :context] = torch.randn((s.kv_heads, context, s.head_dim), generator=gen, device=device).to(dtype)
                store.append(t)
        self.capacity = capacity

    def like(self, dtype) -> "KVCache":
        """A copy in ``dtype`` (the float32 reference's own cache)."""
        new = _copy.copy(self)
        new.k, new.v = [t.to(dtype) for t in self.k], [t.to(dtype) for t in self.v]
        return new


class DecodeLlama(nn.Module):
    """``layers`` decoder layers of model ``shape`` (times ``copies`` physical copies), random weights.
    ``capacity`` bounds the positions (the rotary tables); a step attends over its own cache's
    capacity, so caches of several contexts (each at most ``capacity``) can share one model."""

    def __init__(self, shape: ModelShape, layers: int, capacity: int, copies: int = 1, eps: float = 1e-5,
                 dtype: torch.dtype = torch.bfloat16, device: str = "cpu", seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.shape, self.n_layers, self.copies, self.capacity = shape, layers, copies, capacity
        self.embed_tokens = nn.Embedding(shape.vocab, shape.hidden, device=device, dtype=dtype).requires_grad_(False)
        self.layers = nn.ModuleList(DecoderLayer(shape, eps, dtype, device, capacity) for _ in range(layers * copies))
        self.norm = RMSNorm(shape.hidden, eps, dtype, device)
        self.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False, device=device, dtype=dtype).requires_grad_(False)
        nn.init.normal_(self.lm_head.weight, std=2.0 / math.sqrt(shape.hidden))

    def body(self, ids, positions, cache: KVCache, copy: int = 0):
        """The decoder layers of copy ``copy``: (hidden, residual) before the final norm."""
        meta = step_meta(positions, cache.capacity, self.shape.heads // self.shape.kv_heads)
        hidden, residual = self.embed_tokens(ids), None
        for i in range(self.n_layers):
            layer = self.layers[copy * self.n_layers + i]
            hidden, residual = layer(positions, hidden, residual, cache.k[i], cache.v[i], meta)
        return hidden, residual

    def head(self, hidden, residual):
        """The final norm and the LM head: the logits (M, vocab)."""
        out, _ = self.norm(hidden, residual)
        return self.lm_head(out)

    def forward(self, ids, positions, cache: KVCache, copy: int = 0):
        return self.head(*self.body(ids, positions, cache, copy))

    def weight_bytes(self, copy_only: bool = True) -> int:
        """Bytes of the weights one step reads (one copy of the layers, the final norm, the LM head)."""
        layers = sum(b.numel() * b.element_size() for layer in self.layers[: self.n_layers]
                     for b in list(layer.buffers()) + list(layer.parameters()))
        head = self.lm_head.weight.numel() * self.lm_head.weight.element_size()
        return layers * (1 if copy_only else self.copies) + head


class Int4PackLinear(nn.Module):
    """A projection through ``torch._weight_int4pack_mm`` (torch's int4 tiles, repacked once from a
    :class:`QuantLinear`; CUDA and bfloat16 only): the PyTorch baseline's linear."""

    def __init__(self, layer: QuantLinear):
        super().__init__()
        self.in_features, self.out_features = layer.in_features, layer.out_features
        packed, table = int4pack(layer.qweight.view(-1, 16, layer.out_features), layer.scales, layer.zeros)
        self.register_buffer("packed", packed)
        self.register_buffer("table", table)

    def forward(self, x):
        y = torch._weight_int4pack_mm(x.reshape(-1, self.in_features), self.packed, GROUP, self.table)
        return y.view(*x.shape[:-1], self.out_features)


def int4_baseline(model: DecodeLlama) -> tuple[DecodeLlama, str]:
    """The same model sharing every tensor, its projections on torch's int4 kernel where that runs
    (CUDA, bfloat16), else the native dequantise-then-matmul: (model, what its linears run)."""
    shared = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    twin = _copy.deepcopy(model, memo=shared)
    if not (model.lm_head.weight.is_cuda and model.lm_head.weight.dtype == torch.bfloat16):
        return twin, "native dequantise + matmul (torch's int4 kernel needs CUDA and bfloat16)"
    for name, module in list(twin.named_modules()):
        if isinstance(module, QuantLinear):
            parent, _, attr = name.rpartition(".")
            setattr(twin.get_submodule(parent), attr, Int4PackLinear(module))
    return twin, "torch._weight_int4pack_mm"


def _dequant32(lin: QuantLinear) -> torch.Tensor:
    z = None if lin.zeros is None else lin.zeros.float()
    return dequantize(torch, lin.qweight.view(-1, 16, lin.out_features), lin.scales.float(), z)


def _norm32(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    eps = getattr(m, "variance_epsilon", getattr(m, "eps", 1e-5))
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * m.weight.float()


@torch.no_grad()
def reference_step(model: DecodeLlama, ids, positions, cache32: KVCache, copy: int = 0) -> torch.Tensor:
    """The logits (M, vocab) of one step in float32 over the dequantised weights of ``model``
    (patched or not: it reads the modules' tensors, not their forwards); ``cache32`` float32."""
    s = model.shape
    h, kv, d = s.heads, s.kv_heads, s.head_dim
    mask = step_meta(positions, cache32.capacity, h // kv)[0]
    residual = model.embed_tokens.weight[ids].float()
    for i in range(model.n_layers):
        layer = model.layers[copy * model.n_layers + i]
        att = layer.self_attn
        x = _norm32(layer.input_layernorm, residual)
        q, k, v = (x @ _dequant32(att.qkv_proj)).split([h * d, kv * d, kv * d], dim=-1)
        cos, sin = _cos_sin(positions, att.rotary_emb.inv_freq, torch.float32)
        q, k = _rotate(q, cos, sin, d), _rotate(k, cos, sin, d)
        cache32.k[i].index_copy_(1, positions, k.reshape(-1, kv, d).transpose(0, 1))
        cache32.v[i].index_copy_(1, positions, v.reshape(-1, kv, d).transpose(0, 1))
        residual = residual + attention(q, cache32.k[i], cache32.v[i], mask, h, kv, d) @ _dequant32(att.o_proj)
        x = _norm32(layer.post_attention_layernorm, residual)
        mlp = layer.mlp
        act = F.silu(x @ _dequant32(mlp.gate_proj)) * (x @ _dequant32(mlp.up_proj))
        residual = residual + act @ _dequant32(mlp.down_proj)
    return _norm32(model.norm, residual) @ model.lm_head.weight.float().t()
