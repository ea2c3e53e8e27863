"""The generic harness: one workload spec, one template, one runtime -> cases, launches and checks.

Written once for every workload and backend (sandbox side only). A :class:`Case` is one set of
tensors for one shape:

* inputs drawn fresh from the spec's distributions (never zeros) with a seeded generator;
* every output inside a larger buffer that holds NaN, so an unwritten element reads as NaN and a
  write just outside the output changes a guard;
* ``inout`` tensors (updated in place) drawn like inputs and copied into such a buffer;
* pristine copies of every input, to catch a kernel that writes its inputs;
* the float64 reference, computed on the same device from the pristine inputs;
* per kernel, what its template's ``repack`` made from copies of the workload's declared weights
  (only those: never the activations), with pristine copies of it. It is made once, before the
  kernel's first launch on the case, timed apart (synchronised wall time) and never inside a timed
  launch; the reference stays the one computed from the canonical weights.

The checks are: guards intact, inputs and repacked weights unchanged, then each output against the
reference with the spec's tolerance for its dtype and shape.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from core.backends.arrays import GUARD_ELEMENTS, CheckResult
from core.backends.base import Artifact, Runtime


@dataclass
class Case:
    """One shape's tensors (by name), their guarded buffers, pristine inputs and reference."""

    shape: dict
    data: dict = field(default_factory=dict)
    flats: dict = field(default_factory=dict)
    pristine: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)
    bound: dict = field(default_factory=dict)  # id(kernel) -> launcher from Template.bind
    packed: dict = field(default_factory=dict)  # id(kernel) -> {name: tensor} from Template.repack
    packed_pristine: dict = field(default_factory=dict)  # id(kernel) -> copies of ``packed``
    token: Any = None  # the case's buffers' identity (shared by a refill's twin): how the launcher names them
    mirror: dict = field(default_factory=dict)  # shared copies of pristine and expected, for the launcher's checks


_UIDS = itertools.count(1)


class Token:
    """The identity of one case's buffers, ``uid``; the judge tells its launcher when one has died."""

    __slots__ = ("uid", "__weakref__")

    def __init__(self) -> None:
        self.uid = next(_UIDS)


