"""GPU harness pieces shared by the ``cuda`` and ``triton`` templates (sandbox side only).

Everything here runs inside the evaluator process that owns the GPU; torch is the array library
(inputs, references, baselines), whatever backend compiled the kernel. Nothing GPU-related is
imported at module level, so this file imports on a machine without CUDA.

Pieces:

* :class:`TorchCudaRuntime` -- the runtime half common to both GPU backends: synchronize that raises
  on sticky errors, CUDA-event timing, automatic CUDA-graph timing for launch-bound kernels, L2 flush;
* :class:`GpuHarness` -- ``make_case`` with seeded random inputs (never zeros), outputs poisoned
  with NaN inside guard zones, pristine input copies, a cached float64 reference; ``check`` for
  NaN, guard zones, modified inputs and tolerance.
"""
from __future__ import annotations

import statistics
from abc import abstractmethod
from typing import Any, Callable

from core.backends.base import Runtime
from core.workloads.base import Case, CheckResult, Harness

GUARD = 4096  # elements of NaN before and after every output; catches small out-of-bounds writes
GRAPH_BELOW_S = 30e-6  # kernels faster than this are launch-bound: time them under CUDA graphs
GRAPH_CALLS = 20  # launches captured per graph; one replay's time / GRAPH_CALLS is one sample
L2_FLUSH_BYTES = 256 << 20  # > 4x the H200's 60 MB L2

TORCH_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
# (atol, rtol) per dtype, as the field uses (vLLM for half types, KernelBench for fp32).
GEMM_TOL = {"bfloat16": (1e-3, 1.6e-2), "float16": (1e-3, 1e-3), "float32": (1e-4, 1e-4)}


def torch_dtype(name: str):
    import torch

    return getattr(torch, TORCH_DTYPES[name])


class TorchCudaRuntime(Runtime):
    """Runtime half shared by the GPU backends: one CUDA device, timed with events or graphs."""

    def __init__(self, device_index: int = 0, graphs: bool = True):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        torch.cuda.set_device(device_index)
        self.device_index = device_index
        self.graphs = graphs
        self._flush_buf = None
        self.last_timing = "events"  # "events" or "graph": how the last ``time`` call measured

    def synchronize(self) -> None:
        """cudaDeviceSynchronize; a failed launch (illegal address, trap) raises here."""
        import torch

        torch.cuda.synchronize()

    def flush_cache(self) -> None:
        import torch

        if self._flush_buf is None:
            self._flush_buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self._flush_buf.zero_()

    def time(self, fn: Callable[[int], None], reps: int, warmup: int) -> list[float]:
        """Seconds per call: CUDA events around each call, or, when a call is shorter than
        :data:`GRAPH_BELOW_S` (launch-bound), the replay time of a graph of :data:`GRAPH_CALLS`
        calls divided by their number. ``fn(i)`` may rotate inputs by ``i``."""
        for i in range(warmup):
            fn(i)
        self.synchronize()
        times = time_events(fn, reps, start=warmup)
        self.last_timing = "events"
        if self.graphs and statistics.median(times) < GRAPH_BELOW_S:
            try:
                times = time_graph(fn, reps)
                self.last_timing = "graph"
            except Exception:  # capture unsupported by this callable: keep the event timings
                self.synchronize()
        return times


def time_events(fn: Callable[[int], None], reps: int, start: int = 0) -> list[float]:
    """Per-call device time (s) measured with a pair of CUDA events around each call."""
    import torch

    pairs = []
    for i in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(start + i)
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in pairs]


