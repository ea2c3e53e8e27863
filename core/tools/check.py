"""``python -m core check``: any kernel file through the same protocol as evolution.

A kernel engineer hands in a source file; AbeBot puts it where a rendered genome would be:

1. build the template for (workload, backend, problem) on the device and render its **first seed
   genome** -- that gives the :class:`~core.backends.base.KernelSource` with the entry point,
   compiler flags, launch description (a C kernel's ctypes ``argtypes`` included) and resources;
2. replace its ``source`` by the file's text (and ``entry``, and keys of ``launch``, when given);
3. fail fast: the static resource check and the compile come first (:meth:`Checker.precheck`),
   before any sandbox starts or baseline is timed, and a compiler's log names the user's file, not
   the compile cache;
4. evaluate it with the real sandboxed :class:`~core.evaluation.evaluator.Evaluator`: ``start()``
   times the baselines, ``evaluate_sources([kernel])`` runs the protocol (static check, compile,
   verification on every shape, timing, checked timed launches, roofline, stability, memory).

The result is a dict (:func:`check_kernel`, :class:`Checker`) and a plain-text report
(:func:`format_report`): the verdict (``ok`` or the lethal status and its cause), the error on each
verification shape, the time against every baseline (median and spread), the one-time weight
repack when the template made one (``repack_us``, timed apart) and the share of the roofline. What
a kernel must look like for each workload x backend -- the *entry contract* -- is generated from the
templates by :mod:`core.tools.contract` (``python -m core check --contract``), so docs/contract.md's "Bring your own
kernel" cannot drift from the code.

Bad input (unknown workload or backend, an unreadable, binary or empty file, bad JSON, a backend
not available here, a missing device) raises :class:`CheckInputError` (a ValueError) before anything is written.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from core.backends.base import KernelSource
from core.evaluation.timing import TIMING_TARGET_S
from core.tools.check_result import add_independent, result_dict

EXIT_OK, EXIT_REJECTED, EXIT_BAD_INPUT = 0, 1, 2


class CheckInputError(ValueError):
    """Bad input to ``check``: one line on stderr, exit status 2, nothing written."""


class DeviceBusyError(CheckInputError):
    """Another process holds the device (a run, a bench, another check)."""


# ---- input ---------------------------------------------------------------------------------------

def parse_json_object(text: str | dict | None, flag: str) -> dict:
    """A JSON object given on the command line (or already a dict); CheckInputError otherwise."""
    if text is None:
        return {}
    if isinstance(text, dict):
        return dict(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckInputError(f"{flag} is not valid JSON: {exc.msg}") from None
    if not isinstance(value, dict):
        raise CheckInputError(f"{flag} must be a JSON object (got {type(value).__name__})")
    return value


MAX_KERNEL_BYTES = 4 << 20  # a kernel file larger than this is not a kernel (or never ends: /dev/zero)


def read_kernel(path: str | Path) -> str:
    """The text of a kernel file; CheckInputError naming the file when it is missing, unreadable,
    not text, empty, or larger than :data:`MAX_KERNEL_BYTES` (read no further, so /dev/zero cannot
    fill the memory)."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_KERNEL_BYTES + 1)
        if len(data) > MAX_KERNEL_BYTES:
            raise CheckInputError(f"kernel file {path} is larger than {MAX_KERNEL_BYTES >> 20} MiB: not a kernel file")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise CheckInputError(f"kernel file {path}: no such file") from None
    except IsADirectoryError:
        raise CheckInputError(f"kernel file {path} is a folder, not a kernel file") from None
    except UnicodeDecodeError:
        raise CheckInputError(f"kernel file {path} is not a UTF-8 text file (a kernel is source code)") from None
    except OSError as exc:
        raise CheckInputError(f"kernel file {path}: {exc.strerror or exc}") from None
    if "\x00" in text:
        raise CheckInputError(f"kernel file {path} is a binary file, not source code")
    if not text.strip():
        raise CheckInputError(f"kernel file {path} is empty: there is no kernel to check")
    return text


def own_paths(text: str, cache_dir: str | Path, name: str) -> str:
    """``text`` (a compiler log) with every path of the compile cache -- where the source was
    compiled -- replaced by ``name``, the user's own file: ``/runs/.cache/ab12/kernel.c:3:5`` reads
    ``mine.c:3:5``."""
    root = re.escape(str(Path(cache_dir).resolve()))
    return re.sub(root + r"/[^\s:'\"]*", lambda _: name, text) if text else text


