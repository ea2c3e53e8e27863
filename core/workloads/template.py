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
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar

from core.backends.base import Artifact, DeviceInfo, KernelSource
from core.genome import GeneSpace, Genome


class Template(ABC):
    """One backend's code template for a workload family."""

    backend: ClassVar[str]

    def __init__(self, workload: Any, problem: dict, device: DeviceInfo):
        self.workload, self.problem, self.device = workload, problem, device

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
