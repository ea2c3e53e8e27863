"""The per-op breakdown of a decode step, by replaying each op alone on the step's own inputs.

:func:`record_ops` runs one eager step of every layer copy with hooks that keep, for each op call,
the callable (the module or function the step called) and its very arguments (the step's own
tensors, not copies: the same weights, caches, activations and views). The ops are the step's
units, named by where they sit in a layer: ``input_layernorm``, ``self_attn.qkv_proj``,
``self_attn.rotary_emb``, ``self_attn.cache_attn`` (the KV-cache write and SDPA),
``self_attn.o_proj``, ``post_attention_layernorm``, ``mlp.gate_proj``, ``mlp.up_proj``, ``silu_mul``,
``mlp.down_proj``, and once per step ``embed_tokens``, ``step_meta`` (the mask and int32
positions), ``norm`` and ``lm_head``. Whatever the model runs for them (torch's int4 kernel, the
library's kernels, the native ops) is what is replayed.

:func:`op_breakdown` replays each op's calls for all the layers of one copy (a CUDA graph per copy
on a GPU, replayed in rotation over the copies exactly as the step is, so the 4-bit weights come
from memory as in the step; the eager calls on a CPU), times every op with
:func:`~core.tools.decode_engine.time_steps` (interleaved rounds), and compares the sum with the
whole step's time. What the sum does not hold: the gaps between the ops inside the step's one graph,
and anything a fused step (``torch.compile``) does better than its ops run one by one.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from core.library import decode_model, ops as library_ops
from core.tools.decode_engine import capture, time_steps

UNITS = ("embed_tokens", "step_meta", "input_layernorm", "self_attn.qkv_proj", "self_attn.rotary_emb",
         "self_attn.cache_attn", "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
         "silu_mul", "mlp.down_proj", "norm", "lm_head")
KIND = {"embed_tokens": "embedding", "step_meta": "step setup (mask, int32 positions)",
        "input_layernorm": "rmsnorm (+ residual add)", "post_attention_layernorm": "rmsnorm (+ residual add)",
        "norm": "rmsnorm (+ residual add)", "self_attn.rotary_emb": "rope",
        "self_attn.cache_attn": "attention (KV write + SDPA)", "silu_mul": "silu_mul", "lm_head": "LM head (GEMV)"}
FUNCTIONS = ((decode_model, "gated", "silu_mul"), (library_ops, "silu_mul", "silu_mul"),
             (decode_model, "step_meta", "step_meta"))
METHOD = ("op replay: each op of the one-token step (module or function, with the step's own input tensors) "
          "replayed alone, the calls of all layers of one copy per CUDA graph, rotating over the layer copies as "
          "the step does (host clock around eager calls on a CPU); timed in interleaved rounds, median. An op whose "
          "weights over all copies fit in the L2 (weights_from_memory false: the norms, or few layers) finds them "
          "there on replay, where the step reads them from memory; the gaps between ops inside the step's one "
          "graph are not in the sum.")

Call = tuple[Callable, tuple, dict]


FUSED_KIND = {"ResidualOnly": "residual add (its RMSNorm fused into the QKV GEMV)",
              "NormQuantLinear": "rmsnorm + w4a16 GEMV (fused)"}  # core.tools.decode_fuse's modules


def kind_of(unit: str, fn: Any = None) -> str:
    """The op kind of a unit (``w4a16 GEMV`` for the projections), or of the fused module ``fn`` runs."""
    fused = FUSED_KIND.get(type(fn).__name__)
    return fused or KIND.get(unit, "w4a16 GEMV" if unit.endswith("_proj") else "other")


def _unit(name: str) -> str | None:
    """The unit a module's name in the model stands for (``layers.3.mlp.up_proj`` -> ``mlp.up_proj``)."""
    parts = name.split(".")
    rel = ".".join(parts[2:]) if parts[0] == "layers" and len(parts) > 2 else name
    return rel if rel in UNITS else None


