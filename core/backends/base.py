"""The backend contract: how kernel source becomes something the sandbox can launch.

A backend has two halves, because CUDA errors are sticky and a bad kernel can kill its process:

* the **compiler half** runs in the GA process, in a thread pool (``compile`` is called from many
  threads at once and must be thread-safe). It turns a :class:`KernelSource` into a picklable
  :class:`Artifact` (a file in the cache, or bytes) and raises :class:`CompileError` with the
  compiler's log on failure. Artifacts are cached by :func:`source_hash`.
* the **runtime half** (:class:`Runtime`) lives only inside the sandboxed evaluator process: it
  owns the device context, loads artifacts, synchronises and times launches.

Every module here must import on a machine without a GPU; GPU packages are imported inside
functions, and ``availability()`` says why a backend cannot run here.
"""
from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, ClassVar


class CompileError(Exception):
    """The kernel did not compile; ``str(err)`` is the compiler's log (trimmed)."""


class BackendUnavailable(Exception):
    """The backend cannot run on this machine (no GPU, missing package...)."""


@dataclass(frozen=True)
class DeviceInfo:
    """What the evaluator and the dashboard need to know about a target device."""

    backend: str
    index: int
    name: str
    memory_bytes: int
    multiprocessors: int  # SMs on a GPU, cores on a CPU
    shared_mem_per_block: int = 0  # bytes a block may use (opt-in maximum on a GPU); 0 on a CPU
    registers_per_block: int = 0
    registers_per_thread: int = 0
    max_threads_per_block: int = 0
    l2_bytes: int = 0
    memory_bandwidth: float = 0.0  # bytes/s (read + write) for the roofline; 0 when unknown
    arch: str = ""  # "sm_90", "x86_64"...
    versions: dict = field(default_factory=dict)  # driver, toolkit, package versions

    def label(self) -> str:
        return f"{self.backend}:{self.index} {self.name}"

    @classmethod
    def from_dict(cls, raw: dict, backend: str = "") -> "DeviceInfo":
        """Rebuild from a stored record (unknown keys ignored, missing ones defaulted)."""
        known = {f.name for f in fields(cls)}
        base = {"backend": backend, "index": 0, "name": "unknown", "memory_bytes": 0, "multiprocessors": 0}
        return cls(**{**base, **{k: v for k, v in raw.items() if k in known}})


