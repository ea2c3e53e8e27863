"""The evaluator end to end on the C backend: a good kernel, then planted faults.

Every fault goes through the same path the GA uses (render -> static check -> compile -> sandbox
running :class:`~core.evaluation.protocol.Protocol`), and the run must survive it: after each one a
good kernel still evaluates ``ok``. Planted kernels are hand-written C with the template's own
signature: they reuse a rendered :class:`KernelSource` through ``dataclasses.replace(kernel,
source=...)``, so the entry point and the ctypes argument types (``launch["argtypes"]``) come along.

The watchdog (:class:`~core.evaluation.sandbox.Sandbox`) and the timing rotation are tested on
their own, without a compiler.
"""
from __future__ import annotations

import dataclasses
import random

import pytest

from core.backends import availability
from core.backends.base import DeviceInfo, KernelSource
from core.config import RunConfig
from core.evaluation.evaluator import Evaluator
from core.evaluation.record import STATUSES, Evaluation
from core.evaluation.sandbox import Sandbox
from core.evaluation.rooflines import ALLOWANCE, LAUNCH_SHARE, suspect_floor_us
from core.evaluation.timing import graph_block, timing_case_count

C_UNAVAILABLE = availability("c")
needs_c = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")

GOOD = r"""
void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
    %s
}
"""

FAULTS = {  # name -> (C statement appended to a correct gemm, expected status, text expected in the cause)
    "wrong_result": ("C[(M / 2) * N + N / 2] += 1.0f;", "wrong_result", "wrong_result"),
    "out_of_bounds": ("C[M * N] = 0.0f; C[M * N + 1] = 0.0f;", "wrong_result", "out_of_bounds_write"),
    "input_modified": ("((float *)A)[0] = 1.0f + A[0];", "wrong_result", "input_modified"),
    "nan_output": ("C[0] = 0.0f / 0.0f * A[0];", "wrong_result", "nan"),
    "segfault": ("*(volatile int *)(void *)0x10 = 1;", "crashed", "SIGSEGV"),
    "endless_loop": ("volatile unsigned spin = 0; for (;;) spin++;", "timeout", "killed"),
    "compile_error": ("this is not C;", "compile_error", "error"),
}

# Flips the lowest mantissa bit of one output on every other launch: within tolerance, not bit-stable.
NONDETERMINISTIC = "static unsigned calls; if (calls++ % 2) { union { float f; unsigned u; } v; v.f = C[0]; v.u ^= 1u; C[0] = v.f; }"

SIZE = {"m": 64, "n": 64, "k": 64}


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    if C_UNAVAILABLE is not None:
        pytest.skip(f"C backend: {C_UNAVAILABLE}")
    root = tmp_path_factory.mktemp("eval")
    config = RunConfig.from_dict({"workload": "gemm", "backend": "c", "problem": dict(SIZE),
                                  "timeout_s": 3.0, "stability_launches": 8, "seed": 1})
    lines: list[str] = []
    ev = Evaluator(config, root / ".cache", log=lines.append, log_path=root / "sandbox.log", timing_target_s=0.05)
    ev.lines = lines
    ev.start()
    yield ev
    ev.close()


def _genome(ev: Evaluator):
    space = ev.template.gene_space()
    seeds = space.seed_genomes()
    return seeds[0] if seeds else space.random(random.Random(0))


def _planted(ev: Evaluator, statement: str) -> KernelSource:
    """A real rendered kernel (entry, flags, ``launch["argtypes"]``) whose source is hand-written."""
    kernel = dataclasses.replace(ev.template.render(_genome(ev)), source=GOOD % statement)
    assert kernel.launch["argtypes"], "the C template names its entry point's ctypes signature"
    return kernel


def _assert_good(ev: Evaluator) -> Evaluation:
    [res] = ev.evaluate_sources([_planted(ev, "")])
    assert res.status == "ok", res.cause
    return res


