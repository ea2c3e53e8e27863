"""The runtime half shared by the GPU backends (``cuda`` and ``triton``), sandbox side only.

One CUDA device through torch: ``synchronize`` raises on sticky errors, timing uses CUDA events,
and launch-bound callables are also timed under CUDA graphs; ``evict`` empties the L2 for the
``cold`` cache policy. Harness
tensors are torch tensors on that device (``arrays``). torch is imported when a runtime is made,
so this module imports on a machine without CUDA.
"""
from __future__ import annotations

import functools
import statistics
import time
from typing import Callable

from core.backends.base import Runtime
from core.backends.torch_arrays import TorchArrays

GRAPH_BELOW_S = 1e-3  # below this a launch's CPU cost (Python, Triton/dynamo dispatch) can leak into
# per-call events (seen on the H200: torch.compile RMSNorm 71-95 us by events): time under CUDA graphs
GRAPH_CALLS = 20  # launches captured per graph; one replay's time / GRAPH_CALLS is one sample
# The device's spin before each event-timed call (time_events): the host's time to queue the last call,
# times the margin, plus the pad, at most the cap; cycles counted at the H200's 1.98 GHz boost clock (a
# slower clock spins longer, which costs nothing but time).
SPIN_MARGIN, SPIN_PAD_S, SPIN_CAP_S, SPIN_FIRST_S = 1.5, 10e-6, 2e-3, 50e-6
SPIN_CYCLES_PER_S = 1.98e9
EVICT_L2_TIMES = 2  # the scratch read that empties the L2 is this many times its size

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
        self._scratch = None  # (buffer, 0-d output) of the L2 eviction
        self.last_timing = "events"  # "events" or "graph": how the last ``time`` call measured
        self._captured: dict = {}  # (fn, before, graph_block, cache) -> replay, for one measurement's graphs

    def synchronize(self) -> None:
        """cudaDeviceSynchronize; a failed launch (illegal address, trap) raises here."""
        import torch

        torch.cuda.synchronize()

    can_evict = True

    def evict_method(self) -> str:
        return f"a read of a scratch buffer {EVICT_L2_TIMES}x the L2 after every preparation"

    def chain_times(self, fn: Callable[[int], None], launches: int, reps: int) -> list[float]:
        """Seconds per launch of a CUDA graph of ``fn(0) ... fn(launches - 1)``: each sample is its
        replay less the replay of ``fn(0)`` alone, over ``launches - 1`` (:func:`replay_chain`
        with no preparation graph), so what launching a graph costs cancels."""
        launches = max(2, launches)
        replay = functools.partial(replay_chain, *capture_chain(fn, None, launches))
        try:
            return replay(reps)
        finally:
            self.synchronize()

    def host_overhead(self, fn: Callable[[int], None], calls: int = 50, reps: int = 5) -> float | None:
        """Host microseconds per eager call: ``calls`` calls queued back to back (the queue never
        fills at 50), timed by the host clock before the device is waited for; median of ``reps``."""
        import time as _time

        for i in range(3):
            fn(i)
        self.synchronize()
        out = []
        for _ in range(reps):
            t0 = _time.perf_counter()
            for i in range(calls):
                fn(i)
            out.append((_time.perf_counter() - t0) / calls * 1e6)
            self.synchronize()
        return statistics.median(out)

    def evict(self, arrays: list) -> None:
        """Empty the L2: read a scratch buffer :data:`EVICT_L2_TIMES` times its size (one reduction
        kernel, capturable in a graph). A read, not a write, so the lines it leaves are clean and the
        timed launch pays no write-back of the eviction's own data."""
        import torch

        if self._scratch is None:
            l2 = int(torch.cuda.get_device_properties(self.device_index).L2_cache_size) or (64 << 20)
            buf = torch.ones(EVICT_L2_TIMES * l2 // 4, dtype=torch.float32, device=f"cuda:{self.device_index}")
            self._scratch = (buf, torch.empty((), dtype=torch.float32, device=buf.device))
        buf, out = self._scratch
        torch.sum(buf, dim=0, out=out)

    def empty_launch(self) -> Callable[[int], None]:
        """One kernel that writes one element (torch's fill)."""
        import torch

        one = torch.zeros(1, dtype=torch.int32, device=f"cuda:{self.device_index}")
        return lambda _i: one.zero_()

    def time(self, fn: Callable[[int], None], reps: int, warmup: int,
             before: Callable[[int], None] | None = None, after: Callable[[int], None] | None = None,
             method: str | None = None) -> list[float]:
        """Seconds per call: CUDA events around each call, with ``before``/``after`` and an L2 flush
        outside the events; when a call is shorter than :data:`GRAPH_BELOW_S`, also under graphs:
        a chain of launches on ``graph_block`` prepared cases (:func:`replay_chain`), or where
        ``graph_block`` is 1, a graph of :data:`GRAPH_CALLS` prepared calls less the preparations
        alone (:func:`time_graph`); the faster of the two (by median) is returned. The same rule
        holds for kernels and baselines: graphs remove Python launch cost that per-call events would
        count, while cuBLAS picked slower kernels under capture on the H200 (4096^3 bf16: 171 us by
        events, 195 us in a graph), so neither method alone is fair to every callable. Under a graph
        ``after`` is not called: the harness checks the last replay's outputs instead.

        ``method`` ("events" or "graph", a previous call's ``last_timing``) skips the choice and
        times that way only, so one measurement's chunks compare like with like."""
        before = before or _nothing
        after = after or _nothing
        if method == "graph" and self.graphs:
            # No eager warm-up here: the graphs warm up themselves, and an eager launch would leave
            # the outputs (and the harness's record of each case's last permutation) out of step
            # with the graphs' replays.
            try:
                return self._time_graph(fn, reps, before)
            except Exception:  # capture failed this time: fall back to checked per-call events
                self._captured.clear()
                end_failed_capture()
        for i in range(warmup):
            before(i)
            fn(i)
            after(i)
        self.synchronize()
        times = time_events(fn, reps, start=warmup, before=before, after=after)
        self.last_timing = "events"
        if self.graphs and method is None and statistics.median(times) < GRAPH_BELOW_S:
            graph = self._capture_twice(fn, reps, before)
            if graph is None:  # capture unsupported by this callable: keep the event timings
                for i in range(GRAPH_CALLS):  # leave every case as an eager, logged launch left it
                    before(i)
                    fn(i)
                    after(i)
            elif statistics.median(graph) < statistics.median(times):
                times, self.last_timing = graph, "graph"
        return times

    def _capture_twice(self, fn: Callable[[int], None], reps: int, before: Callable[[int], None]) -> list[float] | None:
        """:meth:`_time_graph`, tried a second time when the first capture raises: a torch.compile'd
        callable may compile again on its first call under capture, which fails, and capture on the
        next try. (On the H200 the fused RMSNorm + int4 baseline took 130 us by events, its host
        cost included, against 27.7 us when a later capture succeeded; timed by events, it was not
        chosen as the fastest baseline, and the fused kernel was scored against a 4x slower one.)"""
        for _ in range(2):
            try:
                return self._time_graph(fn, reps, before)
            except Exception:
                self._captured.clear()
                end_failed_capture()
        return None


    def forget(self) -> None:
        """Release the graphs (and the cases they reference) of the last measurement."""
        self._captured.clear()

    def _time_graph(self, fn: Callable[[int], None], reps: int, before: Callable[[int], None]) -> list[float]:
        """The graphs of ``fn`` and ``before``, captured once per measurement (its later chunks, and
        the other side of a paired measurement, only replay them):

        * no preparation at all (an empty launch): :func:`replay_chain` of :data:`GRAPH_CALLS`
          launches, with no preparation graph (an empty capture is what torch warned about);
        * ``cache = "hot"`` and ``graph_block`` >= 2: :func:`replay_chain` over ``graph_block``
          cases, each launch finding its inputs as the preparations left them;
        * otherwise (``cold``: every launch is preceded by its preparation and the L2 eviction):
          :func:`replay_graphs`, a graph of (preparation, launch) pairs less one of the
          preparations alone."""
        key = (fn, before, self.graph_block, self.cache)
        replay = self._captured.get(key)
        if replay is None:
            calls = min(GRAPH_CALLS, self.graph_block)
            if before is _nothing:
                replay = functools.partial(replay_chain, *capture_chain(fn, None, GRAPH_CALLS))
            elif self.cache == "hot" and calls >= 2:
                replay = functools.partial(replay_chain, *capture_chain(fn, before, calls))
            else:
                replay = functools.partial(replay_graphs, *capture_graphs(fn, before))
            self._captured[key] = replay
        return replay(reps)


def end_failed_capture() -> None:
    """Leave torch as a successful capture would. A capture that raised (a callable that syncs, as
    a kernel reading its output on the host does) never reached the generators' capture epilogue,
    so the default CUDA generator still believes it is capturing and the next eager draw raises
    "Offset increment outside graph capture"; an empty capture runs the prologue and epilogue."""
    import warnings

    import torch

    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty"
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
    torch.cuda.synchronize()


def _nothing(_i: int) -> None:
    return None


def time_events(fn: Callable[[int], None], reps: int, start: int = 0, before: Callable[[int], None] = _nothing,
                after: Callable[[int], None] = _nothing) -> list[float]:
    """Per-call device time (s) measured with a pair of CUDA events around each call; ``before`` and
    ``after`` are queued outside the pair.

    The device spins (``torch.cuda._sleep``) before the first event for longer than the host took to
    queue the previous call, so the call is queued whole before the events start: the pair measures
    the device's time, not the host's. Without it a callable whose host side outlasted the work queued
    before it (an L2-emptying read of about 35 us) was charged the difference
    (``tests/test_timing_gpu.py``: 300 us of host time before a launch)."""
    import torch

    pairs = []
    host_s = SPIN_FIRST_S  # the first call's host time is not known yet
    for i in range(start, start + reps):
        before(i)
        torch.cuda._sleep(int(min(SPIN_CAP_S, SPIN_MARGIN * host_s + SPIN_PAD_S) * SPIN_CYCLES_PER_S))
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        t0 = time.perf_counter()
        fn(i)
        host_s = max(time.perf_counter() - t0, 0.5 * host_s)  # a slow call's margin decays, not at once
        e.record()
        after(i)
        pairs.append((s, e))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e-3 for s, e in pairs]