def validate_target(workload: str, backend: str, problem: dict | None, device: int = 0) -> tuple[Any, dict]:
    """(workload spec, full problem) when the pair exists, the backend runs here and the device
    exists; CheckInputError naming what is wrong otherwise. Writes nothing."""
    from core.backends import availability, backend_class
    from core.workloads import get_workload

    try:
        wl = get_workload(workload)
        backend_class(backend)
    except ValueError as exc:
        raise CheckInputError(str(exc)) from None
    if backend not in wl.templates:
        raise CheckInputError(f"workload {workload!r} has no {backend!r} template (has: {', '.join(wl.templates)})")
    try:
        full = wl.validate_problem(dict(problem or {}), backend)
    except ValueError as exc:
        raise CheckInputError(f"--problem: {exc}") from None
    reason = availability(backend)
    if reason:
        raise CheckInputError(f"backend {backend!r} is not available here: {reason}")
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise CheckInputError(f"--device must be a device index >= 0 (got {device!r})")
    n = len(backend_class(backend).devices())
    if device >= n:
        raise CheckInputError(f"backend {backend!r} has {n} device(s); --device {device} does not exist")
    return wl, full


def planted(seed: KernelSource, source: str, entry: str | None = None, launch: dict | None = None) -> KernelSource:
    """The seed's kernel with ``source`` in its place; ``entry`` replaces the entry point and
    ``launch`` is merged into the seed's launch dict (its keys win)."""
    changes: dict[str, Any] = {"source": source}
    if entry:
        changes["entry"] = entry
    if launch:
        changes["launch"] = {**seed.launch, **launch}
    return dataclasses.replace(seed, **changes)


def check_plant(wl: Any, backend: str, problem: dict, device: int, source: str, entry: str | None,
                launch: dict, path: str = "the kernel file") -> None:
    """CheckInputError, before anything starts, for an ``--entry`` the file never names or a
    ``--launch`` the seed's launch dict cannot take: a key of another kind than the seed's value
    (a negative count, text for a number, an ``argtypes`` name the backend does not know), or a new
    key that is not a size (an integer >= 0). Otherwise they would be reported as the kernel crashing."""
    import importlib

    from core.backends import backend_class

    cls = backend_class(backend)
    seed = seed_kernel(wl.template(backend, problem, cls.devices()[device]))
    names_entry = re.search(rf"\b{re.escape(seed.entry)}\b", seed.source) is not None  # else the name is informational
    if entry is not None and names_entry and not re.search(rf"\b{re.escape(entry)}\b", source):
        raise CheckInputError(f"--entry {entry}: {path} never names {entry!r}")
    known_types = getattr(importlib.import_module(cls.__module__), "CTYPES", None)
    for key, value in launch.items():
        if key not in seed.launch:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CheckInputError(f"--launch: {key!r} is not a launch key of this kernel (the seed has "
                                      f"{', '.join(seed.launch)}); a key added must be a size, an integer >= 0")
            continue
        want = seed.launch[key]
        if not _same_kind(want, value):
            raise CheckInputError(f"--launch: {key} must be like the seed's {json.dumps(want)} (got {json.dumps(value)})")
        if key == "argtypes" and known_types is not None and any(v not in known_types for v in value):
            raise CheckInputError(f"--launch: argtypes names must be among {', '.join(known_types)} (got {json.dumps(value)})")


def _same_kind(want: Any, value: Any) -> bool:
    """Whether ``value`` can stand where the seed has ``want``: the same JSON kind, a count no lower
    than 0 where the seed's is a count, a list of the seed's element kind."""
    if isinstance(want, bool) or isinstance(value, bool):
        return isinstance(want, bool) and isinstance(value, bool)
    if isinstance(want, int):
        return isinstance(value, int) and (value >= 0 or want < 0)
    if isinstance(want, float):
        return isinstance(value, (int, float)) and value == value and abs(value) != float("inf")
    if isinstance(want, list):
        return isinstance(value, list) and all(_same_kind(want[0], v) for v in value) if want else isinstance(value, list)
    return isinstance(value, type(want))


# ---- the device lock -----------------------------------------------------------------------------

@contextlib.contextmanager
def _no_lock(runs_dir: Any, backend: str, device: int, what: str) -> Iterator[None]:
    yield


def device_lock() -> tuple[Callable, type]:
    """(``hold_device``, ``DeviceBusy``) from :mod:`core.run.device_lock`; a lock that does nothing
    (and an exception never raised) where that module is not there."""
    try:
        from core.run.device_lock import DeviceBusy, hold_device
    except ImportError:
        return _no_lock, type("NeverBusy", (Exception,), {})
    return hold_device, DeviceBusy


