"""The workload spec: everything about a kernel family that does not depend on the backend.

A family lives in ``core/workloads/<family>/``. Its ``__init__.py`` holds one :class:`Workload`
subclass, written once for every backend:

* ``params`` -- the problem's settings with their defaults (on a CPU and on a GPU) and bounds;
* ``tensors(problem)`` -- name, dimensions, dtype and role of every tensor, and how inputs are drawn;
* ``shapes(problem)`` -- the verification shapes: the first is timed, one is not a multiple of
  any tile, vector width or unroll factor;
* ``reference(xp, t, problem)`` -- float64 outputs from float64 inputs, with operations numpy and
  torch share, so it runs wherever the kernel's tensors live;
* ``tolerances`` -- (atol, rtol) of ``|out - ref| <= atol + rtol |ref|`` by dtype (or a
  ``tolerance(dtype, shape)`` of its own, where the shape matters);
* ``baselines(arrays)`` -- the library paths timed beside the kernels, in the array library of the
  backend ("numpy" or "torch"); the fastest one that verifies normalises fitness;
* ``flops(shape, problem)`` -- for the compute roofline; bytes come from the tensors;
* ``weights(problem)`` -- the inputs a template may repack once into its own layout (default none);
* ``permuted_along`` -- the shape key along which timed launches get permuted inputs (default none).

:func:`verification_shapes`, the input draws (:class:`Normal`, :class:`Uniform`, :class:`Indices`)
and :func:`compiled_once` (a baseline under torch.compile) are written here once for every family.

Next to it, one template per backend (``<family>/<backend>.py``, see :mod:`core.workloads.template`)
holds the gene space, ``render`` and how to launch. Registering the family in
``core/workloads/__init__.py`` puts it through the conformance suite.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from core.backends.arrays import Arrays, dtype_bytes

ROLES = ("input", "output", "inout")


@dataclass(frozen=True)
class Normal:
    """Inputs drawn from N(mean, std^2); ``scale(shape)`` multiplies std (e.g. ``k ** -0.25`` keeps
    a product's outputs near N(0, 1) whatever K is)."""

    mean: float = 0.0
    std: float = 1.0
    scale: Callable[[dict], float] | None = None

    def draw(self, arrays: Arrays, shape: tuple[int, ...], dtype: str, gen: Any, problem_shape: dict) -> Any:
        std = self.std * (self.scale(problem_shape) if self.scale else 1.0)
        return arrays.normal(shape, dtype, gen, self.mean, std)


@dataclass(frozen=True)
class Uniform:
    """Inputs drawn uniformly from [low, high)."""

    low: float = -1.0
    high: float = 1.0

    def draw(self, arrays: Arrays, shape: tuple[int, ...], dtype: str, gen: Any, problem_shape: dict) -> Any:
        return arrays.uniform(shape, dtype, gen, self.low, self.high)


@dataclass(frozen=True)
class Indices:
    """Row indices into dimension ``dim`` (of another tensor), drawn uniformly with repeats: float
    draws truncated, kept a row below the end so that rounding up cannot index past it."""

    dim: str

    def draw(self, arrays: Arrays, shape: tuple[int, ...], dtype: str, gen: Any, problem_shape: dict) -> Any:
        return arrays.uniform(shape, dtype, gen, 0.0, float(max(1, problem_shape[self.dim] - 1)))


@dataclass(frozen=True)
class Tensor:
    """One argument of the operation.

    ``dims`` name the shape's keys (``("m", "k")``) or give fixed sizes; ``dtype`` None means the
    problem's dtype. ``role``: ``input`` (must come back unchanged), ``output`` (poisoned before
    every checked launch) or ``inout`` (drawn like an input, updated in place, checked as an output).
    """

    name: str
    dims: tuple
    role: str = "input"
    init: Normal | Uniform | Indices = Normal()
    dtype: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"tensor {self.name}: role must be one of {ROLES}")

    def shape(self, shape: dict) -> tuple[int, ...]:
        return tuple(shape[d] if isinstance(d, str) else int(d) for d in self.dims)

    def dtype_in(self, problem: dict) -> str:
        return self.dtype or problem["dtype"]

    def numel(self, shape: dict) -> int:
        n = 1
        for d in self.shape(shape):
            n *= d
        return n

    @property
    def read(self) -> bool:
        return self.role in ("input", "inout")

    @property
    def written(self) -> bool:
        return self.role in ("output", "inout")


