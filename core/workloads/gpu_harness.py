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
GRAPH_BELOW_S = 1e-3  # below this a launch's CPU cost (Python, Triton/dynamo dispatch) can leak into
# per-call events (seen on the H200: torch.compile RMSNorm 71-95 us by events): time under CUDA graphs
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

    def onchip_bytes(self, artifact) -> int:
        """Registers x threads x 4 + shared memory per block, preferring what the loaded kernel
        reported (the function's own attributes, or Triton's compiled handle) over estimates."""
        r = dict(artifact.resources)
        kernel = getattr(self, "_kernel", None)
        if kernel is not None and getattr(kernel, "resources", None):
            r.update(kernel.resources)
        return int(r.get("registers", 0)) * int(r.get("threads", 0)) * 4 + int(r.get("shared_bytes", 0))

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


# ---------------------------------------------------------------------------------------------
# Workload harness bases shared by the cuda and triton templates
# ---------------------------------------------------------------------------------------------
class GemmHarnessBase(GpuHarness):
    """GEMM C = A @ B on torch tensors; baselines are cuBLAS through torch.matmul and cupy.matmul."""

    outputs = ("c",)

    def new_inputs(self, shape: dict, gen) -> dict:
        import torch

        m, n, k = shape["m"], shape["n"], shape["k"]
        scale = k ** -0.25  # outputs ~ N(0, 1) whatever K is
        a = (torch.randn(m, k, generator=gen, device="cuda") * scale).to(self.dtype)
        b = (torch.randn(k, n, generator=gen, device="cuda") * scale).to(self.dtype)
        return {"a": a, "b": b}

    def output_shapes(self, shape: dict) -> dict:
        return {"c": (shape["m"], shape["n"])}

    def reference(self, inputs: dict, shape: dict) -> dict:
        return {"c": inputs["a"].double() @ inputs["b"].double()}

    def tolerance(self, name: str) -> tuple[float, float]:
        return GEMM_TOL[self.problem["dtype"]]

    def baselines(self) -> dict:
        import torch

        out = {"cublas_torch": lambda case: torch.matmul(case.data["a"], case.data["b"], out=case.data["c"])}
        try:
            import cupy

            cupy.from_dlpack(torch.ones(2, 2, device="cuda", dtype=self.dtype))  # bf16 needs a recent cupy

            def cupy_mm(case):
                if "_cp" not in case.data:
                    case.data["_cp"] = tuple(cupy.from_dlpack(case.data[n]) for n in ("a", "b", "c"))
                a, b, c = case.data["_cp"]
                with cupy.cuda.ExternalStream(current_stream_ptr()):
                    cupy.matmul(a, b, out=c)

            out["cublas_cupy"] = cupy_mm
        except Exception:  # cupy cannot hold this dtype: torch's cuBLAS stays the baseline
            pass
        return out


def rms_forward_native(x, weight, eps: float, residual=None):
    """vLLM's ``RMSNorm.forward_native`` (eager PyTorch), with its fused residual variant."""
    import torch

    orig = x.dtype
    x = x.to(torch.float32)
    if residual is not None:
        x = x + residual.to(torch.float32)
        residual = x.to(orig)
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    x = x.to(orig) * weight
    return x if residual is None else (x, residual)


