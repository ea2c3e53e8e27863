"""A template: one backend's way of writing a workload's kernel.

A template holds only what is particular to its backend:

* ``gene_space()`` -- the legal genomes (the four gene groups), their seeds and constraints;
* ``render(genome)`` -- the kernel source with its launch parameters and static resource estimate;
* ``bind(kernel, t, shape)`` -- how to launch the loaded kernel on the spec's tensors: returns a
  zero-argument callable with everything (pointers, grid, workspace) worked out, so the timed
  launches pay only for the call itself;
* ``extra_bytes(kernel, artifact, shape)`` -- workspace beyond inputs and outputs (default: the
  rendered estimate ``resources["workspace_bytes"]``);
* ``repack(kernel, arrays, weights, shape)`` -- a one-time repacking of the workload's weights
  into the kernel's own layout, as Marlin does (default: none). The harness runs it once per case,
  outside the timed launches, times it apart, counts the new tensors' bytes as the kernel's memory
  and hands them to ``bind`` beside the case's tensors.

Inputs, references, tolerances, baselines, poisoning and timing belong to the workload spec and to
:mod:`core.evaluation`, written once for every template.

The ``machine_code`` gene group (PTX edits, docs/machine-code.md) is added here for every template
of a backend that compiles through PTX (``Backend.ptx_edits``), without the templates knowing: when
the run turns it on (``template.machine_code = True``), ``gene_space()`` gains the group, and
``render()`` of a genome with edits returns the source carrying them (:mod:`core.backends.ptx.carry`).
"""
from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar

from core.backends.base import Artifact, DeviceInfo, KernelSource
from core.genome import EditListGene, GeneSpace, Genome


class Template(ABC):
    """One backend's code template for a workload family."""

    backend: ClassVar[str]
    machine_code: bool = False  # the run's choice (RunConfig.machine_code): add the machine_code gene group

    def __init__(self, workload: Any, problem: dict, device: DeviceInfo):
        self.workload, self.problem, self.device = workload, problem, device

    def run_with(self, config: Any) -> "Template":
        """This template, set up for a run of ``config`` (a RunConfig): the machine_code group on or off."""
        self.machine_code = bool(getattr(config, "machine_code", 0))
        return self

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "gene_space" in cls.__dict__:
            cls.gene_space = _with_machine_code_space(cls.__dict__["gene_space"])
        if "render" in cls.__dict__:
            cls.render = _with_machine_code_source(cls.__dict__["render"])

    @abstractmethod
    def gene_space(self) -> GeneSpace:
        """The legal genomes; every gene changes the rendered source."""

    @abstractmethod
    def render(self, genome: Genome) -> KernelSource:
        """Genome -> kernel source with its static resource estimate."""

    @abstractmethod
    def bind(self, kernel: Any, t: dict, shape: dict) -> Callable[[], Any]:
        """A callable launching ``kernel`` (what the runtime loaded) once on tensors ``t``."""

    def extra_bytes(self, kernel: Any, artifact: Artifact, shape: dict) -> int:
        """Bytes the kernel needs beyond its inputs and outputs (workspaces, packed copies)."""
        return int(artifact.resources.get("workspace_bytes", 0))

    def repack(self, kernel: Any, arrays: Any, weights: dict, shape: dict) -> dict:
        """New tensors by name, made once from ``weights`` for ``kernel`` (what the runtime loaded;
        its ``launch_params`` say which layout it reads), in ``arrays``' library; {} for none.

        ``weights`` holds copies of the tensors the workload declares as weights
        (:meth:`Workload.weights <core.workloads.spec.Workload.weights>`), and nothing else: a repack
        never sees the activations, so it cannot precompute an output. The new tensors reach
        :meth:`bind` in ``t`` under their own names (which must not be the spec's), must come back
        unchanged from every launch, and their bytes count as the kernel's memory."""
        return {}

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


def _ptx_backend(template: Template) -> Any:
    """The backend class of ``template`` when it compiles through PTX, else None."""
    from core.backends import backend_class

    try:
        cls = backend_class(template.backend)
    except (ValueError, KeyError, AttributeError, ImportError):
        return None
    return cls if getattr(cls, "ptx_edits", False) else None


def machine_code_gene() -> EditListGene:
    """The ``machine_code`` group's one gene: up to 8 PTX edits (:mod:`core.backends.ptx.edits`)."""
    from core.backends.ptx.edits import Alphabet

    return EditListGene("edits", Alphabet(), max_edits=8,
                        doc="PTX edits applied after the source compiles: cache operators, eviction priorities, "
                            ".nc on read-only loads, prefetches, moves, .maxnreg (docs/machine-code.md)")


def _with_machine_code_space(gene_space: Callable) -> Callable:
    @functools.wraps(gene_space)
    def wrapped(self: Template) -> GeneSpace:
        space = gene_space(self)
        if not getattr(self, "machine_code", False) or "machine_code" in space.groups or _ptx_backend(self) is None:
            return space
        return dataclasses.replace(space, groups={**space.groups, "machine_code": (machine_code_gene(),)})
    return wrapped


def _with_machine_code_source(render: Callable) -> Callable:
    @functools.wraps(render)
    def wrapped(self: Template, genome: Genome) -> KernelSource:
        kernel = render(self, genome)
        try:
            edits = genome["machine_code"]["edits"]
        except (KeyError, TypeError):  # not a Genome (a test's plain mapping): no edits
            edits = ()
        backend = _ptx_backend(self) if edits else None
        if backend is None:
            return kernel
        from core.backends.ptx.carry import attach, carried

        if carried(kernel.source) == tuple(edits):  # an overriding render called this one
            return kernel
        return dataclasses.replace(kernel, source=attach(kernel.source, edits, backend.line_comment))
    return wrapped