@dataclass(frozen=True)
class Baseline:
    """A library path timed beside the kernels.

    ``fn(t, problem)`` gets the case's tensors by name: it writes the outputs in place and returns
    None, or returns the outputs (one array, a tuple in the order of the written tensors, or a dict
    by name), which the harness copies in outside the timed region before checking them.
    """

    name: str
    arrays: str  # "numpy" or "torch"
    fn: Callable[[dict, dict], Any]
    doc: str = ""
    returns_outputs: bool = False  # True when it allocates its outputs (not extra memory, so subtracted)


@dataclass(frozen=True)
class Param:
    """A problem setting. ``kind``: "size" (int in [1, upper]), "real" (float in (low, high)), "flag"
    (bool), "dtype" (one of the backend's dtypes, limited to ``choices`` when given)."""

    name: str
    default: Any  # on a GPU
    cpu_default: Any = None  # on a CPU, when different (smaller sizes)
    kind: str = "size"
    upper: int = 1 << 16
    cpu_upper: int | None = None
    low: float = 0.0
    high: float = 1.0
    choices: tuple = ()

    def default_for(self, device_kind: str) -> Any:
        return self.cpu_default if device_kind == "cpu" and self.cpu_default is not None else self.default

    def check(self, value: Any, device_kind: str, dtypes: tuple[str, ...]) -> str | None:
        """Why ``value`` is not allowed, or None."""
        if self.kind == "size":
            upper = self.cpu_upper if device_kind == "cpu" and self.cpu_upper else self.upper
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
                return f"{self.name} must be an integer from 1 to {upper} (got {value!r})"
        elif self.kind == "real":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not self.low < value < self.high:
                return f"{self.name} must be a number in ({self.low:g}, {self.high:g}) (got {value!r})"
        elif self.kind == "flag":
            if not isinstance(value, bool):
                return f"{self.name} must be true or false (got {value!r})"
        elif self.kind == "dtype":
            allowed = tuple(d for d in dtypes if not self.choices or d in self.choices)
            if value not in allowed:
                return f"{self.name} must be one of {', '.join(allowed)} on this backend (got {value!r})"
        return None


def compiled_once(fn: Callable) -> Callable:
    """``fn`` under ``torch.compile(fn, dynamic=False)`` for a baseline: compiled at the first call
    (torch is imported then, not with the workload) and that compiled function reused after."""
    compiled: list = []

    def call(*args: Any, **kwargs: Any) -> Any:
        if not compiled:
            import torch

            compiled.append(torch.compile(fn, dynamic=False))
        return compiled[0](*args, **kwargs)

    return call


def verification_shapes(problem: dict, keys: tuple[str, ...], *changes: dict) -> list[dict]:
    """The problem's own shape (its settings ``keys``), the timed one, then that shape with each of
    ``changes`` applied (the odd shapes), each where it differs from the first."""
    main = {k: problem[k] for k in keys}
    return [main] + [s for s in ({**main, **c} for c in changes) if s != main]


def family_templates(package: str, *backends: str) -> dict[str, str]:
    """``{backend: "<package>.<backend>"}``: a family's templates, one module per backend named after it."""
    return {backend: f"{package}.{backend}" for backend in backends}


#: How a timed launch finds the caches (a problem setting every workload takes, ``"cache"``):
#: ``cold`` (the default) -- nothing a preparation wrote is left in the last-level cache, inputs and
#: weights come from device memory, as a model's layer finds them; ``hot`` -- the launch finds its
#: inputs as the preparation left them, as for a kernel whose inputs the previous kernel just
#: produced. Baselines are always timed under the same policy as the kernels.
CACHE_POLICIES = ("cold", "hot")


def cache_policy(problem: dict) -> str:
    """The problem's cache policy (``cold`` unless it says ``hot``)."""
    return problem.get("cache") or "cold"


