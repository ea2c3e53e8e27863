"""C backend: kernels in C, built by the system compiler into shared objects, called through ctypes.

The embedded default every user gets: it needs only ``cc``/``gcc`` with OpenMP. Compiles are
content-addressed (``<cache_dir>/<hash>.so``), written under a temporary name and moved into
place with ``os.replace`` so that concurrent or killed compiles never leave a half-written file.

A kernel's C signature is the template's business: it gives the ctypes argument types of its
entry point as ``launch["argtypes"]`` (names from :data:`CTYPES`), and the runtime's loaded
:class:`CKernel` turns numpy arrays into pointers. Harnesses work in numpy (``runtime.arrays``).
"""
from __future__ import annotations

import ctypes
import os
import platform
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, ContextManager

from core.backends import c_guard, cache, elf, namespaces
from core.backends.base import Artifact, Backend, CompileError, DeviceInfo, KernelSource, Runtime, source_hash
from core.backends.c_loader import Loader

BASE_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-fPIC", "-shared", "-fopenmp")
LINK_FLAGS: tuple[str, ...] = ("-lm",)
COMPILE_TIMEOUT_S = 60.0
LOG_LIMIT = 4000

# ctypes argument types a template names in ``launch["argtypes"]``.
CTYPES = {"ptr": ctypes.c_void_p, "int": ctypes.c_int, "long": ctypes.c_long, "float": ctypes.c_float, "double": ctypes.c_double}


def compiler_command() -> list[str]:
    """The C compiler: ``$CC`` (may hold arguments, e.g. ``ccache gcc``), else ``cc``, else ``gcc``."""
    env = os.environ.get("CC", "").strip()
    if env:
        return shlex.split(env)
    found = shutil.which("cc") or shutil.which("gcc")
    return [found] if found else []


