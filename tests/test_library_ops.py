"""The library's torch ops: custom ops with fake implementations, so ``torch.compile`` keeps them as
one node each and CUDA graphs capture their launches; eager and compiled calls dispatch to the same
C kernels (CPU) and agree with the native path."""
from __future__ import annotations

import pytest
import torch

from core.backends import availability
from core.library import native, ops
from core.library.dispatcher import Dispatcher
from core.library.manifest import Library
from core.library.verify import VerifiedCache
from tests.test_library_dispatch_support import c_library

ROWS, COLS, HEADS, KV, HALF, INTER, N, K = 4, 128, 2, 1, 16, 128, 64, 256

needs_c = pytest.mark.skipif(availability("c") is not None, reason="no C compiler with OpenMP")


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    if availability("c") is not None:
        pytest.skip("no C compiler with OpenMP")
    root, cache = tmp_path_factory.mktemp("lib"), tmp_path_factory.mktemp("cc")
    return c_library(root, [
        ("rmsnorm", {"rows": ROWS, "cols": COLS, "residual": True, "eps": 1e-5}),
        ("rope", {"tokens": ROWS, "q_heads": HEADS, "kv_heads": KV, "half_dim": HALF, "max_positions": 64}),
        ("silu_mul", {"tokens": ROWS, "hidden": INTER}),
        ("w4a16", {"m": ROWS, "n": N, "k_groups": K // 128, "zero_points": False}),
    ], cache, seed=1)


def use(lib, tmp_path) -> Dispatcher:
    d = Dispatcher(lib, verified=VerifiedCache(tmp_path / "v.json"), build_dir=tmp_path / "b", log_misses=False)
    ops.activate(d)
    return d


def inputs() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"x": torch.randn(ROWS, COLS, generator=g), "res": torch.randn(ROWS, COLS, generator=g),
            "w": torch.rand(COLS, generator=g) + 0.5, "pos": torch.randint(0, 64, (ROWS,), generator=g, dtype=torch.int32),
            "cache": torch.rand(64, 2, HALF, generator=g) * 2 - 1,
            "q": torch.randn(ROWS, HEADS * 2 * HALF, generator=g), "k": torch.randn(ROWS, KV * 2 * HALF, generator=g),
            "gate": torch.randn(ROWS, INTER, generator=g), "up": torch.randn(ROWS, INTER, generator=g),
            "a": torch.randn(ROWS, K, generator=g), "qw": torch.randint(-2**31, 2**31 - 1, (K // 8, N), generator=g,
                                                                        dtype=torch.int32),
            "s": torch.rand(K // 128, N, generator=g) * 0.01 + 0.005}


def step(t: dict) -> tuple:
    """Every op once: the residual norm, rope in place, silu_mul and the 4-bit product."""
    res = t["res"].clone()
    normed = ops.rmsnorm(t["x"], t["w"], res, 1e-5)
    q, k = t["q"].clone(), t["k"].clone()
    ops.rope(t["pos"], q, k, t["cache"])
    return normed, res, q, k, ops.silu_mul(t["gate"], t["up"]), ops.w4a16(t["a"], t["qw"], t["s"])


def native_step(t: dict) -> tuple:
    res = t["res"].clone()
    normed = native.rmsnorm(t["x"], t["w"], res, 1e-5)
    q, k = t["q"].clone(), t["k"].clone()
    native.rope(t["pos"], q.view(ROWS, HEADS, 2, HALF), k.view(ROWS, KV, 2, HALF), t["cache"])
    return normed, res, q, k, native.silu_mul(t["gate"], t["up"]), native.w4a16(t["a"], t["qw"].view(-1, 16, N), t["s"], None)


def test_every_op_is_a_registered_custom_op_with_a_fake():
    for name in ("rmsnorm", "rope", "silu_mul", "w4a16"):
        op = getattr(torch.ops.abebot, name).default
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Meta"), name


def test_without_a_dispatcher_the_ops_run_the_native_path():
    t = inputs()
    for got, want in zip(step(t), native_step(t)):
        torch.testing.assert_close(got, want)


@needs_c
def test_eager_ops_run_the_library_kernels_and_agree_with_the_native_path(lib, tmp_path):
    d = use(lib, tmp_path)
    t = inputs()
    for got, want in zip(step(t), native_step(t)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert d.calls_by() == {"exact": 4}


@needs_c
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])  # inductor passes too, in 20 s here: too slow for the suite
def test_torch_compile_keeps_each_op_whole_and_dispatches_to_the_kernels(lib, tmp_path, backend):
    d = use(lib, tmp_path)
    t = inputs()
    compiled = torch.compile(step, backend=backend, fullgraph=True)  # fullgraph: no graph break anywhere
    for got, want in zip(compiled(t), native_step(t)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert d.calls_by() == {"exact": 4}


@needs_c
def test_the_fake_ops_give_the_output_shapes_without_running_anything(lib, tmp_path):
    d = use(lib, tmp_path)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        t = {k: mode.from_tensor(v) for k, v in inputs().items()}
        y = torch.ops.abebot.w4a16(t["a"], t["qw"], t["s"], None)
        out = torch.ops.abebot.rmsnorm(t["x"], t["w"], t["res"], 1e-5)
    assert tuple(y.shape) == (ROWS, N) and tuple(out.shape) == (ROWS, COLS)
    assert d.counts() == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the lead runs it on the H200)")
def test_a_cuda_graph_captures_the_ops_and_replays_them():
    """With no library active the ops run natively; the capture must still record them (the
    library path on a GPU is covered by benchmarks/tools/library_overhead.py)."""
    dev = torch.device("cuda")
    x, w = torch.randn(ROWS, COLS, device=dev), torch.rand(COLS, device=dev) + 0.5
    gate, up = torch.randn(ROWS, INTER, device=dev), torch.randn(ROWS, INTER, device=dev)
    ops.activate(Dispatcher(Library(), log_misses=False))
    ops.rmsnorm(x, w, None, 1e-5), ops.silu_mul(gate, up)  # warm-up: resolution happens outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, act = ops.rmsnorm(x, w, None, 1e-5), ops.silu_mul(gate, up)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, native.rmsnorm(x, w, None, 1e-5))
    torch.testing.assert_close(act, native.silu_mul(gate, up))


@pytest.mark.skipif(not torch.cuda.is_available() or availability("cuda") is not None,
                    reason="needs a CUDA GPU and the cuda backend (the lead runs it on the H200)")
def test_a_cuda_graph_captures_library_kernels_launched_through_culaunchkernel(tmp_path):
    """CUDA C entries (seed genomes, bf16) run through the packed cuLaunchKernel path, eagerly and
    replayed from a captured graph on new inputs written into the captured tensors."""
    from core.library.from_genome import seed_library

    lib = seed_library(tmp_path / "lib", [("rmsnorm", {"rows": ROWS, "cols": 1024, "residual": True}),
                                          ("rmsnorm", {"rows": ROWS, "cols": 1024, "residual": False}),
                                          ("silu_mul", {"tokens": ROWS, "hidden": 2048})], "cuda", tmp_path / "cc")
    d = use(lib, tmp_path)
    dev, bf = torch.device("cuda"), torch.bfloat16
    x, res = torch.randn(ROWS, 1024, device=dev, dtype=bf), torch.randn(ROWS, 1024, device=dev, dtype=bf)
    w = (torch.rand(1024, device=dev) + 0.5).to(bf)
    gate, up = torch.randn(ROWS, 2048, device=dev, dtype=bf), torch.randn(ROWS, 2048, device=dev, dtype=bf)
    r0 = res.clone()
    torch.testing.assert_close(ops.rmsnorm(x, w, res, 1e-6), native.rmsnorm(x, w, r0, 1e-6), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(res, r0, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(ops.silu_mul(gate, up), native.silu_mul(gate, up), atol=2e-2, rtol=2e-2)
    ops.rmsnorm(x, w, None, 1e-6)  # the first call of each shape loads and verifies: never inside a capture
    torch.cuda.synchronize()
    assert d.calls_by() == {"exact": 3} and not d.refused
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, act = ops.rmsnorm(x, w, None, 1e-6), ops.silu_mul(gate, up)
    x.copy_(torch.randn_like(x))
    gate.copy_(torch.randn_like(gate))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, native.rmsnorm(x, w, None, 1e-6), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(act, native.silu_mul(gate, up), atol=2e-2, rtol=2e-2)
    assert d.calls_by() == {"exact": 5}
