"""The fusions decode-bench's (b) can apply on top of ``patch(model, library)``, and what (b) fuses today.

What the patched step runs, per layer (the library's ops, :mod:`core.library.patch`):

* **residual add + RMSNorm**: fused, always -- ``abebot::rmsnorm`` with its residual (one kernel adds,
  writes the residual back and normalises), for the post-attention norm, the next layer's input norm
  and the final norm;
* **RMSNorm into the QKV GEMV** (``--fuse norm-qkv``, :func:`fuse_norm_qkv`): the ``rmsnorm_w4a16``
  workload's kernel (``abebot::rmsnorm_w4a16``). The input norm then only adds the residual (a
  torch add: the fused kernel takes no residual), and the QKV projection normalises its input itself;
* **SiLU·mul**: its own kernel (``abebot::silu_mul``) between the gate and up GEMVs and the down
  GEMV, not fused into either: no workload fuses it yet; gate and up are two GEMVs of one entry;
* **RoPE with the KV-cache write**: not fused (the rope kernel rotates in place, then an index copy);
  attention is torch's SDPA in both ways (the ``attention_decode`` workload is no library op yet).
"""
from __future__ import annotations

import torch
from torch import nn

from core.library import ops
from core.library.quant_linear import LibraryQuantLinear, QuantLinear

FUSIONS = {"norm-qkv": "RMSNorm into the QKV GEMV (rmsnorm_w4a16)"}


class ResidualOnly(nn.Module):
    """An input RMSNorm whose normalisation moved into the projection after it: ``forward(x,
    residual=None)`` returns ``x`` alone, or ``(x + residual, x + residual)`` (the new residual is
    both what the projection normalises and what the layer carries on). Keeps ``weight`` and the
    epsilon, which the float32 reference and the fused projection read."""

    def __init__(self, weight: torch.Tensor, eps: float):
        super().__init__()
        self.weight, self.variance_epsilon = weight, float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return x
        s = x + residual
        return s, s


class NormQuantLinear(LibraryQuantLinear):
    """A 4-bit projection that normalises its input first, in one library op (``abebot::rmsnorm_w4a16``);
    shares the projection's tensors and the norm's weight."""

    @classmethod
    def fusing(cls, norm_weight: torch.Tensor, eps: float, layer: QuantLinear) -> "NormQuantLinear":
        new = cls.sharing(layer)
        new.gamma, new.eps = norm_weight, float(eps)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rmsnorm_w4a16(x, self.gamma, self.qweight, self.scales, self.eps)


def _eps(norm: nn.Module) -> float:
    return float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))


def fuse_norm_qkv(model: nn.Module) -> list[str]:
    """Swap every decoder layer's ``input_layernorm`` + ``self_attn.qkv_proj`` (symmetric 4-bit, no
    bias) for :class:`ResidualOnly` + :class:`NormQuantLinear`, in place; the names of the layers fused."""
    fused = []
    for name, layer in model.named_modules():
        norm, attn = getattr(layer, "input_layernorm", None), getattr(layer, "self_attn", None)
        qkv = getattr(attn, "qkv_proj", None)
        if norm is None or not isinstance(qkv, QuantLinear) or isinstance(qkv, NormQuantLinear):
            continue
        if qkv.zeros is not None or qkv.bias is not None or getattr(norm, "weight", None) is None:
            continue
        attn.qkv_proj = NormQuantLinear.fusing(norm.weight, _eps(norm), qkv)
        layer.input_layernorm = ResidualOnly(norm.weight, _eps(norm))
        fused.append(name)
    return fused
