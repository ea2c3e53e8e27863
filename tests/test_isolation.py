"""What the sandbox and the CLI keep apart: memory, files, the compile cache and the device.

* a problem too big for the device's memory is refused before anything is written (core/evaluation/bounds.py);
* the CPU sandbox runs with file-size, address-space and CPU-time limits in an empty working
  directory of its own (core/evaluation/sandbox.py), and a kernel that hits a limit is lethal while
  the run goes on;
* a cached artefact is used only when the SHA-256 recorded beside it matches (core/backends/cache.py);
* one run per device: run, resume and bench take the device's lock, and the dashboard asks it
  (core/run/device_lock.py).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from core.backends import availability
from core.backends.base import KernelSource

ROOT = Path(__file__).resolve().parents[1]
C_UNAVAILABLE = availability("c")
needs_c = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")
ISSUE_PROBLEM = '{"rows":1048576,"cols":131072}'  # 2^37 floats per tensor: accepted by the spec, 1 TiB of io
TINY = '{"m": 48, "n": 40, "k": 56}'
GEMM_ARGTYPES = ("ptr", "ptr", "ptr", "int", "int", "int")

GEMM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    %s
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) acc += A[i * K + k] * B[k * N + j];
            C[i * N + j] = acc;
        }
}
"""
WRITE_LARGE_FILE = ('static char block[1 << 20]; FILE *f = fopen("abebot-large-file.bin", "wb");'
                    'if (f) { for (int i = 0; i < 256; i++) fwrite(block, 1, sizeof block, f); fclose(f); }')
WRITE_SMALL_FILE = 'FILE *f = fopen("abebot-relative-write.txt", "w"); if (f) { fputs("hello", f); fclose(f); }'
REFUSED = "abebot-test: malloc returned NULL"
# malloc(MiB << 20), abort() when it returns NULL (saying so in the sandbox log first)
ALLOCATE = ('size_t n = (size_t){mib} << 20; char *p = malloc(n);'
            'if (!p) {{ fputs("' + REFUSED + '\\n", stderr); fflush(stderr); abort(); }} memset(p, 1, n); free(p);')


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


# -- sizes bounded by memory ---------------------------------------------------------------------
@needs_c
def test_a_problem_too_big_for_memory_is_refused_before_anything_is_written(tmp_path):
    runs = tmp_path / "runs"
    r = cli("run", "--workload", "rmsnorm", "--backend", "c", "--problem", ISSUE_PROBLEM, "--runs-dir", str(runs))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("abebot: error: problem needs ~") and "GiB on c:0" in lines[0]
    assert lines[0].endswith("GiB available): make it smaller"), lines[0]
    assert not runs.exists() and r.stdout == ""  # no run folder, no lock file, no "run <id>" line


@needs_c
def test_the_launch_form_refuses_the_same_problem():
    from core.config import ConfigError
    from dashboard import launch as L

    with pytest.raises(ConfigError, match=r"problem needs ~.* GiB on c:0 .*available\): make it smaller"):
        L.build_config({"workload": "rmsnorm", "backend": "c", "problem_text": ISSUE_PROBLEM})
    assert L.build_config({"workload": "rmsnorm", "backend": "c", "problem_text": '{"rows": 64, "cols": 64}'})


def test_the_bound_counts_every_case_the_evaluator_holds():
    from core.backends.base import DeviceInfo
    from core.evaluation.bounds import GiB, HEADROOM, OVERHEAD, problem_need_bytes
    from core.workloads import get_workload

    gemm = get_workload("gemm")
    problem = gemm.validate_problem({"m": 1024, "n": 1024, "k": 1024}, "c")
    io = gemm.io_bytes(gemm.shapes(problem)[0], problem)
    cpu = DeviceInfo("c", 0, "cpu", 64 * GiB, 8, l2_bytes=1 << 20)
    # 2 timing cases + 1, each io x (2 + 8 / 4) for float32
    assert problem_need_bytes(gemm, problem, cpu, "cpu") == int(HEADROOM * 3 * io * 4) + OVERHEAD["cpu"]


# -- the CPU sandbox's limits --------------------------------------------------------------------
def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


