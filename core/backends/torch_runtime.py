"""The runtime half shared by the GPU backends (``cuda`` and ``triton``), sandbox side only.

One CUDA device through torch: ``synchronize`` raises on sticky errors, timing uses CUDA events,
and launch-bound callables are also timed under CUDA graphs; the L2 is flushed on demand. Harness
tensors are torch tensors on that device (``arrays``). torch is imported when a runtime is made,
so this module imports on a machine without CUDA.
"""
from __future__ import annotations

import statistics
from typing import Callable

from core.backends.base import Runtime
from core.backends.torch_arrays import TorchArrays

GRAPH_BELOW_S = 1e-3  # below this a launch's CPU cost (Python, Triton/dynamo dispatch) can leak into
# per-call events (seen on the H200: torch.compile RMSNorm 71-95 us by events): time under CUDA graphs
GRAPH_CALLS = 20  # launches captured per graph; one replay's time / GRAPH_CALLS is one sample
L2_FLUSH_BYTES = 256 << 20  # > 4x the H200's 60 MB L2

class TorchCudaRuntime(Runtime):
    """Runtime half shared by the GPU backends: one CUDA device, timed with events or graphs."""

    def __init__(self, device_index: int = 0, graphs: bool = True):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA device")
        torch.cuda.set_device(device_index)
        self.device_index = device_index
        self.arrays = TorchArrays(f"cuda:{device_index}")
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
        """Seconds per call: CUDA events around each call; when a call is shorter than
        :data:`GRAPH_BELOW_S`, also the replay time of a graph of :data:`GRAPH_CALLS` calls divided
        by their number, and the faster of the two (by median) is returned. The same rule holds for
        kernels and baselines: graphs remove Python launch cost that per-call events would count,
        while cuBLAS picked slower kernels under capture on the H200 (4096^3 bf16: 171 us by events,
        195 us in a graph), so neither method alone is fair to every callable."""
        for i in range(warmup):
            fn(i)
        self.synchronize()
        times = time_events(fn, reps, start=warmup)
        self.last_timing = "events"
        if self.graphs and statistics.median(times) < GRAPH_BELOW_S:
            try:
                graph = time_graph(fn, reps)
            except Exception:  # capture unsupported by this callable: keep the event timings
                self.synchronize()
            else:
                if statistics.median(graph) < statistics.median(times):
                    times, self.last_timing = graph, "graph"
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


def current_stream_ptr() -> int:
    """The raw handle of torch's current CUDA stream (kernels launched elsewhere join it)."""
    import torch

    return torch.cuda.current_stream().cuda_stream
