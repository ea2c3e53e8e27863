"""The second timing method: a kernel and its baselines timed independently of the protocol's own.

Every figure ``core bench`` and ``core check`` report is cross-checked by a method that shares none
of the protocol's machinery (its preparation, poison, permutations, checks, cache eviction or
pairs): ``copies`` copies of one case, at distinct addresses, whose bytes together exceed
:data:`ROTATE_LLC_TIMES` times the last-level cache, and a chain of launches that visits them in
turn, so that each launch finds its copy evicted by the ones read since -- as a model's layer finds
its weights. On a GPU the chain is a CUDA graph replayed (less the replay of its first launch
alone, so a graph's own launch cost cancels); on a CPU the chain is called back to back and timed
by the wall clock. The kernel's and each baseline's chains are replayed in interleaved rounds.

Where the copies would take more memory than :func:`copy_budget_bytes` allows (a CPU whose
last-level cache is the whole socket's: 480 MiB on our development VM), fewer are made, and the
reply says how many bytes rotated against how large the cache is: such a timing is only partly
cold, and is reported as such (``rotation_bytes`` < ``ROTATE_LLC_TIMES`` x ``llc_bytes``).

The same process also measures the host overhead of an eager call of each (µs of host time a call
costs outside a graph, :meth:`core.backends.base.Runtime.host_overhead`).
"""
from __future__ import annotations

import math
import os
import random
import statistics
from typing import Any, Callable

from core.evaluation.record import one_line

ROTATE_LLC_TIMES = 2.5  # the copies' bytes over the last-level cache, at least
MIN_LAUNCHES = 16  # launches in one chain (cycling over the copies when there are fewer)
MAX_COPIES = 4096
ROUNDS = 7  # interleaved rounds of every chain
BUDGET_S = 4.0  # about this much wall time for the timed chains (a chain is replayed 1-5 times a round)
DISAGREE = 0.05  # the two methods' speed-ups differing by more than this share are flagged