class RmsNormHarnessBase(GpuHarness):
    """RMSNorm on torch tensors: ``x``, ``w`` (and ``residual``, updated in place) -> ``out``.

    Baselines: vLLM's forward_native under torch.compile (the first, normalising fitness: it is
    what vLLM runs by default), the same in eager mode, and F.rms_norm.
    """

    tol = (1e-2, 1e-2)  # vLLM's RMSNorm tests

    @property
    def outputs(self):  # type: ignore[override]
        return ("out", "residual") if self.problem.get("residual") else ("out",)

    @property
    def inplace(self):  # type: ignore[override]
        return ("residual",) if self.problem.get("residual") else ()

    def new_inputs(self, shape: dict, gen) -> dict:
        import torch

        r, c = shape["rows"], shape["cols"]
        d = {"x": torch.randn(r, c, generator=gen, device="cuda").to(self.dtype),
             "w": (1.0 + 0.5 * torch.randn(c, generator=gen, device="cuda")).to(self.dtype)}
        if self.problem.get("residual"):
            d["residual"] = torch.randn(r, c, generator=gen, device="cuda").to(self.dtype)
        return d

    def output_shapes(self, shape: dict) -> dict:
        s = (shape["rows"], shape["cols"])
        return {"out": s, "residual": s} if self.problem.get("residual") else {"out": s}

    def reference(self, inputs: dict, shape: dict) -> dict:
        x = inputs["x"].double()
        ref = {}
        if self.problem.get("residual"):
            x = x + inputs["residual"].double()
            ref["residual"] = x.clone()
        rms = (x.pow(2).mean(-1, keepdim=True) + self.problem["eps"]).sqrt()
        ref["out"] = x / rms * inputs["w"].double()
        return ref

    def tolerance(self, name: str) -> tuple[float, float]:
        return self.tol

    def accept_baseline_result(self, case, result) -> None:
        """forward_native and F.rms_norm return new tensors (and the new residual): copy them in."""
        if result is None:
            return
        out, residual = result if isinstance(result, tuple) else (result, None)
        case.data["out"].copy_(out)
        if residual is not None:
            case.data["residual"].copy_(residual)

    def baselines(self) -> dict:
        import torch

        eps, res = self.problem["eps"], self.problem.get("residual")
        compiled = torch.compile(rms_forward_native, dynamic=False)

        def args(case):
            d = case.data
            return (d["x"], d["w"], eps, d["residual"] if res else None)

        # torch.compile first: it is what vLLM runs by default, so it normalises the fitness.
        out = {"vllm_native_compile": lambda case: compiled(*args(case)),
               "vllm_native_eager": lambda case: rms_forward_native(*args(case))}
        if not res:
            out["torch_rms_norm"] = lambda case: torch.nn.functional.rms_norm(case.data["x"], (case.shape["cols"],), case.data["w"], eps)
        return out