def time_graph(fn: Callable[[int], None], reps: int, calls: int = GRAPH_CALLS,
               before: Callable[[int], None] = _nothing) -> list[float]:
    """Per-call device time (s) of ``calls`` prepared launches captured in one CUDA graph, replayed
    ``reps`` times, less the replay time of a graph of the preparations (``before``) alone."""
    return replay_graphs(*capture_graphs(fn, before, calls), reps)


def warm_up_for_capture(fn: Callable[[int], None], before: Callable[[int], None], calls: int) -> None:
    """``before(i); fn(i)`` for ``i < calls`` on a side stream, then synchronised: the warm-up torch
    asks for before a capture (lazy initialisation must not happen inside it)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(calls):
            before(i)
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()


def capture_graphs(fn: Callable[[int], None], before: Callable[[int], None] = _nothing, calls: int = GRAPH_CALLS):
    """(preparation graph, full graph, calls): ``before(i)`` alone, and ``before(i); fn(i)``, for
    ``i < calls``; ``before(i)`` must prepare the same work in both (the subtraction assumes it)."""
    import torch

    warm_up_for_capture(fn, before, calls)
    prep, full = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(prep):
        for i in range(calls):
            before(i)
    with torch.cuda.graph(full):  # captured last: the harness's record of each case is this graph's
        for i in range(calls):
            before(i)
            fn(i)
    return prep, full, calls


def replay_graphs(prep, full, calls: int, reps: int) -> list[float]:
    """Per-call seconds of ``reps`` replays of ``full`` less the median replay of ``prep`` (replayed
    just before, so both see the same clocks)."""
    prep_times = _replay(prep, max(5, reps // 2))
    full_times = _replay(full, reps)  # replayed last: the outputs left behind are a timed launch's
    base = statistics.median(prep_times)
    return [max(t - base, 0.0) / calls for t in full_times]


def _replay(graph, reps: int) -> list[float]:
    import torch

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
    return [s.elapsed_time(e) * 1e-3 for s, e in pairs]


def capture_chain(fn: Callable[[int], None], before: Callable[[int], None] | None, calls: int):
    """(preparation graph, one launch, chain of launches, calls): ``before(i)`` for ``i < calls``,
    ``fn(0)`` alone, and ``fn(i)`` for ``i < calls``, each its own graph (see :func:`replay_chain`).
    The calls must be on distinct cases: an in-place kernel must not find its case launched on.
    ``before`` None: no preparation graph (None in its place)."""
    import torch

    warm_up_for_capture(fn, before or _nothing, calls)
    prep, one, chain = None, torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    if before is not None:
        prep = torch.cuda.CUDAGraph()
        with torch.cuda.graph(prep):  # the harness's record of each case is this graph's preparation
            for i in range(calls):
                before(i)
    with torch.cuda.graph(one):
        fn(0)
    with torch.cuda.graph(chain):
        for i in range(calls):
            fn(i)
    return prep, one, chain, calls


def replay_chain(prep, one, chain, calls: int, reps: int) -> list[float]:
    """Per-call seconds of a chain of ``calls`` launches, no preparation timed: each sample is the
    replay of the chain less that of its first launch alone, over ``calls - 1``, both timed with
    events right after an untimed replay of the preparations (so the inputs are as warm as they
    leave them). The difference cancels what launching a graph costs and keeps what each further
    launch adds, as in a model's own graph.

    Why not a graph of (preparation, launch) pairs less one of the preparations, as
    :func:`time_graph` does: a launch changes what the preparation after it costs, and that was
    booked to the launch. On the H200 (session 13, calls 48-49) an RMSNorm with streaming cache
    hints (``.cs``) timed 0.75-1.04 us at 16 rows that way, plain hints 1.99-2.05 us, and an empty
    kernel 0.5-0.8 us +- 0.5, against 2.30, 2.33 and 0.90 us with no preparation timed."""
    import torch

    def timed(graph):
        if prep is not None:
            prep.replay()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        graph.replay()
        e.record()
        return s, e

    timed(one), timed(chain)  # warm replays
    torch.cuda.synchronize()
    pairs = [(timed(one), timed(chain)) for _ in range(reps)]  # the chain last: its outputs are left behind
    torch.cuda.synchronize()
    return [max(c[0].elapsed_time(c[1]) - o[0].elapsed_time(o[1]), 0.0) * 1e-3 / (calls - 1) for o, c in pairs]


def current_stream_ptr() -> int:
    """The raw handle of torch's current CUDA stream (kernels launched elsewhere join it)."""
    import torch

    return torch.cuda.current_stream().cuda_stream
