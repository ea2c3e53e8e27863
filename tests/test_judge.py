"""The verdict is reached outside the kernel's process (issue 35, item 1).

The sandbox's process is the judge (:class:`core.evaluation.protocol.Protocol`); kernels are loaded and
launched only in its launcher process (:mod:`core.evaluation.launcher`). Planted cheats patch, through the
interpreter's C API, whatever Python the process that loads them holds -- the protocol, the launch checks,
the launcher's timing -- and must still not be ``ok``. Each fails on a main where the kernel ran beside the
protocol (there, every one of them was ``ok``)."""
from __future__ import annotations

import json
import os
import pickle
import random
import socket
from pathlib import Path

import pytest

from core.backends import availability
from core.evaluation.channel import recv_reply, send_reply
from core.evaluation.judge import final_state, paired_figures, timing_bounds
from core.tools.check import Checker

ROOT = Path(__file__).resolve().parents[1]
CHEATS = ROOT / "tests" / "cheats"
C_UNAVAILABLE = availability("c")
pytestmark = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")
RMSNORM = {"rows": 64, "cols": 256}


def _checker(runs: Path, **options) -> Checker:
    checker = Checker("rmsnorm", "c", RMSNORM, runs_dir=runs, log_path=runs / "sandbox.log", timeout_s=20.0,
                      stability_launches=8, **options)
    checker.start()
    return checker


@pytest.fixture(scope="module")
def rmsnorm(tmp_path_factory):
    checker = _checker(tmp_path_factory.mktemp("judge-runs"))
    yield checker
    checker.close()


@pytest.fixture
def fresh_rmsnorm(tmp_path):
    """A sandbox of its own: a patch stays in the launcher it was loaded in, for the kernels after it
    (docs/security.md says so), so each patching cheat gets a launcher no other cheat patched."""
    checker = _checker(tmp_path, timing_target_s=0.05, second_method=False)
    yield checker
    checker.close()


def cheat(checker: Checker, name: str, **defines) -> dict:
    path = CHEATS / f"{name}.c"
    source = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + path.read_text()
    result = checker.check(source, path=str(path))
    json.dumps(result)
    return result


def verdict(r: dict) -> str:
    return f"{r['status']}: {r['cause'] or '(no cause)'}; time {r['time_us']} us"


def test_a_c_kernel_replacing_the_protocol_through_the_c_api_is_not_ok(fresh_rmsnorm):
    r = cheat(fresh_rmsnorm, "rmsnorm_patch_protocol_capi")
    assert r["status"] == "wrong_result" and not r["ok"], verdict(r)
    assert "verification" in r["cause"] or "on rows=" in r["cause"], verdict(r)


@pytest.mark.parametrize("mode,status", [(1, "wrong_result"), (2, "suspect"), (3, "suspect"), (4, "wrong_result")],
                         ids=["checks-patched-zeros", "timing-replaced", "baseline-inflated", "timed-launches-skipped"])
def test_a_kernel_patching_the_launcher_it_is_loaded_in_is_not_ok(fresh_rmsnorm, mode, status):
    r = cheat(fresh_rmsnorm, "rmsnorm_patch_launcher", CHEAT_MODE=mode)
    assert r["status"] == status and not r["ok"], verdict(r)


def test_the_kernels_process_can_neither_open_the_judges_memory_nor_ptrace_it(rmsnorm):
    """The judge is not dumpable and the launcher holds no capability: even as root, a kernel cannot
    write the judge's memory (the cheat writes zeros if it could, so ``ok`` means it could not)."""
    r = cheat(rmsnorm, "rmsnorm_open_judge_memory")
    assert r["ok"], verdict(r)


def test_a_launcher_killed_by_sigkill_is_retried_once_then_crashed_as_a_sandbox_was(fresh_rmsnorm):
    """A kill the launcher's own limits never send reads as one from outside (the OOM killer): the request
    goes once more to a fresh sandbox, and only a second such death is the candidate's."""
    source = ("#include <signal.h>\n#include <unistd.h>\n"
              "void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols,"
              " float eps) { kill(getpid(), SIGKILL); }\n")
    r = fresh_rmsnorm.check(source)
    assert r["status"] == "crashed" and "killed by SIGKILL twice" in r["cause"], verdict(r)
    assert fresh_rmsnorm.check(fresh_rmsnorm.seed.source)["ok"]  # and the sandbox after it works


