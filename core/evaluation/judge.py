"""The judge's side of the launcher (issue 35, item 1): the verdict is reached in a process that never
loads a kernel.

The sandbox's process runs :class:`core.evaluation.protocol.Protocol`, the *judge*: it draws the cases,
computes the references, checks every output it asks for, applies the physical floor and writes the
verdict. It starts a *launcher* (:mod:`core.evaluation.launcher`, a fresh interpreter: ``python -m``,
never a fork) that loads kernels and launches them on the judge's cases, whose buffers it shares
(:mod:`core.evaluation.shared_buffers`); the judge's pristine inputs and references stay in the judge.

:class:`LauncherClient` is the judge's handle: one request, one JSON reply; a launcher that dies raises
:class:`LauncherDied` (the Protocol's reply is then ``crashed`` with the signal's name, as a dead sandbox
was). :func:`timing_bounds` and :func:`final_state` are what the judge makes of a timing the launcher
reports: see ``docs/security.md``, "What the judge guarantees".
"""
from __future__ import annotations

import math
import os
import socket
import statistics
import subprocess
import sys
import time
import weakref
from typing import Any

from core.backends.arrays import CheckResult
from core.backends.base import CompileError
from core.evaluation.channel import ChannelClosed, recv_reply, send_request
from core.evaluation.record import one_line
from core.evaluation.timing import MIN_REPS


class LauncherDied(Exception):
    """The launcher process ended mid-request; ``code`` is its exit status (negative: a signal)."""

    def __init__(self, code: int | None, cause: str = ""):
        from core.evaluation.sandbox import describe_exit

        super().__init__(cause or describe_exit(code))
        self.code = code

    def reply(self) -> dict:
        """The judge's reply: ``crashed`` with the signal's name and a fresh sandbox, as when the sandbox's
        own process died; killed by SIGKILL or SIGTERM, the request is retried once (``killed_from_outside``)."""
        from core.evaluation.sandbox import OUTSIDE_SIGNALS

        print(f"[sandbox] the launcher {self}", flush=True)
        reply = {"status": "crashed", "cause": str(self), "restart": True}
        if self.code is not None and self.code < 0 and -self.code in OUTSIDE_SIGNALS:
            reply["killed_from_outside"] = True
        return reply


class RemoteError(Exception):
    """An exception raised in the launcher (a kernel's launch failed); ``remote_type`` names it."""

    def __init__(self, remote_type: str, cause: str):
        super().__init__(cause)
        self.remote_type = remote_type


