"""The decode step's mechanics: steps as callables over static inputs, CUDA graphs, timing, the
per-kernel breakdown and the logits check (what :mod:`core.tools.decode_bench` reports).

A :class:`Step` holds a model's step at M tokens over static ``ids`` and ``positions`` tensors: on a
GPU one CUDA graph per layer copy (replayed in rotation, so that successive replays read different
weights), on a CPU the eager call. :func:`time_steps` times the steps interleaved, round by round.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from core.library.decode_model import DecodeLlama, KVCache, reference_step, step_meta


def capture(fn: Callable[[], Any], warm: int = 2) -> tuple[Any, Any]:
    """(graph, output) of ``fn`` captured in a CUDA graph after ``warm`` calls on a side stream (the
    library's ops need one eager call of each shape before a capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warm):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    torch.cuda.synchronize()
    return graph, out


class Step:
    """One step of ``model`` at ``positions`` (M tokens) on ``cache``: ``run()`` replays the next
    layer copy's graph (GPU) or calls the model (CPU); ``logits`` is the output of copy 0's last run.
    ``layer_fn`` replaces a layer's call (the compiled baseline's per-layer function)."""

    def __init__(self, model: DecodeLlama, cache: KVCache, positions: list[int], graphs: bool,
                 layer_fn: Callable | None = None):
        device = model.lm_head.weight.device
        self.model, self.cache, self.layer_fn = model, cache, layer_fn
        self.ids = torch.zeros(len(positions), dtype=torch.long, device=device)
        self.positions = torch.tensor(positions, dtype=torch.long, device=device)
        self.graphs: list = []
        self.outputs: list = []
        self._next = 0
        if graphs:
            for c in range(model.copies):
                g, out = capture(lambda c=c: self._forward(c))
                self.graphs.append(g)
                self.outputs.append(out)

    @torch.no_grad()
    def _forward(self, copy: int) -> torch.Tensor:
        if self.layer_fn is None:
            return self.model(self.ids, self.positions, self.cache, copy)
        m = self.model
        meta = step_meta(self.positions, self.cache.capacity, m.shape.heads // m.shape.kv_heads)
        hidden, residual = m.embed_tokens(self.ids), None
        for i in range(m.n_layers):
            layer = m.layers[copy * m.n_layers + i]
            hidden, residual = self.layer_fn(layer, self.positions, hidden, residual, self.cache.k[i],
                                             self.cache.v[i], meta)
        return m.head(hidden, residual)

    def run(self) -> None:
        if not self.graphs:
            self.outputs = [self._forward(0)]
            return
        self.graphs[self._next].replay()
        self._next = (self._next + 1) % len(self.graphs)

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """The logits of copy 0 on ``ids`` at the step's positions (float32, a copy)."""
        self.ids.copy_(ids)
        if self.graphs:
            self.graphs[0].replay()
            self._next = 1 % len(self.graphs)
        else:
            self.run()
        return self.outputs[0].float().clone()


def sync(device: torch.device) -> None:
    if device.type != "cpu":
        torch.cuda.synchronize(device)


class GraphFn:
    """``fn()`` as a step: one CUDA graph replayed by ``run()`` on a GPU, the call itself on a CPU."""

    def __init__(self, fn: Callable[[], Any], device: torch.device):
        self.fn, self.graph = fn, None
        if device.type != "cpu":
            self.graph, _ = capture(fn)

    def run(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.fn()


def time_steps(steps: dict[str, Any], device: torch.device, rounds: int = 5, iters: int = 20) -> dict[str, dict]:
    """Per step name: median and min ms per step (a :class:`Step` or :class:`GraphFn`) over
    ``rounds`` rounds of ``iters`` runs each, the steps interleaved within every round (CUDA events
    on a GPU, the wall clock on a CPU)."""
    samples: dict[str, list[float]] = {name: [] for name in steps}
    wall: dict[str, list[float]] = {name: [] for name in steps}  # the cross-check: host clock around the same runs
    for _ in range(rounds):
        for name, step in steps.items():
            for _ in range(2):
                step.run()  # warm this step's copies before its timed run
            sync(device)
            t0 = time.perf_counter()
            if device.type != "cpu":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    step.run()
                end.record()
                end.synchronize()
                samples[name].append(start.elapsed_time(end) / iters)
            else:
                for _ in range(iters):
                    step.run()
                samples[name].append((time.perf_counter() - t0) * 1e3 / iters)
            wall[name].append((time.perf_counter() - t0) * 1e3 / iters)
    return {name: {"ms": statistics.median(v), "ms_min": min(v), "ms_max": max(v),
                   "wall_ms": statistics.median(wall[name]), "rounds": rounds, "iters": iters,
                   "method": "CUDA events (wall_ms: host clock, the cross-check)" if device.type != "cpu" else
                   "host clock"} for name, v in samples.items()}


KINDS = (("w4a16", ("int4", "tinygemm", "w4a16", "gptq", "dequant")),
         ("attention", ("fmha", "attention", "flash", "softmax", "sdpa")),
         ("rmsnorm", ("rms", "rsqrt", "norm")), ("silu_mul", ("silu", "sigmoid", "swiglu")),
         ("rope", ("rope", "rotary", "cos", "sin", "_cat_")),
         ("bf16 GEMM/GEMV (LM head)", ("gemm", "gemv", "cublas", "cutlass", "xmma", "sm90")),
         ("copies and index writes", ("copy", "index", "cat", "fill", "memcpy", "memset")))


def kind_of(kernel: str) -> str:
    """The op kind a kernel name suggests (by substring; "other" when none matches)."""
    low = kernel.lower()
    for kind, words in KINDS:
        if any(w in low for w in words):
            return kind
    return "other"


def breakdown(step: Step, runs: int = 5, top: int = 12) -> dict:
    """Where a step's time goes, from torch's profiler over ``runs`` runs: device time per kernel
    name on a GPU (kernels inside graph replays), self CPU time per op on a CPU; grouped by
    :func:`kind_of` (a name heuristic) and the ``top`` names listed with their shares."""
    from torch.profiler import ProfilerActivity, profile

    cuda = step.ids.device.type != "cpu"
    step.run()
    sync(step.ids.device)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(runs):
            step.run()
        sync(step.ids.device)
    rows, host = [], []
    for e in prof.key_averages():
        us = (getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0) or 0) if cuda else \
            e.self_cpu_time_total
        on_device = str(getattr(e, "device_type", "")).endswith("CUDA")  # kernels, not the host calls
        if us > 0:
            (rows if on_device or not cuda else host).append((e.key, us / runs))
    if cuda and not rows:  # no event marked as a device one: host events that carry device time, minus API calls
        rows = [(k, us) for k, us in host if not k.startswith("cuda")]
    total = sum(us for _, us in rows) or 1.0
    kinds: dict[str, float] = {}
    for name, us in rows:
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + us
    rows.sort(key=lambda r: -r[1])
    return {"source": "torch.profiler, " + ("device time per kernel" if cuda else "self CPU time per op"),
            "total_us": round(total, 1),
            "by_kind": {k: {"us": round(v, 1), "share": round(v / total, 4)}
                        for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])},
            "top": [{"name": n[:120], "us": round(us, 1), "share": round(us / total, 4)} for n, us in rows[:top]]}


