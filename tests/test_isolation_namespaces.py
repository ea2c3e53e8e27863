"""Isolation with Linux namespaces (core/evaluation/isolation.py): what a kernel cannot reach when it is on.

Each claim in docs/security.md's "What each mode isolates" is shown here:

* bwrap mode: the sandbox cannot write outside its own folders (the file does not appear), cannot
  open a socket to 127.0.0.1, sees a private /tmp, and leaves no process behind; a C kernel doing
  the same through ``core check`` is contained alike; the C compile cannot read a file outside the
  system's /usr: an absolute ``#include "/etc/passwd"`` is refused by the include guard before the
  compiler runs (in every mode), and a symbolic link planted in the cache folder, which the guard
  cannot see, leads nowhere (``No such file or directory``); neither quotes the file;
* unshare mode: no network, and nothing else;
* off: all of the above succeed (the control that shows each test can fail).

Skipped, with the reason, where bubblewrap (or unshare) cannot create namespaces here;
scripts/test.sh installs bubblewrap.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from core.backends import availability, namespaces
from core.backends.base import CompileError
from core.evaluation import isolation
from core.evaluation.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
BWRAP = pytest.mark.skipif(isolation.mode() != "bwrap", reason=f"no bubblewrap here: {isolation.why_not()}")
UNSHARE = pytest.mark.skipif(isolation.mode() == "none", reason=f"no namespaces here: {isolation.why_not()}")
C_UNAVAILABLE = availability("c")
NEEDS_C = pytest.mark.skipif(C_UNAVAILABLE is not None, reason=f"C backend: {C_UNAVAILABLE}")


class Probe:
    """A sandbox server that does what a hostile kernel would, and says whether it worked."""

    def __init__(self, spec: dict):
        pass

    def handle(self, request: dict) -> dict:
        op = request["op"]
        try:
            if op == "write":
                Path(request["path"]).write_text("written from the sandbox")
            elif op == "connect":
                with socket.create_connection(("127.0.0.1", request["port"]), timeout=2):
                    pass
            elif op == "listdir":
                return {"status": "ok", "names": sorted(os.listdir(request["path"]))}
            elif op == "cwd":
                Path("relative.txt").write_text("mine")
                return {"status": "ok", "cwd": os.getcwd()}
            elif op == "fork_sleeper":
                pid = os.fork()
                if pid == 0:
                    os.setsid()
                    time.sleep(60)
                    os._exit(0)
                return {"status": "ok"}
            elif op == "spawn_sleeper":
                return self._spawn_sleeper(request["mark"], request.get("then", ""))
            elif op == "segv":
                os.kill(os.getpid(), 11)
        except OSError as exc:
            return {"status": "refused", "error": f"{type(exc).__name__}: {exc}"}
        return {"status": "ok"}

    @staticmethod
    def _spawn_sleeper(mark: str, then: str) -> dict:
        """A ``setsid()`` child that execs ``sleep 60`` with ``ABEBOT_TEST_MARK=mark``; once the exec has
        happened (the close-on-exec pipe closes), returns, or ``then="crash"`` crashes the sandbox
        (SIGSEGV), or ``then="hang"`` hangs it until the watchdog kills it."""
        r, w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.setsid()
            try:
                os.execve("/bin/sleep", ["sleep", "60"], {**os.environ, "ABEBOT_TEST_MARK": mark})
            finally:
                os.write(w, b"x")
                os._exit(127)
        os.close(w)
        failed = os.read(r, 1)
        os.close(r)
        if failed:
            return {"status": "refused", "error": "exec of sleep failed"}
        if then == "crash":
            os.kill(os.getpid(), 11)
        while then == "hang":
            time.sleep(1)
        return {"status": "ok"}


@pytest.fixture
def isolate(monkeypatch):
    """Turn isolation on (or off) for this test only."""
    def turn(on: bool, writable=()):
        monkeypatch.setenv(isolation.ENV, "1" if on else "0")
        monkeypatch.delenv(isolation.WRITABLE_ENV, raising=False)
        isolation.enable(on, writable)
    return turn


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.setblocking(False)
    yield server
    server.close()


def connected(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
        return True
    except BlockingIOError:
        return False


def probe(tmp_path: Path, *requests: dict) -> list[dict]:
    with Sandbox({"server": f"{__name__}:Probe"}, timeout_s=20, log_path=tmp_path / "sandbox.log") as box:
        return [box.call(r) for r in requests]


# ---- the sandbox process -----------------------------------------------------------------------------

@BWRAP
def test_an_isolated_sandbox_cannot_write_outside_its_folder(tmp_path, isolate):
    isolate(True)
    in_tmp = tmp_path / "written.txt"  # beside its log, in /tmp: lands in the sandbox's private /tmp
    in_repo = ROOT / f".isolation-probe-{os.getpid()}"  # anywhere else: a read-only file system
    try:
        to_tmp, to_repo = probe(tmp_path, {"op": "write", "path": str(in_tmp)}, {"op": "write", "path": str(in_repo)})
        assert to_repo["status"] == "refused" and "Read-only file system" in to_repo["error"]
        assert not in_tmp.exists() and not in_repo.exists()
    finally:
        in_repo.unlink(missing_ok=True)
    assert "[sandbox" in (tmp_path / "sandbox.log").read_text()  # its own log is still written


@BWRAP
def test_an_isolated_sandbox_has_a_private_tmp_and_works_in_it(tmp_path, isolate):
    isolate(True)
    marker = Path("/tmp") / f"abebot-isolation-marker-{os.getpid()}"
    marker.write_text("host")
    try:
        listing, cwd = probe(tmp_path, {"op": "listdir", "path": "/tmp"}, {"op": "cwd"})
        assert marker.name not in listing["names"]
        assert cwd["status"] == "ok" and cwd["cwd"].startswith("/tmp/abebot-sandbox-work-")
        assert not Path(cwd["cwd"]).exists()  # that /tmp was the sandbox's own
    finally:
        marker.unlink()


@UNSHARE
def test_an_isolated_sandbox_cannot_connect_to_localhost(tmp_path, isolate, listener):
    isolate(True)
    [reply] = probe(tmp_path, {"op": "connect", "port": listener.getsockname()[1]})
    assert reply["status"] == "refused"
    assert not connected(listener)


def marked(mark: str) -> list[int]:
    """Processes of this machine whose environment carries ``ABEBOT_TEST_MARK=mark``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"ABEBOT_TEST_MARK={mark}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(int(pid))
        except OSError:
            pass
    return found