def test_an_honest_kernel_still_checks_ok_through_the_judge(rmsnorm):
    r = rmsnorm.check(rmsnorm.seed.source)
    assert r["ok"] and r["speedup"] > 0, verdict(r)


def test_the_judge_never_maps_a_kernel_and_its_launcher_does(tmp_path):
    """In-process judge (this test's process): the kernel's shared object is mapped by the launcher only."""
    from core.backends import make_backend
    from core.evaluation.protocol import Protocol
    from core.tools.check import seed_kernel
    from core.workloads import get_workload

    problem = get_workload("rmsnorm").validate_problem({"rows": 16, "cols": 256}, "c")
    proto = Protocol({"backend": "c", "workload": "rmsnorm", "problem": problem, "timing_target_s": 0.02,
                      "stability_launches": 3})
    try:
        artifact = make_backend("c", 0).compile(seed_kernel(proto.template), tmp_path / "cc")
        assert proto.baseline(1)["status"] == "ok"
        result = proto.evaluate(artifact, 2)
        assert result["status"] == "ok", result
        assert proto.launcher.pid != os.getpid()
        assert artifact.path not in Path("/proc/self/maps").read_text()
        assert artifact.path in Path(f"/proc/{proto.launcher.pid}/maps").read_text()
    finally:
        proto.launcher.close()


def test_a_launcher_reply_is_read_as_json_never_unpickled():
    mine, theirs = socket.socketpair()
    try:
        send_reply(theirs, {"status": "ok", "times": [1.5]})
        assert recv_reply(mine) == {"status": "ok", "times": [1.5]}
        evil = pickle.dumps(os.getpid)  # a pickle would call what it names in the judge
        theirs.sendall(len(evil).to_bytes(8, "big") + (0).to_bytes(4, "big") + evil)
        with pytest.raises(ValueError):
            recv_reply(mine)
    finally:
        mine.close()
        theirs.close()


def test_reported_times_the_judges_clock_contradicts_are_suspect():
    honest = {"kernel": [1e-5] * 100, "baseline": [2e-5] * 100}
    assert timing_bounds(honest, wall_s=0.01, floor_us=1.0) is None
    assert "judge saw take" in timing_bounds({**honest, "baseline": [1.0] * 100}, wall_s=0.01, floor_us=1.0)
    assert "below the physical floor" in timing_bounds({"kernel": [1e-9] * 1000}, wall_s=1e-4, floor_us=1.0)
    assert "no time" in timing_bounds({"kernel": [0.0, 1e-5]}, wall_s=1.0, floor_us=None)


def test_a_paired_baseline_far_slower_than_its_own_time_at_the_start_is_suspect():
    """Where a sample is one launch of a graph of many, the wall-clock bound is loose: a launcher that
    inflated the baseline's samples 1000x fitted under it on the H200 (call 67). The judge holds the
    paired chunks to the baseline's time alone at the start instead."""
    reply = {"kernel": [1e-5] * 16, "baseline": [2e-5] * 16, "chunks": [1e-5] * 4}
    figures = paired_figures(reply, "median", reference_us=20.0)
    assert not isinstance(figures, str) and figures[1]["speedup"] == pytest.approx(2.0)
    assert not isinstance(paired_figures({**reply, "baseline": [8e-5] * 16}, "median", reference_us=20.0), str)
    inflated = paired_figures({**reply, "baseline": [2e-2] * 16}, "median", reference_us=20.0)
    assert isinstance(inflated, str) and "timed alone at the start" in inflated


