"""The workload contract: a kernel family (``gemm``, ``rmsnorm``) and its per-backend templates.

A workload family lives in ``core/workloads/<family>/``:

* ``__init__.py`` -- the :class:`Workload` (problem defaults and validation, shapes, bytes and
  FLOPs for the roofline, the float64 reference), shared by every backend;
* ``<backend>.py`` -- a :class:`Template` for that backend: the gene space, ``render`` (genome ->
  :class:`KernelSource`) and the sandbox-side :class:`Harness` (inputs, launch, check, baselines).

The evaluator (``core/evaluate.py``) drives the protocol -- verify, time, stability, memory --
through the harness only, so a new backend or workload plugs in without touching the GA.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from core.backends.base import Artifact, DeviceInfo, KernelSource, Runtime
from core.genome import GeneSpace, Genome


@dataclass
class CheckResult:
    """Outcome of checking one launch's outputs against the reference."""

    ok: bool
    cause: str = ""  # "", "wrong_result", "out_of_bounds_write", "input_modified", "nan_output"
    max_abs_err: float = 0.0
    rel_err: float = 0.0
    detail: str = ""


@dataclass
class Case:
    """One set of inputs and poisoned outputs for one shape, owned by the harness.

    ``data`` holds backend arrays (numpy, cupy or torch); ``expected`` the float64 reference
    outputs; ``pristine`` copies of the inputs to detect kernels that write their inputs.
    """

    shape: dict
    data: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)
    pristine: dict = field(default_factory=dict)


class Harness(ABC):
    """Sandbox-side operations on one workload for one backend.

    Created inside the evaluator process with the backend's runtime and the run's problem.
    """

    def __init__(self, workload: "Workload", runtime: Runtime, problem: dict, device: DeviceInfo):
        self.workload, self.runtime, self.problem, self.device = workload, runtime, problem, device

    @abstractmethod
    def make_case(self, shape: dict, seed: int) -> Case:
        """Fresh random inputs (never zeros) for ``shape``, outputs filled with NaN inside guard zones."""

    @abstractmethod
    def launch(self, kernel: Any, case: Case) -> None:
        """One launch of ``kernel`` on ``case`` (may be asynchronous)."""

    @abstractmethod
    def check(self, case: Case) -> CheckResult:
        """Compare outputs with the reference, check guard zones and that inputs are unchanged."""

    @abstractmethod
    def output_bytes(self, case: Case) -> bytes:
        """The raw output bytes, to compare repeated launches bit for bit."""

    @abstractmethod
    def baselines(self) -> dict[str, Callable[[Case], Any]]:
        """Library baselines timed side by side; the first one normalises the fitness."""

    def accept_baseline_result(self, case: Case, result: Any) -> None:
        """Store what a baseline returned (libraries that allocate their own output) into the
        case's outputs, so the baseline is checked like a kernel. Called outside the timed region."""

    def reset_outputs(self, case: Case) -> None:
        """Poison the outputs again (NaN) before a launch whose result will be checked."""

    def extra_memory_bytes(self, kernel: Any, artifact: Artifact, case: Case) -> int:
        """Bytes the kernel needs beyond its inputs and outputs (workspaces, packed copies)."""
        return int(artifact.resources.get("workspace_bytes", 0))

    def onchip_bytes(self, artifact: Artifact) -> int:
        """Per-block on-chip use: registers x threads x 4 + shared memory (0 on the CPU)."""
        r = artifact.resources
        return int(r.get("registers", 0)) * int(r.get("threads", 0)) * 4 + int(r.get("shared_bytes", 0))

    def baseline_memory_bytes(self, name: str, case: Case) -> int:
        """Extra bytes a baseline allocates beyond inputs and outputs, measured where possible."""
        return 0


class Template(ABC):
    """One backend's code template for a workload family."""

    backend: ClassVar[str]

    def __init__(self, workload: "Workload", problem: dict, device: DeviceInfo):
        self.workload, self.problem, self.device = workload, problem, device

    @abstractmethod
    def gene_space(self) -> GeneSpace:
        """The legal genomes; every gene changes the rendered source."""

    @abstractmethod
    def render(self, genome: Genome) -> KernelSource:
        """Genome -> kernel source with its static resource estimate."""

    def resource_violation(self, kernel: KernelSource) -> str | None:
        """A reason when the static estimate exceeds the device (immediate death), else None."""
        r, d = kernel.resources, self.device
        if d.shared_mem_per_block and r.get("shared_bytes", 0) > d.shared_mem_per_block:
            return f"shared memory {r['shared_bytes']} B > device limit {d.shared_mem_per_block} B"
        if d.max_threads_per_block and r.get("threads", 0) > d.max_threads_per_block:
            return f"{r['threads']} threads per block > device limit {d.max_threads_per_block}"
        if d.registers_per_block and r.get("registers", 0) * r.get("threads", 0) > d.registers_per_block:
            return f"registers {r['registers']}x{r['threads']} > device limit {d.registers_per_block}"
        return None

    @abstractmethod
    def harness(self, runtime: Runtime) -> Harness:
        """The sandbox-side harness (called inside the evaluator process only)."""

    @abstractmethod
    def standalone_script(self, kernel: KernelSource) -> str:
        """A self-contained Python script (exported with a champion) that compiles this kernel,
        re-verifies it against a reference on fresh random inputs (the odd shape too), times it
        against the baseline and exits non-zero when verification fails."""


class Workload(ABC):
    """A kernel family, independent of backend."""

    name: ClassVar[str]
    description: ClassVar[str]
    templates: ClassVar[dict[str, str]]  # backend name -> module path holding a ``TEMPLATE`` class

    @abstractmethod
    def default_problem(self, backend: str) -> dict:
        """Default problem (sizes, dtype) for a backend: small on the CPU, real on a GPU."""

    @abstractmethod
    def validate_problem(self, problem: dict, backend: str) -> dict:
        """Return the full problem (defaults filled in) or raise ValueError with a clear message."""

    @abstractmethod
    def shapes(self, problem: dict) -> list[dict]:
        """Verification shapes; the first is the timed shape, another is not a multiple of any tile."""

    @abstractmethod
    def flops(self, shape: dict) -> float:
        """Floating-point operations of one call."""

    @abstractmethod
    def min_bytes(self, shape: dict) -> float:
        """Fewest bytes one call must move (inputs read once, outputs written once)."""

    @abstractmethod
    def io_bytes(self, shape: dict) -> int:
        """Bytes of the inputs and outputs themselves (the memory any implementation holds)."""

    def template(self, backend: str, problem: dict, device: DeviceInfo) -> Template:
        if backend not in self.templates:
            raise ValueError(f"workload {self.name!r} has no {backend!r} template (has: {', '.join(self.templates)})")
        module = importlib.import_module(self.templates[backend])
        return module.TEMPLATE(self, problem, device)
