"""A minimal GPTQ-layout 4-bit linear layer, in the w4a16 workload's layout (no copy per call).

:class:`QuantLinear` holds, for ``in_features`` K (a multiple of 128) and ``out_features`` N:

* ``qweight`` (K / 8, N) int32 -- GPTQ's packing: word ``[k // 8, n]`` holds the 4-bit values of
  ``W[k, n]`` for the 8 consecutive k of its row, value ``k % 8`` in bits ``4 (k % 8)`` and up
  (the lowest nibble first), each an unsigned q in [0, 16). Viewed as (K / 128, 16, N) it is the
  workload's ``qweight`` (:mod:`core.workloads.w4a16`) with the same bytes;
* ``scales`` (K / 128, N) in the activations' dtype -- one scale per group of 128 rows of K;
* ``zeros`` (K / 128, N) uint8, or None for symmetric weights (zero point 8, GPTQ's ``sym=True``).
  GPTQ packs zero points 8 to an int32 along N; here they stay unpacked, as the workload reads them
  (1/64 of the weight bytes);
* ``bias`` (N,) or None.

Dequantisation is ``W[k, n] = (q - z) * scales[k // 128, n]`` and the layer computes
``y = x @ W + bias``. GPTQ's act-order (``g_idx``) is not supported: groups are contiguous in K.

``forward`` runs the native path (dequantise, then matmul); :func:`core.library.patch.patch` swaps
the layer for :class:`LibraryQuantLinear`, which shares its tensors and calls ``abebot::w4a16``.
"""
from __future__ import annotations

import torch
from torch import nn

from core.library import native, ops
from core.workloads.w4a16 import dequantize

GROUP = 128


class QuantLinear(nn.Module):
    """``y = x @ dequant(qweight, scales, zeros) + bias`` with GPTQ 4-bit weights (module docstring)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False, zero_points: bool = False,
                 dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        super().__init__()
        if in_features % GROUP:
            raise ValueError(f"QuantLinear needs in_features a multiple of {GROUP} (got {in_features})")
        self.in_features, self.out_features = in_features, out_features
        groups = in_features // GROUP
        self.register_buffer("qweight", torch.zeros(in_features // 8, out_features, dtype=torch.int32, device=device))
        self.register_buffer("scales", torch.ones(groups, out_features, dtype=dtype, device=device))
        self.register_buffer("zeros", torch.full((groups, out_features), 8, dtype=torch.uint8, device=device)
                             if zero_points else None)
        self.register_buffer("bias", torch.zeros(out_features, dtype=dtype, device=device) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear, zero_points: bool = False, dtype: torch.dtype | None = None) -> "QuantLinear":
        """``linear`` quantised to 4 bits by round-to-nearest, per group of 128 inputs and output:
        symmetric (scale = max |w| / 7, zero point 8) or, with ``zero_points``, asymmetric
        (scale = (max - min) / 15, zero point round(-min / scale))."""
        dtype = dtype or linear.weight.dtype
        q = cls(linear.in_features, linear.out_features, linear.bias is not None, zero_points, dtype,
                linear.weight.device)
        w = linear.weight.detach().float().t().reshape(-1, GROUP, linear.out_features)  # (groups, 128, N)
        if zero_points:
            lo, hi = w.amin(dim=1), w.amax(dim=1)
            scale = ((hi - lo) / 15).clamp_min(1e-12)
            zero = torch.round(-lo / scale).clamp(0, 15)
        else:
            scale = (w.abs().amax(dim=1) / 7).clamp_min(1e-12)
            zero = torch.full_like(scale, 8.0)
        values = torch.clamp(torch.round(w / scale[:, None, :]) + zero[:, None, :], 0, 15).to(torch.int64)
        q.qweight.copy_(pack(values.reshape(linear.in_features, linear.out_features)))
        q.scales.copy_(scale.to(dtype))
        if zero_points:
            q.zeros.copy_(zero.to(torch.uint8))
        if linear.bias is not None:
            q.bias.copy_(linear.bias.detach().to(dtype))
        return q

    def dequantize(self) -> torch.Tensor:
        """The (K, N) weights in ``scales``' dtype."""
        words = self.qweight.view(-1, 16, self.out_features)
        z = None if self.zeros is None else self.zeros.float()
        return dequantize(torch, words, self.scales.float(), z).to(self.scales.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = native.w4a16(x.reshape(-1, self.in_features), self.qweight.view(-1, 16, self.out_features),
                         self.scales, self.zeros).view(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, group={GROUP}, "
                f"zero_points={self.zeros is not None}, bias={self.bias is not None}")


class LibraryQuantLinear(QuantLinear):
    """A :class:`QuantLinear` whose product is the library op ``abebot::w4a16`` (same tensors)."""

    @classmethod
    def sharing(cls, layer: QuantLinear) -> "LibraryQuantLinear":
        """A library layer holding ``layer``'s own tensors (no copy)."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = layer.in_features, layer.out_features
        for name in ("qweight", "scales", "zeros", "bias"):
            new.register_buffer(name, getattr(layer, name))
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = ops.w4a16(x, self.qweight, self.scales, self.zeros)
        return y if self.bias is None else y + self.bias


def pack(values: torch.Tensor) -> torch.Tensor:
    """(K, N) integers in [0, 16) -> (K / 8, N) int32 GPTQ words (value k % 8 in bits 4 (k % 8))."""
    k, n = values.shape
    v = values.to(torch.int64).reshape(k // 8, 8, n)
    words = torch.zeros(k // 8, n, dtype=torch.int64, device=values.device)
    for b in range(8):
        words |= v[:, b, :] << (4 * b)
    return (words - ((words >> 31) << 32)).to(torch.int32)  # two's complement: bit 31 is the sign


def unpack(qweight: torch.Tensor) -> torch.Tensor:
    """(K / 8, N) int32 words -> (K, N) int64 values in [0, 16)."""
    shifts = torch.arange(0, 32, 4, device=qweight.device, dtype=torch.int64)
    q = (qweight.to(torch.int64)[:, None, :] >> shifts[None, :, None]) & 15
    return q.reshape(-1, qweight.shape[-1])
