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

Each backend's folder is also capped in size (:func:`note_write`, :func:`trim`): ``ABEBOT_CACHE_BYTES``
(default 4 GiB), least recently used entries first; a cache hit renews an entry (:func:`touch`).
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, ContextManager, Iterator

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


# -- size cap --------------------------------------------------------------------------------------
DEFAULT_CAP_BYTES = 4 << 30
TRIM_EVERY = 32  # writes into one cache folder between two trims (a trim lists the folder)
STALE_TEMP_S = 3600.0  # a temporary file this old is a killed compile's: removed by the next trim
_writes: dict[str, int] = {}
_writes_guard = threading.Lock()


def cap_bytes() -> int:
    """The compile cache's cap per backend folder: ``ABEBOT_CACHE_BYTES`` (bytes), else 4 GiB."""
    raw = os.environ.get("ABEBOT_CACHE_BYTES", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else DEFAULT_CAP_BYTES


def touch(path: Path) -> None:
    """Mark a cache entry used now (its modification time: access times are often not kept)."""
    try:
        os.utime(path)
    except OSError:
        pass


def note_write(cache_dir: Path, lock: Callable[[str], ContextManager[None]] | None = None) -> int:
    """Count a new entry in ``cache_dir``; trim the folder at the first write and every
    :data:`TRIM_EVERY` after. Returns the bytes removed (0 when no trim ran). Call it holding no
    key lock: the trim takes each entry's (``lock(key)``, else :func:`key_lock`) before deleting it."""
    key = str(Path(cache_dir).absolute())
    with _writes_guard:
        count = _writes[key] = _writes.get(key, 0) + 1
    if count % TRIM_EVERY != 1:
        return 0
    try:
        return trim(Path(cache_dir), cap_bytes(), lock=lock)
    except OSError as exc:  # a trim that fails never fails a compile
        log.warning("compile cache %s not trimmed: %s", cache_dir, exc)
        return 0


def trim(cache_dir: Path, cap: int, protect: frozenset[str] = frozenset(),
         lock: Callable[[str], ContextManager[None]] | None = None) -> int:
    """Delete the least recently used entries of ``cache_dir`` (every file ``<key>.*``, by the newest
    modification time among them) until its files total at most 90% of ``cap``, and temporary files
    left by killed compiles (``.*.tmp`` older than an hour; a younger one may be a compile's in flight, and one
    renamed into place or deleted while the folder is listed is skipped). Subfolders (Triton's own cache) are left
    alone. ``protect`` names keys kept whatever their age. Returns the bytes removed."""
    now = time.time()
    entries: dict[str, list] = {}  # key -> [newest mtime, bytes, paths]
    removed = 0
    total = 0
    with os.scandir(cache_dir) as it:
        for entry in it:
            if not entry.is_file(follow_symlinks=False):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # renamed into place (a compile's .tmp) or deleted since the listing
                continue
            if entry.name.startswith("."):  # temporary files; any other hidden file is not ours
                if entry.name.endswith(".tmp") and now - st.st_mtime > STALE_TEMP_S:
                    removed += _unlink(Path(entry.path))
                continue
            key = entry.name.split(".", 1)[0]
            slot = entries.setdefault(key, [0.0, 0, []])
            slot[0] = max(slot[0], st.st_mtime)
            slot[1] += st.st_size
            slot[2].append(Path(entry.path))
            total += st.st_size
    if total <= cap:
        return removed
    goal = int(cap * 0.9)
    for key, (_, size, paths) in sorted(entries.items(), key=lambda kv: kv[1][0]):
        if total <= goal:
            break
        if key in protect:
            continue
        with (lock(key) if lock else key_lock(cache_dir, key)):
            for p in paths:
                removed += _unlink(p)
        total -= size
    log.info("compile cache %s trimmed to %d bytes (cap %d)", cache_dir, total, cap)
    return removed


def _unlink(path: Path) -> int:
    """Delete ``path``; the bytes it held, 0 when it was gone already (a race is not an error)."""
    try:
        size = path.stat().st_size
        path.unlink()
        return size
    except FileNotFoundError:
        return 0
