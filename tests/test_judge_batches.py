"""The judge's launches, batched (issue 35: what the judge costs a GA run).

A candidate takes a handful of requests to its launcher, not one per launch, and its cases' buffers are
shared once per judge; every launch's outputs are still read back and checked by the judge, so a
launcher that reports launches it never made leaves poison the judge reads."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from core.backends import availability
from core.backends.arrays import GUARD_ELEMENTS
from core.evaluation.launcher import LauncherServer
from core.evaluation.protocol import Protocol
from core.tools.check import seed_kernel, validate_target

C_UNAVAILABLE = availability("c")
pytestmark = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")


def _protocol(launcher: str = "") -> tuple[Protocol, object]:
    _, problem = validate_target("rmsnorm", "c", {"rows": 32, "cols": 128})
    spec = {"backend": "c", "device": 0, "workload": "rmsnorm", "problem": problem, "stability_launches": 8,
            "timing_target_s": 0.01, "launcher": launcher}
    p = Protocol(spec)
    artifact = p.backend.compile(seed_kernel(p.template), Path(tempfile.mkdtemp(prefix="abebot-batches-")))
    assert p.baseline(1)["status"] == "ok"
    return p, artifact


@pytest.fixture(scope="module")
def judged():
    p, artifact = _protocol()
    yield p, artifact
    p.close()


def _requests(p: Protocol) -> list[tuple[str, int]]:
    """(op, cases shared for the first time) of every request the judge makes from now on."""
    seen: list[tuple[str, int]] = []
    request = p.launcher.request

    def counted(op, cases=(), **fields):
        seen.append((op, sum(c.token.uid not in p.launcher.sent_cases for c in cases)))
        return request(op, cases, **fields)
    p.launcher.request = counted
    return seen


def test_a_candidate_takes_five_requests_and_shares_no_new_buffer_after_the_first(judged):
    p, artifact = judged
    assert p.evaluate(artifact, 1)["status"] == "ok"
    seen = _requests(p)
    try:
        r = p.evaluate(artifact, 2)
    finally:
        del p.launcher.request
    assert r["status"] == "ok", r["cause"]
    # load, the verification launches, the same buffers refilled, the timing, stability (with memory)
    assert [op for op, _ in seen] == ["load", "launches", "launches", "time", "repeat"], seen
    assert sum(new for _, new in seen) == 0, seen
    assert r["determinism"] == 1.0 and r["memory_bytes"] > 0 and len(r["shape_errors"]) == len(p.shapes)


def test_a_later_baseline_timing_shares_no_new_buffer(judged):
    p, _ = judged
    seen = _requests(p)
    try:
        r = p.baseline(5)
    finally:
        del p.launcher.request
    assert r["status"] == "ok", r
    assert "baselines" in [op for op, _ in seen] and sum(new for _, new in seen) == 0, seen


def _arrays(name: str):
    if name == "numpy":
        from core.backends.numpy_arrays import NumpyArrays

        return NumpyArrays()
    pytest.importorskip("torch")
    from core.backends.torch_arrays import TorchArrays

    return TorchArrays("cpu")  # the GPU's code path, on CPU tensors


@pytest.mark.parametrize("arrays", ["numpy", "torch"])
def test_a_capture_row_is_checked_as_the_launch_left_it_guards_included(arrays):
    from types import SimpleNamespace

    from core.evaluation.harness import Harness
    from core.workloads import get_workload

    workload, problem = get_workload("rmsnorm"), {"rows": 16, "cols": 64, "dtype": "float32", "residual": True, "eps": 1e-6}
    a = _arrays(arrays)
    h = Harness(workload, None, SimpleNamespace(arrays=a), problem)
    case = h.make_case(workload.shapes(problem)[0], 7)
    capture = h.capture_buffers(case, 3)
    for t in h.written:  # rows 1 and 2: what a right launch leaves; row 2 also writes a guard
        flat = a.clone(case.flats[t.name])
        a.copy_into(flat[GUARD_ELEMENTS:-GUARD_ELEMENTS].reshape(tuple(case.data[t.name].shape)), case.expected[t.name])
        a.copy_into(capture.data[t.name][1], flat)
        a.copy_into(capture.data[t.name][2], flat)
    out = h.written[0].name
    capture.data[out][2][-1] = 0.0
    assert len(h.written) == 2 and h.check(h.captured(case, capture, 1)).ok
    assert h.check(h.captured(case, capture, 2)).cause == "out_of_bounds_write"
    assert h.check(h.captured(case, capture, 0)).cause == "nan_output"  # never written: poison
    row = h.captured(case, capture, 1).data[out]
    assert a.same_bits(row, capture.data[out][1][GUARD_ELEMENTS:-GUARD_ELEMENTS].reshape(tuple(case.data[out].shape)))
    assert not a.same_bits(row, h.captured(case, capture, 0).data[out])


@pytest.mark.parametrize("op", ["op_launches", "op_repeat"])
def test_a_launcher_that_reports_launches_it_never_made_leaves_poison_the_judge_reads(monkeypatch, op):
    """The reply only says how many outputs to look at: the judge reads each one itself."""
    p, artifact = _protocol(launcher="inline")  # the launcher's code in this process, patched here
    try:
        real = getattr(LauncherServer, op)

        def forged(self, request):
            if self.kernel is None:
                return real(self, request)
            return {"status": "ok", "launched": len(request.get("launch") or ()) or int(request.get("launches") or 0)}
        monkeypatch.setattr(LauncherServer, op, forged)
        r = p.evaluate(artifact, 3)
    finally:
        p.close()
    want = "wrong_result" if op == "op_launches" else "unstable"
    assert r["status"] == want and "nan_output" in r["cause"], r


def test_a_launcher_started_early_builds_before_the_settings_and_leaves_quietly_if_the_judge_goes():
    """The judge starts its launcher first thing (its runtime is built while the judge builds its own);
    a judge that fails before it sends the settings leaves a launcher that exits by itself."""
    from core.evaluation.channel import recv_reply, send_request
    from core.evaluation.judge import spawn_launcher

    _, problem = validate_target("rmsnorm", "c", {"rows": 32, "cols": 128})
    spec = {"backend": "c", "device": 0, "workload": "rmsnorm", "problem": problem}
    proc, sock = spawn_launcher(spec)
    try:
        send_request(sock, {"settings": {"cache": "hot", "timing_target_s": 0.01}})
        assert recv_reply(sock)["status"] == "ready"
        send_request(sock, {"op": "ping"})
        assert recv_reply(sock)["pid"] == proc.pid
    finally:
        sock.close()
    assert proc.wait(30) == 0
    proc, sock = spawn_launcher(spec)
    sock.close()  # gone before the settings
    assert proc.wait(30) == 0


ASYNC_RMSNORM = r"""
#include <math.h>
#include <pthread.h>
#include <time.h>
/* Cheat: returns at once and writes the outputs from a thread 2 ms later (after the launch was waited
 * for). Several launches in one request give the thread time: the judge must still not call it ok. */