def wait_until_none(mark: str, timeout_s: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@BWRAP
def test_a_process_left_behind_by_an_isolated_sandbox_is_named_and_killed(tmp_path, isolate, monkeypatch):
    """The sandbox's own sweep (core/evaluation/descendants.py) works inside bwrap's PID namespace: the
    verdict names the process by the namespace's pid, and it is gone before the reply; the sandbox and
    bwrap go at close."""
    from multiprocessing import resource_tracker

    isolate(True)
    resource_tracker.ensure_running()  # multiprocessing's own helper lives on, unmarked
    mark = f"left-behind-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("ABEBOT_TEST_MARK", mark)
    with Sandbox({"server": f"{__name__}:Probe"}, timeout_s=20, log_path=tmp_path / "sandbox.log") as box:
        assert len(marked(mark)) >= 2  # bwrap and the sandbox (and bwrap's init)
        reply = box.call({"op": "spawn_sleeper", "mark": mark + "-sleeper"})
        assert reply["status"] == "crashed", reply
        assert reply["cause"].startswith("left a process running: pid ") and "(sleep)" in reply["cause"], reply
        assert reply["cause"].endswith("(pids in the sandbox's PID namespace)"), reply
        assert marked(mark + "-sleeper") == []
        assert box.call({"op": "cwd"})["status"] == "ok"  # the same sandbox goes on
    assert wait_until_none(mark) == []


@BWRAP
def test_a_process_left_by_an_isolated_sandbox_that_crashed_dies_with_its_namespace(tmp_path, isolate):
    """The sandbox crashes right after its kernel's setsid() child started: no sweep ran, and the parent
    never saw the child (the gap docs/security.md names outside bwrap). The PID namespace ends with
    the sandbox, and takes the child with it."""
    isolate(True)
    mark = f"crashed-left-{os.getpid()}-{time.monotonic_ns()}"
    [reply] = probe(tmp_path, {"op": "spawn_sleeper", "mark": mark, "then": "crash"})
    assert reply == {"status": "crashed", "cause": "killed by SIGSEGV"}, reply
    assert wait_until_none(mark) == []


@BWRAP
def test_a_process_left_by_an_isolated_sandbox_killed_on_a_timeout_dies_with_it(tmp_path, isolate):
    """Killed on a timeout, the sandbox takes its kernel's processes along: the watchdog kills every descendant
    of bwrap (the process it started) by host pid, and the PID namespace ends with the sandbox."""
    isolate(True)
    mark = f"timeout-left-{os.getpid()}-{time.monotonic_ns()}"
    with Sandbox({"server": f"{__name__}:Probe"}, timeout_s=20, log_path=tmp_path / "sandbox.log") as box:
        reply = box.call({"op": "spawn_sleeper", "mark": mark, "then": "hang"}, timeout_s=2)
        assert reply["status"] == "timeout", reply
        assert wait_until_none(mark) == []
        assert box.restarts == 1 and box.call({"op": "cwd"})["status"] == "ok"


@BWRAP
def test_an_isolated_sandbox_started_from_a_thread_outlives_the_thread(tmp_path, isolate):
    """bwrap --die-with-parent follows the forking *thread*: a pool worker's restart must not die with it."""
    import threading

    isolate(True)
    box = Sandbox({"server": f"{__name__}:Probe"}, timeout_s=20, log_path=tmp_path / "sandbox.log")
    try:
        starter = threading.Thread(target=box.start)
        starter.start()
        starter.join()
        time.sleep(0.5)
        assert box.alive() and box.call({"op": "cwd"})["status"] == "ok" and box.restarts == 0
    finally:
        box.close()


@BWRAP
def test_an_isolated_sandbox_dies_with_the_process_that_started_it(tmp_path):
    import signal
    import subprocess
    import sys

    mark = f"parent-killed-{os.getpid()}-{time.monotonic_ns()}"
    script = (f"import sys, time; sys.path[:0] = [{str(ROOT)!r}]\n"
              "from core.evaluation import isolation\nfrom core.evaluation.sandbox import Sandbox\n"
              "if __name__ == '__main__':\n"
              "    isolation.enable(True)\n"
              f"    box = Sandbox({{'server': '{__name__}:Probe'}}, timeout_s=20, log_path={str(tmp_path / 's.log')!r})\n"
              "    box.start(); print('ready', flush=True); time.sleep(60)\n")
    (tmp_path / "parent.py").write_text(script)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], cwd=ROOT, stdout=subprocess.PIPE,
                              env=dict(os.environ, ABEBOT_TEST_MARK=mark), text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        assert len(marked(mark)) >= 3
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_until_none(mark) == []
    finally:
        parent.kill()
        parent.wait()


