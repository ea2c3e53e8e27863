"""The dispatcher: which library kernel serves a call, and running it; the native path otherwise.

A call is an op (an AbeBot workload name), its workload ``problem`` (the sizes the call's tensors
have, the dtype, the op's settings) and its tensors. :meth:`Dispatcher.run` looks the call's key
(op, fmt, N, K, M, device; :mod:`core.library.keys`) up in the library in the format's order --
exact, the same device at the nearest M bucket, the same architecture on another device -- and
runs the entry it finds. It returns False when none serves the call: the caller runs the native
path (:mod:`core.library.native`). A miss never raises:

* every call is counted by key and by how it was served (:meth:`Dispatcher.counts`);
* the first miss of each key in a process is appended to ``LIB/misses.jsonl`` (op, fmt, N, K, M,
  device, arch, time), which ``library build --from-misses`` plans the next runs from;
* an entry is used only once it has loaded and verified on this device (:mod:`core.library.loader`);
  a tampered file, a failed load or a failed check refuses that entry with a
  :class:`LibraryWarning`, and the lookup goes on without it.

The resolution of a call signature is cached with the launcher bound for it, so a repeated call
costs one dictionary lookup, writing its tensors' addresses into the bound arguments, and the
launch. A dispatcher is not thread-safe: one per thread, or a lock around calls.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any

from core.backends import BACKENDS, availability, backend_class, make_backend
from core.library.keys import M_PARAM, CallKey, call_key, choose
from core.library.loader import Loaded, Refused, load_entry
from core.library.manifest import MISSES, Library
from core.library.verify import VerifiedCache, default_cache_path


class LibraryWarning(UserWarning):
    """An entry refused (tampered, not loading, failing verification) or a miss log not written."""


def default_build_dir() -> Path:
    """Where entries rebuilt from source are compiled: ``$ABEBOT_CACHE_DIR/library_builds``."""
    root = os.environ.get("ABEBOT_CACHE_DIR") or str(Path.home() / ".cache" / "abebot")
    return Path(root) / "library_builds"


class Dispatcher:
    """Serves op calls from one library (a :class:`~core.library.manifest.Library` or its folder).

    ``verified`` remembers entries checked on this device (default: the file under
    ``~/.cache/abebot``); ``build_dir`` holds entries compiled here from their sources;
    ``log_misses`` False keeps ``misses.jsonl`` untouched (a read-only library); ``fast_launch``
    False launches through the backends' own binds, not :mod:`core.library.launch` (to compare)."""

    def __init__(self, library: Library | str | Path | None = None, verified: VerifiedCache | None = None,
                 build_dir: Path | None = None, log_misses: bool = True, fast_launch: bool = True):
        if library is None:
            library = Library()
        self.library = library if isinstance(library, Library) else Library.load(library)
        self.verified = verified if verified is not None else VerifiedCache(default_cache_path())
        self.build_dir = Path(build_dir) if build_dir is not None else default_build_dir()
        self.log_misses = log_misses
        self.fast_launch = fast_launch
        self.refused: dict[str, str] = {}  # entry id -> why it is not used here
        # call signature -> [calls, CallKey, how, Loaded | None, the bound launcher of every such call | None]
        self._resolved: dict[tuple, list] = {}
        self._loaded: dict[str, Loaded] = {}
        self._devices: dict[tuple, tuple] = {}  # (kind, index) -> (name, arch, {backend: (backend, runtime)})
        self._logged: set[CallKey] = set()

    # -- the hot path ------------------------------------------------------------------------------
    def run(self, op: str, problem: dict, tensors: dict, kind: str = "cpu", index: int = 0,
            shaped: Any = None) -> bool:
        """Run the library kernel serving ``op`` on ``problem`` over ``tensors`` (torch tensors by the
        workload's names, contiguous, on a ``kind`` ("cpu" or "gpu") device ``index``): True when
        one ran (outputs written), False when the caller must run the native path. ``shaped``: where
        ``tensors`` are other views of the workload's tensors (the same memory), a callable giving
        them in the workload's shapes, called only when a launcher is bound."""
        sig = (op, kind, index, *problem.values())
        slot = self._resolved.get(sig)
        if slot is None:
            slot = self._resolved[sig] = self._resolve(op, problem, kind, index)
        slot[0] += 1
        bound = slot[4]
        if bound is not None:  # the launcher every call of this signature takes: set pointers, launch
            bound.run(tensors)
            return True
        loaded = slot[3]
        if loaded is None:
            return False
        slot[4] = loaded.launch(sig, problem, tensors, shaped)
        return True

    def bound(self, op: str, problem: dict, tensors: dict, kind: str = "cpu", index: int = 0) -> tuple | None:
        """After a :meth:`run` of this call that returned True: (the call's resolution slot, whose item
        0 counts its calls -- a caller serving calls itself adds one per call --; the launcher bound
        for it, whose ``slots`` and ``fn`` an op's fast path calls directly,
        :mod:`core.library.fast_launch_plan`). None where no launcher with replaceable pointers
        served it."""
        sig = (op, kind, index, *problem.values())
        slot = self._resolved.get(sig)
        if slot is None or slot[3] is None:
            return None
        bound = slot[4] if slot[4] is not None else slot[3].bound_for(sig, tensors)
        return None if bound is None or bound.slots is None else (slot, bound)

    # -- resolution --------------------------------------------------------------------------------
    def resolve(self, op: str, problem: dict, kind: str = "cpu", index: int = 0) -> tuple[str, Any]:
        """(how, entry) that would serve the call: how is exact, nearest, arch or native (entry None).
        Loads and verifies the entry; does not count a call."""
        slot = self._resolve(op, problem, kind, index)
        return slot[2], (slot[3].entry if slot[3] is not None else None)

    def _resolve(self, op: str, problem: dict, kind: str, index: int) -> list:
        name, arch, backends = self._device(kind, index)
        key = call_key(op, problem, name, arch)
        pool = [e for e in self.library.entries if e.backend in backends]
        while True:
            how, entry = choose(pool, key, frozenset(self.refused))
            if entry is None:
                self._log_miss(key)
                return [0, key, "native", None, None]
            loaded = self._load(entry, backends[entry.backend])
            if loaded is None:
                continue
            if key.M > entry.shape["M"]:
                why = loaded.check_beyond(problem, M_PARAM[op])
                if why:
                    warnings.warn(f"abebot library: entry {entry.id} fails at M={key.M}: {why}; falling back",
                                  LibraryWarning, stacklevel=3)
                    self._log_miss(key)
                    return [0, key, "native", None, None]
            return [0, key, how, loaded, None]

    def _load(self, entry: Any, backend_runtime: tuple) -> Loaded | None:
        loaded = self._loaded.get(entry.id)
        if loaded is not None:
            return loaded
        backend, runtime = backend_runtime
        try:
            loaded = load_entry(entry, self.library.root or Path("."), backend, runtime, self.build_dir,
                                self.verified, self.fast_launch)
        except Exception as exc:  # noqa: BLE001 -- Refused, or anything else: a miss never raises
            why = str(exc) if isinstance(exc, Refused) else f"entry {entry.id}: {type(exc).__name__}: {exc}"
            self.refused[entry.id] = why
            warnings.warn(f"abebot library: {why}; falling back", LibraryWarning, stacklevel=4)
            return None
        self._loaded[entry.id] = loaded
        return loaded

    def _device(self, kind: str, index: int) -> tuple[str, str, dict]:
        """(device name, arch, {backend name: (backend, runtime)}) of the backends that run on a
        ``kind`` device here and that the library has entries for."""
        known = self._devices.get((kind, index))
        if known is not None:
            return known
        name, arch, backends = "unknown", "", {}
        wanted = {e.backend for e in self.library.entries}
        for b in BACKENDS:
            try:
                if backend_class(b).device_kind != kind or availability(b) is not None:
                    continue
                backend = make_backend(b, index)
            except Exception:  # noqa: BLE001 -- a backend that cannot start here serves nothing
                continue
            name, arch = backend.device.name, backend.device.arch
            if b in wanted:
                backends[b] = (backend, backend.make_runtime())
        self._devices[(kind, index)] = (name, arch, backends)
        return self._devices[(kind, index)]

    # -- misses and counts -------------------------------------------------------------------------
    def _log_miss(self, key: CallKey) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        root = self.library.root
        if not self.log_misses or root is None:
            return
        record = {**key.as_miss(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            with open(Path(root) / MISSES, "a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
        except OSError as exc:
            warnings.warn(f"abebot library: cannot log a miss to {Path(root) / MISSES}: {exc}", LibraryWarning,
                          stacklevel=4)

    def counts(self) -> list[dict]:
        """One row per call key served so far: op, fmt, N, K, M, device, how, entry id, calls."""
        rows: dict[tuple, dict] = {}
        for calls, key, how, loaded, _bound in self._resolved.values():
            eid = loaded.entry.id if loaded is not None else None
            row = rows.setdefault((key, how, eid), {**key.as_miss(), "how": how, "entry": eid, "calls": 0})
            row["calls"] += calls
        return list(rows.values())

    def calls_by(self, op: str | None = None) -> dict[str, int]:
        """Calls by how they were served ({"exact": 3, "native": 1}), for one op or all."""
        out: dict[str, int] = {}
        for row in self.counts():
            if op is None or row["op"] == op:
                out[row["how"]] = out.get(row["how"], 0) + row["calls"]
        return out