class Harness:
    """Cases, launches and checks for ``workload`` through ``template`` on ``runtime``.

    ``repacks`` collects (shape, seconds) of every repack made, for the protocol to report."""

    def __init__(self, workload: Any, template: Any, runtime: Runtime, problem: dict):
        self.workload, self.template, self.runtime, self.problem = workload, template, runtime, problem
        self.arrays = runtime.arrays
        self.tensors = workload.tensors(problem)
        self.written = [t for t in self.tensors if t.written]
        self.weights = _weights(workload, problem, self.tensors)
        self.repacks: list[tuple[dict, float]] = []
        self.share = False  # the judge's harness: cases' buffers in memory its launcher maps (issue 35)

    @contextlib.contextmanager
    def _allocating(self):
        """Within: the arrays a case is launched on are allocated shared (numpy; CUDA tensors are
        shared as they are)."""
        a = self.arrays
        pool = getattr(a, "shared_pool", None) if self.share else None
        before = getattr(a, "shared", None)
        a.shared = pool
        try:
            yield
        finally:
            a.shared = before

    # -- cases -----------------------------------------------------------------------------------
    def make_case(self, shape: dict, seed: int, mirror: bool | str = False) -> Case:
        """Fresh random inputs for ``shape``, poisoned outputs in guard zones, the reference.
        ``mirror`` (a judge's timing case): shared copies of the pristine inputs and the reference
        too, which the launcher's launch checks read (the judge checks against its own);
        ``mirror="pristine"`` (a judge's stability case): of the pristine inputs only, which the
        launcher restores in-place tensors from between launches. The declared weights' pristine
        copies are shared for every case of a judge (a repack reads them)."""
        a = self.arrays
        gen = a.generator(seed)
        case = Case(shape=dict(shape), token=Token())
        for t in self.tensors:
            dims, dtype = t.shape(shape), t.dtype_in(self.problem)
            if t.read:
                case.pristine[t.name] = t.init.draw(a, dims, dtype, gen, shape)
            with self._allocating():
                if t.written:
                    case.flats[t.name], case.data[t.name] = a.poisoned(dims, dtype)
                    if t.read:
                        a.copy_into(case.data[t.name], case.pristine[t.name])
                else:
                    case.data[t.name] = a.clone(case.pristine[t.name])
        refs = {name: a.float64(x) for name, x in case.pristine.items()}
        case.expected = self.workload.reference(a.xp, refs, self.problem)
        if self.share and (mirror or self.weights):  # (a repack reads the weights' pristine copies)
            with self._allocating():
                case.mirror = {"pristine": {n: a.clone(x) for n, x in case.pristine.items() if mirror or n in self.weights}}
                if mirror is True:
                    case.mirror["expected"] = {n: a.clone(x) for n, x in case.expected.items()}
        return case

    def refill(self, case: Case, seed: int, weights: bool = False) -> Case:
        """``case``'s buffers (the kernel stays bound to their addresses) holding fresh inputs and
        their reference: the workload's declared weights are kept (a repacked copy of them stays
        right) unless ``weights`` (a case reused for the next kernel, which repacks afresh), every
        other input is drawn anew and the outputs are poisoned again. A kernel that answers from
        memory by address returns the old answer here."""
        a = self.arrays
        gen = a.generator(seed)
        twin = Case(shape=case.shape, data=case.data, flats=case.flats, bound=case.bound, packed=case.packed,
                    packed_pristine=case.packed_pristine, token=case.token)
        for t in self.tensors:
            if t.read:
                twin.pristine[t.name] = case.pristine[t.name] if t.name in self.weights and not weights else \
                    t.init.draw(a, t.shape(case.shape), t.dtype_in(self.problem), gen, case.shape)
            if t.written:
                a.poison(case.flats[t.name])
            if t.read:
                a.copy_into(case.data[t.name], twin.pristine[t.name])
        twin.expected = self.workload.reference(a.xp, {n: a.float64(x) for n, x in twin.pristine.items()}, self.problem)
        twin.mirror = case.mirror  # the launcher's shared copies, rewritten in place
        for part, arrays in case.mirror.items():
            for n, x in arrays.items():
                a.copy_into(x, getattr(twin, part)[n])
        return twin

    def copy_case(self, case: Case) -> Case:
        """Another copy of ``case``'s tensors at other addresses (fresh poisoned outputs, inputs
        cloned), sharing its pristine inputs and reference: what a rotation over copies needs."""
        a = self.arrays
        new = Case(shape=dict(case.shape), pristine=case.pristine, expected=case.expected, token=Token())
        for t in self.tensors:
            if t.written:
                new.flats[t.name], new.data[t.name] = a.poisoned(t.shape(case.shape), t.dtype_in(self.problem))
                if t.read:
                    a.copy_into(new.data[t.name], case.pristine[t.name])
            else:
                new.data[t.name] = a.clone(case.data[t.name])
        return new

    def capture_buffers(self, case: Case, rows: int) -> Case:
        """Buffers for ``rows`` copies of ``case``'s outputs with their guard zones, one row per launch
        (``data[name][j]``), shared with the launcher like a case's: where it copies what each launch
        of a batch on ``case`` left, for the judge to read back and check (:meth:`captured`)."""
        out = Case(shape={"rows": int(rows)}, token=Token())
        with self._allocating():
            for t in self.written:
                _, out.data[t.name] = self.arrays.poisoned((int(rows), int(case.flats[t.name].shape[0])),
                                                           t.dtype_in(self.problem), guard=0)
        return out

    def captured(self, case: Case, capture: Case, row: int) -> Case:
        """``case`` as launch ``row`` of a batch left it: its outputs and guard zones as copied into
        that row of ``capture`` (:meth:`capture_buffers`); its other tensors as they are now."""
        view = Case(shape=case.shape, data=dict(case.data), flats=dict(case.flats), pristine=case.pristine,
                    expected=case.expected, packed=case.packed, packed_pristine=case.packed_pristine, token=case.token)
        for t in self.written:
            flat = capture.data[t.name][row]
            view.flats[t.name] = flat
            view.data[t.name] = flat[GUARD_ELEMENTS:int(flat.shape[0]) - GUARD_ELEMENTS].reshape(tuple(case.data[t.name].shape))
        return view

    def reset_outputs(self, case: Case) -> None:
        """Poison the outputs again and restore in-place tensors, before a checked launch."""
        for t in self.written:
            self.arrays.poison(case.flats[t.name])
            if t.read:
                self.arrays.copy_into(case.data[t.name], case.pristine[t.name])

    # -- launches --------------------------------------------------------------------------------
    def prepare(self, kernel: Any, case: Case) -> Callable[[], Any]:
        """``kernel``'s launcher on ``case``: the repack (once, timed apart), then ``bind``. Call it
        before timing, so that neither lands in a timed launch (or a captured graph)."""
        fn = case.bound.get(id(kernel))
        if fn is None:
            packed = self._repack(kernel, case)
            fn = case.bound[id(kernel)] = self.template.bind(kernel, {**case.data, **packed}, case.shape)
        return fn

    def launch(self, kernel: Any, case: Case) -> None:
        """One launch of ``kernel`` on ``case`` (asynchronous on a GPU)."""
        self.prepare(kernel, case)()

    def _repack(self, kernel: Any, case: Case) -> dict:
        repack = getattr(self.template, "repack", None)
        if repack is None or not self.weights:
            return {}
        a = self.arrays
        # Copies: the repack cannot keep a handle on, or write, the buffers the kernel is checked on.
        weights = {name: a.clone(case.pristine[name]) for name in self.weights}
        a.synchronize()
        t0 = time.perf_counter()
        packed = repack(kernel, a, weights, dict(case.shape)) or {}
        a.synchronize()
        seconds = time.perf_counter() - t0
        if not isinstance(packed, dict):
            raise TypeError(f"repack returned {type(packed).__name__}, not a dict of tensors by name")
        clash = sorted(set(packed) & set(case.data))
        if clash:
            raise ValueError(f"repack returned {clash[0]!r}, a name of the workload's own tensors")
        if packed:
            case.packed[id(kernel)] = packed
            case.packed_pristine[id(kernel)] = {name: a.clone(x) for name, x in packed.items()}
            self.repacks.append((dict(case.shape), seconds))
        return packed

    def weights_changed(self, case: Case) -> str:
        """The first declared weight or repacked copy of ``case`` whose bits differ from its pristine
        copy, named for a cause ("weight 'w'"), or "" when none does."""
        a = self.arrays
        for name in self.weights:
            if not a.same_bits(case.data[name], case.pristine[name]):
                return f"weight {name!r}"
        for key, packed in case.packed.items():
            for name, x in packed.items():
                if not a.same_bits(x, case.packed_pristine[key][name]):
                    return f"repacked weight {name!r}"
        return ""

    def packed_bytes(self, kernel: Any, case: Case) -> int:
        """Bytes of what the repack of ``kernel`` made on ``case`` (0 when it made nothing)."""
        return sum(int(self.arrays.nbytes(x)) for x in case.packed.get(id(kernel), {}).values())

    # -- checks ----------------------------------------------------------------------------------
    def check(self, case: Case) -> CheckResult:
        """Guards, unchanged inputs and repacked weights, then every output within tolerance of the
        reference (computed from the canonical weights)."""
        a = self.arrays
        a.synchronize()
        for t in self.written:
            if not a.guards_intact(case.flats[t.name]):
                return CheckResult(False, "out_of_bounds_write", detail=f"guard zone around {t.name!r} was written")
        for t in self.tensors:
            if not t.written and not a.same_bits(case.data[t.name], case.pristine[t.name]):
                return CheckResult(False, "input_modified", detail=f"input {t.name!r} changed")
        for key, packed in case.packed.items():
            for name, x in packed.items():
                if not a.same_bits(x, case.packed_pristine[key][name]):
                    return CheckResult(False, "input_modified", detail=f"repacked weight {name!r} changed")
        worst = CheckResult(True)
        for t in self.written:
            atol, rtol = self.workload.tolerance(t.dtype_in(self.problem), case.shape)
            res = a.compare(case.data[t.name], case.expected[t.name], atol, rtol)
            if not res.ok:
                res.detail = f"{t.name}: {res.detail}"
                return res
            worst.max_abs_err = max(worst.max_abs_err, res.max_abs_err)
            worst.rel_err = max(worst.rel_err, res.rel_err)
            worst.margin_used = max(worst.margin_used, res.margin_used)
        return worst

    def output_bytes(self, case: Case) -> bytes:
        """Raw bytes of every output, to compare repeated launches bit for bit."""
        return b"".join(self.arrays.to_bytes(case.data[t.name]) for t in self.written)

    # -- baselines -------------------------------------------------------------------------------
    def baselines(self) -> dict[str, Callable[[Case], Any]]:
        """The spec's library paths in this runtime's array library, as ``fn(case)``."""
        out = {}
        for b in self.workload.baselines(self.arrays.name):
            out[b.name] = (lambda fn: lambda case: fn(case.data, self.problem))(b.fn)
        return out

    def accept_baseline_result(self, case: Case, result: Any) -> None:
        """Copy what a baseline returned into the case's outputs, outside the timed region."""
        if result is None:
            return
        if isinstance(result, dict):
            pairs = result.items()
        else:
            values = result if isinstance(result, tuple) else (result,)
            pairs = zip((t.name for t in self.written), values)
        for name, value in pairs:
            self.arrays.copy_into(case.data[name], value)

    def baseline_memory_bytes(self, name: str, case: Case) -> int:
        """Peak extra bytes of one baseline call; outputs it allocates itself are output, not extra."""
        fn = self.baselines()[name]
        spec = next(b for b in self.workload.baselines(self.arrays.name) if b.name == name)
        fn(case)  # warm: lazy initialisation and compilation are not the call's memory
        self.arrays.synchronize()
        peak = self.arrays.peak_extra_bytes(lambda: fn(case))
        if spec.returns_outputs:
            peak -= sum(self.arrays.nbytes(case.data[t.name]) for t in self.written)
        return max(0, int(peak))

    # -- memory ----------------------------------------------------------------------------------
    def extra_memory_bytes(self, kernel: Any, artifact: Artifact, case: Case) -> int:
        return int(self.template.extra_bytes(kernel, artifact, case.shape))

    def onchip_bytes(self, artifact: Artifact, kernel: Any = None) -> int:
        """Per-block on-chip use: registers x threads x 4 + shared memory (0 on a CPU), preferring
        what the loaded kernel reported over the template's estimate."""
        r = dict(artifact.resources)
        r.update(getattr(kernel, "resources", None) or {})
        return int(r.get("registers", 0)) * int(r.get("threads", 0)) * 4 + int(r.get("shared_bytes", 0))


def case_arrays(case: Any) -> list:
    """Every array a launch on ``case`` may read or write: its tensors with their guard buffers, the
    template's repacked weights, and what a baseline keeps in the case (its own packed copy)."""
    found: list = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif hasattr(value, "nbytes"):
            found.append(value)

    walk(case.data)
    walk(case.flats)
    walk(case.packed)
    return found


def _weights(workload: Any, problem: dict, tensors: list) -> tuple[str, ...]:
    """The workload's declared weights, refused unless the launch checks keep each one fixed."""
    declared = getattr(workload, "weights", None)
    names = tuple(declared(problem)) if declared else ()
    by_name = {t.name: t for t in tensors}
    key = workload.perturbation(problem) if hasattr(workload, "perturbation") else None
    for name in names:
        t = by_name.get(name)
        if t is None or t.role != "input":
            raise ValueError(f"{workload.name}: weight {name!r} is not one of its input tensors")
        if key and key in t.dims:  # permuted between timed launches: a repack made once would go stale
            raise ValueError(f"{workload.name}: weight {name!r} spans {key!r}, along which inputs are permuted")
    return names
