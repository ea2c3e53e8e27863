"""Evaluation, written once for every workload and backend.

* :mod:`~core.evaluation.record` -- the :class:`Evaluation` record and the statuses;
* :mod:`~core.evaluation.evaluator` -- GA side: render, static checks, compile pool, dispatch;
* :mod:`~core.evaluation.pool` -- one sandboxed evaluator process per device;
* :mod:`~core.evaluation.sandbox` -- that process and its watchdog;
* :mod:`~core.evaluation.protocol` -- sandbox side: verify, time, stability, memory, baselines;
* :mod:`~core.evaluation.harness` -- cases, poisoning, guard zones and checks, driven by the spec;
* :mod:`~core.evaluation.timing` -- rotation, adaptive repetitions, median and spread;
* :mod:`~core.evaluation.standalone` -- the exported ``run_kernel.py`` for any workload x backend.
"""
from __future__ import annotations

from core.evaluation.record import LETHAL, STATUSES, Evaluation

__all__ = ["Evaluation", "LETHAL", "STATUSES"]