@dataclass(frozen=True)
class KernelSource:
    """Rendered kernel code plus everything needed to compile and launch it.

    ``resources`` is the template's static estimate (``shared_bytes``, ``threads``,
    ``registers_per_thread`` ...) checked against the device before compiling.
    ``launch`` holds template-level launch parameters (block shape, tile sizes) the harness needs.
    """

    backend: str
    source: str
    entry: str
    flags: tuple[str, ...] = ()
    launch: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: dict, backend: str = "") -> "KernelSource":
        """Rebuild from a stored ``kernels`` row (JSON text columns decoded)."""
        def decoded(key: str, default: Any) -> Any:
            value = row.get(key)
            if value is None or value != value:  # None or NaN from a DataFrame
                return default
            return json.loads(value) if isinstance(value, str) else value

        return cls(backend=row.get("backend") or backend, source=row["source"], entry=row.get("entry") or "",
                   flags=tuple(decoded("flags", [])), launch=decoded("launch", {}), resources=decoded("resources", {}))


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel, picklable so it can cross into the sandbox process."""

    backend: str
    source_hash: str
    entry: str
    path: str | None = None  # shared object, cubin... in the compile cache
    payload: bytes | None = None
    launch: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)  # measured: registers, shared_bytes, spill_bytes
    compile_seconds: float = 0.0
    log: str = ""
    code_hash: str = ""  # what it executes with its launch (core/backends/elf.py); "" when not known


def source_hash(kernel: KernelSource, arch: str = "", toolkit: str = "") -> str:
    """Cache key: the source and everything else that changes the binary."""
    h = hashlib.sha256()
    for part in (kernel.backend, kernel.source, kernel.entry, " ".join(kernel.flags), arch, toolkit):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


class Runtime(ABC):
    """The sandbox-side half of a backend: one instance per evaluator process.

    ``arrays`` is the :class:`~core.backends.arrays.Arrays` the harness allocates, draws, poisons
    and compares tensors with on this runtime's device.
    """

    arrays: Any
    graph_block: int = 1  # cases a graph timing prepares before a chain of launches (torch_runtime.replay_chain); 1: pairs
    cache: str = "cold"  # the cache policy of the timings (core.workloads.spec.CACHE_POLICIES), set by the protocol
    chunk_statistic: str = "median"  # how paired timing sums up a chunk: "median", or "min" where noise only adds
    last_timing: str = "wall"  # how the last ``time`` call measured: "wall", "events" or "graph"

    @abstractmethod
    def load(self, artifact: Artifact) -> Any:
        """Load a compiled artifact and return a launchable kernel object."""

    @abstractmethod
    def synchronize(self) -> None:
        """Wait for all launched work to finish and raise if it failed."""

    @abstractmethod
    def time(self, fn: Callable[[int], None], reps: int, warmup: int,
             before: Callable[[int], None] | None = None, after: Callable[[int], None] | None = None,
             method: str | None = None) -> list[float]:
        """Run ``fn(i)`` ``warmup`` times, then time ``reps`` calls; return each call's seconds.

        ``before(i)`` and ``after(i)`` run around every call (warm-up included) outside the timed
        window: the harness poisons outputs, perturbs inputs and logs checks there. GPU runtimes
        time with device events; ``fn(i)`` lets the caller rotate inputs. A runtime that can time
        in more than one way records the way it chose in ``last_timing``; passing that back as
        ``method`` keeps the later chunks of one measurement on it.
        """

    def empty_launch(self) -> Callable[[int], None] | None:
        """``fn(i)`` launching the cheapest kernel this runtime can (the launch floor of
        :mod:`core.evaluation.rooflines`), or None where a launch has no cost of its own to bound."""
        return None

    can_evict: bool = False  # whether ``evict`` empties the caches (else the protocol times ``hot``)

    def evict(self, arrays: list) -> None:
        """Leave nothing of ``arrays`` (a case's tensors) in the device's caches, outside any timed
        window: the ``cold`` cache policy calls it after every preparation (poison, permutation)
        and before the timed launch, for kernels and baselines alike. GPU runtimes evict the whole
        L2 (a read of a scratch buffer twice its size, capturable in a graph); the C runtime
        evicts exactly those buffers' cache lines. This default does nothing (``can_evict`` False)."""

    def evict_method(self) -> str:
        """How ``evict`` empties the caches, in words ("" where it does not)."""
        return ""

    def chain_times(self, fn: Callable[[int], None], launches: int, reps: int) -> list[float]:
        """Seconds per launch of ``fn(0) ... fn(launches - 1)`` called back to back, ``reps`` times:
        the independent timing of :mod:`core.evaluation.crosscheck`, with no preparation, check or
        eviction between launches (``fn`` rotates over copies of the inputs instead). This default
        times each whole chain by the wall clock after one warm chain; GPU runtimes replay it as a
        CUDA graph."""
        import time as _time

        for i in range(launches):
            fn(i)
        self.synchronize()
        out = []
        for _ in range(reps):
            t0 = _time.perf_counter()
            for i in range(launches):
                fn(i)
            self.synchronize()
            out.append((_time.perf_counter() - t0) / launches)
        return out

    def host_overhead(self, fn: Callable[[int], None], calls: int = 50, reps: int = 5) -> float | None:
        """Microseconds of host time per eager call of ``fn`` (None where a call is all host time,
        on a CPU): the wall time of ``calls`` calls queued back to back, before waiting for the
        device, over ``calls`` (the median of ``reps``)."""
        return None

    def forget(self) -> None:
        """Release what the timings of one measurement kept between its calls (captured graphs)."""


class Backend(ABC):
    """One code generator target: ``c``, ``cuda`` or ``triton``.

    Besides compiling, a backend declares its capabilities as class attributes, so that no code
    outside ``core/backends/`` needs to test a backend's name:

    * ``title`` -- how the dashboard names it ("CPU · C");
    * ``language`` -- the syntax-highlight language of its source; ``source_suffix`` -- the file
      suffix of an exported kernel (".c");
    * ``device_kind`` -- "cpu" or "gpu": workloads pick default problem sizes by it, and the
      dashboard says "cores" or "SMs";
    * ``arrays`` -- the array library its runtime launches on ("numpy" or "torch"): a workload's
      baselines and the generic harness's buffers come from it;
    * ``dtypes`` -- the element types its templates may be asked for;
    * ``sticky_errors`` -- whether a failed launch may leave the device unusable, so the sandbox
      restarts after any exception (CUDA errors are sticky);
    * ``entry_kind`` -- what a kernel's entry point is, in words, for the entry contract;
    * ``load_writes(compile_dir)`` -- the folders its runtime writes while loading a kernel (Triton's
      JIT cache), which an isolated sandbox must be allowed to write.
    """

    name: ClassVar[str]
    title: ClassVar[str]
    language: ClassVar[str]
    source_suffix: ClassVar[str]
    device_kind: ClassVar[str]
    arrays: ClassVar[str]
    dtypes: ClassVar[tuple[str, ...]]
    sticky_errors: ClassVar[bool]
    entry_kind: ClassVar[str]

    @classmethod
    @abstractmethod
    def availability(cls) -> str | None:
        """None when this backend can run here, else a one-line reason."""

    @classmethod
    @abstractmethod
    def devices(cls) -> list[DeviceInfo]:
        """Every device this backend can target on this machine (empty when unavailable)."""

    def __init__(self, device_index: int = 0):
        reason = self.availability()
        if reason:
            raise BackendUnavailable(f"backend {self.name!r} unavailable: {reason}")
        devices = self.devices()
        if not 0 <= device_index < len(devices):
            raise BackendUnavailable(f"backend {self.name!r} has no device {device_index} ({len(devices)} found)")
        self.device: DeviceInfo = devices[device_index]

    @abstractmethod
    def compile(self, kernel: KernelSource, cache_dir: Path) -> Artifact:
        """Compile (thread-safe; cached in ``cache_dir`` by :func:`source_hash`)."""

    def precompile(self, artifact: Artifact, launches: Any, workers: int) -> Artifact:
        """Compile what only the real call determines (Triton specialises on argument types and
        sizes) for every launch ``launches(load)`` yields (``core.evaluation.aot.workload_launches``:
        one per shape of the problem) and this device's target, before the sandbox
        launches the artifact; ``workers`` bounds the processes it may use. Raises CompileError.
        The default compiles nothing: ``compile`` produced the final artefact."""
        return artifact

    def close(self) -> None:
        """Release what ``compile``/``precompile`` hold between calls (compile processes)."""

    @classmethod
    def load_writes(cls, compile_dir: Path) -> list[str]:
        """Folders this backend's runtime writes while it loads kernels compiled into ``compile_dir``
        (Triton's JIT cache): an isolated sandbox may write these and nothing else of the user's.
        The default: none."""
        return []

    @abstractmethod
    def make_runtime(self) -> Runtime:
        """Create the runtime half. Called only inside the sandbox process."""

    def cache_key(self, kernel: KernelSource) -> str:
        return source_hash(kernel, self.device.arch, self.device.versions.get("toolkit", ""))
