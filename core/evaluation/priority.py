"""The sandbox's scheduling priority while it times: above other work on the machine, where allowed.

A timing shares the machine with whatever else runs there. Preemption only ever adds time, but not
in proportion: beside two busy loops on our 2-core VM, numpy's 2-thread OpenBLAS GEMM went from 250
us to 15.8 ms (a thread waits on its descheduled sibling), while an OpenMP kernel went from 244 to
256-467 us, and a ratio of the two moved 60x. So the sandbox renices every one of its threads
(those a library started at import included; threads started later inherit it) to
:data:`TIMING_NICE` where the operating system allows it (root, or CAP_SYS_NICE), so that ordinary
processes yield to the timed calls; the compile threads run at +10 (``core.evaluation.evaluator``).
Not a real-time class: a kernel that spins still leaves the machine usable and is killed by the
sandbox's watchdog. Where it is not allowed the priority stays as it is, and the reply of a
baseline timing says which (``priority``).
"""
from __future__ import annotations

import os

TIMING_NICE = -10


def raise_priority() -> str:
    """Renice every thread of this process to TIMING_NICE; return what was done, in words."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    done = 0
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, TIMING_NICE)
            done += 1
        except (AttributeError, OSError):
            pass
    return f"nice {TIMING_NICE}" if done else f"nice {os.getpriority(os.PRIO_PROCESS, 0)} (not allowed to raise)"
