"""The judge's verification and stability launches, batched (issue 35: the judge's cost).

A request to the launcher is a round trip between two processes; one per launch cost a GA run time
on every candidate (20 stability launches, 5 verification launches). Here the launches of a stage go
in as few requests as the checks allow, and the judge still reads back and checks what every one of
them wrote, against its own references:

* **verification**: one request launches once on each fresh case (every shape once, the main shape
  twice, last), each case's buffers its own, so every launch's outputs are still in place when the
  reply comes; then a second request launches on the main shape again in the buffers launched last,
  refilled with new inputs (a kernel answering by address, from memory, fails there);
* **stability**: one request makes the repeated launches on one case (outputs poisoned and in-place
  tensors restored before each, in the launcher) and copies what each left, outputs and guard zones,
  into a row of shared capture buffers of its own (:meth:`core.evaluation.harness.Harness.capture_buffers`);
  the judge checks the first in full, compares every other bit for bit with it, checks any that
  differs in full, and checks the case's inputs as the last launch left them. The memory measurement
  rides on the same request. Capture rows are bounded (:data:`CAPTURE_SHARE`): more launches than
  fit take more requests.

A launcher that says it launched fewer than asked (it raised, or a launch changed the repacked
weights it read: ``stopped``) has the launches before that checked first, as one request per launch
had. What the launcher reports changes no check: a patched one that claims launches it never made
leaves outputs the judge reads, which must still be right.

The cases are made once per judge and refilled with fresh inputs and references (the declared weights
too) for each candidate (:class:`CasePool`), so their buffers are shared with the launcher once, not
mapped afresh for every candidate; so are the baselines' timing and verification cases, refilled at
each baseline timing. Where they would take too much of the device's memory they are made afresh, as
before.
"""
from __future__ import annotations

from typing import Any

from core.backends.base import CompileError
from core.evaluation.judge import RemoteError
from core.evaluation.record import one_line

CAPTURE_SHARE = 32  # a stability request's capture rows take at most this share of the device's memory
POOL_SHARE = 8  # pooled cases are kept when their estimated bytes fit in this share of the device's memory
CASE_COPIES = 6  # what a case holds per io byte, roughly: tensors, guards, pristine copies, a float64 reference


class CasePool:
    """The judge's verification and stability cases, kept by key and refilled for each candidate; made
    afresh every time when ``keep`` is False."""

    def __init__(self, harness: Any, keep: bool):
        self.h, self.keep = harness, keep
        self.cases: dict[Any, Any] = {}
        self.captures: dict[Any, Any] = {}

    def case(self, key: Any, shape: dict, seed: int, mirror: bool | str = False) -> Any:
        kept = self.cases.get(key)
        case = self.h.refill(kept, seed, weights=True) if kept is not None else self.h.make_case(shape, seed, mirror=mirror)
        if self.keep:
            self.cases[key] = case
        return case

    def timing_cases(self, key: Any, shape: dict, count: int, rng: Any) -> list:
        """``count`` timing cases of ``shape`` (with shared copies of their pristine inputs and
        references, for the launch checks), kept by ``key`` and refilled (the declared weights kept)."""
        kept = self.cases.get(key)
        cases = [self.h.refill(c, rng.getrandbits(31)) for c in kept] if kept else \
            [self.h.make_case(shape, rng.getrandbits(31), mirror=True) for _ in range(count)]
        if self.keep:
            self.cases[key] = cases
        return cases

    def capture(self, case: Any, rows: int) -> Any:
        key = (case.token.uid, rows)
        buffers = self.captures.get(key) or self.h.capture_buffers(case, rows)
        if self.keep:
            self.captures[key] = buffers
        return buffers


def pool_for(protocol: Any) -> CasePool:
    """A pool for the protocol's harness: kept unless its cases (every verification shape, the main
    shape twice more) would take more than 1/POOL_SHARE of the device's memory."""
    w, problem = protocol.workload, protocol.problem
    shapes = list(protocol.shapes) + [protocol.main, protocol.main]
    need = CASE_COPIES * sum(int(w.io_bytes(s, problem)) for s in shapes)
    memory = int(getattr(protocol.device, "memory_bytes", 0) or 0)
    return CasePool(protocol.harness, keep=not memory or need * POOL_SHARE <= memory)


