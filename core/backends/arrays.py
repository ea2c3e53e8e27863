"""The array libraries a harness works in: numpy on the CPU, torch on a GPU (or on the CPU).

The generic harness (:mod:`core.evaluation.harness`) is written once against :class:`Arrays`:
draw random inputs, allocate outputs poisoned with NaN inside guard zones, copy, compare with a
float64 reference, read raw bytes, measure a callable's extra memory. A backend's runtime owns
one instance (``runtime.arrays``) for its device. ``xp`` is the library's module; a workload's
float64 reference is written once with operations numpy and torch share (``@``, ``*``,
``.mean(-1, keepdims=True)``, ``xp.sqrt``, ``xp.exp``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

GUARD_ELEMENTS = 4096  # NaN elements before and after every output: catches small out-of-bounds writes


@dataclass
class CheckResult:
    """Outcome of checking one launch's outputs against the reference."""

    ok: bool
    cause: str = ""  # "", "wrong_result", "out_of_bounds_write", "input_modified", "nan_output"
    max_abs_err: float = 0.0
    rel_err: float = 0.0
    detail: str = ""
    margin_used: float = 0.0  # max over elements of |err| / (atol + rtol |ref|): 1.0 is the edge of tolerance


class Arrays(ABC):
    """One array library on one device. Every method is called inside the sandbox process."""

    name: str  # "numpy" or "torch"
    xp: Any  # the library's module, for references

    @abstractmethod
    def generator(self, seed: int) -> Any:
        """A seeded random generator on this device."""

    @abstractmethod
    def normal(self, shape: tuple[int, ...], dtype: str, gen: Any, mean: float, std: float) -> Any:
        """Normally distributed values, drawn in float32 and rounded to ``dtype``."""

    @abstractmethod
    def uniform(self, shape: tuple[int, ...], dtype: str, gen: Any, low: float, high: float) -> Any:
        """Uniformly distributed values in [low, high), drawn in float32 and rounded to ``dtype``."""

    @abstractmethod
    def poisoned(self, shape: tuple[int, ...], dtype: str, guard: int = GUARD_ELEMENTS) -> tuple[Any, Any]:
        """(flat buffer, view): the view of ``shape`` sits between ``guard`` elements on each side,
        and the whole buffer holds NaN."""

    @abstractmethod
    def poison(self, flat: Any) -> None:
        """Fill a buffer from :meth:`poisoned` with NaN again, guards included."""

    @abstractmethod
    def guards_intact(self, flat: Any, guard: int = GUARD_ELEMENTS) -> bool:
        """Whether the guard zones still hold only the poison."""

    @abstractmethod
    def copy_into(self, dst: Any, src: Any) -> None:
        """``dst[...] = src``."""

    @abstractmethod
    def clone(self, x: Any) -> Any:
        """An independent copy."""

    @abstractmethod
    def same_bits(self, a: Any, b: Any) -> bool:
        """Bitwise equality (NaN-safe)."""

    @abstractmethod
    def float64(self, x: Any) -> Any:
        """A float64 copy on the same device, for the reference."""

    @abstractmethod
    def compare(self, out: Any, ref: Any, atol: float, rtol: float) -> CheckResult:
        """``|out - ref| <= atol + rtol * |ref|`` everywhere, computed in float64; NaN or inf in
        ``out`` is ``nan_output`` (poison left behind)."""

    @abstractmethod
    def to_bytes(self, x: Any) -> bytes:
        """The raw bytes of ``x``, to compare repeated launches bit for bit."""

    @abstractmethod
    def nbytes(self, x: Any) -> int:
        """Bytes ``x`` occupies."""

    @abstractmethod
    def peak_extra_bytes(self, fn: Callable[[], Any]) -> int:
        """Peak bytes ``fn()`` allocates beyond what was live before it ran."""

    # -- perturbing and checking timed launches (core/evaluation/checks.py) ----------------------
    @abstractmethod
    def index_table(self, rows: list[list[int]]) -> Any:
        """A (P, n) int64 array of index rows on this device."""

    @abstractmethod
    def choose(self, table: Any, rng: Any) -> tuple[Any, Any]:
        """(index, row) of a random row of ``table``; on a GPU drawn on the device (graph-safe), so
        each replay of a captured launch draws afresh."""

    @abstractmethod
    def take_into(self, dst: Any, src: Any, row: Any, axis: int) -> None:
        """``dst = src`` with its ``axis`` permuted by ``row``."""

    @abstractmethod
    def count_outside(self, out: Any, ref: Any, atol: float, rtol: float) -> tuple[Any, Any]:
        """On the device, without a host sync: (elements of ``out`` that are not finite, elements
        with ``|out - ref| > atol + rtol |ref|``) as device scalars."""

    @abstractmethod
    def to_host(self, values: list) -> list[float]:
        """Device scalars -> Python floats (one transfer)."""

    def synchronize(self) -> None:
        """Wait for queued work (a no-op where calls are synchronous)."""


def dtype_bytes(dtype: str) -> int:
    """Bytes of one element of ``dtype`` ("float32", "bfloat16", "int32"...)."""
    return {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int8": 1, "uint8": 1}[dtype]


def make_arrays(name: str, device: str = "cpu") -> Arrays:
    """The :class:`Arrays` for library ``name`` on ``device`` ("cpu", "cuda", "cuda:1")."""
    if name == "numpy":
        from core.backends.numpy_arrays import NumpyArrays

        return NumpyArrays()
    if name == "torch":
        from core.backends.torch_arrays import TorchArrays

        return TorchArrays(device)
    raise ValueError(f"unknown array library {name!r}")
