"""Integrity of the compile cache: an artefact is used only when the hash recorded beside it matches.

The cache (``<runs_dir>/.cache/<backend>/``) is shared across runs, and kernels run as the user who
owns it, so a file there may have been replaced since it was written (by a kernel writing through an
absolute path, say). After a compile, the backend writes ``<key>.sha256`` beside its artefacts: one
``sha256sum`` line per file (``<hex>  <key>.so``), so ``sha256sum -c <key>.sha256`` checks it by hand
too, and a sidecar copied beside another key names the wrong files. On a cache hit the backend
recomputes the hashes; a missing, unreadable or different sidecar means the artefacts are deleted and
rebuilt (the reason is logged on the ``abebot.cache`` logger and kept in the artefact's compile log).

What this does not cover: a file swapped between this check (in the GA process) and the sandbox
loading it, and Triton's own JIT cache (``<cache>/triton/triton/``), which Triton keys itself.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import ContextManager, Iterator

log = logging.getLogger("abebot.cache")
_LINE = re.compile(r"^([0-9a-f]{64})  (\S+)$")


class KeyLocks:
    """Mutual exclusion by key, for any number of keys: ``with locks.hold(key):``.

    A key's lock exists only while a thread holds it or waits for it, so the table holds as many
    entries as there are threads at most, not one per key ever seen (issue 10: a lock per source
    hash, never freed, grew with every kernel of a 72-hour run)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, list] = {}  # key -> [its lock, threads holding or waiting for it]

    def __len__(self) -> int:
        return len(self._locks)

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            entry = self._locks.get(key)
            if entry is None:
                entry = self._locks[key] = [threading.Lock(), 0]
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._guard:
                entry[1] -= 1
                if not entry[1]:
                    del self._locks[key]


_key_locks = KeyLocks()


def key_lock(cache_dir: Path, key: str) -> ContextManager[None]:
    """One lock per cache entry in this process (``with key_lock(dir, key):``): a check, a discard
    and a rebuild of the same entry never interleave between compile threads."""
    return _key_locks.hold(f"{cache_dir}/{key}")


def sidecar_path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / f"{key}.sha256"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def record(cache_dir: Path, key: str, digests: dict[str, str]) -> None:
    """Write ``<key>.sha256``, atomically, from ``{file name: sha256 hex}`` (every name ``<key>.*``).

    Callers hash what they wrote (the bytes in memory, or the temporary file before it was moved
    into place), not the file in the cache, which may have changed since."""
    lines = "".join(f"{digest}  {name}\n" for name, digest in sorted(digests.items()))
    atomic_write(sidecar_path(cache_dir, key), lines.encode())


def mismatch(cache_dir: Path, key: str, files: list[Path]) -> str | None:
    """None when every file exists and matches ``<key>.sha256``; else why the cache entry is not trusted."""
    side = sidecar_path(cache_dir, key)
    try:
        text = side.read_text()
    except FileNotFoundError:
        return f"no {side.name} recorded beside it"
    except (OSError, UnicodeDecodeError) as exc:
        return f"{side.name} unreadable ({exc})"
    recorded: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            return f"{side.name} is malformed"
        recorded[m.group(2)] = m.group(1)
    names = {Path(p).name for p in files}
    if set(recorded) != names or any(not n.startswith(f"{key}.") for n in recorded):
        return f"{side.name} names {sorted(recorded)}, not {sorted(names)}"
    for p in files:
        try:
            actual = file_sha256(Path(p))
        except OSError as exc:
            return f"{Path(p).name} unreadable ({exc})"
        if actual != recorded[Path(p).name]:
            return f"{Path(p).name} has sha256 {actual[:12]}..., {side.name} records {recorded[Path(p).name][:12]}..."
    return None


def discard(cache_dir: Path, key: str, files: list[Path], why: str) -> str:
    """Delete an untrusted entry (its files and sidecar); return the line logged."""
    for p in [*files, sidecar_path(cache_dir, key)]:
        try:
            Path(p).unlink()
        except FileNotFoundError:
            pass
    line = f"cache entry {key} not trusted ({why}): deleted and rebuilt"
    log.warning(line)
    return line


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` (``.<name>.*.tmp``), then move it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
