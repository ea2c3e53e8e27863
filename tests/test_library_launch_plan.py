"""The ops' eager fast path (core/library/fast_launch_plan.py): after the first call of a key the
next ones skip the dispatcher, still count, write each call's tensors, and fall back where the plan
does not fit. Real C kernels on the CPU; a stub driver for the compiled launcher's direct call."""
from __future__ import annotations

import pytest
import torch

from core.library import ops
from core.library.dispatcher import Dispatcher
from core.library.fast_launch_plan import Plan, make_plan
from core.library.launch import FastCudaKernel
from tests.test_library_launch_compiled import CudaKernel, built, stub_driver  # noqa: F401 -- fixtures
from tests.test_library_ops import ROWS, inputs, lib, native_step, needs_c, step, use  # noqa: F401 -- fixtures


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


def counting_runs(d: Dispatcher) -> list:
    """Every op name ``d.run`` is called with, from now on."""
    seen, real = [], d.run

    def spy(op, *a, **kw):
        seen.append(op)
        return real(op, *a, **kw)

    d.run = spy
    return seen


def fresh(t: dict) -> dict:
    """New tensors (new addresses) with new values, the weights kept."""
    g = torch.Generator().manual_seed(len(t) + int(t["x"].sum() * 1000) % 997)
    return {k: (v if k in ("qw", "s", "w", "cache", "pos") else torch.randn(v.shape, generator=g)) for k, v in t.items()}


@needs_c
def test_after_the_first_call_the_ops_skip_the_dispatcher_and_still_count(lib, tmp_path):
    d = use(lib, tmp_path)
    t = inputs()
    step(t)
    assert sum(p is not None for p in ops._plans.values()) == 4
    runs = counting_runs(d)
    for _ in range(3):
        t = fresh(t)
        for got, want in zip(step(t), native_step(t)):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert runs == [] and d.calls_by() == {"exact": 16}


@needs_c
def test_a_call_the_plan_does_not_fit_takes_the_dispatcher_path(lib, tmp_path):
    from core.library import native

    d = use(lib, tmp_path)
    t = inputs()
    step(t)
    gate, up = t["gate"], t["up"].double()  # mixed dtypes: refused by the plan's check, then native
    torch.testing.assert_close(ops.silu_mul(gate, up), native.silu_mul(gate.double(), up))
    wide = torch.randn(ROWS, 2 * t["x"].shape[1])[:, ::2]  # not contiguous: the dispatcher path, then native
    res = t["res"].clone()
    want_res = res.clone()
    torch.testing.assert_close(ops.rmsnorm(wide, t["w"], res, 1e-5), native.rmsnorm(wide.contiguous(), t["w"], want_res, 1e-5))
    torch.testing.assert_close(res, want_res)
    assert d.calls_by() == {"exact": 4}  # neither ran a library kernel


@needs_c
def test_activating_another_dispatcher_drops_the_plans(lib, tmp_path):
    use(lib, tmp_path)
    step(inputs())
    assert ops._plans
    ops.activate(Dispatcher(lib, log_misses=False, build_dir=tmp_path / "b2"))
    assert ops._plans == {}


@needs_c
def test_a_key_served_natively_is_remembered_without_a_plan(lib, tmp_path):
    d = use(lib, tmp_path)
    x, w = torch.randn(3, 96), torch.rand(96) + 0.5  # no entry of 96 columns: native
    ops.rmsnorm(x, w, None, 1e-5)
    ops.rmsnorm(x, w, None, 1e-5)
    assert [p for k, p in ops._plans.items() if k[0] == "rmsnorm"] == [None]
    assert d.calls_by("rmsnorm") == {"native": 2}


class _Bound:
    def __init__(self, fn, slots):
        self.fn, self.slots = fn, slots


class _Dispatcher:
    """What make_plan asks a dispatcher: the resolution slot and the bound launcher."""

    def __init__(self, bound):
        self.slot, self._bound = [0, "key", "exact", None, None], bound

    def bound(self, *a):
        return self.slot, self._bound


def test_a_plan_calls_the_compiled_launch_directly_with_the_ops_tensors_in_its_order(stub_driver):
    mod, stub = stub_driver
    x, w, out = torch.randn(2, 8), torch.ones(8), torch.empty(2, 8)
    launch = FastCudaKernel(CudaKernel()).bind((2,), (64,), (x, w, x, out, 2, 8), 0)
    stub.nargs.value = 6
    # the bound launcher's slots name the workload's tensors by argument position
    bound = _Bound(launch, [(launch, (0, 1, 2, 3), ("x", "w", "x", "out"))])
    x2, w2, out2 = torch.randn(2, 8), torch.ones(8), torch.empty(2, 8)
    plan = make_plan(_Dispatcher(bound), "rmsnorm", {}, {}, "gpu", 0, ("out", "x", "w"), (out2, x2, w2), ("w",))
    assert isinstance(plan, Plan) and isinstance(plan.call, mod.Launch)
    plan.call(out2, x2, w2)
    assert stub.seen()["args"][:4] == [x2.data_ptr(), w2.data_ptr(), x2.data_ptr(), out2.data_ptr()]
    with pytest.raises(TypeError, match="w has dtype"):
        plan.call(out2, x2, w2.double())


def test_a_plan_over_several_launches_sets_each_then_runs_the_launcher(stub_driver):
    mod, stub = stub_driver
    a, b = torch.randn(4), torch.randn(4)
    first = FastCudaKernel(CudaKernel()).bind((1,), (32,), (a, 4), 0)
    second = FastCudaKernel(CudaKernel()).bind((3,), (32,), (b, a, 4), 0)
    stub.nargs.value = 2
    ran = []

    def fn():
        first()
        ran.append(stub.seen()["args"][:1])
        second()

    bound = _Bound(fn, [(first, (0,), ("a",)), (second, (0, 1), ("b", "a"))])
    a2, b2 = torch.randn(4), torch.randn(4)
    plan = make_plan(_Dispatcher(bound), "op", {}, {}, "gpu", 0, ("a", "b"), (a2, b2), ())
    plan.call(a2, b2)
    assert ran == [[a2.data_ptr()]] and stub.seen()["args"][:2] == [b2.data_ptr(), a2.data_ptr()]
    assert stub.seen()["grid"] == (3, 1, 1)


def test_no_plan_where_the_launcher_reads_a_tensor_the_op_does_not_pass(stub_driver):
    mod, stub = stub_driver
    t = torch.randn(4)
    launch = FastCudaKernel(CudaKernel()).bind((1,), (32,), (t, t), 0)
    bound = _Bound(launch, [(launch, (0, 1), ("x", "scratch"))])
    assert make_plan(_Dispatcher(bound), "op", {}, {}, "gpu", 0, ("x",), (t,), ()) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the lead runs it on the H200)")
def test_on_a_gpu_the_fast_path_launches_each_calls_tensors(tmp_path):
    from core.backends import availability
    from core.library import native
    from core.library.from_genome import seed_library

    if availability("cuda") is not None:
        pytest.skip("no cuda backend")
    lib = seed_library(tmp_path / "lib", [("silu_mul", {"tokens": 2, "hidden": 2048})], "cuda", tmp_path / "cc")
    d = use(lib, tmp_path)
    for i in range(4):
        gate, up = (torch.randn(2, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        torch.testing.assert_close(ops.silu_mul(gate, up), native.silu_mul(gate, up), atol=2e-2, rtol=2e-2)
    plans = [p for p in ops._plans.values() if p is not None]
    assert len(plans) == 1 and type(plans[0].call).__name__ == "Launch"  # the compiled launcher, called directly
    assert d.calls_by() == {"exact": 4}
