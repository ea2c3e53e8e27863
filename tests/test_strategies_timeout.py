"""The per-candidate timeout at k x the running median (core/evaluation/tail_timeout.py, --tail-timeout)."""
from __future__ import annotations

from core.config import RunConfig
from core.evaluation.tail_timeout import FLOOR_S, WARMUP, TailTimeout


def test_the_timeout_is_off_until_enough_candidates_came_back_ok():
    tail = TailTimeout(10, ceiling_s=30)
    for _ in range(WARMUP - 1):
        tail.observe("ok", 1.0)
    tail.observe("timeout", 30.0)  # lethal ones do not count
    assert tail.limit() is None
    tail.observe("ok", 1.0)
    assert tail.limit() == 10.0


def test_the_timeout_follows_the_median_within_its_floor_and_ceiling():
    tail = TailTimeout(10, ceiling_s=30)
    for s in [0.1] * WARMUP:
        tail.observe("ok", s)
    assert tail.limit() == FLOOR_S
    for s in [9.0] * (2 * WARMUP):
        tail.observe("ok", s)
    assert tail.limit() == 30.0
    assert TailTimeout(0, ceiling_s=30).limit() is None


def test_tail_timeout_is_a_run_setting_off_by_default():
    assert RunConfig().tail_timeout == 0.0
    assert RunConfig.from_dict({"tail_timeout": 10}).tail_timeout == 10.0
