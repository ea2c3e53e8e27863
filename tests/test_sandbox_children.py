"""Nothing a kernel starts survives its request (issue 35, item 3), and a sandbox killed from outside
does not condemn the candidate it was running (issue 36, item 9).

* C kernels that fork, double-fork and ``setsid()`` and then sleep in a loop: after the check none of
  those processes is alive, and the verdict is ``crashed: left a process running``; through the
  ``python -m core check`` command too;
* a sandbox SIGKILLed from outside mid-request retries the request once in a fresh sandbox; a
  candidate that kills its own sandbox every time is crashed the second time; a SIGSEGV is not retried.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.backends import availability
from core.evaluation.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
C_UNAVAILABLE = availability("c")
needs_c = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")

# A GEMM kernel that also starts processes (written to PIDS_FILE, one pid a line) and then computes
# right: only the processes are wrong with it. %(start)s is one of the STARTS below.
FORKING_GEMM = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static int started;

static void note(void) {
    FILE *f = fopen("%(pids)s", "a");
    if (f) { fprintf(f, "%%d\n", (int)getpid()); fclose(f); }
}

static void linger(void) {
    note();
    for (;;) sleep(1);
}

static void start(void) {
    %(start)s
}

void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    if (!started) { started = 1; start(); }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
}
"""
STARTS = {
    "fork": "if (fork() == 0) linger();",
    "double_fork": "pid_t p = fork(); if (p == 0) { if (fork() == 0) linger(); _exit(0); } ",
    "setsid": "pid_t p = fork(); if (p == 0) { setsid(); if (fork() == 0) { setsid(); linger(); } linger(); }",
}
GEMM = {"m": 48, "n": 40, "k": 56}


def _pids(path: Path, want: int, wait_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        pids = [int(x) for x in path.read_text().split()] if path.exists() else []
        if len(pids) >= want or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] not in "ZX"


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    if C_UNAVAILABLE is not None:
        pytest.skip(f"C backend: {C_UNAVAILABLE}")
    from core.config import RunConfig
    from core.evaluation.evaluator import Evaluator

    root = tmp_path_factory.mktemp("children")
    config = RunConfig.from_dict({"workload": "gemm", "backend": "c", "problem": GEMM, "timeout_s": 20.0,
                                  "stability_launches": 4, "seed": 1})
    ev = Evaluator(config, root / ".cache", log=lambda line: None, log_path=root / "sandbox.log", timing_target_s=0.02)
    ev.start()
    yield ev
    ev.close()


def _source(ev, start: str, pids: Path):
    import dataclasses
    import random

    space = ev.template.gene_space()
    genome = (space.seed_genomes() or [space.random(random.Random(0))])[0]
    return dataclasses.replace(ev.template.render(genome), source=FORKING_GEMM % {"start": start, "pids": pids})


@needs_c
@pytest.mark.parametrize("how", sorted(STARTS))
def test_processes_a_kernel_starts_are_killed_and_named_in_the_verdict(evaluator, tmp_path, how):
    pids = tmp_path / "pids"
    [res] = evaluator.evaluate_sources([_source(evaluator, STARTS[how], pids)])
    want = 2 if how == "setsid" else 1
    started = _pids(pids, want)
    assert len(started) == want, started
    assert res.status == "crashed" and res.cause.startswith("left a process running: pid "), (res.status, res.cause)
    assert all(f"pid {p} " in res.cause for p in started), (res.cause, started)
    assert not [p for p in started if _alive(p)]
    [good] = evaluator.evaluate_sources([_source(evaluator, "/* starts nothing */", tmp_path / "none")])
    assert good.status == "ok", good.cause  # the sandbox goes on, and a kernel that starts nothing is ok


@needs_c
@pytest.mark.parametrize("isolate", ["--no-isolate", "--isolate"])
def test_the_check_command_leaves_no_process_behind(tmp_path, isolate):
    """Through ``python -m core check``, with and without bubblewrap. Under bwrap the kernel's processes
    live in the sandbox's PID namespace: the pids it notes and the verdict names are that namespace's,
    so the processes are found on the host by a mark in their environment."""
    from core.evaluation import isolation
    from core.workloads import get_workload
    from tests.test_isolation_namespaces import marked, wait_until_none

    if isolate == "--isolate" and isolation.mode() != "bwrap":
        pytest.skip(f"no bubblewrap here: {isolation.why_not()}")
    pids = tmp_path / "pids"
    kernel = tmp_path / "forks.c"
    kernel.write_text(FORKING_GEMM % {"start": STARTS["setsid"], "pids": pids})
    assert get_workload("gemm")
    mark = f"check-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "OMP_NUM_THREADS": "2", "ABEBOT_TEST_MARK": mark,
           isolation.WRITABLE_ENV: str(tmp_path)}  # where the kernel notes its pids, seen from outside
    r = subprocess.run([sys.executable, "-m", "core", "check", "--workload", "gemm", "--backend", "c",
                        "--kernel", str(kernel), "--problem", json.dumps(GEMM), "--runs-dir", str(tmp_path / "runs"),
                        "--seconds", "0.05", "--json", isolate], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env=env)
    started = _pids(pids, 2, wait_s=0)
    assert len(started) == 2, (started, r.stderr[-2000:])
    assert r.returncode == 1, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["status"] == "crashed" and "left a process running" in result["cause"], result
    assert all(f"pid {p} " in result["cause"] for p in started), (result["cause"], started)
    assert ("PID namespace" in result["cause"]) == (isolate == "--isolate"), result["cause"]
    assert wait_until_none(mark) == []
    if isolate == "--no-isolate":
        assert not [p for p in started if _alive(p)]


