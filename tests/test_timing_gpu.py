"""Event timing on a GPU measures the device's time, not the host's (skipped without CUDA).

Run on the H200: ``PYTHONPATH=$PWD python -m pytest -q -n 0 -p no:cacheprovider tests/test_timing_gpu.py``
"""
from __future__ import annotations

import statistics
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")


def test_host_time_spent_queueing_a_call_is_not_counted_by_its_events():
    from core.backends.torch_runtime import time_events

    x = torch.zeros(1 << 20, device="cuda")

    def slow_to_queue(i: int) -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 300e-6:  # the host busy for 300 us before the launch
            pass
        x.add_(1.0)

    alone = statistics.median(time_events(lambda i: x.add_(1.0), reps=20, start=2))
    slow = statistics.median(time_events(slow_to_queue, reps=20, start=2))
    assert slow < alone + 50e-6, f"{slow * 1e6:.1f} us by events, {alone * 1e6:.1f} us when queued at once"
