"""One library entry made runnable on this device: hash-checked, loaded, verified, bound.

:func:`load_entry` turns a manifest :class:`~core.library.manifest.Entry` into a :class:`Loaded`:

1. the source and the artefact must match their sha256 in the manifest (else :class:`Refused`);
2. on the device the entry was built on (same name, and on a CPU the same feature flags), its
   artefact is loaded as it is (``make_backend(backend).make_runtime().load(Artifact(...))``); on
   another device of the same architecture, where the entry has no artefact, or where the artefact
   is a module loaded from source (Triton's), the kept source is compiled here by the backend into
   its content-addressed cache (the build folder), since a ``-march=native`` object may not run on
   another CPU of the same architecture and Triton's JIT cache must not go into the library;
3. it must pass :func:`core.library.verify.check_kernel` on this device before its first use; the
   outcome is remembered by artefact hash and device (:class:`core.library.verify.VerifiedCache`).

:meth:`Loaded.launch` then runs it on a call's torch tensors. The launcher the workload template's
``bind`` builds (grid, workspace, argument list worked out once) is made once per call signature
(the problem's sizes and settings) and weight tensor, through a kernel wrapper whose launches take
new pointers (:mod:`core.library.launch`): each call only writes its activations' addresses into
the bound argument list and launches. Where a launch cannot take new pointers (Triton's), or where
the template derived a pointer from inside a call's tensor, launchers are cached per tensor
addresses instead (at most :data:`BY_ADDRESS` per signature; a Triton launcher holds its tensors).
What a template repacks from a weight (the C w4a16 kernel's column panels) is made once per weight
tensor and kept with it: weights are taken to be fixed once a model is loaded.
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from core.backends import backend_class
from core.backends.base import Artifact, KernelSource
from core.library.launch import FastCudaKernel, fast_launcher
from core.library.verify import VerifiedCache, check_kernel
from core.workloads import get_workload

BOUND_PER_ENTRY = 4096  # launchers kept per entry: one per call shape and weight (oldest dropped first)
BY_ADDRESS = 16  # per call shape, launchers kept by tensor addresses where pointers cannot be replaced


class Refused(Exception):
    """The entry cannot be used on this device; ``str()`` says why in one line."""


class Loaded:
    """An entry loaded and verified on this device, with its launchers by call."""

    def __init__(self, entry: Any, backend: Any, runtime: Any, kernel: Any, workload: Any):
        self.entry, self.backend, self.runtime, self.kernel, self.workload = entry, backend, runtime, kernel, workload
        self.numpy = backend_class(entry.backend).arrays == "numpy"
        self.weights = tuple(workload.weights(dict(entry.problem)))
        self._weight_names = self.weights
        self._bound: OrderedDict = OrderedDict()
        self._packed: dict = {}  # weight identity -> (repacked tensors, the weights kept alive)
        self._beyond: dict[int, str | None] = {}  # M above the bucket -> outcome of its check

    def check_beyond(self, problem: dict, m_param: str) -> str | None:
        """For a call whose M exceeds the entry's bucket (the largest bucket serves every larger M):
        the quick check again at the call's M, once per M; None when it passes, else why not."""
        m = int(problem[m_param])
        if m not in self._beyond:
            wanted = {**self.entry.problem, **{k: v for k, v in problem.items() if k != m_param}, m_param: m}
            try:
                problem = self.workload.validate_problem(wanted, self.entry.backend)
                self._beyond[m] = check_kernel(self.workload, lambda s: self.template({**problem, **s}),
                                               self.runtime, self.kernel, problem, shapes=[_sizes(problem)])
            except Exception as exc:  # noqa: BLE001 -- a crash in the check refuses this M
                self._beyond[m] = f"the check raised {type(exc).__name__}: {exc}"
            getattr(self.kernel, "created", []).clear()
        return self._beyond[m]

    def launch(self, sig: tuple, problem: dict, tensors: dict, shaped: Callable[[], dict] | None = None
               ) -> "_Bound | None":
        """Run the kernel once on ``tensors`` (torch tensors by the workload's names, contiguous,
        on this entry's device) for the call ``problem`` whose signature is ``sig``. Where the
        tensors are not yet in the workload's shapes (the same memory, other views), ``shaped()``
        gives them so: only a bind needs shapes, a bound launch needs addresses. Returns the bound
        launcher when it serves every call of ``sig`` (no weights in its key, pointers replaceable),
        so the caller may keep it and call :meth:`_Bound.run` directly."""
        key = self._key(sig, tensors)
        bound = self._bound.get(key)
        if bound is None:
            bound = self._bind(key, problem, shaped() if shaped is not None else tensors)
        if bound.slots is None:  # no replaceable pointers (Triton): one launcher per set of addresses
            ptrs = tuple(t.data_ptr() for t in tensors.values())
            fn = bound.by_address.get(ptrs)
            if fn is None:
                fn = bound.by_address[ptrs] = self._make(problem, shaped() if shaped is not None else tensors)[0]
                while len(bound.by_address) > BY_ADDRESS:
                    bound.by_address.pop(next(iter(bound.by_address)))
            fn()
            return None
        bound.run(tensors)
        return None if self._weight_names else bound

    def bound_for(self, sig: tuple, tensors: dict) -> "_Bound | None":
        """The launcher bound for calls of ``sig`` on ``tensors``' weights (None before the first)."""
        return self._bound.get(self._key(sig, tensors))

    def _key(self, sig: tuple, tensors: dict) -> tuple:
        return (sig, *[tensors[n].data_ptr() for n in self._weight_names if n in tensors]) if self._weight_names else sig

    def _bind(self, key: tuple, problem: dict, tensors: dict) -> "_Bound":
        fn, launches = self._make(problem, tensors)
        bound = _Bound(fn, _slots(launches, tensors, self._weight_names))
        if bound.slots is None:
            bound.by_address[tuple(t.data_ptr() for t in tensors.values())] = fn
        self._bound[key] = bound
        while len(self._bound) > BOUND_PER_ENTRY:
            self._bound.popitem(last=False)
        return bound

    def _make(self, problem: dict, tensors: dict) -> tuple[Callable[[], Any], list]:
        """The template's launcher on ``tensors``, and the slot launches its binds created."""
        arrays = {name: (t.detach().numpy() if self.numpy else t) for name, t in tensors.items()}
        shape = _sizes(problem)
        template = self.template({**self.entry.problem, **problem})
        packed = self._repack(template, tensors, arrays, shape)
        created = getattr(self.kernel, "created", None)
        if created is not None:
            created.clear()
        fn = template.bind(self.kernel, {**arrays, **packed}, shape)
        launches = list(created) if created is not None else []
        if created is not None:
            created.clear()
        return fn, launches

    def _repack(self, template: Any, tensors: dict, arrays: dict, shape: dict) -> dict:
        names = [n for n in self.weights if n in tensors]
        if not names:
            return {}
        ident = tuple((n, tensors[n].data_ptr(), tuple(tensors[n].shape), tensors[n]._version) for n in names)
        hit = self._packed.get(ident)
        if hit is None:
            made = template.repack(self.kernel, self.runtime.arrays, {n: arrays[n] for n in names}, dict(shape)) or {}
            hit = self._packed[ident] = (made, [tensors[n] for n in names])
        return hit[0]

    def template(self, problem: dict) -> Any:
        """The workload's template for ``problem`` on this device (its ``bind`` reads the problem's
        runtime settings: eps, residual, zero points)."""
        return self.workload.template(self.entry.backend, problem, self.backend.device)


