"""The compile cache's trim against compiles in flight (issue 36): a temporary file renamed into
place, or an entry deleted, between the trim's listing and its look at the file is skipped, and
the trim goes on (it used to stop with FileNotFoundError, only logged)."""
from __future__ import annotations

import os
import time
from pathlib import Path

from core.backends import cache


class _Listing:
    """What ``os.scandir`` gives, listed at once; ``then`` runs after the listing, before any stat."""

    def __init__(self, folder: Path, then) -> None:
        self.entries = list(_REAL_SCANDIR(folder))
        then()

    def __enter__(self):
        return iter(self.entries)

    def __exit__(self, *exc) -> None:
        return None


_REAL_SCANDIR = os.scandir


def _entry(folder: Path, key: str, size: int, age_s: float) -> None:
    for suffix, n in ((".so", size), (".sha256", 80)):
        p = folder / f"{key}{suffix}"
        p.write_bytes(b"\0" * n)
        os.utime(p, (time.time() - age_s, time.time() - age_s))


def test_the_trim_skips_a_temporary_file_renamed_into_place_while_it_lists(tmp_path, monkeypatch):
    for i in range(6):
        _entry(tmp_path, f"key{i}", 1 << 20, age_s=1000 - i)
    tmp = tmp_path / ".new.77.beef.so.tmp"
    tmp.write_bytes(b"\0" * 1000)
    gone = tmp_path / "key5.sha256"  # and another process's discard of an entry meanwhile

    def compile_finishes() -> None:
        os.replace(tmp, tmp_path / "new.so")
        gone.unlink()

    monkeypatch.setattr(cache.os, "scandir", lambda folder: _Listing(folder, compile_finishes))
    removed = cache.trim(tmp_path, cap=3 << 20)
    monkeypatch.undo()
    assert removed >= 3 << 20
    assert (tmp_path / "new.so").stat().st_size == 1000  # the compile's artefact is untouched
    assert sum(p.stat().st_size for p in tmp_path.glob("key*")) <= int((3 << 20) * 0.9)


def test_a_young_temporary_file_is_left_to_its_compile(tmp_path):
    young = tmp_path / ".k.1.aa.so.tmp"
    young.write_bytes(b"x" * 100)
    old = tmp_path / ".k.2.bb.so.tmp"
    old.write_bytes(b"x" * 100)
    os.utime(old, (time.time() - 2 * cache.STALE_TEMP_S,) * 2)
    assert cache.trim(tmp_path, cap=1 << 30) == 100
    assert young.exists() and not old.exists()
