"""The launcher: the one process that loads kernels and launches them (issue 35, item 1).

The judge (:class:`core.evaluation.protocol.Protocol`, in the sandbox's process) spawns it and never
loads a kernel itself. The launcher receives the judge's cases as shared buffers
(:mod:`core.evaluation.shared_buffers`), loads an artifact, launches on a case when asked, and runs the
timing loops (:func:`core.evaluation.timing.paired_times` beside the primary baseline, with
:class:`core.evaluation.checks.LaunchChecks` and the cache policy's eviction around every launch) on
the judge's timing cases. It holds no reference the judge checks against and reaches no verdict:
whatever it reports, the judge bounds (:mod:`core.evaluation.judge`). Its replies are JSON
(:mod:`core.evaluation.channel`).

It runs under the sandbox's limits (the CPU time re-armed per request, the address space once its
server is built), ignores SIGINT, leaves its process group and session as they are (the judge's: the
sandbox sweeps and kills every process a kernel starts) and, where it can, drops every capability and
sets ``no_new_privs``: a kernel running as root cannot ``ptrace`` the judge.
"""
from __future__ import annotations

import os
import random
import signal
import statistics
import threading
import time
import traceback
from typing import Any, Callable

from core.backends.base import CompileError
from core.evaluation.checks import LaunchChecks
from core.evaluation.harness import Case, Harness, case_arrays
from core.evaluation.record import one_line
from core.evaluation.shared_buffers import Attached
from core.evaluation.timing import Side, adaptive_times, median_iqr_us, paired_times, rotation