@needs_c
def test_baselines_are_timed_and_verified_on_the_main_shape(evaluator):
    b = evaluator.baseline
    assert b["primary"] in b["baselines"] and b["time_us"] > 0
    assert b["shape"] == SIZE
    assert b["io_bytes"] == 4 * 3 * 64 * 64 and b["memory_bytes"] >= b["io_bytes"]
    assert b["flops"] == 2 * 64 ** 3
    # Measured peaks give a roofline on the CPU too; the suspect floor never sits above a verified library path.
    assert b["roofline_us"] > 0 and b["peaks"]["flops_per_s"] > 0 and b["peaks"]["bandwidth_bytes_per_s"] > 0
    assert b["floor_us"] <= b["roofline_us"] and b["floor_us"] <= b["time_us"]
    assert b["launch_us"] is None  # a C call has no launch of its own to bound the floor
    assert b["device"]["backend"] == "c"
    assert all(entry["verified"] for entry in b["baselines"].values())


@needs_c
def test_a_good_genome_evaluates_ok_with_every_measurement(evaluator):
    [res] = evaluator.evaluate([_genome(evaluator)])
    assert res.status == "ok", res.cause
    assert res.genome_hash == _genome(evaluator).hash
    assert 0 < res.time_us < 1e6 and res.time_spread_us >= 0
    assert res.memory_bytes >= 4 * 3 * 64 * 64 and res.extra_bytes >= 0 and res.onchip_bytes >= 0
    assert res.determinism == 1.0  # bit-identical on every repeated launch
    assert 0 <= res.steadiness <= 1 and 0 < res.error_margin <= 1  # steadiness is 0 when load scatters the launches
    assert res.stability == pytest.approx((res.determinism + res.steadiness + res.error_margin) / 3)
    assert [e["shape"] for e in res.shape_errors] == evaluator.workload.shapes(evaluator.problem)
    assert res.max_abs_err < 1e-2 and res.source and res.entry == "abebot_gemm"
    assert res.compile_s >= 0 and res.eval_s > 0
    assert res.launch["argtypes"] and res.resources.get("threads", 0) >= 1


@needs_c
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_planted_fault_is_caught_and_the_run_survives(evaluator, fault):
    statement, status, cause = FAULTS[fault]
    [res] = evaluator.evaluate_sources([_planted(evaluator, statement)])
    assert res.status == status, (res.status, res.cause)
    assert res.status in STATUSES and res.lethal
    assert cause.lower() in (res.cause + res.compile_log).lower()
    assert "\n" not in res.cause
    if fault == "compile_error":  # the compiler's log is kept, the cause is its telling line
        assert "not C" in res.compile_log or "error" in res.compile_log
    if fault == "segfault":  # faulthandler's report lands in the sandbox log, not on the terminal
        assert "Segmentation fault" in evaluator.log_path.read_text()
    _assert_good(evaluator)  # the run survives


@needs_c
def test_a_nondeterministic_kernel_is_not_fully_stable(evaluator):
    [res] = evaluator.evaluate_sources([_planted(evaluator, NONDETERMINISTIC)])
    assert res.status in ("ok", "unstable"), res.cause
    assert res.stability < 1.0 and (res.status == "unstable" or res.determinism < 1.0)


@needs_c
def test_resource_exceeded_is_rejected_before_compiling(evaluator, monkeypatch):
    device = dataclasses.replace(evaluator.backend.device, shared_mem_per_block=1024)
    template = evaluator.workload.template("c", evaluator.problem, device)
    big = dataclasses.replace(_planted(evaluator, ""), resources={"shared_bytes": 4096})
    assert "shared memory" in template.resource_violation(big)
    compiles = []
    monkeypatch.setattr(evaluator, "template", template)
    monkeypatch.setattr(evaluator.backend, "compile", lambda *a: compiles.append(a))
    [res] = evaluator.evaluate_sources([big])
    assert res.status == "resource_exceeded" and "4096" in res.cause and not compiles