struct job { const float *x, *w; float *out; int rows, cols; float eps; };
static struct job jobs[64];
static unsigned next_job;
static void *late(void *arg) {
    struct job *j = arg;
    struct timespec t = {0, 2000000};
    nanosleep(&t, 0);
    for (int i = 0; i < j->rows; i++) {
        const float *r = j->x + (long)i * j->cols;
        float ss = 0.0f;
        for (int k = 0; k < j->cols; k++) ss += r[k] * r[k];
        float s = 1.0f / sqrtf(ss / j->cols + j->eps);
        for (int k = 0; k < j->cols; k++) j->out[(long)i * j->cols + k] = r[k] * s * j->w[k];
    }
    return 0;
}
void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps) {
    (void)residual;
    struct job *j = &jobs[next_job++ % 64];
    j->x = x; j->w = w; j->out = out; j->rows = rows; j->cols = cols; j->eps = eps;
    pthread_t t;
    pthread_create(&t, 0, late, j);
    pthread_detach(t);
}
"""


def test_a_kernel_writing_its_outputs_after_it_returned_is_not_ok(judged):
    from core.tools.check import planted

    p, _ = judged
    artifact = p.backend.compile(planted(seed_kernel(p.template), ASYNC_RMSNORM),
                                 Path(tempfile.mkdtemp(prefix="abebot-batches-")))
    r = p.evaluate(artifact, 11)
    assert r["status"] == "wrong_result" and "nan_output" in r["cause"], r