@BWRAP
def test_a_crash_in_an_isolated_sandbox_is_named_by_its_signal(tmp_path, isolate):
    isolate(True)
    [reply] = probe(tmp_path, {"op": "segv"})
    assert reply["status"] == "crashed" and "SIGSEGV" in reply["cause"], reply


def test_without_isolation_the_same_probes_succeed(tmp_path, isolate, listener):
    isolate(False)
    outside = tmp_path / "written.txt"
    write, connect = probe(tmp_path, {"op": "write", "path": str(outside)},
                           {"op": "connect", "port": listener.getsockname()[1]})
    assert write["status"] == connect["status"] == "ok"
    assert outside.exists() and connected(listener)


# ---- the C compile ---------------------------------------------------------------------------------

def compile_c(tmp_path: Path, source: str):
    """Compile ``source`` as the C backend compiles a kernel (core/backends/c.py), into tmp_path/cache."""
    from core.backends.base import KernelSource
    from core.backends.c import CBackend

    backend = CBackend(0)
    return backend.compile(KernelSource(backend="c", source=source, entry="f"), tmp_path / "cache")


REFUSED = "refused: only the kernel's own folder and the toolchain's headers may be included"


def planted(tmp_path: Path) -> dict[str, Path]:
    """A file outside the system (beside the test) and, in the compile cache folder, symbolic links to it
    and to /etc/passwd: what a kernel run without isolation could leave there for a later compile.
    The include guard reads only a kernel's text, so ``#include "secret.h"`` gets past it."""
    secret = tmp_path / "secret.h"
    secret.write_text("TOPSECRET_LINE_42 leaked;\n")  # read as C, its first word is quoted: "unknown type name"
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "secret.h").symlink_to(secret)
    (cache / "passwd.h").symlink_to("/etc/passwd")
    return {"secret": secret}