def test_after_a_timing_the_judge_checks_every_case_against_its_own_reference():
    """The reported permutation must be one, the inputs that permutation of the pristine ones, the outputs
    that permutation of the judge's reference."""
    import numpy as np

    from core.backends.c import CRuntime
    from core.evaluation.harness import Harness
    from core.workloads import get_workload

    wl = get_workload("rmsnorm")
    problem = wl.validate_problem({"rows": 8, "cols": 32}, "c")
    runtime = CRuntime()
    h = Harness(wl, None, runtime, problem)
    case = h.make_case(wl.shapes(problem)[0], 3)
    rows = case.shape["rows"]
    perm = list(reversed(range(rows)))
    for t in h.tensors:
        if t.read and not t.written:
            case.data[t.name][...] = np.take(case.pristine[t.name], perm, axis=0) if "rows" in t.dims else case.pristine[t.name]
    for t in h.written:
        case.data[t.name][...] = np.take(case.expected[t.name], perm, axis=0)
    assert final_state(h, [case], {"0": perm}).ok
    assert final_state(h, [case], {"0": [0] * rows}).cause == "suspect"  # not a permutation
    assert final_state(h, [case], {"0": None}).cause == "suspect"  # the workload permutes: a row is owed
    assert final_state(h, [case], {}).cause == "suspect"  # no launch reported on the case
    assert final_state(h, [case, case], {"0": perm}).cause == "suspect"  # the loops launch on the first cases at least
    assert not final_state(h, [case], {"0": list(range(rows))}).ok  # not the permutation the inputs hold
    random.shuffle(perm)
    assert not final_state(h, [case], {"0": perm}).ok


def test_the_paired_figures_are_derived_from_the_samples_not_taken_from_the_launcher():
    from core.evaluation.judge import paired_figures

    kernel = [1e-5, 2e-5] * 8  # 8 chunks of 2
    baseline = [3e-5, 4e-5] * 8
    reply = {"kernel": kernel, "baseline": baseline, "chunks": [1e-9] * 8, "speedup": 1e4}
    chunks, figures = paired_figures(reply, "min")
    assert chunks == [1e-5] * 8 and figures["speedup"] == pytest.approx(3.0) and figures["speedup_spread"] == 0
    assert figures["pair_baseline_us"] == pytest.approx(35.0)
    assert isinstance(paired_figures({**reply, "baseline": baseline[:-1]}, "min"), str)
    assert isinstance(paired_figures({**reply, "chunks": [1e-5] * 5}, "min"), str)
    assert "not a number" in timing_bounds({"kernel": [float("nan")] * 4}, wall_s=1.0, floor_us=None)
    assert "no timed launch" in timing_bounds({"kernel": []}, wall_s=1.0, floor_us=None)


def test_a_reply_that_is_not_json_ends_the_launcher_as_a_crash():
    import subprocess
    import sys

    from core.evaluation.judge import LauncherClient, LauncherDied

    client = LauncherClient.__new__(LauncherClient)
    client.sock, theirs = socket.socketpair()
    client.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs.sendall((4).to_bytes(8, "big") + (0).to_bytes(4, "big") + b"\x80abc")
        with pytest.raises(LauncherDied, match="not one"):
            client._receive()
        assert client.proc is None
    finally:
        theirs.close()
        client.sock.close()


def test_abebot_launcher_inline_puts_the_kernels_back_in_the_judges_process(monkeypatch):
    """The documented escape hatch (docs/security.md): without it the launcher is a process of its own."""
    from core.evaluation.protocol import Protocol
    from core.workloads import get_workload

    problem = get_workload("rmsnorm").validate_problem({"rows": 4, "cols": 32}, "c")
    spec = {"backend": "c", "workload": "rmsnorm", "problem": problem, "timing_target_s": 0.02}
    for value, inline in (("", False), ("inline", True)):
        monkeypatch.setenv("ABEBOT_LAUNCHER", value)
        proto = Protocol(spec)
        try:
            assert proto.launcher.inline is inline
        finally:
            proto.close()


def test_baselines_updating_a_tensor_in_place_verify_through_the_judge():
    """rmsnorm's residual is updated in place: the launcher's memory measurement calls a baseline again,
    and must leave the case as its first call did for the judge's check."""
    from core.evaluation.protocol import Protocol
    from core.workloads import get_workload

    problem = get_workload("rmsnorm").validate_problem({"rows": 4, "cols": 32, "residual": True}, "c")
    proto = Protocol({"backend": "c", "workload": "rmsnorm", "problem": problem, "timing_target_s": 0.02})
    try:
        base = proto.baseline(1)
    finally:
        proto.close()
    assert base["status"] == "ok", base.get("cause")
    assert all(e["verified"] for e in base["baselines"].values() if e.get("time_us") is not None)