HEADROOM_BYTES = (1 << 30) + _cores() * (128 << 20)  # as core.evaluation.limits.sandbox_limits allows per core


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    """A C evaluator whose sandbox may grow its address space by 1 GiB, plus the product's own room
    per core for what threads reserve and never touch (stacks, malloc arenas: glibc makes one more
    arena whenever threads contend, so a loaded machine reserves more), instead of the host's memory."""
    if C_UNAVAILABLE is not None:
        pytest.skip(f"C backend: {C_UNAVAILABLE}")
    import core.evaluation.limits
    from core.config import RunConfig
    from core.evaluation.evaluator import Evaluator

    real = core.evaluation.limits.sandbox_limits
    mp = pytest.MonkeyPatch()
    mp.setattr(core.evaluation.limits, "sandbox_limits", lambda backend, timeout_s: {**real(backend, timeout_s),
                                                                          "address_space_bytes": HEADROOM_BYTES})
    root = tmp_path_factory.mktemp("isolation")
    config = RunConfig.from_dict({"workload": "gemm", "backend": "c", "problem": {"m": 64, "n": 64, "k": 64},
                                  "timeout_s": 20.0, "stability_launches": 4, "seed": 1})
    ev = Evaluator(config, root / ".cache", log=lambda line: None, log_path=root / "sandbox.log", timing_target_s=0.02)
    try:
        ev.start()
    finally:
        mp.undo()
    yield ev
    ev.close()


def _kernel(ev, statement: str) -> KernelSource:
    import dataclasses
    import random

    space = ev.template.gene_space()
    genome = (space.seed_genomes() or [space.random(random.Random(0))])[0]
    return dataclasses.replace(ev.template.render(genome), source=GEMM % statement)


def _assert_the_run_goes_on(ev) -> None:
    [res] = ev.evaluate_sources([_kernel(ev, "/* a good kernel */")])
    assert res.status == "ok", f"{res.cause}; the sandbox log ends:\n{ev.log_path.read_text(errors='replace')[-3000:]}"


@needs_c
def test_the_sandbox_runs_with_limits_in_a_fresh_working_directory(evaluator):
    log = evaluator.log_path.read_text()
    assert "limits: file size 64 MiB, cpu" in log and "address space limited to" in log
    assert "abebot-sandbox-work-" in log
    [res] = evaluator.evaluate_sources([_kernel(evaluator, WRITE_SMALL_FILE)])
    assert res.status == "ok", res.cause  # writing a small file is allowed...
    assert not (ROOT / "abebot-relative-write.txt").exists()  # ...but it lands in the sandbox's own folder
    assert not (Path.cwd() / "abebot-relative-write.txt").exists()
    assert not list(evaluator.cache_dir.parent.rglob("abebot-relative-write.txt"))


@needs_c
def test_a_kernel_cannot_write_a_large_file(evaluator):
    [res] = evaluator.evaluate_sources([_kernel(evaluator, WRITE_LARGE_FILE)])
    assert res.status == "crashed" and res.lethal, (res.status, res.cause)
    assert "SIGXFSZ" in res.cause
    assert not (ROOT / "abebot-large-file.bin").exists()
    _assert_the_run_goes_on(evaluator)
    # the killed sandbox's working directory (and the 64 MiB it wrote) went with the restart
    import tempfile

    left = [p for p in Path(tempfile.gettempdir()).glob("abebot-sandbox-work-*/abebot-large-file.bin")]
    assert not left, left


@needs_c
def test_a_kernel_cannot_allocate_beyond_the_address_space_limit(evaluator):
    [within] = evaluator.evaluate_sources([_kernel(evaluator, ALLOCATE.format(mib=256))])
    assert within.status == "ok", within.cause  # the limit is about size: 256 MiB of the headroom is fine
    log, restarts = evaluator.log_path, evaluator.sandbox.restarts
    start = log.stat().st_size
    [res] = evaluator.evaluate_sources([_kernel(evaluator, ALLOCATE.format(mib=(HEADROOM_BYTES >> 20) + 1024))])
    assert res.status == "crashed" and res.lethal, (res.status, res.cause)
    after = log.read_bytes()[start:].decode(errors="replace")
    assert REFUSED in after, after[-2000:]  # the limit refused the allocation: that is what stopped it
    # Which signal ends a kernel whose allocation was refused is not the contract: this one aborts
    # (SIGABRT), but one that touches the NULL, or a stack that cannot grow at the limit, dies by
    # SIGSEGV (and before faulthandler dumped the crashing thread only, its report could itself crash
    # into a SIGSEGV). Either is a kill: never "ok", a timeout, an exit status or the OOM killer's
    # SIGKILL (the allocation not refused).
    assert res.cause in ("killed by SIGABRT", "killed by SIGSEGV"), res.cause
    # the dead sandbox was replaced by one limited again, and the run goes on in it
    assert evaluator.sandbox.restarts == restarts + 1
    assert "address space limited to" in after.split(REFUSED, 1)[1], after[-2000:]
    _assert_the_run_goes_on(evaluator)