def _fmt(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _stop(protocol: Any, stopped: dict, status: str, where: str) -> None:
    """Raise what ended a batch early: a changed repacked weight, a compile error, the launch's error."""
    from core.evaluation.protocol import Failure

    if stopped.get("packed_modified"):
        raise Failure(status, one_line(f"input_modified {where}: repacked weight {stopped['packed_modified']!r} changed"))
    if stopped.get("compile"):
        raise CompileError(str(stopped.get("cause", "")))
    raise RemoteError(str(stopped.get("type") or "Error"), str(stopped.get("cause", "")))


def launch_and_check(protocol: Any, items: list[tuple[Any, dict | None, str]], result: dict,
                     status: str = "wrong_result") -> None:
    """One request launching once on each case of ``items`` ((case, its shape's error entry, where)),
    then the judge's own check of each, in order; the first failure is the verdict."""
    reply = protocol.launcher.request("launches", cases=[c for c, _, _ in items], launch=[c.token.uid for c, _, _ in items])
    launched = max(0, min(len(items), int(reply.get("launched") or 0)))
    for case, entry, where in items[:launched]:
        errors = result.setdefault("shape_errors", [])
        if entry is not None and not any(e is entry for e in errors):  # (a shape's entry once it is checked)
            errors.append(entry)
        protocol._check(case, result, status, where, entry)
    if launched < len(items):
        _stop(protocol, reply.get("stopped") or {"type": "LauncherError",
                                                  "cause": f"launched {launched} of {len(items)} cases"},
              status, items[launched][2])


def verify(protocol: Any, rng: Any, result: dict) -> None:
    """Every shape once, the main shape twice, each on fresh inputs, then the main shape again in the
    same buffers with new inputs; first failure is the verdict. The worst error on each shape goes
    into ``result["shape_errors"]``."""
    result["shape_errors"] = errors = []  # (each shape's entry added as its first case is checked)
    items: list[tuple[Any, dict, str]] = []
    entries = [{"shape": dict(shape), "max_abs_err": 0.0, "rel_err": 0.0, "margin_used": 0.0} for shape in protocol.shapes]
    # The main shape (0) last: its second case is the last launch before the relaunch in its buffers, so a
    # kernel answering from its last call by address is caught (with the other shapes between, a one-slot
    # memo was ok on the H200, call 71).
    for i in list(range(1, len(protocol.shapes))) + [0]:
        shape = protocol.shapes[i]
        for k in range(2 if i == 0 else 1):
            items.append((protocol.pool.case(("verify", i, k), shape, rng.getrandbits(31)), entries[i], f"on {_fmt(shape)}"))
    launch_and_check(protocol, items, result)
    main, entry, _ = items[-1]
    again = protocol.harness.refill(main, rng.getrandbits(31))
    launch_and_check(protocol, [(again, entry, f"on {_fmt(main.shape)}, new inputs in the same buffers")], result)
    errors[:] = [e for e in entries if any(e is x for x in errors)]  # in the shapes' order again
    result["margin_used"] = max(e["margin_used"] for e in errors)


def stability(protocol: Any, rng: Any, result: dict) -> Any:
    """Repeated launches on one fresh case, each re-poisoned: the share bit-identical to the first (a
    launch that differs is checked in full, and one out of tolerance makes the kernel ``unstable``).
    Stability is the mean of that determinism, the steadiness of the timing (1 - IQR / median) and
    the tolerance left unused on the worst element. The memory measurement (``protocol.memory_reply``)
    comes back with the last request. Returns the case."""
    p, h, a = protocol, protocol.harness, protocol.arrays
    case = p.pool.case(("stability",), p.main, rng.getrandbits(31), mirror="pristine")
    n = p.stability_launches
    per_launch = sum(int(a.nbytes(case.flats[t.name])) for t in h.written)
    memory = int(getattr(p.device, "memory_bytes", 0) or 0) or (8 << 30)
    rows = max(1, min(n, memory // CAPTURE_SHARE // max(1, per_launch)))
    capture = p.pool.capture(case, rows)
    same, first, done = 0, None, 0
    while done < n:
        k = min(rows, n - done)
        reply = p.launcher.request("repeat", cases=[case, capture], case=case.token.uid, into=capture.token.uid,
                                   launches=k, memory=done + k >= n)
        launched = max(0, min(k, int(reply.get("launched") or 0)))
        for j in range(launched):
            view, where = h.captured(case, capture, j), f"in stability launch {done + j + 1}/{n}"
            if first is None:
                p._check(view, result, "unstable", where)
                first = {t.name: view.data[t.name] if rows >= n else a.clone(view.data[t.name]) for t in h.written}
                same += 1
            elif all(a.same_bits(view.data[name], ref) for name, ref in first.items()):
                same += 1
            else:
                p._check(view, result, "unstable", where)
        if launched < k:
            stopped = reply.get("stopped") or {"type": "LauncherError", "cause": f"launched {launched} of {k}"}
            _stop(p, stopped, "unstable", f"in stability launch {done + launched + 1}/{n}")
        done += k
        p.memory_reply = reply.get("memory")
    _inputs_unchanged(p, case, n)
    steady = max(0.0, 1.0 - result["time_spread_us"] / result["time_us"]) if result.get("time_us") else 0.0
    margin = max(0.0, 1.0 - result.get("margin_used", 0.0))
    result["determinism"], result["steadiness"], result["error_margin"] = same / n, steady, margin
    result["stability"] = (same / n + steady + margin) / 3
    return case


def _inputs_unchanged(protocol: Any, case: Any, n: int) -> None:
    """The inputs no launch writes still hold their pristine bits after the last stability launch."""
    from core.evaluation.protocol import Failure

    a = protocol.arrays
    for t in protocol.harness.tensors:
        if not t.written and not a.same_bits(case.data[t.name], case.pristine[t.name]):
            raise Failure("unstable", f"input_modified in stability launches 1-{n}: input {t.name!r} changed")