class _Bound:
    """A launcher bound for one call signature: ``fn`` runs it; ``slots`` (launch, position, tensor
    name) are the pointer arguments set from each call's tensors, or None where the launch cannot
    take new pointers (then ``by_address`` holds one launcher per set of addresses)."""

    __slots__ = ("fn", "slots", "by_address")

    def __init__(self, fn: Callable[[], Any], slots: list | None):
        self.fn, self.slots, self.by_address = fn, slots, {}

    def run(self, tensors: dict) -> None:
        """Write ``tensors``' addresses into the bound arguments, then launch."""
        for launch, positions, names in self.slots:
            launch.update(positions, [tensors[n].data_ptr() for n in names])
        self.fn()


def _slots(launches: list, tensors: dict, weights: tuple) -> list | None:
    """(launch, positions, names) per launch: its pointer arguments that are the start of one of the
    call's non-weight tensors. None when there are no launches to set, or when an argument is
    ambiguous (two tensors at one address) or points inside a call tensor other than at its start (a
    derived pointer that would go stale)."""
    if not launches:
        return None
    starts: dict[int, list[str]] = {}
    spans = []
    for name, t in tensors.items():
        if t.numel() == 0:
            continue
        starts.setdefault(t.data_ptr(), []).append(name)
        spans.append((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()))
    slots = []
    for launch in launches:
        positions, names = [], []
        for position, address in launch.pointers:
            found = starts.get(address, [])
            if len(found) > 1:
                return None
            if found:
                if found[0] not in weights:
                    positions.append(position)
                    names.append(found[0])
            elif any(lo < address < hi for lo, hi in spans):
                return None
        if positions:
            slots.append((launch, tuple(positions), tuple(names)))
    return slots


