"""A per-candidate timeout at k times the running median of the run's candidates (``--tail-timeout k``).

A kernel that loops or crawls holds the device until the fixed ``--timeout-s`` kills it; autotuners
report that the tail of slow candidates runs at 10-15x the median (Helion #1274). With ``k`` > 0 the
evaluator gives each candidate ``k x`` the median sandbox time (``eval_s``) of the last
:data:`WINDOW` candidates that came back ``ok``, once :data:`WARMUP` have; never less than
:data:`FLOOR_S` and never more than ``--timeout-s``. A candidate killed this way is lethal ``timeout``.
"""
from __future__ import annotations

import statistics
import threading
from collections import deque

WARMUP = 8
WINDOW = 256
FLOOR_S = 5.0


class TailTimeout:
    """The running limit; :meth:`observe` every measured candidate, ask :meth:`limit` before the next."""

    def __init__(self, k: float, ceiling_s: float, floor_s: float = FLOOR_S, warmup: int = WARMUP):
        self.k, self.ceiling_s, self.floor_s, self.warmup = float(k), float(ceiling_s), float(floor_s), warmup
        self._seconds: deque[float] = deque(maxlen=WINDOW)
        self._lock = threading.Lock()  # device slots measure in parallel threads

    def observe(self, status: str, eval_s: float) -> None:
        if self.k > 0 and status == "ok" and eval_s > 0:
            with self._lock:
                self._seconds.append(float(eval_s))

    def limit(self) -> float | None:
        """Seconds the next candidate may take, or None (the sandbox's fixed timeout) when off or warming up."""
        if self.k <= 0:
            return None
        with self._lock:
            if len(self._seconds) < self.warmup:
                return None
            median = statistics.median(self._seconds)
        return min(self.ceiling_s, max(self.floor_s, self.k * median))