_STANDALONE = r'''#!/usr/bin/env python3
"""AbeBot champion, exported standalone: compiles the kernel, re-verifies it on fresh random inputs
(the odd shapes too) against a float64 reference, times it against the library baseline, and exits
non-zero when verification fails. Needs torch (+ cupy for CUDA C, triton for Triton) and a GPU."""
import importlib.util, sys, tempfile
import torch

WORKLOAD, BACKEND = {workload!r}, {backend!r}
PROBLEM = {problem!r}
SHAPES = {shapes!r}
LAUNCH, ENTRY, FLAGS = {launch!r}, {entry!r}, {flags!r}
SOURCE = {source!r}
DT = getattr(torch, PROBLEM["dtype"])


def load():
    if BACKEND == "triton":
        path = tempfile.NamedTemporaryFile("w", suffix=".py", delete=False)
        path.write(SOURCE); path.close()
        spec = importlib.util.spec_from_file_location("abebot_champion", path.name)
        mod = importlib.util.module_from_spec(spec); sys.modules["abebot_champion"] = mod; spec.loader.exec_module(mod)
        return mod
    import cupy
    return cupy.RawModule(code=SOURCE, options=tuple(FLAGS)).get_function(ENTRY)


def ptr(t):
    import numpy as np
    return np.uint64(t.data_ptr())


def run(k, d, s):
    import numpy as np
    if WORKLOAD == "gemm":
        if BACKEND == "triton":
            ws = torch.empty(max(1, k.workspace_bytes(s["m"], s["n"], s["k"]) // 4), device="cuda")
            return k.launch(d["a"], d["b"], d["c"], ws)
        smem = LAUNCH["dynamic_shared_bytes"]
        if smem > 48 * 1024:
            k.max_dynamic_shared_size_bytes = smem
        tiles = -(-s["m"] // LAUNCH["block_m"]) * -(-s["n"] // LAUNCH["block_n"])
        return k((tiles,), (LAUNCH["threads"],), (ptr(d["a"]), ptr(d["b"]), ptr(d["c"]), np.int32(s["m"]), np.int32(s["n"]), np.int32(s["k"])), shared_mem=smem)
    res = d.get("residual")
    if BACKEND == "triton":
        return k.launch(d["x"], d["w"], d["out"], res, PROBLEM["eps"])
    blocks = -(-s["rows"] // LAUNCH["rows_per_block"])
    if LAUNCH["persistent"]:
        blocks = min(blocks, torch.cuda.get_device_properties(0).multi_processor_count * LAUNCH["waves"])
    return k((blocks,), (LAUNCH["threads"],), (ptr(d["x"]), ptr(d["w"]), ptr(res if res is not None else d["x"]), ptr(d["out"]),
             np.int32(s["rows"]), np.int32(s["cols"]), np.float32(PROBLEM["eps"])))


def case(s):
    if WORKLOAD == "gemm":
        a = (torch.randn(s["m"], s["k"], device="cuda") * s["k"] ** -0.25).to(DT)
        b = (torch.randn(s["k"], s["n"], device="cuda") * s["k"] ** -0.25).to(DT)
        d = {{"a": a, "b": b, "c": torch.full((s["m"], s["n"]), float("nan"), device="cuda", dtype=DT)}}
        return d, {{"c": a.double() @ b.double()}}, lambda: torch.matmul(a, b)
    x = torch.randn(s["rows"], s["cols"], device="cuda").to(DT)
    w = (1 + 0.5 * torch.randn(s["cols"], device="cuda")).to(DT)
    d = {{"x": x, "w": w, "out": torch.full_like(x, float("nan"))}}
    xx = x.double()
    ref = {{}}
    if PROBLEM.get("residual"):
        r = torch.randn_like(x)
        d["residual"] = r.clone()
        xx = xx + r.double()
        ref["residual"] = xx
    ref["out"] = xx / (xx.pow(2).mean(-1, keepdim=True) + PROBLEM["eps"]).sqrt() * w.double()
    return d, ref, lambda: torch.nn.functional.rms_norm(x, (s["cols"],), w, PROBLEM["eps"])


def main():
    k = load()
    tol = {{"bfloat16": (1e-3, 1.6e-2), "float16": (1e-3, 1e-3), "float32": (1e-4, 1e-4)}}[PROBLEM["dtype"]]
    if WORKLOAD == "rmsnorm":
        tol = (1e-2, 1e-2)
    ok = True
    for s in SHAPES:
        torch.manual_seed(1234)
        d, ref, _ = case(s)
        run(k, d, s)
        torch.cuda.synchronize()
        for name, r in ref.items():
            o = d[name].double()
            good = bool(((o - r).abs() <= tol[0] + tol[1] * r.abs()).all())
            print(f"{{s}} {{name}}: {{'ok' if good else 'WRONG'}} max|err| {{float((o - r).abs().max()):.3g}}")
            ok &= good
    import triton.testing as tt
    d, _, base = case(SHAPES[0])
    t_k = tt.do_bench(lambda: run(k, d, SHAPES[0]), return_mode="median")
    t_b = tt.do_bench(base, return_mode="median")
    print(f"kernel {{t_k * 1e3:.1f}} us, torch baseline {{t_b * 1e3:.1f}} us, speed-up {{t_b / t_k:.3f}}x")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
'''


def standalone_script(workload: str, kernel, problem: dict) -> str:
    """A self-contained script that recompiles, re-verifies and times ``kernel`` (exported with a champion)."""
    from core.workloads import get_workload

    shapes = get_workload(workload).shapes(problem)
    return _STANDALONE.format(workload=workload, backend=kernel.backend, problem=dict(problem), shapes=shapes,
                              launch=dict(kernel.launch), entry=kernel.entry, flags=list(kernel.flags), source=kernel.source)