class LauncherClient:
    """The judge's launcher: started at once, restarted when a request finds it dead.

    ``inline`` (tests, ``run_kernel.py`` of an exported kernel: no adversary) serves the requests in this
    process, on the judge's own runtime and harness, with nothing shared or separated."""

    def __init__(self, spec: dict, settings: dict, harness: Any, runtime: Any, inline: bool = False,
                 early: tuple | None = None):
        self.spec, self.settings, self.harness, self.inline = dict(spec), dict(settings), harness, inline
        self.arrays = harness.arrays
        self.blocks = None
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.own: frozenset[int] = frozenset()  # the judge's descendants when the launcher was ready
        self.pid = os.getpid()
        self.sent_cases: set[int] = set()
        self.dead_cases: list[int] = []
        if inline:
            from core.evaluation.launcher import LauncherServer

            self.server = LauncherServer(spec, settings, runtime=runtime, harness=harness)
            return
        if self.arrays.name == "numpy":
            from core.evaluation.shared_buffers import NumpyBlocks

            self.blocks = NumpyBlocks()
            self.arrays.shared_pool = self.blocks
        harness.share = True
        self._start(early)

    # -- the process -----------------------------------------------------------------------------
    def _start(self, early: tuple | None = None) -> None:
        """A launcher (``early``: one :func:`spawn_launcher` started, building its runtime meanwhile)
        given the judge's settings, and ready."""
        from core.evaluation.descendants import descendants

        self.proc, self.sock = early or spawn_launcher(self.spec)
        self.sent_cases: set[int] = set()
        self.dead_cases: list[int] = []
        if self.blocks is not None:
            self.blocks.forget_sent()
        try:
            send_request(self.sock, {"settings": self.settings})
        except OSError:
            pass  # it ended already: its reply (or its death) says why
        reply = self._receive()
        if reply.get("status") != "ready":
            raise RuntimeError(f"launcher failed to start: {reply.get('cause')}\n{reply.get('traceback', '')}".rstrip())
        self.pid = int(reply.get("pid") or self.proc.pid)
        self.own = frozenset(descendants(os.getpid()))

    def alive(self) -> bool:
        return self.inline or (self.proc is not None and self.proc.poll() is None)

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            send_request(self.sock, {"op": "exit"})
            self.proc.wait(2.0)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(5.0)
        self.sock.close()
        self.proc = None

    def _receive(self) -> dict:
        try:
            return recv_reply(self.sock)
        except ValueError as exc:  # not JSON, not an object, too long: the channel cannot be trusted on
            print(f"[sandbox] the launcher's reply was refused ({exc}); it is killed", flush=True)
            self.proc.kill()
            self.proc.wait(5.0)
            self.proc = None
            raise LauncherDied(None, f"the kernel's process sent a reply that is not one ({one_line(str(exc))})") from None
        except (ChannelClosed, ConnectionError, OSError):
            try:
                code = self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait(5.0)
            self.proc = None
            raise LauncherDied(code) from None

    # -- requests --------------------------------------------------------------------------------
    def request(self, op: str, cases: list = (), **fields: Any) -> dict:
        """Send ``op`` with the cases it names (their buffers shared the first time), return the reply;
        raises CompileError, RemoteError (the launch raised) or LauncherDied."""
        if not self.inline and not self.alive():
            self._start()
        self.arrays.synchronize()  # (GPU) what the judge wrote in the shared buffers is there before the launcher reads
        layouts: dict[int, dict] = {}
        for case in cases:
            uid = case.token.uid
            if uid not in self.sent_cases or self.inline:
                layouts[uid] = {"inline": case} if self.inline else self._layout(case)
                if not self.inline:
                    self.sent_cases.add(uid)
                    weakref.finalize(case.token, self.dead_cases.append, uid)
        message = {"op": op, "layouts": layouts, **fields}
        if self.inline:
            reply = self.server.handle(message)
        else:
            descriptors = [d for layout in layouts.values() for key, part in layout.items() if key != "shape"
                           for d in part.values()]
            blocks, fds = self.blocks.fds(descriptors) if self.blocks is not None else ([], [])
            message.update(blocks=blocks, dead=self._drain(self.blocks.dead if self.blocks else []),
                           drop_cases=self._drain(self.dead_cases))
            try:
                send_request(self.sock, message, fds)
            except (ConnectionError, OSError):
                pass  # read as a death by _receive
            reply = self._receive()
        for shape, seconds in reply.pop("repacks", []):
            self.harness.repacks.append((dict(shape), float(seconds)))
        if reply.get("status") == "error":
            if reply.get("compile"):
                raise CompileError(reply.get("cause", ""))
            raise RemoteError(str(reply.get("type", "Error")), str(reply.get("cause", "")))
        return reply

    @staticmethod
    def _drain(items: list) -> list:
        out = list(items)
        items.clear()
        return out

    def _layout(self, case: Any) -> dict:
        d = self.arrays.describe
        layout = {"shape": dict(case.shape), "data": {n: d(x) for n, x in case.data.items()},
                  "flats": {n: d(x) for n, x in case.flats.items()}}
        for part, arrays in case.mirror.items():
            layout[part] = {n: d(x) for n, x in arrays.items()}
        missing = [n for part in ("data", "flats") for n, v in layout[part].items() if v is None]
        if missing:
            raise RuntimeError(f"case buffers not shared with the launcher: {missing}")
        return layout

    # -- the operations the protocol uses --------------------------------------------------------
    def load(self, artifact: Any) -> dict:
        return self.request("load", artifact=artifact)

    def launch(self, case: Any) -> dict:
        """One launch on ``case``, finished when this returns; ``input_modified`` if the kernel wrote the
        repacked weights it read."""
        reply = self.request("launch", cases=[case], case=case.token.uid)
        return reply


def spawn_launcher(spec: dict) -> tuple[subprocess.Popen, socket.socket]:
    """Start a launcher process (``python -m core.evaluation.launcher``) and send it ``spec``: it builds
    its backend, runtime and harness while the judge builds its own, then waits for the judge's
    settings (:meth:`LauncherClient._start`). Returns (process, the judge's end of the socket)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "core.evaluation.launcher", str(theirs.fileno())],
                                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
    finally:
        theirs.close()
    send_request(mine, {"spec": dict(spec)})
    return proc, mine


def time_baselines(self: Any, wanted: list[str], cases: list, rng: Any) -> dict[str, dict]:
    """The judge's baseline timing (``self``: the Protocol): each baseline run once in the launcher on a case of its own and checked here, then timed there
    as kernels are, on ``cases``; times the judge's clock contradicts are not taken."""
    verify = {name: self.pool.case(("baseline", name), self.main, rng.getrandbits(31)) for name in wanted}
    t0 = time.perf_counter()
    reply = self.launcher.request("baselines", cases=cases + list(verify.values()), timing=[c.token.uid for c in cases],
                                  verify={n: c.token.uid for n, c in verify.items()}, seed=rng.getrandbits(31))
    wall = time.perf_counter() - t0
    self.priority = reply.get("priority") or self.priority
    got_all = reply.get("baselines") or {}
    claimed = sum(sum(float(t) for t in (e.get("times") or [])) for e in got_all.values())
    entries: dict[str, dict] = {}
    for name, case in verify.items():
        got = got_all.get(name) or {"cause": "not run by the launcher"}
        entry: dict[str, Any] = {"time_us": got.get("time_us"), "spread_us": got.get("spread_us"), "verified": False,
                                 "cause": str(got.get("cause") or "")}
        if "extra_bytes" in got:  # it ran: the judge checks what it wrote
            chk = self.harness.check(case)
            entry.update(verified=bool(chk.ok), max_abs_err=float(chk.max_abs_err), rel_err=float(chk.rel_err),
                         cause=entry["cause"] or ("" if chk.ok else one_line(f"{chk.cause} {chk.detail}")))
            entry["memory_bytes"] = self.io_bytes + int(got["extra_bytes"])
        if claimed > wall:
            entry.update(time_us=None, cause=f"the launcher reported {claimed:.3f} s of baseline launches in "
                                             f"{wall:.3f} s by the judge's clock")
        entries[name] = entry
    return entries