@torch.no_grad()
def record_ops(model, cache, positions: list[int]) -> list[dict[str, list[Call]]]:
    """Per layer copy, {unit: its calls in order} of one eager step of ``model`` at ``positions``
    (the model patched or not; ``cache`` the step's own KV cache, written at ``positions``)."""
    device = model.lm_head.weight.device
    ids = torch.zeros(len(positions), dtype=torch.long, device=device)
    pos = torch.tensor(positions, dtype=torch.long, device=device)
    by_copy: list[dict[str, list[Call]]] = []
    current: dict[str, list[Call]] = {}

    def hook(unit):
        def pre(module, args, kwargs):
            current.setdefault(unit, []).append((module, args, kwargs))
        return pre

    def wrap(unit, fn):
        def recorded(*args, **kwargs):
            current.setdefault(unit, []).append((fn, args, kwargs))
            return fn(*args, **kwargs)
        return recorded

    handles = [m.register_forward_pre_hook(hook(u), with_kwargs=True)
               for name, m in model.named_modules() if (u := _unit(name))]
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in FUNCTIONS]
    try:
        for (owner, attr, unit), (_, _, fn) in zip(FUNCTIONS, saved):
            setattr(owner, attr, wrap(unit, fn))
        for c in range(model.copies):
            current = {}
            model(ids, pos, cache, c)
            by_copy.append(current)
    finally:
        for h in handles:
            h.remove()
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)
    return by_copy


class Replay:
    """One unit's calls as a step: ``run()`` replays the next copy's calls (a CUDA graph per copy on
    a GPU, in rotation; the calls themselves on a CPU)."""

    def __init__(self, calls_by_copy: list[list[Call]], device: torch.device):
        self.calls, self.graphs, self._next = calls_by_copy, [], 0
        if device.type != "cpu":
            self.graphs = [capture(lambda c=calls: _call_all(c))[0] for calls in calls_by_copy]

    def run(self) -> None:
        if self.graphs:
            self.graphs[self._next].replay()
            self._next = (self._next + 1) % len(self.graphs)
        else:
            _call_all(self.calls[0])


def _call_all(calls: list[Call]) -> Any:
    out = None
    for fn, args, kwargs in calls:
        out = fn(*args, **kwargs)
    return out


def weight_bytes(calls: list[Call]) -> int:
    """Bytes of the weights (parameters and buffers of the modules called) that ``calls`` read."""
    seen: dict[int, int] = {}
    for fn, _, _ in calls:
        if isinstance(fn, torch.nn.Module):
            for t in list(fn.parameters()) + list(fn.buffers()):
                seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values())


def op_breakdown(model, cache, positions: list[int], step_ms: float, device: torch.device,
                 rounds: int = 5, iters: int = 20) -> dict:
    """Each unit's ms per step, share of the units' sum, calls per step, kind and weight bytes per step
    (``weights_from_memory``: whether one rotation over the copies reads more than the L2 holds, so
    that each replay finds them in memory as the step does; None on a CPU); the sum against
    ``step_ms`` (the whole step, timed the same way) and the method (module docstring)."""
    by_copy = record_ops(model, cache, positions)
    units = [u for u in UNITS if u in by_copy[0]]
    with torch.no_grad():
        replays = {u: Replay([copy.get(u, []) for copy in by_copy], device) for u in units}
        t = time_steps(replays, device, rounds, iters)
    l2 = torch.cuda.get_device_properties(device).L2_cache_size if device.type != "cpu" else None
    total = sum(t[u]["ms"] for u in units) or float("nan")
    rows = []
    for u in units:
        wb = weight_bytes(by_copy[0][u])
        rows.append({"op": u, "kind": kind_of(u, by_copy[0][u][0][0]), "calls": len(by_copy[0][u]),
                     "ms": round(t[u]["ms"], 5), "share": round(t[u]["ms"] / total, 4), "weight_bytes": wb,
                     "weights_from_memory": None if l2 is None else wb * len(by_copy) > l2})
    kinds: dict[str, float] = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0.0) + r["ms"]
    return {"method": METHOD, "rows": rows, "sum_ms": round(total, 4), "step_ms": round(step_ms, 4),
            "sum_over_step": round(total / step_ms, 4) if step_ms else None,
            "by_kind": {k: {"ms": round(v, 5), "share": round(v / total, 4)}
                        for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}}