class LauncherServer:
    """Kernels and baselines launched on the judge's shared cases. ``settings``: cache, graph_block,
    timing_target_s (the judge's choices)."""

    def __init__(self, spec: dict, settings: dict, runtime: Any = None, harness: Harness | None = None):
        if runtime is None:  # a process of its own: its own backend, runtime and harness
            runtime, harness = build(spec)
        self.runtime, self.h, self.arrays = runtime, harness, runtime.arrays
        self.cache = settings["cache"]
        self.timing_target_s = float(settings["timing_target_s"])
        runtime.cache = self.cache
        runtime.graph_block = int(settings.get("graph_block", 1))
        self.attached = Attached()
        self.cases: dict[int, Case] = {}
        self.kernel: Any = None
        self.artifact: Any = None
        self.dying: tuple[list, list] = ([], [])  # blocks and cases the judge let go, dropped at the next load

    # -- requests --------------------------------------------------------------------------------
    def handle(self, request: dict, fds: list[int] = ()) -> dict:
        """Take in the request's new buffers and cases, run its op; errors come back as a reply."""
        self.attached.receive(request.get("blocks", []), list(fds))
        # What the judge let go stays mapped until the next kernel is loaded: a kernel that kept a pointer to
        # an earlier case's buffer reads what is left there (and fails its checks), as it did in one process.
        self.dying[0].extend(request.get("dead", []))
        self.dying[1].extend(request.get("drop_cases", []))
        for uid, layout in request.get("layouts", {}).items():
            self.cases[uid] = self._case(layout)
        op = request.get("op")
        try:
            reply = getattr(self, f"op_{op}")(request)
        except CompileError as exc:
            reply = {"status": "error", "compile": True, "type": type(exc).__name__, "cause": str(exc)}
        except Exception as exc:
            traceback.print_exc()
            reply = {"status": "error", "type": type(exc).__name__, "cause": str(exc)}
        reply["repacks"] = [[shape, s] for shape, s in self.h.repacks]
        self.h.repacks.clear()
        return reply

    def _case(self, layout: dict) -> Case:
        get = self.attached.array
        if "inline" in layout:  # the same process: the judge's own case
            return layout["inline"]
        return Case(shape=dict(layout["shape"]), data={n: get(d) for n, d in layout["data"].items()},
                    flats={n: get(d) for n, d in layout["flats"].items()},
                    pristine={n: get(d) for n, d in layout.get("pristine", {}).items()},
                    expected={n: get(d) for n, d in layout.get("expected", {}).items()})

    def op_ping(self, request: dict) -> dict:
        return {"status": "ok", "pid": os.getpid()}

    def op_load(self, request: dict) -> dict:
        """Load an artifact: the kernel every later launch uses (the previous one is let go)."""
        for case in self.cases.values():
            case.bound.clear()
            case.packed.clear()
            case.packed_pristine.clear()
        self.kernel, self.artifact = None, None
        blocks, uids = self.dying
        for uid in uids:
            self.cases.pop(uid, None)
        self.attached.drop(blocks)
        self.dying = ([], [])
        self.kernel = self.runtime.load(request["artifact"])
        self.artifact = request["artifact"]
        return {"status": "ok", "resources": dict(getattr(self.kernel, "resources", None) or {})}

    def op_launch(self, request: dict) -> dict:
        """One launch of the kernel on a case, waited for; the repacked weights it read checked unchanged."""
        case = self.cases[request["case"]]
        self.h.launch(self.kernel, case)
        self.runtime.synchronize()
        for key, packed in case.packed.items():
            for name, x in packed.items():
                if not self.arrays.same_bits(x, case.packed_pristine[key][name]):
                    return {"status": "ok", "packed_modified": name}
        return {"status": "ok"}

    def op_launches(self, request: dict) -> dict:
        """One launch on each case named in ``launch``, in order, each waited for; stops at the first
        launch that raises or changes the repacked weights it read (``stopped``). The judge reads back
        and checks every output itself: ``launched`` only says how many it may look at."""
        done = 0
        for uid in request["launch"]:
            stopped = self._launch_once(self.cases[uid])
            if stopped:
                return {"status": "ok", "launched": done, "stopped": stopped}
            done += 1
        return {"status": "ok", "launched": done}

    def op_repeat(self, request: dict) -> dict:
        """``launches`` launches on one case, its outputs poisoned and its in-place tensors restored
        before each, what each left (outputs with their guard zones) copied into its own row of the
        ``into`` buffers for the judge to read back and compare; then, with ``memory``, the memory
        measurement on that case (:meth:`op_memory`)."""
        case, into = self.cases[request["case"]], self.cases[request["into"]]
        done = 0
        for j in range(int(request["launches"])):
            self.h.reset_outputs(case)
            stopped = self._launch_once(case)
            if stopped:
                return {"status": "ok", "launched": done, "stopped": stopped}
            for t in self.h.written:
                self.arrays.copy_into(into.data[t.name][j], case.flats[t.name])
            done += 1
        self.runtime.synchronize()
        out = {"status": "ok", "launched": done}
        if request.get("memory"):
            out["memory"] = self.op_memory({"case": request["case"]})
        return out

    def _launch_once(self, case: Case) -> dict | None:
        """One launch on ``case``, waited for; why the batch stops there (it raised, or changed the
        repacked weights it read), or None."""
        try:
            self.h.launch(self.kernel, case)
            self.runtime.synchronize()
        except CompileError as exc:  # a JIT backend (Triton) compiles at its first launch
            return {"compile": True, "type": type(exc).__name__, "cause": str(exc)}
        except Exception as exc:
            traceback.print_exc()
            return {"type": type(exc).__name__, "cause": str(exc)}
        for key, packed in case.packed.items():
            for name, x in packed.items():
                if not self.arrays.same_bits(x, case.packed_pristine[key][name]):
                    return {"packed_modified": name}
        return None

    def op_memory(self, request: dict) -> dict:
        case = self.cases[request["case"]]
        declared = int(self.h.extra_memory_bytes(self.kernel, self.artifact, case))
        seen = int(self.arrays.peak_extra_bytes(lambda: self.h.launch(self.kernel, case)))
        return {"status": "ok", "declared": declared, "seen": seen, "packed": int(self.h.packed_bytes(self.kernel, case)),
                "onchip": int(self.h.onchip_bytes(self.artifact, self.kernel))}

    # -- timing ----------------------------------------------------------------------------------
    def op_time(self, request: dict) -> dict:
        """Time the kernel on the timing cases, alone or in pairs with ``pair`` (a baseline's name) on
        ``pair_cases``; every timed launch checked by LaunchChecks. Reports every sample, the chunks,
        the last permutation of each case and the checks' verdict, for the judge to bound."""
        cases = [self.cases[u] for u in request["timing"]]
        rng = random.Random(int(request["seed"]))
        for c in cases:  # repack and bind now: neither belongs in a timed launch
            self.h.prepare(self.kernel, c)
        checks = LaunchChecks(self.h, cases, rng.getrandbits(31))
        kernel = self.kernel
        side = self._side(lambda c: self.h.launch(kernel, c), cases, checks)
        out: dict[str, Any] = {"status": "ok", "cache": self.cache, "baseline": [], "chunks": []}
        if request.get("pair") is None:
            out["kernel"] = adaptive_times(self.runtime, side.fn, self.timing_target_s, before=side.before,
                                           after=side.after)
            out["timing_method"] = getattr(self.runtime, "last_timing", "")
        else:
            name = request["pair"]
            fn = self.h.baselines()[name]
            bcases = [self.cases[u] for u in request["pair_cases"]]
            bside = self._side(fn, bcases, LaunchChecks(self.h, bcases, rng.getrandbits(31), check=False))
            paired = paired_times(self.runtime, side, bside, self.timing_target_s)
            out.update(kernel=paired.kernel, baseline=paired.baseline, chunks=paired.kernel_chunks,
                       speedup=paired.speedup, speedup_spread=paired.spread, noisy=paired.noisy, pair_baseline=name,
                       pair_baseline_us=statistics.median(paired.baseline) * 1e6, timing_method=paired.method)
        self.runtime.synchronize()
        verdict = checks.verify(last_outputs=False)  # the judge reads the last outputs itself
        out["checks"] = {"ok": bool(verdict.ok), "cause": verdict.cause, "detail": verdict.detail}
        out["last"] = {str(ci): (None if row is None else [int(v) for v in row.tolist()]) for ci, row in checks.last.items()}
        return out

    def _side(self, launch: Callable[[Any], None], cases: list, checks: LaunchChecks) -> Side:
        """``launch`` rotating through ``cases``, with ``checks`` around every launch and, under the
        ``cold`` policy, the caches emptied after each preparation: the one way kernels and
        baselines alike are timed."""
        if self.cache != "cold":
            return Side(rotation(launch, cases), checks.before, checks.after)

        def prepare(i: int) -> None:
            checks.before(i)
            self.runtime.evict(case_arrays(cases[i % len(cases)]))
        return Side(rotation(launch, cases), prepare, checks.after)

    def op_baselines(self, request: dict) -> dict:
        """Every baseline named: run once on its verification case (its result written into the case's
        outputs, for the judge to check), its memory, then timed as kernels are on the timing cases."""
        from core.evaluation.priority import raise_priority

        priority = raise_priority()  # threads a baseline's library started since are reniced too
        cases = [self.cases[u] for u in request["timing"]]
        rng = random.Random(int(request["seed"]))
        fns = self.h.baselines()
        entries: dict[str, dict] = {}
        for name, uid in request["verify"].items():
            entry: dict[str, Any] = {"time_us": None, "spread_us": None, "cause": ""}
            entries[name] = entry
            try:
                case = self.cases[uid]
                result = fns[name](case)
                self.runtime.synchronize()
                self.h.accept_baseline_result(case, result)
                # Its calls update in-place tensors (rmsnorm's residual) again: what the judge is about to
                # check is put back as the first call left it.
                kept = {t.name: self.arrays.clone(case.data[t.name]) for t in self.h.written}
                entry["extra_bytes"] = int(self.h.baseline_memory_bytes(name, case))
                for tname, x in kept.items():
                    self.arrays.copy_into(case.data[tname], x)
                checks = LaunchChecks(self.h, cases, rng.getrandbits(31), check=False)
                side = self._side(fns[name], cases, checks)
                times = adaptive_times(self.runtime, side.fn, self.timing_target_s, before=side.before, after=side.after)
                self.runtime.synchronize()
                entry["times"] = times
                entry["time_us"], entry["spread_us"] = median_iqr_us(times)
            except Exception as exc:
                traceback.print_exc()
                entry["cause"] = one_line(f"{type(exc).__name__}: {exc}")
        return {"status": "ok", "baselines": entries, "priority": priority,
                "evict": self.runtime.evict_method() if self.cache == "cold" else ""}

    def op_primary(self, request: dict) -> dict:
        """The primary among the verified baselines (``single_us``: their single timings), decided in
        pairs on the timing cases (:func:`core.evaluation.primary.choose_primary`)."""
        from core.evaluation.primary import choose_primary

        cases = [self.cases[u] for u in request["timing"]]
        rng = random.Random(int(request["seed"]))
        fns = self.h.baselines()
        primary, paired, timed_s = choose_primary(
            self.runtime, dict(request["single_us"]),
            lambda n: self._side(fns[n], cases, LaunchChecks(self.h, cases, rng.getrandbits(31), check=False)),
            self.timing_target_s)
        return {"status": "ok", "primary": primary, "paired": {n: list(v) for n, v in paired.items()}, "timed_s": timed_s}

    def op_chains(self, request: dict) -> dict:
        """The second timing method (:func:`core.evaluation.crosscheck.chains`) on copies of a case."""
        from core.evaluation.crosscheck import chains

        return chains(self.h, self.runtime, self.kernel, self.cases[request["case"]], request["copies"],
                      request.get("names"))