class Workload(ABC):
    """A kernel family, independent of backend (see the module docstring)."""

    name: ClassVar[str]
    description: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]
    #: backend name -> module holding that backend's ``TEMPLATE`` class
    templates: ClassVar[dict[str, str]]
    #: dtype -> (atol, rtol), whatever the shape (see :meth:`tolerance`)
    tolerances: ClassVar[dict[str, tuple[float, float]]]
    #: the shape key of :meth:`perturbation`, None for none
    permuted_along: ClassVar[str | None] = None

    # -- the problem -----------------------------------------------------------------------------
    def default_problem(self, backend: str) -> dict:
        """Default settings on ``backend``: small on a CPU, real LLM sizes on a GPU."""
        kind = _capabilities(backend).device_kind
        return {p.name: p.default_for(kind) for p in self.params}

    def validate_problem(self, problem: dict, backend: str) -> dict:
        """The full problem (defaults filled in) on ``backend``, or ValueError saying which setting
        is wrong (a dtype the backend cannot run included)."""
        caps = _capabilities(backend)
        kind, dtypes = caps.device_kind, tuple(caps.dtypes)
        defaults = self.default_problem(backend)
        problem = dict(problem)
        cache = problem.pop("cache", None)
        if cache is not None and cache not in CACHE_POLICIES:
            raise ValueError(f"cache must be one of {', '.join(CACHE_POLICIES)} (got {cache!r})")
        unknown = set(problem) - set(defaults)
        if unknown:
            raise ValueError(f"{self.name} has no setting {', '.join(sorted(unknown))} "
                             f"(has: {', '.join(sorted(defaults))}, and cache)")
        merged = {**defaults, **problem, **({"cache": cache} if cache else {})}
        for p in self.params:
            if p.kind == "real" and isinstance(merged[p.name], int) and not isinstance(merged[p.name], bool):
                merged[p.name] = float(merged[p.name])
            why = p.check(merged[p.name], kind, dtypes)
            if why:
                raise ValueError(why)
        return merged

    # -- what one call is ------------------------------------------------------------------------
    @abstractmethod
    def tensors(self, problem: dict) -> list[Tensor]:
        """Every argument of the operation, inputs first."""

    @abstractmethod
    def shapes(self, problem: dict) -> list[dict]:
        """Verification shapes; the first is the timed one, another is not a multiple of any tile."""

    @abstractmethod
    def reference(self, xp: Any, t: dict, problem: dict) -> dict:
        """float64 outputs by name from the float64 inputs ``t`` (numpy or torch, as ``xp``)."""

    def tolerance(self, dtype: str, shape: dict) -> tuple[float, float]:
        """(atol, rtol) for outputs of ``dtype`` on ``shape``: by default the class's
        ``tolerances[dtype]``, the same for every shape (override where the shape matters)."""
        return self.tolerances[dtype]

    @abstractmethod
    def baselines(self, arrays: str) -> list[Baseline]:
        """The library paths in array library ``arrays``, imported lazily inside ``fn``."""

    @abstractmethod
    def flops(self, shape: dict, problem: dict) -> float:
        """Arithmetic operations of one call (for the compute roofline)."""

    def weights(self, problem: dict) -> tuple[str, ...]:
        """Names of the input tensors that are a model's fixed weights, the same for every call: a
        template may repack these once into its own layout (:meth:`Template.repack
        <core.workloads.template.Template.repack>`), and only these reach its repack, never an input
        that changes per call (activations). Each must be an ``input`` without the
        :meth:`perturbation` dimension, so the launch checks never change it between launches.
        Default: none, nothing may be repacked."""
        return ()

    def perturbation(self, problem: dict) -> str | None:
        """The shape key along which permuting the inputs permutes the outputs the same way (the
        rows of a row-wise operation, M of a product): timed launches get freshly permuted inputs,
        so a kernel that memoises answers is caught. None: inputs are only restored, not permuted.
        Default: the class's ``permuted_along``."""
        return self.permuted_along

    # -- bytes, from the tensors -----------------------------------------------------------------
    def io_bytes(self, shape: dict, problem: dict) -> int:
        """Bytes of the inputs and outputs themselves: the memory any implementation holds."""
        return sum(t.numel(shape) * dtype_bytes(t.dtype_in(problem)) for t in self.tensors(problem))

    def min_bytes(self, shape: dict, problem: dict) -> float:
        """Fewest bytes one call moves: every input read once, every output written once."""
        return float(sum(t.numel(shape) * dtype_bytes(t.dtype_in(problem)) * (t.read + t.written)
                         for t in self.tensors(problem)))

    # -- templates -------------------------------------------------------------------------------
    def template(self, backend: str, problem: dict, device: Any):
        """The ``backend`` template for ``problem`` on ``device``; ValueError when there is none."""
        if backend not in self.templates:
            raise ValueError(f"workload {self.name!r} has no {backend!r} template (has: {', '.join(self.templates)})")
        module = importlib.import_module(self.templates[backend])
        return module.TEMPLATE(self, problem, device)


def _capabilities(backend: Any) -> Any:
    """The backend class for a name (its capabilities are class attributes), or ``backend`` itself."""
    if isinstance(backend, str):
        from core.backends import backend_class

        return backend_class(backend)
    return backend


def scaled_by_sqrt_sqrt(dim: str) -> Callable[[dict], float]:
    """``shape[dim] ** -0.25``: inputs of a K-long dot product drawn with this std give outputs
    near N(0, 1) for every K, so one tolerance fits every shape."""
    return lambda shape: float(shape[dim]) ** -0.25