# ---- checking ------------------------------------------------------------------------------------

class Checker:
    """One started evaluator (sandbox + timed baselines) for (workload, backend, problem, device);
    :meth:`check` runs any number of kernel sources through it.

    :func:`check_kernel` is the one-shot form the command line uses; a test or a script checking
    many kernels keeps one Checker, so the sandbox starts and the baselines are timed once.
    ``second_method``: a kernel that passes is also timed, with the primary baseline, by the second
    method (:mod:`core.evaluation.crosscheck`), and both speed-ups are reported.
    """

    def __init__(self, workload: str, backend: str, problem: dict | None = None, *, runs_dir: str | Path = "runs",
                 device: int = 0, timing_target_s: float = TIMING_TARGET_S, timeout_s: float = 30.0,
                 stability_launches: int = 20, seed: int = 0, log_path: str | Path | None = None,
                 second_method: bool = True):
        from core.config import ConfigError, RunConfig

        self.workload, self.problem = validate_target(workload, backend, problem, device)
        try:
            self.config = RunConfig.from_dict({"workload": workload, "backend": backend, "device": device,
                                               "problem": dict(self.problem), "timeout_s": float(timeout_s),
                                               "stability_launches": int(stability_launches), "seed": int(seed)})
        except ConfigError as exc:
            raise CheckInputError(str(exc)) from None
        try:
            from core.evaluation.bounds import check_fits  # a problem too big for the device's memory is bad input
        except ImportError:
            check_fits = None
        if check_fits is not None:
            try:
                check_fits(self.config)
            except ConfigError as exc:
                raise CheckInputError(str(exc)) from None
        main = self.workload.shapes(self.problem)[0]
        self.min_bytes = float(self.workload.min_bytes(main, self.problem))
        self.flops = float(self.workload.flops(main, self.problem))
        self.runs_dir = Path(runs_dir)
        self.timing_target_s = float(timing_target_s)
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"abebot-check-{os.getpid()}.log"
        self.lines: list[str] = []  # the evaluator's log lines
        self.evaluator = None
        self.baseline: dict | None = None
        self.seed: KernelSource | None = None
        self.second_method = bool(second_method)

    def start(self) -> dict:
        """Start the sandbox, time the baselines, render the first seed; return the baseline record."""
        from core.evaluation.evaluator import Evaluator

        self.evaluator = Evaluator(self.config, self.cache_dir, log=self.lines.append,
                                   log_path=self.log_path, timing_target_s=self.timing_target_s)
        self.baseline = self.evaluator.start()
        self.seed = seed_kernel(self.evaluator.template)
        return self.baseline

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None

    def __enter__(self) -> "Checker":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def kernel(self, source: str, entry: str | None = None, launch: dict | None = None) -> KernelSource:
        """The KernelSource that :meth:`check` evaluates for ``source``."""
        if self.seed is None:
            raise RuntimeError("Checker.start() must be called before checking")
        return planted(self.seed, source, entry, launch)

    def check(self, source: str, entry: str | None = None, launch: dict | None = None, path: str = "") -> dict:
        """Evaluate ``source`` as this pair's kernel; the result dict (see :func:`result_dict`)."""
        kernel = self.kernel(source, entry, launch)
        [ev] = self.evaluator.evaluate_sources([kernel])
        result = result_dict(self, kernel, ev, path)
        if ev.ok and self.second_method:  # every reported figure, cross-checked by the second method
            add_independent(result, self.evaluator.crosscheck(kernel, [result["primary"]]))
        return self._own_paths(result, path)

    def precheck(self, source: str, entry: str | None = None, launch: dict | None = None, path: str = "") -> dict | None:
        """The static resource check and the compile of ``source``, before any sandbox starts or
        baseline is timed: the result dict of a kernel that fails either (``resource_exceeded``,
        ``compile_error``, the compiler's log naming ``path``), None when it compiles. The compile
        lands in the cache :meth:`check` compiles into, so it is not repeated."""
        from core.backends import make_backend
        from core.evaluation.record import Evaluation, first_error_line, trim_log
        from core.backends.base import CompileError

        backend = make_backend(self.config.backend, self.config.device)
        template = self.workload.template(self.config.backend, self.problem, backend.device)
        kernel = planted(seed_kernel(template), source, entry, launch)
        reason = template.resource_violation(kernel)
        status, log = ("resource_exceeded", "") if reason else ("", "")
        if not reason:
            try:
                backend.compile(kernel, self.cache_dir)
                return None
            except CompileError as exc:
                status, log = "compile_error", trim_log(str(exc)) or "compile failed (no log)"
                reason = first_error_line(log)
        ev = Evaluation(genome_hash="", status=status, cause=reason, resources=dict(kernel.resources),
                        source=kernel.source, entry=kernel.entry, flags=list(kernel.flags), launch=dict(kernel.launch),
                        compile_log=log)
        result = self._own_paths(result_dict(self, kernel, ev, path), path)
        result["device"] = backend.device.label()
        return result

    @property
    def cache_dir(self) -> Path:
        """The compile cache (``<runs>/.cache``), shared with runs."""
        return self.runs_dir / ".cache"

    def _own_paths(self, result: dict, path: str) -> dict:
        """``result`` with the compile cache's paths in its cause and compiler log replaced by ``path``."""
        name = Path(path).name if path else "the kernel"
        result["cause"] = own_paths(result.get("cause") or "", self.cache_dir, name)
        evaluation = result.get("evaluation") or {}
        for key in ("cause", "compile_log"):
            if evaluation.get(key):
                evaluation[key] = own_paths(evaluation[key], self.cache_dir, name)
        return result