@NEEDS_C
@BWRAP
def test_an_isolated_compile_cannot_include_a_file_outside_the_system(tmp_path, isolate):
    isolate(True)
    secret = planted(tmp_path)["secret"]
    for path in ("/etc/passwd", str(secret)):  # the first layer: refused before the compiler runs
        with pytest.raises(CompileError) as err:
            compile_c(tmp_path, f'#include "{path}"\nint f(void) {{ return 0; }}\n')
        assert REFUSED in str(err.value), str(err.value)
        assert "root:x:0:0" not in str(err.value) and "TOPSECRET" not in str(err.value)
    for name in ("passwd.h", "secret.h"):  # past the guard: the compile's namespace has no such file
        with pytest.raises(CompileError) as err:
            compile_c(tmp_path, f'#include "{name}"\nint f(void) {{ return 0; }}\n')
        assert "No such file or directory" in str(err.value), str(err.value)
        assert "root:x:0:0" not in str(err.value) and "TOPSECRET" not in str(err.value)


@NEEDS_C
@BWRAP
def test_an_isolated_compile_still_builds_an_openmp_kernel(tmp_path, isolate):
    isolate(True)
    art = compile_c(tmp_path, "#include <math.h>\n#include <omp.h>\n"
                              "int f(int n) { int s = 0;\n#pragma omp parallel for reduction(+:s)\n"
                              "for (int i = 0; i < n; i++) s += i; return s + (int)sqrt(4.0); }\n")
    assert Path(art.path).exists()


@NEEDS_C
def test_without_isolation_an_include_quotes_the_file(tmp_path, isolate):
    """The control: an absolute include is still refused by the guard, quoting nothing, but a planted
    link the guard lets through is followed, and the compiler's error quotes the file."""
    isolate(False)
    secret = planted(tmp_path)["secret"]
    with pytest.raises(CompileError) as err:
        compile_c(tmp_path, f'#include "{secret}"\nint f(void) {{ return 0; }}\n')
    assert REFUSED in str(err.value) and "TOPSECRET" not in str(err.value)
    with pytest.raises(CompileError) as err:
        compile_c(tmp_path, '#include "secret.h"\nint f(void) { return 0; }\n')
    assert "TOPSECRET_LINE_42" in str(err.value)


# ---- what each mode says -----------------------------------------------------------------------------

def test_the_isolation_line_says_plainly_when_a_check_is_not_isolated(monkeypatch):
    monkeypatch.setattr(namespaces, "mode", lambda: "none")
    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    line = isolation.describe(True)
    assert line.startswith("NOT isolated") and "apt-get install bubblewrap" in line
    assert isolation.describe(False) == line  # off because there is none: the same plain line


def test_commands_are_unchanged_when_isolation_is_off(isolate):
    isolate(False)
    assert isolation.compile_command(["cc", "x.c"], "/tmp") == ["cc", "x.c"]
    assert isolation.sandbox_prefix() == []


def test_an_isolated_sandbox_may_write_only_what_its_backend_writes_while_loading(tmp_path, monkeypatch, isolate):
    """Asked of the backend (``Backend.load_writes``), not by its name: Triton's JIT cache under the
    compile cache, nothing for C (the command line only: no bwrap needs to run)."""
    isolate(True)
    monkeypatch.setattr(namespaces, "mode", lambda: "bwrap")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    cache = tmp_path / "cache"

    def written(backend: str) -> list[str]:
        args = isolation.sandbox_prefix([], {"backend": backend, "cache_dir": str(cache)})
        return [args[i + 1] for i, a in enumerate(args) if a == "--bind"]

    assert written("triton") == [str(cache / "triton" / "triton")]
    assert written("c") == []


def test_unshare_mode_cuts_the_network_only(monkeypatch, isolate):
    isolate(True)
    monkeypatch.setattr(namespaces, "mode", lambda: "unshare")
    cmd = isolation.compile_command(["cc", "x.c"], "/tmp")
    assert cmd[:2] == ["unshare", "--net"] and cmd[-2:] == ["cc", "x.c"]
    assert isolation.sandbox_prefix()[:2] == ["unshare", "--net"]


# ---- a kernel through `core check` ---------------------------------------------------------------------