def _sizes(problem: dict) -> dict:
    return {k: v for k, v in problem.items() if isinstance(v, int) and not isinstance(v, bool)}


def load_entry(entry: Any, root: Path, backend: Any, runtime: Any, build_dir: Path,
               verified: VerifiedCache, fast_launch: bool = True) -> Loaded:
    """``entry`` of the library at ``root`` loaded into ``runtime`` (of ``backend``, this device)
    and verified here; :class:`Refused` with the reason when it cannot be used. ``fast_launch``:
    a CUDA C or C kernel launches through :mod:`core.library.launch` (``cuLaunchKernel``, or one
    ctypes call, with pointers replaced per call), else through the backend's own bind (CuPy's
    launch on a GPU) with launchers cached per tensor address; the check runs the launch the calls
    will run."""
    why = entry.verify_files(root)
    if why:
        raise Refused(why)
    workload = get_workload(entry.op)
    try:
        problem = workload.validate_problem(dict(entry.problem), entry.backend)
    except ValueError as exc:
        raise Refused(f"entry {entry.id}: its problem is not valid here: {exc}") from None
    artifact, ident = _artifact(entry, root, backend, workload, problem, build_dir)
    try:
        kernel = runtime.load(artifact)
        kernel = fast_launcher(kernel) if fast_launch else kernel
    except Exception as exc:  # noqa: BLE001 -- a kernel that does not load is refused, never fatal
        raise Refused(f"entry {entry.id}: does not load here: {type(exc).__name__}: {exc}") from None
    loaded = Loaded(entry, backend, runtime, kernel, workload)
    launcher = "|cuLaunchKernel" if isinstance(kernel, FastCudaKernel) else ""
    cache_key = VerifiedCache.key(ident + launcher, backend.device.name)
    known = verified.get(cache_key)
    if known is None:
        try:
            why = check_kernel(workload, lambda s: loaded.template({**problem, **s}), runtime, kernel, problem)
        except Exception as exc:  # noqa: BLE001 -- a crash in the check refuses the entry
            why = f"the check raised {type(exc).__name__}: {exc}"
        verified.put(cache_key, why)
        getattr(kernel, "created", []).clear()
        known = verified.get(cache_key)
    if not known["ok"]:
        raise Refused(f"entry {entry.id}: failed verification on this device: {known['detail']}")
    return loaded


def _artifact(entry: Any, root: Path, backend: Any, workload: Any, problem: dict, build_dir: Path) -> tuple[Artifact, str]:
    """(the artifact to load, the identity its verification is remembered by)."""
    launch = dict(entry.launch)
    name = launch.get("entry")
    flags = entry.device.get("cpu_flags")
    same_device = entry.device.get("name") == backend.device.name and (
        flags is None or flags == backend.device.versions.get("cpu_flags_hash"))
    # A module loaded from source (Triton's .py) is written into the build folder instead, so that its
    # JIT cache goes there and not into the library.
    binary = entry.artefact is not None and Path(entry.artefact).suffix != backend_class(entry.backend).source_suffix
    if same_device and binary and name:
        return (Artifact(backend=entry.backend, source_hash=entry.source_hash[:24], entry=name,
                         path=str(entry.artefact_path(root)), launch=launch), entry.artefact_hash)
    kernel = _kernel_source(entry, root, workload, problem, backend)
    try:
        artifact = backend.compile(kernel, build_dir)
    except Exception as exc:  # noqa: BLE001 -- CompileError, a missing toolchain...
        raise Refused(f"entry {entry.id}: its source does not compile here: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    return artifact, f"built:{artifact.source_hash}"


def _kernel_source(entry: Any, root: Path, workload: Any, problem: dict, backend: Any) -> KernelSource:
    """The kept source with its entry point, flags and launch: from ``launch`` where the manifest
    has them, else from rendering the entry's genome (used only if it renders the same source)."""
    source = entry.source_path(root).read_text()
    launch = dict(entry.launch)
    if launch.get("entry") and "flags" in launch:
        return KernelSource(entry.backend, source, launch["entry"], tuple(launch["flags"]), launch)
    genome = (entry.provenance or {}).get("genome")
    if genome is None:
        raise Refused(f"entry {entry.id}: its launch lacks the entry point and flags, and it has no genome")
    template = workload.template(entry.backend, problem, backend.device)
    rendered = template.render(template.gene_space().from_json(genome))
    if rendered.source != source:
        raise Refused(f"entry {entry.id}: its genome no longer renders its source, and its launch lacks flags")
    return KernelSource(entry.backend, source, rendered.entry, rendered.flags, {**rendered.launch, **launch},
                        rendered.resources)