def paired_primary(self: Any, timed: dict[str, dict], cases: list, rng: Any) -> tuple[str, dict]:
    """The primary (``self``: the Protocol) among the verified baselines ``timed``, decided in pairs in
    the launcher (:mod:`core.evaluation.primary`), and each contested one's paired (us, spread). The
    fastest single timing, and no paired figure, when the launcher's pairings took more launch time
    than the judge's clock saw, name a baseline that did not verify, or fail."""
    fastest = min(timed, key=lambda n: timed[n]["time_us"])
    if len(timed) < 2:
        return fastest, {}
    t0 = time.perf_counter()
    try:
        reply = self.launcher.request("primary", timing=[c.token.uid for c in cases], seed=rng.getrandbits(31),
                                      single_us={n: e["time_us"] for n, e in timed.items()})
    except RemoteError:
        return fastest, {}
    wall = time.perf_counter() - t0
    primary, paired = reply.get("primary"), reply.get("paired") or {}
    if primary not in timed or float(reply.get("timed_s") or 0.0) > wall or set(paired) - set(timed):
        return fastest, {}
    return primary, {n: (float(v[0]), float(v[1])) for n, v in paired.items()}


# -- what the judge makes of a reported timing ---------------------------------------------------
def timing_bounds(reply: dict, wall_s: float, floor_us: float | None) -> str | None:
    """Why a timing the launcher reported cannot be right (``suspect``), or None. The judge's clock ran
    over the whole request: the reported launches cannot add up to more than it saw, nor can the
    launches it saw have taken less, each, than the physical floor."""
    kernel = [float(t) for t in reply.get("kernel") or []]
    if not kernel:
        return "the launcher reported no timed launch"
    every = kernel + [float(t) for t in (reply.get("baseline") or []) + (reply.get("chunks") or [])]
    if not all(math.isfinite(t) and t > 0 for t in every):
        return "the launcher reported a timed launch of no time, or of a time that is not a number"
    claimed = sum(kernel) + sum(float(t) for t in reply.get("baseline") or [])
    if claimed > wall_s:
        return (f"the launcher reported {claimed * 1e6:.0f} us of timed launches in a batch the judge saw take "
                f"{wall_s * 1e6:.0f} us")
    if floor_us and kernel and wall_s / len(kernel) < floor_us * 1e-6:
        return (f"{len(kernel)} timed launches reported in {wall_s * 1e6:.0f} us by the judge's clock: "
                f"{wall_s / len(kernel) * 1e6:.2f} us each is below the physical floor {floor_us:.2f} us")
    return None


# On a GPU a paired baseline's chunks may be slower than the same baseline timed alone at the start
# (per-call events carry host cost a graph did not: 130 against 27.7 us for a compiled baseline on the
# H200), but not by this much: beyond it the launcher inflated them to flatter the kernel. Not on a CPU
# (chunk statistic "min"), where a sample is one call's wall time, so the judge's clock bounds them
# closely, and where a loaded machine moves a baseline by more than this (numpy 250 us to 15.8 ms).
BASELINE_DRIFT = 16.0