HOSTILE_RMSNORM = r"""/* An honest RMSNorm that, on its first call, writes a file outside its folder and opens a
 * socket to 127.0.0.1: what a kernel nobody reviewed may do. */
#include <arpa/inet.h>
#include <math.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

static int done;

static void side_effects(void) {
    FILE *f = fopen("%(marker)s", "w");
    if (f) { fputs("written by a kernel\n", f); fclose(f); }
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {0};
    to.sin_family = AF_INET;
    to.sin_port = htons(%(port)d);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s >= 0) { connect(s, (struct sockaddr *)&to, sizeof to); close(s); }
}

void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps) {
    (void)residual;
    if (!done) { done = 1; side_effects(); }
    for (int i = 0; i < rows; i++) {
        const float *r = x + (long)i * cols;
        float ss = 0.0f;
        for (int j = 0; j < cols; j++) ss += r[j] * r[j];
        float s = 1.0f / sqrtf(ss / cols + eps);
        for (int j = 0; j < cols; j++) out[(long)i * cols + j] = r[j] * s * w[j];
    }
}
"""


def check_hostile(tmp_path: Path, listener: socket.socket, isolate: bool) -> tuple[dict, bool, list[str]]:
    """Check HOSTILE_RMSNORM with ``core check``'s own function: (result, whether its file appeared,
    the lines said before it ran)."""
    from core.tools.check import check_kernel

    marker = ROOT / f".isolation-kernel-marker-{os.getpid()}"  # outside /tmp: a real folder of the user's
    kernel = tmp_path / "hostile.c"
    kernel.write_text(HOSTILE_RMSNORM % {"marker": marker, "port": listener.getsockname()[1]})
    said: list[str] = []
    try:
        result = check_kernel("rmsnorm", "c", kernel, problem={"rows": 16, "cols": 64}, runs_dir=tmp_path / "runs",
                              isolate=isolate, say=said.append, timing_target_s=0.02, timeout_s=20.0,
                              stability_launches=4, log_path=tmp_path / "sandbox.log")
        return result, marker.exists(), said
    finally:
        marker.unlink(missing_ok=True)


@NEEDS_C
@BWRAP
def test_core_check_isolates_a_kernel_that_writes_outside_its_folder_and_opens_a_socket(tmp_path, listener):
    result, written, said = check_hostile(tmp_path, listener, isolate=True)
    assert said == [isolation.describe(True)] and said[0].startswith("isolated with bubblewrap")
    assert result["ok"], result  # it computes right: only what it did besides is contained
    assert not written and not connected(listener)
    assert result["isolation"] == said[0]
    assert isolation.ENV not in os.environ or os.environ[isolation.ENV] != "1"  # turned off again after the check


@NEEDS_C
def test_without_isolation_core_check_lets_that_kernel_write_and_connect(tmp_path, listener):
    result, written, said = check_hostile(tmp_path, listener, isolate=False)
    assert said[0].startswith("isolation off")
    assert written and connected(listener)


def test_check_isolate_where_there_is_none_is_bad_input(tmp_path, monkeypatch, capsys):
    from core.cli import main

    monkeypatch.setattr(namespaces, "mode", lambda: "none")
    kernel = tmp_path / "k.c"
    kernel.write_text("void abebot_rmsnorm(void) {}\n")
    code = main(["check", "--workload", "rmsnorm", "--backend", "c", "--kernel", str(kernel),
                 "--runs-dir", str(tmp_path / "runs"), "--isolate"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--isolate: no isolation here" in err[0]


# ---- the Check page ----------------------------------------------------------------------------------

def test_the_check_page_says_plainly_when_the_kernel_will_not_be_isolated(tmp_path, monkeypatch):
    from tests.test_app import app

    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(tmp_path))
    monkeypatch.setattr(namespaces, "mode", lambda: "none")
    monkeypatch.setattr(isolation.shutil, "which", lambda name: None)
    at = app("check")
    assert any(w.value.startswith("NOT isolated") for w in at.warning), [w.value for w in at.warning]
    assert at.toggle(key="check_isolate").value is False


@BWRAP
def test_the_check_page_isolates_by_default_where_bubblewrap_works(tmp_path, monkeypatch):
    from dashboard.checkkernel import check_argv
    from tests.test_app import app

    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(tmp_path))
    at = app("check")
    assert at.toggle(key="check_isolate").value is True
    assert any(i.value.startswith("isolated with bubblewrap") for i in at.info), [i.value for i in at.info]
    assert check_argv(tmp_path, tmp_path / "k.c", "gemm", "c", isolate=True)[-1] == "--isolate"
    assert check_argv(tmp_path, tmp_path / "k.c", "gemm", "c", isolate=False)[-1] == "--no-isolate"