# -- the process -----------------------------------------------------------------------------------
def build(spec: dict) -> tuple[Any, Harness]:
    """The launcher's own backend runtime and harness for ``spec``."""
    from core.backends import make_backend
    from core.evaluation.devices import slot_device
    from core.workloads import get_workload

    backend = make_backend(spec["backend"], spec.get("device", 0))
    device = slot_device(backend.device, int(spec.get("set_size") or 0))
    runtime = backend.make_runtime()
    workload, problem = get_workload(spec["workload"]), dict(spec["problem"])
    return runtime, Harness(workload, workload.template(spec["backend"], problem, device), runtime, problem)


def launcher_main(sock: Any, spec: dict, settings: dict | None = None) -> None:
    """Serve the judge on ``sock``; without ``settings``, build the runtime first (while the judge builds
    its own), then wait for them."""
    """Entry point of the launcher process (spawned by :class:`core.evaluation.judge.LauncherClient`)."""
    from core.evaluation.channel import ChannelClosed, recv_request, send_reply
    from core.evaluation.limits import limit_address_space, rearm_cpu_time
    from core.evaluation.priority import raise_priority

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # a write past the file-size limit kills it (Python ignores it)
    import faulthandler
    import sys

    faulthandler.enable(file=sys.stderr, all_threads=False)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True, name="orphan-guard").start()
    limits = dict(spec.get("limits") or {})
    try:
        runtime, harness = build(spec)
        if settings is None:
            try:
                settings = recv_request(sock)[0]["settings"]
            except (ChannelClosed, OSError):
                return  # the judge is gone before it was ready
        server = LauncherServer(spec, settings, runtime=runtime, harness=harness)
    except BaseException as exc:
        send_reply(sock, {"status": "error", "cause": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
        return
    raise_priority()
    drop_privileges()
    limit_address_space(limits, spec)
    send_reply(sock, {"status": "ready", "pid": os.getpid()})
    while True:
        try:
            request, fds = recv_request(sock)
        except (ChannelClosed, OSError):
            return
        if request.get("op") == "exit":
            return
        rearm_cpu_time(limits)
        try:
            reply = server.handle(request, fds)
        except Exception as exc:  # the server's own fault: said in the reply, the process serves on
            traceback.print_exc()
            reply = {"status": "error", "type": type(exc).__name__, "cause": str(exc)}
        send_reply(sock, reply)


def drop_privileges() -> str:
    """``no_new_privs``, then every capability out of the bounding, effective, permitted and inheritable
    sets (a launcher running as root keeps its uid but cannot ptrace or signal across users, nor
    regain a capability by exec). Returns what was done, in words."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return "no libc"
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP (fails without CAP_SETPCAP: nothing to drop then)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    ok = libc.capset(ctypes.byref(header), data) == 0
    return "capabilities dropped" if ok else "capabilities kept (capset failed)"


def _exit_with_parent(parent: int) -> None:
    """Exit when the judge is gone, even while a kernel spins in C (ctypes releases the GIL)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def launcher_entry(argv: list[str]) -> None:
    """``python -m core.evaluation.launcher FD``: the judge's socket is descriptor FD; its first message
    carries the spec (and the judge's settings, or they come in the next one)."""
    import socket

    from core.evaluation.channel import recv_request

    sock = socket.socket(fileno=int(argv[1]))
    init, _ = recv_request(sock)
    launcher_main(sock, init["spec"], init.get("settings"))


if __name__ == "__main__":  # the module the process runs is imported as itself: one LauncherServer class
    import sys

    from core.evaluation.launcher import launcher_entry as _entry

    _entry(sys.argv)