def time_graph(fn: Callable[[int], None], reps: int, calls: int = GRAPH_CALLS) -> list[float]:
    """Per-call device time (s) of ``calls`` launches captured in one CUDA graph, replayed ``reps`` times."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up on the capture stream, as torch asks
        for i in range(calls):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 / calls for s, e in pairs]


def guarded(shape: tuple[int, ...], dtype, guard: int = GUARD):
    """(flat buffer, view): the view has ``shape`` in the middle of a NaN-filled flat buffer."""
    import torch

    n = 1
    for d in shape:
        n *= d
    flat = torch.full((n + 2 * guard,), float("nan"), dtype=dtype, device="cuda")
    return flat, flat[guard: guard + n].view(shape)


def guards_intact(flat, guard: int = GUARD) -> bool:
    import torch

    return bool(torch.isnan(flat[:guard]).all() and torch.isnan(flat[-guard:]).all())


def compare(out, ref, atol: float, rtol: float) -> CheckResult:
    """Elementwise |out - ref| <= atol + rtol |ref| on the GPU, in float64."""
    import torch

    o = out.double()
    if torch.isnan(o).any():
        bad = int(torch.isnan(o).sum())
        return CheckResult(False, "nan_output", float("nan"), float("nan"), f"{bad} of {o.numel()} outputs are NaN (unwritten?)")
    err = (o - ref).abs()
    max_abs = float(err.max()) if err.numel() else 0.0
    rel = float(torch.linalg.vector_norm(o - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-300))
    bad = err > atol + rtol * ref.abs()
    if bool(bad.any()):
        idx = int(bad.flatten().nonzero()[0])
        return CheckResult(False, "wrong_result", max_abs, rel,
                           f"{int(bad.sum())} elements out of tolerance; first at flat index {idx}: "
                           f"got {float(o.flatten()[idx]):.6g}, want {float(ref.flatten()[idx]):.6g}")
    return CheckResult(True, "", max_abs, rel)


class GpuHarness(Harness):
    """Common harness: subclasses say which tensors are inputs, outputs and how to get the reference.

    A case's ``data`` holds torch tensors: the inputs, each output's view, and ``"_flat_<name>"``
    for the guarded buffer behind each output. ``pristine`` holds copies of the inputs.
    """

    outputs: tuple[str, ...] = ("out",)
    #: outputs that are also inputs (updated in place, e.g. RMSNorm's residual)
    inplace: tuple[str, ...] = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ref_cache: dict[tuple, dict] = {}

    # -- what a workload supplies -------------------------------------------------------------
    @abstractmethod
    def new_inputs(self, shape: dict, gen) -> dict:
        """Fresh random input tensors on the GPU drawn from ``gen`` (a seeded torch generator)."""

    @abstractmethod
    def output_shapes(self, shape: dict) -> dict[str, tuple[int, ...]]:
        """Shape of every output (in-place outputs included)."""

    @abstractmethod
    def reference(self, inputs: dict, shape: dict) -> dict:
        """float64 reference outputs computed on the GPU from the inputs."""

    @abstractmethod
    def tolerance(self, name: str) -> tuple[float, float]:
        """(atol, rtol) for output ``name``."""

    @property
    def dtype(self):
        return torch_dtype(self.problem["dtype"])

    # -- the Harness contract -------------------------------------------------------------------
    def make_case(self, shape: dict, seed: int) -> Case:
        import torch

        gen = torch.Generator(device="cuda")
        gen.manual_seed(seed)
        inputs = self.new_inputs(shape, gen)
        case = Case(shape=dict(shape))
        key = (tuple(sorted(shape.items())), seed)
        if key not in self._ref_cache:
            self._ref_cache = {key: self.reference(inputs, shape)}  # keep one: references can be GBs
        case.expected = self._ref_cache[key]
        for name, shp in self.output_shapes(shape).items():
            flat, view = guarded(shp, self.dtype)
            if name in inputs:  # in-place: the input lives inside the guarded buffer
                view.copy_(inputs[name])
            case.data["_flat_" + name] = flat
            case.data[name] = view
        for name, t in inputs.items():
            case.data.setdefault(name, t)
            case.pristine[name] = t.clone()
        return case

    def reset_outputs(self, case: Case) -> None:
        for name in self.outputs:
            if name in self.inplace:
                case.data[name].copy_(case.pristine[name])
            else:
                case.data[name].fill_(float("nan"))

    def check(self, case: Case) -> CheckResult:
        import torch

        torch.cuda.synchronize()
        for name in self.output_shapes(case.shape):
            if not guards_intact(case.data["_flat_" + name]):
                return CheckResult(False, "out_of_bounds_write", detail=f"guard zone around {name!r} was written")
        for name, t in case.pristine.items():
            if name in self.inplace:
                continue
            if not torch.equal(case.data[name], t):
                return CheckResult(False, "input_modified", detail=f"input {name!r} changed")
        worst = CheckResult(True)
        for name, ref in case.expected.items():
            atol, rtol = self.tolerance(name)
            res = compare(case.data[name], ref, atol, rtol)
            if not res.ok:
                res.detail = f"{name}: {res.detail}"
                return res
            worst.max_abs_err = max(worst.max_abs_err, res.max_abs_err)
            worst.rel_err = max(worst.rel_err, res.rel_err)
        return worst

    def output_bytes(self, case: Case) -> bytes:
        import torch

        parts = [case.data[n].contiguous().view(torch.uint8).cpu().numpy().tobytes() for n in self.outputs]
        return b"".join(parts)

    def baseline_memory_bytes(self, name: str, case: Case) -> int:
        """Peak bytes a baseline allocates beyond what is live before it runs (torch allocator)."""
        import torch

        fn = self.baselines()[name]
        fn(case)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        fn(case)
        torch.cuda.synchronize()
        # The baseline allocates its own output; that is output, not extra memory.
        out_bytes = sum(case.data[n].numel() * case.data[n].element_size() for n in self.outputs if n not in self.inplace)
        return max(0, torch.cuda.max_memory_allocated() - before - out_bytes)


def current_stream_ptr() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def summarize(times: list[float]) -> dict[str, Any]:
    """Median and spread (interquartile range) in microseconds."""
    q = statistics.quantiles(times, n=4) if len(times) >= 4 else [min(times), 0, max(times)]
    return {"time_us": statistics.median(times) * 1e6, "spread_us": (q[2] - q[0]) * 1e6, "n": len(times)}
