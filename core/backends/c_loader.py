"""Shared objects loaded with ctypes, and unloaded again once nothing can call into them.

ctypes never calls ``dlclose``: every kernel a sandbox ever loaded stayed mapped (about five
mappings per ``.so``), and a long CPU run reached the kernel's limit of 65,530 mappings after some
13,000 kernels, when every later ``dlopen`` failed with ``Cannot allocate memory`` (issue 36).

:class:`Loader` keeps the handles of the ``keep`` most recently loaded objects, and calls ``dlclose`` on an
older one only once nothing can call into it: every function pointer it hands out holds the
object's :class:`Library` (a plain attribute of the pointer, freed by reference counting: a pointer
``ctypes.CDLL`` makes sits in a reference cycle that only the cyclic collector frees, at no
predictable time), and a ``weakref.finalize`` on the :class:`Library` closes the handle once the
last pointer and the loader's own reference are gone.

What a function pointer does not show: a thread the kernel started and left running in its own code.
Unmapping that code would crash the sandbox later, during another candidate. So before each new load
the loader compares the process's threads with those it had before the previous load: an object in
whose time a thread appeared that is still alive (a kernel's own, or OpenMP's pool starting) is
pinned, never closed. Signal handlers a kernel installs pointing into its own code are not tracked.

Why not a fresh sandbox process every N kernels instead: a restart re-imports numpy, rebuilds the
server and its device measurements, and loses what OpenMP and the allocator had warmed; ``dlclose``
costs microseconds and keeps the sandbox's mappings and RSS flat for any N (``tests/test_unloading.py``).
"""
from __future__ import annotations

import ctypes
import os
import weakref
from collections import OrderedDict
from functools import lru_cache
from typing import Any, Sequence

KEEP_LOADED = 8  # handles kept past their kernel: a re-measured elite loads again without a dlopen


def _libdl() -> ctypes.CDLL:
    main = ctypes.CDLL(None)
    if hasattr(main, "dlclose"):
        return main
    return ctypes.CDLL("libdl.so.2")  # glibc before 2.34 keeps dlopen and friends there


_dl = _libdl()
_dlopen, _dlsym, _dlclose, _dlerror = _dl.dlopen, _dl.dlsym, _dl.dlclose, _dl.dlerror
_dlopen.argtypes, _dlopen.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_void_p
_dlsym.argtypes, _dlsym.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p
_dlclose.argtypes, _dlclose.restype = [ctypes.c_void_p], ctypes.c_int
_dlerror.argtypes, _dlerror.restype = [], ctypes.c_char_p


def _error(default: str) -> str:
    msg = _dlerror()
    return msg.decode(errors="replace") if msg else default


def thread_ids() -> frozenset[str]:
    """The ids of this process's threads (empty where ``/proc`` is not there)."""
    try:
        return frozenset(os.listdir("/proc/self/task"))
    except OSError:
        return frozenset()


class Library:
    """One ``dlopen`` handle; closed by its finalizer once this object is gone."""

    def __init__(self, path: str, handle: int):
        self.path, self.handle = path, handle

    def function(self, name: str, argtypes: Sequence[Any], restype: Any = None) -> Any:
        """The exported function ``name`` as a ctypes function pointer that keeps this library loaded.
        AttributeError when it is not exported (as ``ctypes.CDLL`` raises)."""
        address = _dlsym(ctypes.c_void_p(self.handle), name.encode())
        if not address:
            raise AttributeError(f"{self.path}: undefined symbol: {name}")
        fn = _pointer_type(tuple(argtypes), restype)(address)
        fn.library = self  # a plain attribute: freed with the pointer, no cycle
        return fn


@lru_cache(maxsize=64)
def _pointer_type(argtypes: tuple, restype: Any) -> type:
    """A C function pointer type whose instances accept attributes (the library they hold)."""
    proto = ctypes.CFUNCTYPE(restype, *argtypes)
    return type("KernelPointer", (proto,), {"_flags_": proto._flags_, "_argtypes_": proto._argtypes_,
                                            "_restype_": proto._restype_})


class Loader:
    """Opens shared objects ``RTLD_NOW | RTLD_LOCAL`` and closes them when they are safe to close.

    ``open(path)`` returns a :class:`Library`; its ``function(name, argtypes)`` pointers keep it open.
    """

    def __init__(self, keep: int = KEEP_LOADED):
        self.keep = max(1, int(keep))
        self.opened = 0
        self.closed = 0  # handles dlclosed so far (counted by their finalizers)
        self._recent: OrderedDict[str, Library] = OrderedDict()
        self._pinned: list[Library] = []
        self._last: Library | None = None
        self._threads_before_last: frozenset[str] = frozenset()

    def open(self, path: str) -> Library:
        """The loaded object at ``path``: the same one while it is among the ``keep`` most recent.
        OSError with the dynamic loader's message when it cannot be loaded."""
        lib = self._recent.pop(path, None)
        if lib is None:
            self._pin_if_threads_were_left()
            self._threads_before_last = thread_ids()
            # RTLD_LOCAL: every kernel exports the same symbol name; each is looked up in its own handle.
            handle = _dlopen(os.fsencode(path), os.RTLD_NOW | os.RTLD_LOCAL)
            if not handle:
                raise OSError(_error(f"{path}: cannot be loaded"))
            lib = Library(path, handle)
            fin = weakref.finalize(lib, self._finalize, handle)
            fin.atexit = False  # never unmap code at exit, while OpenMP's threads may still be parked
            self.opened += 1
            self._last = lib
        self._recent[path] = lib
        while len(self._recent) > self.keep:
            self._recent.popitem(last=False)
        return lib

    @property
    def pinned(self) -> int:
        """Objects kept loaded for good because a thread started in their time was still running."""
        return len(self._pinned)

    def _finalize(self, handle: int) -> None:
        _dlclose(ctypes.c_void_p(handle))
        self.closed += 1

    def _pin_if_threads_were_left(self) -> None:
        last, self._last = self._last, None
        if last is None or not self._threads_before_last:
            return
        if thread_ids() - self._threads_before_last:
            self._pinned.append(last)
            print(f"[sandbox] {last.path}: a thread started while it was the newest kernel is still "
                  "running; it stays loaded", flush=True)
