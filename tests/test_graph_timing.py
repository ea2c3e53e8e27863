"""core.backends.torch_runtime.replay_chain, on a simulated device clock (the CUDA part runs on the H200:
benchmarks/reports/DECODE_H200.md, session 13, and the GPU tests in test_launch_checks.py)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from core.backends.torch_runtime import replay_chain  # noqa: E402


class Clock:
    """A device that runs one thing at a time: each graph replay advances the time by its cost."""

    def __init__(self):
        self.ms = 0.0
        self.log: list[str] = []


class Graph:
    def __init__(self, clock: Clock, name: str, ms):
        self.clock, self.name, self.ms = clock, name, ms

    def replay(self) -> None:
        self.clock.ms += self.ms(self.clock) if callable(self.ms) else self.ms
        self.clock.log.append(self.name)


@pytest.fixture
def clock(monkeypatch):
    c = Clock()

    class Event:
        def __init__(self, enable_timing: bool = False):
            assert enable_timing

        def record(self) -> None:
            self.at = c.ms

        def elapsed_time(self, end: "Event") -> float:
            return end.at - self.at

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return c


def test_a_chain_less_its_first_launch_gives_each_further_launch_and_times_no_preparation(clock):
    # a graph launch costs 0.004 ms, each kernel 0.002 ms; the preparations 0.5 ms, never timed
    prep = Graph(clock, "prep", 0.5)
    one = Graph(clock, "one", 0.004 + 0.002)
    chain = Graph(clock, "chain", 0.004 + 5 * 0.002)
    times = replay_chain(prep, one, chain, calls=5, reps=7)
    assert len(times) == 7 and all(t == pytest.approx(2e-6) for t in times)
    # every timed replay right after its preparation, the chain last (its outputs are left behind)
    assert clock.log == ["prep", "one", "prep", "chain"] * 8


def test_what_a_launch_changes_in_the_next_preparation_is_not_booked_to_it(clock):
    """The defect of the (preparation, launch) pairs: a kernel that leaves the next preparation
    cheaper. Here the preparation after a chain costs 0.3 ms less; the chain's time does not move."""
    prep = Graph(clock, "prep", lambda c: 0.2 if c.log and c.log[-1] == "chain" else 0.5)
    one = Graph(clock, "one", 0.004 + 0.0025)
    chain = Graph(clock, "chain", 0.004 + 4 * 0.0025)
    assert all(t == pytest.approx(2.5e-6) for t in replay_chain(prep, one, chain, calls=4, reps=5))


def test_noise_never_gives_a_negative_time(clock):
    prep = Graph(clock, "prep", 0.1)
    one = Graph(clock, "one", 0.010)
    chain = Graph(clock, "chain", 0.008)  # a chain measured faster than its first launch alone
    assert replay_chain(prep, one, chain, calls=3, reps=4) == [0.0] * 4