# -- killed from outside ----------------------------------------------------------------------------
class KillableServer:
    """A sandbox server that answers ``work`` after ``marker`` appears... or dies as asked."""

    def __init__(self, spec: dict):
        self.spec = spec

    def info(self) -> dict:
        return {"pid": os.getpid()}

    def handle(self, request: dict) -> dict:
        if request.get("op") == "kill_self":
            os.kill(os.getpid(), signal.SIGKILL)
        if request.get("op") == "segfault":
            import ctypes

            ctypes.string_at(0)
        if request.get("op") == "work":
            Path(request["started"]).write_text(str(os.getpid()))
            deadline = time.monotonic() + 10
            while not Path(request["go"]).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return {"status": "ok", "pid": os.getpid()}


def _box(tmp_path: Path) -> Sandbox:
    return Sandbox({"server": "tests.test_sandbox_children:KillableServer"}, timeout_s=30,
                   log_path=tmp_path / "sandbox.log", startup_timeout_s=60)


def test_a_sandbox_killed_from_outside_retries_the_candidate_in_a_fresh_one(tmp_path):
    started, go = tmp_path / "started", tmp_path / "go"

    def kill_the_first_sandbox_once_it_works() -> None:
        deadline = time.monotonic() + 20
        while not (started.exists() and started.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)  # until the pid is written, not only the file created
        pid = int(started.read_text())
        started.unlink()
        os.kill(pid, signal.SIGKILL)  # the OOM killer, say
        go.write_text("")  # the retry may finish

    with _box(tmp_path) as box:
        first = box.info["pid"]
        killer = threading.Thread(target=kill_the_first_sandbox_once_it_works)
        killer.start()
        reply = box.call({"op": "work", "started": str(started), "go": str(go)})
        killer.join()
        assert reply["status"] == "ok", reply
        assert reply["pid"] != first and box.restarts == 1 and box.outside_kills == 1


def test_a_candidate_that_kills_its_own_sandbox_is_crashed_after_one_retry(tmp_path):
    with _box(tmp_path) as box:
        reply = box.call({"op": "kill_self"})
        assert reply["status"] == "crashed", reply
        assert reply["cause"] == "killed by SIGKILL twice, the second time in a fresh sandbox"
        assert box.restarts == 2 and box.outside_kills == 2
        assert box.call({"op": "ping"})["status"] == "ok"


def test_a_segfault_is_the_candidates_and_is_not_retried(tmp_path):
    with _box(tmp_path) as box:
        reply = box.call({"op": "segfault"})
        assert reply == {"status": "crashed", "cause": "killed by SIGSEGV"}
        assert box.restarts == 1 and box.outside_kills == 0


class CrashAfterSetsidServer:
    """Starts a process that leaves the sandbox's group with setsid(), then the sandbox crashes."""

    def __init__(self, spec: dict):
        pass

    def handle(self, request: dict) -> dict:
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                Path(request["pids"]).write_text(str(os.getpid()))
                while True:
                    time.sleep(0.2)
            os._exit(0)
        os.waitpid(pid, 0)
        deadline = time.monotonic() + 20
        while not Path(request["go"]).exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # until the test has seen the parent notice the orphan
        import ctypes

        ctypes.string_at(0)
        return {"status": "ok"}


def test_a_process_left_by_a_sandbox_that_then_crashed_is_killed_too(tmp_path):
    pids = tmp_path / "pids"
    box = Sandbox({"server": "tests.test_sandbox_children:CrashAfterSetsidServer"}, timeout_s=30,
                  log_path=tmp_path / "sandbox.log", startup_timeout_s=60)
    go = tmp_path / "go"

    def let_it_crash_once_the_parent_has_seen_the_orphan() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            started = _pids(pids, 1, wait_s=0)
            if started and started[0] in box._watch.seen:
                break
            time.sleep(0.05)
        go.write_text("")

    with box:
        helper = threading.Thread(target=let_it_crash_once_the_parent_has_seen_the_orphan)
        helper.start()
        reply = box.call({"op": "work", "pids": str(pids), "go": str(go)})
        helper.join()
        assert reply == {"status": "crashed", "cause": "killed by SIGSEGV"}, reply
        [orphan] = _pids(pids, 1, wait_s=0)
        deadline = time.monotonic() + 5
        while _alive(orphan) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(orphan)