def copy_budget_bytes(device_kind: str, memory_bytes: int) -> int:
    """Bytes the copies may take: a quarter of a GPU's memory; on a CPU 64 MiB unless
    ``ABEBOT_CROSSCHECK_BYTES`` says otherwise (the test suite's machines have 2 cores, 24 GB and
    a socket's 480 MiB L3 that no affordable rotation covers: the reply says how much was rotated)."""
    if device_kind == "cpu":
        return int(os.environ.get("ABEBOT_CROSSCHECK_BYTES", 64 << 20))
    return max(1 << 30, memory_bytes // 4)


def plan_copies(case_bytes: int, llc_bytes: int, budget_bytes: int) -> int:
    """How many copies to rotate: enough to exceed ROTATE_LLC_TIMES x the cache, within the budget."""
    want = math.ceil(ROTATE_LLC_TIMES * max(llc_bytes, 1) / max(case_bytes, 1)) if llc_bytes else 2
    return int(max(2, min(want, MAX_COPIES, budget_bytes // max(case_bytes, 1))))


def crosscheck(protocol: Any, artifact: Any, seed: int, names: list[str] | None = None) -> dict:
    """Time ``artifact``'s kernel and the baselines ``names`` (default: every baseline) on rotated
    copies of the main shape (see the module docstring). Returns ``{"status": "ok", "times_us":
    {name: median}, "spread_us": {name: IQR}, "host_overhead_us": {name: us or None}, "copies",
    "rotation_bytes", "llc_bytes", "launches", "method"}``; the kernel is named ``"kernel"``. A
    kernel that computes a wrong result on a fresh case is ``wrong_result`` and is not timed.

    The judge (this process) draws the fresh case and checks the kernel's output on it itself; the
    launcher makes the copies and times the chains (:func:`chains`), and the judge bounds the times
    it reports by its own clock: launches reported to take longer than the request did are ``suspect``."""
    import time

    h, launcher = protocol.harness, protocol.launcher
    rng = random.Random(seed)
    launcher.load(artifact)
    fresh = h.make_case(protocol.main, rng.getrandbits(31), mirror=True)
    launcher.launch(fresh)
    chk = h.check(fresh)
    if not chk.ok:
        return {"status": "wrong_result", "cause": one_line(f"{chk.cause} {chk.detail}")}
    llc = int(protocol.device.l2_bytes or 0)
    n = plan_copies(protocol.io_bytes, llc, copy_budget_bytes(protocol.backend.device_kind, protocol.device.memory_bytes))
    t0 = time.perf_counter()
    reply = launcher.request("chains", cases=[fresh], case=fresh.token.uid, copies=n, names=names)
    wall = time.perf_counter() - t0
    claimed = sum(float(v) for v in reply.get("claimed_s", {}).values())
    if claimed > wall:
        return {"status": "suspect", "cause": f"the launcher reported {claimed * 1e6:.0f} us of chained launches in a "
                                              f"request the judge saw take {wall * 1e6:.0f} us"}
    reply.pop("claimed_s", None)
    return {**reply, "copies": n, "rotation_bytes": n * protocol.io_bytes, "llc_bytes": llc,
            "method": "CUDA graph chain" if protocol.backend.device_kind == "gpu" else "wall clock chain",
            "cold": n * protocol.io_bytes >= ROTATE_LLC_TIMES * llc if llc else False}


def chains(h: Any, rt: Any, kernel: Any, fresh: Any, n: int, names: list[str] | None = None) -> dict:
    """The launcher's half of :func:`crosscheck`: ``n`` copies of ``fresh`` at distinct addresses, and
    the kernel's and each baseline's chains over them timed in interleaved rounds. ``claimed_s``: the
    seconds of launches each side's samples add up to, for the judge's bound."""
    copies = [fresh] + [h.copy_case(fresh) for _ in range(n - 1)]
    launchers = [h.prepare(kernel, c) for c in copies]  # repack and bind now, outside every timing
    sides: dict[str, Callable[[int], None]] = {"kernel": lambda i: launchers[i % n]()}
    for name, fn in h.baselines().items():
        if names is None or name in names:
            sides[name] = (lambda f: lambda i: f(copies[i % n]))(fn)
    launches = max(MIN_LAUNCHES, n)
    times: dict[str, list[float]] = {name: [] for name in sides}
    failed: dict[str, str] = {}
    reps = {name: 1 for name in sides}
    for r in range(ROUNDS):
        for name, fn in sides.items():
            if name in failed:
                continue
            try:
                got = rt.chain_times(fn, launches, reps=reps[name])
            except Exception as exc:  # a baseline that cannot be chained (captured) is reported, not fatal
                if name == "kernel":
                    raise
                failed[name] = one_line(f"{type(exc).__name__}: {exc}")
                continue
            times[name] += got
            if r == 0:  # the first round sizes the rest to the budget
                chain_s = max(statistics.median(got) * launches, 1e-7)
                reps[name] = int(max(1, min(5, BUDGET_S / (ROUNDS * len(sides) * chain_s))))
    host = {}
    for name, fn in sides.items():
        try:
            host[name] = rt.host_overhead(fn)
        except Exception:
            host[name] = None
    return {"status": "ok", "times_us": {k: statistics.median(v) * 1e6 for k, v in times.items() if v},
            "spread_us": {k: _iqr(v) * 1e6 for k, v in times.items() if v}, "failed": failed,
            "host_overhead_us": host, "launches": launches,
            "claimed_s": {k: sum(v) * launches for k, v in times.items()}}


def agreement(protocol_speedup: float | None, independent_speedup: float | None) -> dict:
    """How the two methods' speed-ups over the same baseline compare: their ratio and whether they
    disagree by more than :data:`DISAGREE`."""
    if not protocol_speedup or not independent_speedup:
        return {"methods_ratio": None, "disagree": None}
    ratio = independent_speedup / protocol_speedup
    return {"methods_ratio": ratio, "disagree": abs(ratio - 1.0) > DISAGREE}


def _iqr(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]