@needs_c
def test_duplicates_and_identical_sources_are_evaluated_once(evaluator, monkeypatch):
    calls = []
    real = evaluator.backend.compile
    monkeypatch.setattr(evaluator.backend, "compile", lambda k, d: calls.append(k) or real(k, d))
    g = _genome(evaluator)
    results = evaluator.evaluate([g, g])
    assert [r.genome_hash for r in results] == [g.hash, g.hash] and results[0] is not results[1]
    assert len(calls) == 1
    kernel = _planted(evaluator, "/* same */")
    a, b = evaluator.evaluate_sources([kernel, kernel], ["x", "y"])
    assert (a.genome_hash, b.genome_hash) == ("x", "y") and a.time_us == b.time_us and len(calls) == 2


@needs_c
def test_a_render_failure_is_a_compile_error(evaluator, monkeypatch):
    def broken(genome):
        raise ValueError("template cannot render this")

    monkeypatch.setattr(evaluator.template, "render", broken)
    [res] = evaluator.evaluate([_genome(evaluator)])
    assert res.status == "compile_error" and "cannot render" in res.cause


@needs_c
def test_sandbox_output_goes_to_its_log(evaluator):
    assert "[sandbox" in evaluator.log_path.read_text()
    assert any("sandbox restarted" in line for line in evaluator.lines) or not evaluator.sandbox.restarts


def test_timing_rotates_enough_cases_to_leave_the_last_level_cache():
    cpu = DeviceInfo("c", 0, "cpu", 1 << 34, 2, l2_bytes=32 << 20)
    assert 2 <= timing_case_count(1 << 20, cpu, "cpu") <= 4
    gpu = DeviceInfo("cuda", 0, "gpu", 1 << 37, 132, l2_bytes=50 << 20)
    assert timing_case_count(1 << 20, gpu, "gpu") * (1 << 20) > 50 << 20
    assert timing_case_count(1 << 30, gpu, "gpu") == 2
    small = DeviceInfo("cuda", 0, "gpu", 48 << 20, 132, l2_bytes=50 << 20)  # cases, copies and references fit in half
    assert timing_case_count(1 << 20, small, "gpu") == 4
    unknown = DeviceInfo("c", 0, "cpu", 0, 1)  # no cache size known: two cases
    assert timing_case_count(1 << 20, unknown, "cpu") == 2



def test_graph_timing_chains_launches_on_distinct_cases_that_fit_in_the_cache():
    gpu = DeviceInfo("cuda", 0, "gpu", 1 << 37, 132, l2_bytes=60 << 20)
    assert graph_block(65536, gpu, timing_case_count(65536, gpu, "gpu")) == 240  # one row: a chain of every launch
    assert graph_block(3 << 20, gpu, timing_case_count(3 << 20, gpu, "gpu")) == 5  # a quarter of the L2
    assert graph_block(1 << 30, gpu, 2) == 1  # a case bigger than the cache: one preparation per launch, as before
    assert graph_block(1 << 10, gpu, 3) == 3  # never more than the cases in rotation
    assert graph_block(1 << 10, DeviceInfo("c", 0, "cpu", 0, 1), 4) == 1  # no cache size known



def test_the_suspect_floor_is_the_higher_of_the_roofline_and_half_a_launch_never_above_a_library_path():
    assert suspect_floor_us(10.0, None, float("inf")) == 10.0 / ALLOWANCE
    assert suspect_floor_us(0.28, 0.75, float("inf")) == LAUNCH_SHARE * 0.75  # decode sizes: the launch bounds
    assert suspect_floor_us(0.28, 0.75, 0.3) == 0.3  # a verified baseline faster than that: it is physical
    assert suspect_floor_us(100.0, 0.75, float("inf")) == 100.0 / ALLOWANCE  # big kernels: the roofline bounds
    # the 16-row kernel a timing defect gave 0.27 us (session 12) is suspect against a 0.75 us launch
    assert 0.27 < suspect_floor_us(0.28, 0.75, 2.76 / ALLOWANCE)


