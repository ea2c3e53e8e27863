"""Per-key compile locks (core/backends/cache.py KeyLocks, used by the C, CUDA and Triton backends):
mutual exclusion per key, and a table that does not grow with the keys seen (issue 10)."""
from __future__ import annotations

import threading
import time

from core.backends import cache
from core.backends.c import CBackend


def test_the_lock_tables_do_not_grow_with_distinct_keys(tmp_path):
    for i in range(2000):
        with cache.key_lock(tmp_path, f"key{i}"):
            assert len(cache._key_locks) >= 1
        with CBackend._lock_for(f"key{i}"):
            pass
    assert len(cache._key_locks) == 0 and len(CBackend._key_locks) == 0


def test_a_key_lock_is_freed_after_an_exception(tmp_path):
    try:
        with cache.key_lock(tmp_path, "boom"):
            raise ValueError
    except ValueError:
        pass
    assert len(cache._key_locks) == 0
    with cache.key_lock(tmp_path, "boom"):  # not left held
        pass


def test_the_same_key_excludes_and_other_keys_do_not():
    locks = cache.KeyLocks()
    inside, most, order = [0], [0], []
    guard = threading.Lock()

    def work(key: str) -> None:
        with locks.hold(key):
            with guard:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.02)
            with guard:
                inside[0] -= 1
            order.append(key)

    threads = [threading.Thread(target=work, args=("same",)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1 and len(order) == 6 and len(locks) == 0

    with locks.hold("a"):  # another key is not blocked by a held one
        done = threading.Event()

        def other() -> None:
            with locks.hold("b"):
                done.set()

        t = threading.Thread(target=other)
        t.start()
        assert done.wait(2.0)
        t.join()
        assert len(locks) == 1  # "a" only
    assert len(locks) == 0