@lru_cache(maxsize=4)
def _probe(cc: tuple[str, ...]) -> tuple[str | None, str]:
    """(reason it cannot build OpenMP shared objects or None, first line of ``--version``)."""
    if not cc:
        return "no C compiler: set $CC or install gcc", ""
    try:
        ver = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"C compiler {cc[0]!r} does not run: {exc}", ""
    if ver.returncode != 0:
        return f"C compiler {cc[0]!r} --version failed", ""
    version = (ver.stdout.strip().splitlines() or [""])[0]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.c")
        src.write_text("#include <omp.h>\nint abebot_probe(void) { return omp_get_max_threads(); }\n")
        try:
            res = subprocess.run([*cc, *BASE_FLAGS, "-o", str(Path(tmp, "probe.so")), str(src)],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"C compiler cannot build a shared object: {exc}", version
        if res.returncode != 0:
            return f"C compiler cannot build OpenMP shared objects: {_trim(res.stderr, 300)}", version
    return None, version


def _trim(log: str, limit: int = LOG_LIMIT) -> str:
    log = log.strip()
    if len(log) <= limit:
        return log
    half = limit // 2
    return f"{log[:half]}\n... [{len(log) - limit} characters cut] ...\n{log[-half:]}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def last_level_cache_bytes() -> int:
    """Size of the largest cache of CPU 0 from sysfs (0 when unknown)."""
    best = 0
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in root.glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best


def _numpy_versions() -> dict:
    try:
        import numpy as np
    except ImportError:
        return {}
    out = {"numpy": np.__version__}
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        out["blas"] = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:  # show_config's layout is not a stable API; the version is nice to have
        pass
    return out


class CBackend(Backend):
    """CPU target: C compiled with ``cc -O3 -march=native -fopenmp`` and loaded with ctypes."""

    name = "c"
    title = "CPU · C"
    language = "c"
    source_suffix = ".c"
    device_kind = "cpu"
    arrays = "numpy"
    dtypes = ("float32",)
    sticky_errors = False
    entry_kind = "a C function, compiled to a shared object and called through ctypes"

    _key_locks = cache.KeyLocks()  # per cache key, freed when unused

    @classmethod
    def availability(cls) -> str | None:
        return _probe(tuple(compiler_command()))[0]

    @classmethod
    def devices(cls) -> list[DeviceInfo]:
        if cls.availability():
            return []
        return [_cpu_device(tuple(compiler_command()))]

    def cache_key(self, kernel: KernelSource) -> str:
        # -march=native makes the binary depend on the exact CPU, not only on the architecture.
        arch = f"{self.device.arch}|{self.device.name}|{self.device.versions.get('cpu_flags_hash', '')}"
        return source_hash(kernel, arch, self.device.versions.get("toolkit", ""))

    def compile(self, kernel: KernelSource, cache_dir: Path) -> Artifact:
        """Build ``<cache_dir>/<hash>.so`` (cached); CompileError with the trimmed log on failure.

        A cached ``.so`` is used only when ``<hash>.sha256`` beside it matches its bytes
        (:mod:`core.backends.cache`); otherwise it is deleted and rebuilt. The source is refused before
        the compiler runs if it includes a file outside its folder and the toolchain's headers, and the
        compiler runs under limits (:mod:`core.backends.c_guard`). The cache folder is kept under
        ``ABEBOT_CACHE_BYTES`` (:func:`core.backends.cache.note_write`). The artifact's path is
        absolute: the sandbox loads it from a working directory of its own.
        """
        cache_dir = Path(cache_dir).absolute()
        cache_dir.mkdir(parents=True, exist_ok=True)
        key = self.cache_key(kernel)
        so_path = cache_dir / f"{key}.so"
        with self._lock_for(key):
            rejected = ""
            if so_path.exists():
                why = cache.mismatch(cache_dir, key, [so_path])
                if why is None:
                    cache.touch(so_path)  # recently used: the last to go when the cache is trimmed
                    return self._artifact(kernel, key, so_path, 0.0, "cache hit")
                rejected = cache.discard(cache_dir, key, [so_path], why) + "\n"
            refused = c_guard.refused_include(kernel.source)
            if refused:  # before the compiler opens anything (core/backends/c_guard.py)
                raise CompileError(refused)
            c_path = cache_dir / f"{key}.c"
            cache.atomic_write(c_path, kernel.source.encode())
            t0 = time.perf_counter()
            log, digest = _run_compiler(c_path, so_path, kernel.flags)
            cache.record(cache_dir, key, {so_path.name: digest})
            artifact = self._artifact(kernel, key, so_path, time.perf_counter() - t0, rejected + log)
        cache.note_write(cache_dir, self._lock_for)  # capped at ABEBOT_CACHE_BYTES, least recently used first
        return artifact

    def make_runtime(self) -> "CRuntime":
        return CRuntime(self.device)

    @classmethod
    def _lock_for(cls, key: str) -> ContextManager[None]:
        return cls._key_locks.hold(key)

    def _artifact(self, kernel: KernelSource, key: str, path: Path, seconds: float, log: str) -> Artifact:
        return Artifact(backend=self.name, source_hash=key, entry=kernel.entry, path=str(path),
                        launch=dict(kernel.launch), resources=dict(kernel.resources),
                        compile_seconds=seconds, log=log, code_hash=elf.code_hash(path, kernel.launch, kernel.entry))


@lru_cache(maxsize=4)
def _cpu_device(cc: tuple[str, ...]) -> DeviceInfo:
    import hashlib

    version = _probe(cc)[1]
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    flags = ""
    try:
        flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")), "")
    except OSError:
        pass
    versions = {"compiler": version, "toolkit": version, "cpu_flags_hash": hashlib.sha256(flags.encode()).hexdigest()[:12],
                "python": platform.python_version(), **_numpy_versions()}
    return DeviceInfo(backend="c", index=0, name=_cpu_model(), memory_bytes=int(memory),
                      multiprocessors=usable_cores(), l2_bytes=last_level_cache_bytes(),
                      arch=platform.machine(), versions=versions)


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask: taskset and containers narrow it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _run_compiler(c_path: Path, so_path: Path, flags: tuple[str, ...]) -> tuple[str, str]:
    """Compile to a temporary name, then move it into place; returns the compiler's log and the
    SHA-256 of the object (hashed before it is moved into the shared cache). Every process of the
    compile runs under :func:`core.backends.c_guard.compile_limits` (memory, CPU time, file size)."""
    tmp = so_path.with_name(f".{so_path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.so.tmp")
    limits = c_guard.compile_limits()
    cmd, preexec = c_guard.limited([*compiler_command(), *BASE_FLAGS, *c_guard.DIAGNOSTIC_FLAGS, *flags,
                                    "-o", str(tmp), str(c_path), *LINK_FLAGS], limits)
    cmd = namespaces.compile_command(cmd, so_path.parent)  # under bwrap when isolation is on (issue 35)
    # A session of its own, so a timeout kills cc1 and as too, not only the driver.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=preexec)
    try:
        out, _ = proc.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        tmp.unlink(missing_ok=True)
        raise CompileError(f"compile timed out after {COMPILE_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        cause = c_guard.limit_cause(out, proc.returncode, limits)
        log = _trim(out, LOG_LIMIT // 2 if cause else LOG_LIMIT)
        raise CompileError(f"{cause}\n{log}".strip() if cause else log or f"compiler exited with status {proc.returncode}")
    digest = cache.file_sha256(tmp)
    os.replace(tmp, so_path)
    return _trim(out), digest


class CRuntime(Runtime):
    """Loads shared objects with ctypes and times calls with ``perf_counter_ns``."""

    def __init__(self, device: DeviceInfo | None = None):
        from core.backends.numpy_arrays import NumpyArrays

        self.device = device
        self.arrays = NumpyArrays()
        self.loader = Loader()  # dlcloses a kernel's object once nothing can call into it (issue 36)

    def load(self, artifact: Artifact) -> "CKernel":
        """The entry point as a ctypes function with its argument types set. Its shared object is
        unloaded once the kernel and every call bound from it are gone (:mod:`core.backends.c_loader`)."""
        if not artifact.path:
            raise ValueError("C artifact has no path")
        names = artifact.launch.get("argtypes")
        if not names:
            raise ValueError(f"entry {artifact.entry!r} has no launch['argtypes'] (the template names its C signature)")
        fn = self.loader.open(artifact.path).function(artifact.entry, [CTYPES[n] for n in names])
        self.arrays.begin_kernel()
        return CKernel(fn, artifact, self.arrays)

    def synchronize(self) -> None:
        """Calls are synchronous on the CPU."""

    def time(self, fn: Callable[[int], None], reps: int, warmup: int, before: Callable[[int], None] | None = None,
             after: Callable[[int], None] | None = None, method: str | None = None) -> list[float]:
        """Seconds of each of ``reps`` calls after ``warmup`` calls, by ``perf_counter_ns`` around the
        call alone; ``before``/``after`` (the preparation, the cache eviction, the checks) run around
        each call, outside the timed window."""
        clock = time.perf_counter_ns
        out: list[float] = []
        for i in range(warmup + reps):
            if before is not None:
                before(i)
            t0 = clock()
            fn(i)
            t1 = clock()
            if after is not None:
                after(i)
            if i >= warmup:
                out.append((t1 - t0) * 1e-9)
        self.last_timing = "wall"
        return out

    can_evict = True
    chunk_statistic = "min"  # a wall clock around a CPU call: preemption and contention only ever add

    def evict(self, arrays: list) -> None:
        """Evict exactly these numpy arrays' cache lines (:mod:`core.backends.cpu_cache`)."""
        from core.backends.cpu_cache import evictor

        llc = (self.device.l2_bytes if self.device else 0) or last_level_cache_bytes()
        evictor(llc).evict(arrays)

    def evict_method(self) -> str:
        from core.backends.cpu_cache import evictor

        return evictor((self.device.l2_bytes if self.device else 0) or last_level_cache_bytes()).method


class CKernel:
    """A loaded C entry point; ``bind(*args)`` turns numpy arrays into pointers (None into NULL) once
    and returns the zero-argument call the harness times.

    The kernel's first call is measured: the C heap it grew and kept (a workspace allocated once) is
    reported to ``arrays`` (:meth:`NumpyArrays.note_kernel_heap`) and counted into its memory. Until
    that first call, ``bind`` returns a launcher that checks a flag; after it, the plain call (the
    launches the harness times are bound after verification's)."""

    def __init__(self, function: Any, artifact: Artifact, arrays: Any = None):
        self.function = function
        self.launch_params = dict(artifact.launch)
        self.resources = dict(artifact.resources)
        self._arrays = arrays
        self._measured = arrays is None

    def bind(self, *args: Any) -> Callable[[], None]:
        conv = tuple(a.ctypes.data if hasattr(a, "ctypes") else a for a in args)
        fn = self.function
        if self._measured:
            return lambda: fn(*conv)

        def first_call_measured() -> None:
            if self._measured:
                fn(*conv)
                return
            self._measured = True
            from core.backends.numpy_arrays import heap_in_use

            before = heap_in_use()
            fn(*conv)
            if before is not None:
                self._arrays.note_kernel_heap((heap_in_use() or 0) - before)

        return first_call_measured

    def __call__(self, *args: Any) -> None:
        self.bind(*args)()