@pytest.mark.skipif(availability("cuda") is not None, reason="needs a CUDA GPU (run on the device)")
def test_on_the_gpu_an_empty_launch_is_timed_and_bounds_the_floor():
    from core.evaluation.protocol import Protocol
    from core.workloads import get_workload

    problem = get_workload("rmsnorm").validate_problem({"rows": 16, "residual": True}, "cuda")
    b = Protocol({"backend": "cuda", "device": 0, "workload": "rmsnorm", "problem": problem}).baseline(0)
    assert b["status"] == "ok" and 0.1 < b["launch_us"] < 50
    assert b["floor_us"] == min(max(b["roofline_us"] / ALLOWANCE, LAUNCH_SHARE * b["launch_us"]), b["time_us"] / ALLOWANCE)


class EchoServer:
    """A sandbox server without kernels, for the watchdog's own cases."""

    def __init__(self, spec: dict):
        import os

        self.pid = os.getpid()

    def handle(self, request: dict) -> dict:
        import os

        if request["op"] == "quit":
            os._exit(3)
        return {"status": "ok", "pid": self.pid, "restart": request["op"] == "sticky"}


def test_sandbox_restarts_after_exit_and_sticky_errors(tmp_path):
    with Sandbox({"server": f"{__name__}:EchoServer"}, timeout_s=10, log_path=tmp_path / "s.log") as sb:
        first = sb.call({"op": "echo"})["pid"]
        assert sb.call({"op": "quit"}) == {"status": "crashed", "cause": "sandbox process exited with status 3"}
        second = sb.call({"op": "sticky"})["pid"]  # a sticky device error: answered, then a fresh process
        third = sb.call({"op": "echo"})["pid"]
        assert len({first, second, third}) == 3 and sb.restarts == 2


def test_sources_that_compile_to_the_same_code_are_measured_once(evaluator):
    """Twins (another source, the same machine code and launch) share one measurement; the same source
    sent again (a re-timing) is measured again."""
    kernel = evaluator.template.render(_genome(evaluator))
    twin = dataclasses.replace(kernel, source=kernel.source + "\n/* a comment changes the source, not the code */\n")
    first, second = evaluator.evaluate_sources([kernel, twin])
    assert first.status == second.status == "ok"
    measured, reused = (first, second) if second.same_code_as else (second, first)
    assert measured.same_code_as == "" and reused.same_code_as == measured.source_hash != reused.source_hash
    assert reused.time_us == measured.time_us and reused.phases == {"compile": reused.compile_s}
    for source in (kernel, twin):  # each sent again: a re-timing, measured
        [again] = evaluator.evaluate_sources([source])
        assert again.same_code_as == "" and "timing" in again.phases


@needs_c
def test_genomes_compiled_ahead_are_compiled_once_and_measured_when_evaluated(evaluator, monkeypatch):
    calls = []
    real = evaluator.backend.compile
    monkeypatch.setattr(evaluator.backend, "compile", lambda k, d: calls.append(k.source) or real(k, d))
    space = evaluator.template.gene_space()
    rng = random.Random(11)
    genomes = list({g.hash: g for g in (space.random(rng) for _ in range(6))}.values())[:3]
    evaluator.compile_ahead(genomes)
    assert len(evaluator._ahead) == len({evaluator.backend.cache_key(evaluator.template.render(g)) for g in genomes})
    results = evaluator.evaluate(genomes)
    assert [r.genome_hash for r in results] == [g.hash for g in genomes]
    assert all(r.status in ("ok", "compile_error", "wrong_result", "resource_exceeded") for r in results)
    assert len(calls) == len(set(calls)) and not evaluator._ahead  # each compiled once, every compile claimed
    assert not evaluator._rendered  # and every kernel rendered ahead was used, not rendered again