@torch.no_grad()
def check_logits(step: Step, model: DecodeLlama, cache32: KVCache, first_position: int, steps: int,
                 tolerance: float, seed: int = 0) -> dict:
    """``steps`` one-token steps of ``step`` (positions ``first_position`` on) against
    :func:`reference_step` in float32: the token fed at each step is the reference's argmax of the
    step before (both see the same tokens). Returns the maximum absolute error of the logits, its
    ratio to the logits' standard deviation, and argmax agreement over the steps whose reference
    top-2 logits are at least ``tolerance`` apart; closer steps are counted apart."""
    device = step.ids.device
    token = torch.randint(0, model.shape.vocab, (1,), generator=torch.Generator().manual_seed(seed)).to(device)
    max_err, scale, agree, counted, close, close_agree = 0.0, 0.0, 0, 0, 0, 0
    for i in range(steps):
        pos = torch.tensor([first_position + i], device=device)
        step.positions.copy_(pos)
        got = step.logits(token)[0]
        want = reference_step(model, token, pos, cache32)[0]
        max_err = max(max_err, (got - want).abs().max().item())
        scale = max(scale, want.std().item())
        top2 = torch.topk(want, 2)
        same = int(got.argmax().item() == top2.indices[0].item())
        if (top2.values[0] - top2.values[1]).item() < tolerance:
            close, close_agree = close + 1, close_agree + same
        else:
            counted, agree = counted + 1, agree + same
        token = top2.indices[:1].clone()
    return {"steps": steps, "max_abs_error": max_err, "logit_std": scale,
            "max_error_over_std": max_err / scale if scale else None, "tolerance": tolerance,
            "argmax_agree": agree, "argmax_counted": counted,
            "argmax_agreement": agree / counted if counted else None,
            "close_steps": close, "close_steps_agree": close_agree}