class SpinServer:
    """Burns CPU time on request (a sandbox server without a kernel)."""

    def __init__(self, spec: dict):
        pass

    def handle(self, request: dict) -> dict:
        end = time.process_time() + request["cpu_s"]
        while time.process_time() < end:
            pass
        return {"status": "ok", "pid": os.getpid()}


def test_the_cpu_time_limit_is_per_request_and_kills_a_runaway(tmp_path):
    from core.evaluation.sandbox import Sandbox

    spec = {"server": f"{__name__}:SpinServer", "limits": {"cpu_seconds": 2}}
    with Sandbox(spec, timeout_s=60, log_path=tmp_path / "s.log") as sb:
        first = sb.call({"cpu_s": 1.2})
        second = sb.call({"cpu_s": 1.2})  # 2.4 s in all: the budget is re-armed for every request
        assert first["status"] == second["status"] == "ok" and first["pid"] == second["pid"]
        t0 = time.monotonic()
        runaway = sb.call({"cpu_s": 30})
        assert runaway == {"status": "crashed", "cause": "killed by SIGXCPU"}
        assert time.monotonic() - t0 < 20  # long before the watchdog's 60 s
        assert sb.call({"cpu_s": 0.1})["status"] == "ok" and sb.restarts == 1


def _short_lived_threads_forever() -> None:
    while True:
        threads = [threading.Thread(target=sum, args=(range(50),)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


class AbortServer:
    """Calls C's abort() (through ctypes, which releases the GIL, as a kernel's launch does) while
    other Python threads start and exit."""

    def __init__(self, spec: dict):
        pass

    def handle(self, request: dict) -> dict:
        import ctypes

        for _ in range(2):
            threading.Thread(target=_short_lived_threads_forever, daemon=True).start()
        time.sleep(request["after_s"])
        ctypes.CDLL(None).abort()
        return {"status": "ok"}


def test_an_abort_is_reported_as_sigabrt_whatever_other_threads_do(tmp_path):
    """faulthandler's report must not turn a kernel's SIGABRT into a SIGSEGV: dumping every thread
    reads threads that may be exiting (it did so in ~10% of such aborts), so it dumps the crashing one."""
    from core.evaluation.sandbox import Sandbox

    log = tmp_path / "s.log"
    with Sandbox({"server": f"{__name__}:AbortServer"}, timeout_s=60, log_path=log) as sb:
        causes = [sb.call({"after_s": 0.01 + 0.01 * (i % 5)})["cause"] for i in range(8)]
        assert sb.restarts == 8
    assert causes == ["killed by SIGABRT"] * 8, causes
    report = log.read_text()
    assert report.count("Fatal Python error: Aborted") == 8 and "Segmentation fault" not in report
    assert "in handle" in report  # the crashing thread's Python stack...
    assert "_short_lived_threads_forever" not in report  # ...and only its


# -- the compile cache ---------------------------------------------------------------------------
@needs_c
def test_a_tampered_cached_object_is_rebuilt_not_loaded(tmp_path, caplog):
    from core.backends.c import CBackend, CRuntime

    fill = "void abebot_fill(float *out, int n) {{ for (int i = 0; i < n; i++) out[i] = {v}f; }}\n"
    argtypes = {"argtypes": ("ptr", "int")}
    backend = CBackend()
    good = KernelSource("c", fill.format(v=1.0), "abebot_fill", launch=argtypes)
    evil = KernelSource("c", fill.format(v=666.0), "abebot_fill", launch=argtypes)
    cache = tmp_path / "cache"
    first = backend.compile(good, cache)
    so = Path(first.path)
    assert so.is_absolute() and (cache / f"{first.source_hash}.sha256").exists()
    assert backend.compile(good, cache).log == "cache hit"
    genuine = so.read_bytes()

    # a working object of another kernel planted under the good kernel's name
    planted = Path(backend.compile(evil, tmp_path / "elsewhere").path).read_bytes()
    so.write_bytes(planted)
    with caplog.at_level("WARNING", logger="abebot.cache"):
        rebuilt = backend.compile(good, cache)
    assert rebuilt.log.startswith(f"cache entry {first.source_hash} not trusted (") and "rebuilt" in rebuilt.log
    assert any("not trusted" in r.getMessage() for r in caplog.records)
    assert so.read_bytes() != planted and so.read_bytes() == genuine

    so.write_bytes(b"\x7fELF garbage")  # a truncated or overwritten object
    assert "not trusted" in backend.compile(good, cache).log and so.read_bytes() == genuine
    (cache / f"{first.source_hash}.sha256").unlink()  # no record beside it (a cache from before)
    assert "no " in backend.compile(good, cache).log and (cache / f"{first.source_hash}.sha256").exists()
    rebuilt = backend.compile(good, cache)
    assert rebuilt.log == "cache hit"
    assert not list(cache.glob(".*.tmp"))
    # Loaded last: this process maps the object, and rewriting a mapped file in place (as the tampering
    # above does) would crash the process later with SIGBUS.
    out = np.zeros(4, np.float32)
    CRuntime().load(rebuilt)(out, 4)
    assert (out == 1.0).all()  # the rebuilt kernel ran, never the planted one


def test_a_sidecar_checks_every_file_and_is_bound_to_its_key(tmp_path):
    import hashlib

    from core.backends import cache

    a, b = tmp_path / "k1.cubin", tmp_path / "k1.json"
    a.write_bytes(b"cubin")
    b.write_bytes(b"{}")
    cache.record(tmp_path, "k1", {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b)})
    assert cache.mismatch(tmp_path, "k1", [a, b]) is None
    b.write_bytes(b'{"resources": {"registers": 1}}')
    assert "k1.json has sha256" in cache.mismatch(tmp_path, "k1", [a, b])
    shutil.copy(tmp_path / "k1.sha256", tmp_path / "k2.sha256")  # another key's record says nothing about k2
    (tmp_path / "k2.cubin").write_bytes(b"cubin")
    (tmp_path / "k2.json").write_bytes(b"{}")
    assert "names" in cache.mismatch(tmp_path, "k2", [tmp_path / "k2.cubin", tmp_path / "k2.json"])


# -- one run per device --------------------------------------------------------------------------
def test_the_lock_key_is_the_physical_device(monkeypatch):
    from core.run.device_lock import device_key

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert device_key("c", 0) == "cpu-0"
    assert device_key("cuda", 0) == device_key("triton", 0) == "gpu-0"  # two backends, one GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert device_key("triton", 0) == "gpu-3" and device_key("cuda", 1) == "gpu-1"


def _fake_run(runs: Path, run_id: str = "20260101-000000-gemm-c-lock") -> Path:
    """A run folder with its database (resume and bench refuse one without it before any lock)."""
    from store.writer import RunWriter

    runs.mkdir(parents=True, exist_ok=True)
    writer = RunWriter.create(runs, run_id, {"workload": "gemm", "backend": "c", "device": 0,
                                             "problem": {"m": 48, "n": 40, "k": 56}})
    writer.set_status("stopped")
    writer.close()
    return runs / run_id


@needs_c
def test_a_second_run_on_the_same_device_is_refused(tmp_path):
    from core.run.device_lock import DeviceBusy, device_holder, hold_device
    from dashboard import launch as L

    runs = tmp_path / "runs"
    folder = _fake_run(runs)
    with hold_device(runs, "c", 0, "run 20260101-000000-gemm-c-holder"):
        r = cli("run", "--workload", "gemm", "--backend", "c", "--problem", TINY, "--runs-dir", str(runs))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        [line] = r.stderr.strip().splitlines()
        assert "device cpu-0 (c:0) is busy: run 20260101-000000-gemm-c-holder" in line and f"pid {os.getpid()}" in line
        assert sorted(p.name for p in runs.iterdir()) == [".locks", folder.name]  # no new run folder
        for command in (["resume", folder.name], ["bench", folder.name]):
            r = cli(*command, "--runs-dir", str(runs))
            assert r.returncode == 2 and "is busy: run 20260101-000000-gemm-c-holder" in r.stderr, (command, r.stderr)
        with pytest.raises(DeviceBusy, match="holder"):
            with hold_device(runs, "c", 0, "check of a kernel"):
                pass
        assert "holder" in device_holder(runs, "c", 0)
        assert "is busy: run 20260101-000000-gemm-c-holder" in L.busy_reason(runs, "c", 0)
        assert L.busy_reason(runs, "cuda", 0) is None  # another device
    assert device_holder(runs, "c", 0) is None and L.busy_reason(runs, "c", 0) is None


def test_cuda_and_triton_share_a_gpu_lock(tmp_path):
    from core.run.device_lock import DeviceBusy, device_holder, hold_device

    with hold_device(tmp_path, "cuda", 0, "run A"):
        assert "run A" in device_holder(tmp_path, "triton", 0)
        with pytest.raises(DeviceBusy):
            with hold_device(tmp_path, "triton", 0, "run B"):
                pass
        with hold_device(tmp_path, "triton", 1, "run C"):  # another GPU is free
            pass


def test_a_killed_holder_leaves_the_device_free(tmp_path):
    from core.run.device_lock import device_holder, hold_device

    script = ("import sys, time; from core.run.device_lock import hold_device\n"
              "with hold_device(sys.argv[2], 'c', 0, 'run doomed'):\n    print('held', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(ROOT), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert "run doomed" in device_holder(tmp_path, "c", 0)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert device_holder(tmp_path, "c", 0) is None
    with hold_device(tmp_path, "c", 0, "run next") as lock:
        assert lock.held and json.loads(lock.path.read_text())["what"] == "run next"


# -- on a GPU (skipped where there is none) ------------------------------------------------------
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_a_gpu_sandbox_runs_in_its_own_folder_without_rlimits_and_its_cache_is_checked(tmp_path, backend):
    if availability(backend) is not None:
        pytest.skip(f"{backend}: {availability(backend)}")
    import random

    from core.backends import make_backend
    from core.config import RunConfig
    from core.evaluation.evaluator import Evaluator

    config = RunConfig.from_dict({"workload": "rmsnorm", "backend": backend, "problem": {"rows": 64, "cols": 256},
                                  "timeout_s": 60.0, "stability_launches": 4, "seed": 1})
    ev = Evaluator(config, tmp_path / ".cache", log=lambda line: None, log_path=tmp_path / "sandbox.log",
                   timing_target_s=0.02)
    ev.start()
    try:
        space = ev.template.gene_space()
        kernel = (space.seed_genomes() or [space.random(random.Random(0))])[0]
        kernel = ev.template.render(kernel)
        [res] = ev.evaluate_sources([kernel])
        assert res.status == "ok", res.cause
        log = ev.log_path.read_text()
        assert "abebot-sandbox-work-" in log and "limits:" not in log and "address space" not in log
        assert ev._spec()["limits"] == {}  # no RLIMIT_AS under CUDA, no rlimits on a GPU at all
    finally:
        ev.close()
    be = make_backend(backend, 0)
    first = be.compile(kernel, tmp_path / "cache")
    artifact = Path(first.path)
    assert artifact.is_absolute() and (artifact.parent / f"{first.source_hash}.sha256").exists()
    hit = be.compile(kernel, tmp_path / "cache")
    assert "not trusted" not in hit.log and (backend != "cuda" or hit.compile_seconds == 0.0)
    genuine = artifact.read_bytes()
    artifact.write_bytes(genuine[: len(genuine) // 2] + b"tampered")
    rebuilt = be.compile(kernel, tmp_path / "cache")
    assert rebuilt.log.startswith(f"cache entry {first.source_hash} not trusted (") and "rebuilt" in rebuilt.log
    assert not artifact.read_bytes().endswith(b"tampered")
    if backend == "triton":
        assert artifact.read_bytes() == kernel.source.encode()