def paired_figures(reply: dict, statistic: str, reference_us: float | None = None) -> tuple[list[float], dict] | str:
    """The kernel's chunk statistics and the paired figures (speed-up, its spread, noisy, the baseline's
    median), derived by the judge from the samples the launcher reported -- its own speed-up is not
    read. :func:`core.evaluation.timing.paired_times` times (baseline, kernel) chunks of equal
    repetitions, each kernel chunk's statistic reported; a string says why the samples cannot be that,
    or that the baseline's chunks are over :data:`BASELINE_DRIFT` times ``reference_us``, its time at
    the start (the wall-clock bound is loose where a sample is one launch of a graph of many)."""
    from core.evaluation.timing import Paired

    k, b = [float(t) for t in reply.get("kernel") or []], [float(t) for t in reply.get("baseline") or []]
    pairs = len(reply.get("chunks") or [])
    if not pairs or len(k) % pairs or len(b) != len(k):
        return f"{len(k)} kernel and {len(b)} baseline samples reported in {pairs} pairs of equal chunks"
    reps = len(k) // pairs
    pick = min if statistic == "min" else statistics.median
    kc = [pick(k[i * reps:(i + 1) * reps]) for i in range(pairs)]
    bc = [pick(b[i * reps:(i + 1) * reps]) for i in range(pairs)]
    if reference_us and statistic != "min" and statistics.median(bc) * 1e6 > BASELINE_DRIFT * reference_us:
        return (f"the baseline's paired chunks took {statistics.median(bc) * 1e6:.1f} us, over {BASELINE_DRIFT:.0f}x "
                f"its {reference_us:.1f} us timed alone at the start")
    paired = Paired(k, b, [x / max(y, 1e-12) for x, y in zip(bc, kc)], str(reply.get("timing_method") or ""),
                    statistic, kc)
    return kc, {"speedup": paired.speedup, "speedup_spread": paired.spread, "noisy": bool(paired.noisy),
                "pair_baseline_us": statistics.median(b) * 1e6}


def final_state(harness: Any, cases: list, last: dict) -> CheckResult:
    """After a timing: every case launched (at least the first ``MIN_REPS``) holds a permutation (the one
    reported) of its pristine inputs, and its outputs are that permutation of the judge's own reference,
    within tolerance; guards intact. Counted on the device and read back at once (one sync on a GPU)."""
    a, key = harness.arrays, harness.workload.perturbation(harness.problem)
    owed = min(len(cases), MIN_REPS)  # every timed call of the loops launches on cases 0, 1, ... MIN_REPS - 1 at least
    if sum(str(ci) in last for ci in range(len(cases))) < owed:
        return CheckResult(False, "suspect", detail=f"timed launches reported on {len(last)} cases, fewer than {owed}")
    counts: list[tuple[int, str, Any, Any]] = []  # (case, what, tensor, device count)
    for ci, case in enumerate(cases):
        if str(ci) not in last:  # (a rotation over more cases than launches: on a GPU, 256 of them)
            continue
        row = last[str(ci)]
        n = int(case.shape.get(key, 1)) if key else 1
        if row is None and n >= 2:  # the launch checks permute whatever has two rows or more
            return CheckResult(False, "suspect", detail=f"case {ci + 1}: no permutation reported")
        if row is not None:
            if sorted(int(v) for v in row) != list(range(n)):
                return CheckResult(False, "suspect", detail=f"case {ci + 1}: the reported permutation is not one")
            row = a.index_table([row])[0]
        for t in harness.tensors:
            axis = t.dims.index(key) if key and key in t.dims and row is not None else None
            if t.written:
                counts.append((ci, "guard", t, a.guard_damage(case.flats[t.name])))
                atol, rtol = harness.workload.tolerance(t.dtype_in(harness.problem), case.shape)
                ref = _permuted(a, case.expected[t.name], row, axis)
                counts += [(ci, "output", (t, ref), c) for c in a.count_outside(case.data[t.name], ref, atol, rtol)]
            elif t.read:  # exactly the pristine inputs, permuted: any difference (or NaN) is a write
                counts += [(ci, "input", t, c) for c in
                           a.count_outside(case.data[t.name], a.float64(_permuted(a, case.pristine[t.name], row, axis)),
                                           0.0, 0.0)]
    values = a.to_host([c for _, _, _, c in counts])
    for (ci, what, t, _), value in zip(counts, values):
        if not value:
            continue
        if what == "guard":
            return CheckResult(False, "out_of_bounds_write", detail=f"case {ci + 1}: guard zone around {t.name!r}")
        if what == "input":
            return CheckResult(False, "input_modified",
                               detail=f"case {ci + 1}: input {t.name!r} is not its pristine inputs, permuted")
        t, ref = t
        atol, rtol = harness.workload.tolerance(t.dtype_in(harness.problem), cases[ci].shape)
        res = a.compare(cases[ci].data[t.name], ref, atol, rtol)
        if res.ok:  # (counted and compared alike; never expected)
            res = CheckResult(False, "wrong_result", detail="outputs beyond tolerance")
        res.detail = f"the last timed launch on case {ci + 1}: {t.name}: {res.detail}"
        return res
    return CheckResult(True)


def _permuted(a: Any, x: Any, row: Any, axis: int | None) -> Any:
    if axis is None:
        return x
    if a.name == "numpy":
        return a.xp.take(x, row, axis=axis)
    return x.index_select(axis, row)
