"""``patch(model, library)``: swap a Llama-style model's layers for the library's ops, in place.

What it recognises (by structure, whatever the model's own class names beyond these):

* **RMSNorm** -- a module whose class name ends in ``RMSNorm``, with a 1-D ``weight`` and an
  ``eps`` or ``variance_epsilon``: becomes :class:`LibraryRMSNorm` (``forward(x, residual=None)``,
  vLLM's convention: with a residual it returns ``(out, residual)`` and updates ``residual`` in
  place, as vLLM's fused kernel does; Hugging Face's ``forward(x)`` is the same call without one);
* **rotary embedding** -- a module whose class name contains ``Rotary``, with an ``inv_freq``
  buffer and vLLM's ``forward(positions, query, key) -> (query, key)`` (NeoX style): becomes
  :class:`LibraryRotary`, which rotates contiguous ``query``/``key`` in place (vLLM's semantics)
  from a cos/sin cache it builds once per dtype. Hugging Face's rotary module (which returns cos and
  sin for a free function to apply) is reported as skipped;
* **SiLU * mul** -- a module with ``gate_proj``, ``up_proj``, ``down_proj`` and an ``act_fn``
  that is ``nn.SiLU``: becomes :class:`LibraryMLP` (the same projections,
  ``down(silu_mul(gate(x), up(x)))``);
* **4-bit linear** -- every :class:`~core.library.quant_linear.QuantLinear`: becomes a
  :class:`~core.library.quant_linear.LibraryQuantLinear` sharing its tensors;
* **attention** -- a module with a ``library_attention`` flag (the attention of
  :class:`~core.library.decode_model.DecodeLlama`) has it set: its attention then calls
  ``abebot::attention_decode`` (:mod:`core.library.attention`). Other models' attention is left alone.

The swapped modules share the original parameters (no copy). The patch activates one
:class:`~core.library.dispatcher.Dispatcher` for the library (:func:`core.library.ops.activate`);
the returned :class:`PatchReport` lists what was swapped and skipped and holds that dispatcher, whose
:meth:`~core.library.dispatcher.Dispatcher.counts` say which calls ran a library kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from core.library import ops
from core.library.dispatcher import Dispatcher
from core.library.manifest import Library
from core.library.quant_linear import LibraryQuantLinear, QuantLinear


@dataclass
class PatchReport:
    """What :func:`patch` did: module names swapped by kind, names skipped with why, the dispatcher."""

    swapped: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    skipped: list[tuple[str, str]] = field(default_factory=list)
    dispatcher: Dispatcher | None = None

    def __str__(self) -> str:
        lines = [f"{kind}: {len(names)} swapped" for kind, names in self.swapped.items()]
        return "\n".join(lines + [f"skipped {name}: {why}" for name, why in self.skipped])


KINDS = ("rmsnorm", "rope", "silu_mul", "w4a16", "attention")


class LibraryRMSNorm(nn.Module):
    """RMSNorm through ``abebot::rmsnorm``; shares the original ``weight``."""

    def __init__(self, weight: nn.Parameter, eps: float):
        super().__init__()
        self.weight, self.eps = weight, float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
        out = ops.rmsnorm(x, self.weight, residual, self.eps)
        return out if residual is None else (out, residual)


class LibraryRotary(nn.Module):
    """NeoX rotary embedding through ``abebot::rope``, from a (max_positions, 2, head / 2) cos/sin cache
    computed once per dtype and device from the original ``inv_freq``."""

    def __init__(self, inv_freq: torch.Tensor, max_positions: int):
        super().__init__()
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.max_positions = int(max_positions)
        self._caches: dict = {}
        self._positions: tuple = (None, None, None, None)  # (source tensor, its version, capture stream, int32 copy)

    def cos_sin_cache(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        key = (dtype, device)
        if key not in self._caches:
            t = torch.arange(self.max_positions, device=device, dtype=torch.float32)
            freqs = t[:, None] * self.inv_freq.to(device=device, dtype=torch.float32)[None, :]
            self._caches[key] = torch.stack([freqs.cos(), freqs.sin()], dim=1).to(dtype).contiguous()
        return self._caches[key]

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> tuple:
        q, k = query.contiguous(), key.contiguous()
        ops.rope(self._int32(positions), q, k, self.cos_sin_cache(q.dtype, q.device))
        return q, k

    def _int32(self, positions: torch.Tensor) -> torch.Tensor:
        """Positions as int32 (the kernels' type), converted once for all the layers of a step."""
        if positions.dtype == torch.int32 or torch.compiler.is_compiling():
            return positions.to(torch.int32)
        # A copy made outside a CUDA graph capture is not refreshed by its replays: under a capture the
        # conversion is made (and recorded) again, then shared by the layers captured after it on the same
        # capture stream (torch.cuda.graph captures each graph on a stream of its own by default).
        capturing = torch.cuda.current_stream().cuda_stream if (
            positions.is_cuda and torch.cuda.is_current_stream_capturing()) else None
        src, version, was_capturing, copy = self._positions
        if src is not positions or version != positions._version or was_capturing != capturing:
            copy = positions.to(torch.int32)
            self._positions = (positions, positions._version, capturing, copy)
        return copy


class LibraryMLP(nn.Module):
    """The gated MLP with ``abebot::silu_mul`` between its projections (the same projection modules)."""

    def __init__(self, gate_proj: nn.Module, up_proj: nn.Module, down_proj: nn.Module):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = gate_proj, up_proj, down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(ops.silu_mul(self.gate_proj(x), self.up_proj(x)))


def patch(model: nn.Module, library: Library | Dispatcher | str | Path, **dispatcher_options: Any) -> PatchReport:
    """Swap ``model``'s RMSNorm, rotary, SiLU*mul and 4-bit linear layers for library ops (module
    docstring) and activate a dispatcher over ``library`` (a folder, a loaded library or a
    dispatcher; ``dispatcher_options`` go to :class:`Dispatcher`). Returns the report."""
    dispatcher = library if isinstance(library, Dispatcher) else Dispatcher(library, **dispatcher_options)
    report = PatchReport(dispatcher=dispatcher)
    for name, module in list(model.named_modules()):
        if not name:
            continue
        new, kind, why = _replacement(module)
        if why:
            report.skipped.append((name, why))
        if new is None:
            continue
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, new)
        report.swapped[kind].append(name)
    ops.activate(dispatcher)
    return report


