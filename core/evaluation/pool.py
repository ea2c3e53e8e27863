"""A pool of sandboxed evaluator processes: one per device slot of the run.

Each slot's sandbox is a :class:`~core.evaluation.sandbox.Sandbox` built from the same spec with
its own device (a GPU index, or a CPU core set: :mod:`core.evaluation.devices`), so a crash or a
sticky error on one device restarts only that one. :meth:`SandboxPool.map` spreads requests over
the slots as they free up: a device that falls behind takes fewer.
"""
from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from core.evaluation.devices import Slot, set_size
from core.evaluation.sandbox import Sandbox, SandboxError

# Tries of a baseline timing whose sandbox died (crashed, timed out, would not start again): a sandbox
# killed by the machine (the OOM killer, a full /dev/shm) must not end a 72-hour run, a baseline that
# kills every fresh sandbox must not loop for ever.
BASELINE_ATTEMPTS = 3
RETRY_PAUSE_S = 2.0  # between two tries: what killed the sandbox may pass


class SandboxPool:
    """``spec`` is the sandbox server's spec without a device; ``slots`` the devices to serve."""

    def __init__(self, spec: dict, slots: list[Slot], timeout_s: float, log_path: Path | str | None = None):
        if not slots:
            raise ValueError("a sandbox pool needs at least one device")
        self.slots = list(slots)
        self.labels = [s.label for s in self.slots]
        size = set_size(self.slots)
        self.sandboxes = {s.label: Sandbox({**spec, **s.spec(), "set_size": size}, timeout_s,
                                           _per_device(log_path, k, len(self.slots)))
                          for k, s in enumerate(self.slots)}

    def start(self) -> None:
        """Start every slot's sandbox (SandboxError from the first that cannot start)."""
        for box in self.sandboxes.values():
            box.start()

    def call(self, request: dict, slot: str | None = None, timeout_s: float | None = None) -> dict:
        """Send ``request`` to ``slot``'s sandbox (the first slot when None); never raises for
        what the sandbox does."""
        return self.sandboxes[slot or self.labels[0]].call(request, timeout_s)

    def call_retrying(self, request: dict, slot: str | None = None, timeout_s: float | None = None,
                      attempts: int = BASELINE_ATTEMPTS, log: Callable[[str], None] = print) -> dict:
        """:meth:`call`, tried again in a fresh sandbox while the reply is ``crashed`` or ``timeout``
        (the dead sandbox is replaced by :meth:`Sandbox.call`) or the sandbox cannot start again
        (:class:`SandboxError`), ``attempts`` tries in all; the last reply, whose ``cause`` then says
        how many tries failed. For requests whose failure is not a verdict on a candidate (baselines)."""
        slot = slot or self.labels[0]
        for attempt in range(1, attempts + 1):
            try:
                reply = self.call(request, slot, timeout_s)
            except SandboxError as exc:
                reply = {"status": "crashed", "cause": str(exc).splitlines()[0]}
            if reply.get("status") not in ("crashed", "timeout"):
                return reply
            log(f"sandbox on {slot}: {request.get('op')} {reply.get('status')} ({reply.get('cause')}), "
                f"try {attempt} of {attempts}" + ("; trying again in a fresh sandbox" if attempt < attempts else ""))
            if attempt < attempts:
                time.sleep(RETRY_PAUSE_S)
        reply["cause"] = f"{reply.get('cause')} ({attempts} tries, each in a fresh sandbox)"
        return reply

    def each(self, run: Callable[[str], Any]) -> dict[str, Any]:
        """``run(slot)`` for every slot at once (one thread each); slot -> result."""
        if len(self.labels) == 1:
            return {self.labels[0]: run(self.labels[0])}
        results: dict[str, Any] = {}
        threads = [threading.Thread(target=lambda s=s: results.__setitem__(s, run(s))) for s in self.labels]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {s: results[s] for s in self.labels}

    def map(self, work: Iterable[Any], run: Callable[[Any, str], Any]) -> Iterable[Any]:
        """``run(item, slot)`` for every item of ``work`` (consumed as it comes: items may still be
        compiling), each on whichever slot frees up first; yields the results as they finish."""
        if len(self.labels) == 1:
            for item in work:
                yield run(item, self.labels[0])
            return
        todo: queue.Queue = queue.Queue(maxsize=len(self.labels))
        done: queue.Queue = queue.Queue()
        stop = object()

        def serve(slot: str) -> None:
            while (item := todo.get()) is not stop:
                try:
                    done.put((True, run(item, slot)))
                except BaseException as exc:  # handed to the consumer, which re-raises it
                    done.put((False, exc))

        workers = [threading.Thread(target=serve, args=(s,), daemon=True) for s in self.labels]
        for w in workers:
            w.start()
        fed = 0

        def feed() -> None:
            nonlocal fed
            try:
                for item in work:
                    todo.put(item)
                    fed += 1
            except BaseException as exc:  # the producer failed: the consumer re-raises it
                fed += 1
                done.put((False, exc))
            finally:
                for _ in workers:
                    todo.put(stop)

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        got = 0
        while feeder.is_alive() or got < fed:
            try:
                ok, value = done.get(timeout=0.1)
            except queue.Empty:
                continue
            got += 1
            if not ok:
                raise value
            yield value
        for w in workers:
            w.join()

    @property
    def restarts(self) -> int:
        """Sandbox restarts so far, over every slot."""
        return sum(box.restarts for box in self.sandboxes.values())

    def close(self) -> None:
        for box in self.sandboxes.values():
            box.close()

    def __enter__(self) -> "SandboxPool":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _per_device(log_path: Path | str | None, k: int, count: int) -> Path | str | None:
    """One log per slot when there are several (``sandbox.log`` -> ``sandbox.1.log``)."""
    if log_path is None or count == 1:
        return log_path
    p = Path(log_path)
    return p.with_name(f"{p.stem}.{k}{p.suffix}")