def seed_kernel(template: Any) -> KernelSource:
    """The template's first seed genome, rendered."""
    seeds = template.gene_space().seed_genomes()
    if not seeds:
        raise RuntimeError(f"the {template.backend} template of {template.workload.name} has no seed genome")
    return template.render(seeds[0])


def check_kernel(workload: str, backend: str, kernel: str | Path, problem: dict | str | None = None,
                 entry: str | None = None, launch: dict | str | None = None, runs_dir: str | Path = "runs",
                 device: int = 0, isolate: bool | None = None, say: Callable[[str], None] | None = None,
                 **options: Any) -> dict:
    """Check the kernel file ``kernel`` once: validate the input (CheckInputError), hold the device,
    start a :class:`Checker`, evaluate, stop it. ``isolate``: compile and sandbox under Linux
    namespaces (None: where available, :func:`isolation_for`); ``say`` gets the line saying how the
    check is isolated, before it runs. ``options`` go to :class:`Checker` (timing_target_s,
    timeout_s, stability_launches, seed, log_path)."""
    problem = parse_json_object(problem, "--problem")
    launch = parse_json_object(launch, "--launch")
    if entry is not None and not re.fullmatch(r"[A-Za-z_]\w*", entry):
        raise CheckInputError(f"--entry {entry!r} is not a function name")
    source = read_kernel(kernel)
    checker = Checker(workload, backend, problem, runs_dir=runs_dir, device=device, **options)  # validates
    check_plant(checker.workload, backend, checker.problem, device, source, entry, launch, str(kernel))
    from core.evaluation import isolation

    on = isolation_for(isolate)
    (say or (lambda line: None))(isolation.describe(on))  # before the upload runs: what isolates it, or nothing
    hold_device, busy = device_lock()
    result: dict = {}
    try:
        with isolation.turned(on), hold_device(Path(runs_dir), backend, device, f"check {kernel}"):
            result = checker.precheck(source, entry, launch, str(kernel)) or {}  # before any baseline timing
            if result:
                return {**result, "isolation": isolation.describe(on)}
            with checker:
                result = {**checker.check(source, entry, launch, str(kernel)), "isolation": isolation.describe(on)}
                return result
    except busy as exc:
        raise DeviceBusyError(str(exc)) from None
    finally:
        _drop_sandbox_log(checker, options, result)


def isolation_for(isolate: bool | None) -> bool:
    """Whether a check is isolated (:mod:`core.evaluation.isolation`): ``isolate`` None isolates where
    the machine can; True where it cannot is bad input."""
    from core.evaluation import isolation

    on = isolation.mode() != "none" if isolate is None else bool(isolate)
    if on and isolation.mode() == "none":
        raise CheckInputError(f"--isolate: no isolation here: {isolation.why_not()}")
    return on


def _drop_sandbox_log(checker: Checker, options: dict, result: dict) -> None:
    """Remove the sandbox's log made for this one check, unless the caller named it or the report
    points at it (a kernel that crashed or timed out)."""
    if options.get("log_path") or result.get("status") in ("crashed", "timeout"):
        return
    checker.log_path.unlink(missing_ok=True)