def _replacement(m: nn.Module) -> tuple[nn.Module | None, str, str]:
    """(new module, kind, "") for a module patch swaps; (None, "", why) for one it recognises but
    cannot swap; (None, "", "") otherwise. The MLP's projections are swapped on their own visit."""
    cls = type(m).__name__
    if isinstance(m, QuantLinear) and not isinstance(m, LibraryQuantLinear):
        return LibraryQuantLinear.sharing(m), "w4a16", ""
    if cls.endswith("RMSNorm") and not isinstance(m, LibraryRMSNorm):
        eps = getattr(m, "variance_epsilon", getattr(m, "eps", None))
        weight = getattr(m, "weight", None)
        if eps is None or weight is None or weight.dim() != 1:
            return None, "", "an RMSNorm without a 1-D weight and an eps"
        return LibraryRMSNorm(weight, eps), "rmsnorm", ""
    if "Rotary" in cls and not isinstance(m, LibraryRotary):
        inv_freq = getattr(m, "inv_freq", None)
        if inv_freq is None:
            return None, "", "a rotary embedding without inv_freq"
        if m.forward.__code__.co_varnames[1:4] != ("positions", "query", "key"):
            return None, "", "not a forward(positions, query, key) rotary (Hugging Face's returns cos and sin)"
        max_positions = getattr(m, "max_position_embeddings", None) or getattr(m, "max_positions", None) or 4096
        return LibraryRotary(inv_freq, max_positions), "rope", ""
    if getattr(m, "library_attention", None) is False:  # AbeBot's own decode model: its attention takes the op
        m.library_attention = True
        return m, "attention", ""
    if all(hasattr(m, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")) and not isinstance(m, LibraryMLP):
        if not isinstance(m.act_fn, nn.SiLU):
            return None, "", f"a gated MLP whose activation is {type(m.act_fn).__name__}, not SiLU"
        return LibraryMLP(m.gate_proj, m.up_proj, m.down_proj), "silu_mul", ""
    return None, "", ""
