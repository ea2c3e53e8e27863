"""What the Triton templates share: their base class, a few genes and checks, and the small pieces
of code generation every ``<family>/triton.py`` writes the same way.

A Triton template renders one Python module (``@triton.jit`` kernels and a ``launch`` function).
The pieces here are plain string work, so a template reads as its kernel: eviction and cache
hints, indentation, a body written in the genome's order of tokens, and the masked / unmasked
twin a ``masks = "even"`` genome gets (``EVEN``, decided at launch when the shape fills every tile).
"""
from __future__ import annotations

from typing import Iterable

from core.backends.base import KernelSource
from core.genome import ChoiceGene, Genome
from core.workloads.template import Template


class TritonTemplate(Template):
    """A template whose kernel is a Triton module (see :mod:`core.workloads.triton_common`)."""

    backend = "triton"

    def kernel_source(self, source: str, entry: str, launch: dict, threads: int, registers: int,
                      shared_bytes: int = 0) -> KernelSource:
        """``source`` with its kernel ``entry`` (no compiler flags), launch parameters and static
        estimate: ``threads`` per program, ``registers`` per thread, ``shared_bytes`` per program."""
        resources = {"threads": threads, "shared_bytes": shared_bytes, "registers": registers}
        return KernelSource(self.backend, source, entry, (), launch, resources)


def gene_groups_of(genome: Genome, sequence: str = "body") -> tuple[dict, dict, dict, tuple]:
    """A genome's parallel_config and memory_pattern, its ``regs`` map and its instruction
    sequence ``sequence``: what a template's ``render_module`` takes."""
    return (genome["parallel_config"], genome["memory_pattern"], genome["register_allocation"]["regs"],
            genome["instruction_sequence"][sequence])


# -- genes and checks ----------------------------------------------------------------------------

def num_warps_gene(choices: tuple[int, ...]) -> ChoiceGene:
    """The ``num_warps`` gene: warps per program."""
    return ChoiceGene("num_warps", choices, "warps per program")


def masks_gene(doc: str) -> ChoiceGene:
    """The ``masks`` gene: "always" masks every access, "even" renders :func:`even_twin`."""
    return ChoiceGene("masks", ("always", "even"), doc)


def per_thread_violation(per_thread: int, most: int, least: int = 0) -> str | None:
    """Why a program giving each thread ``per_thread`` elements of its tiles does not fit: more than
    ``most`` (they spill), or fewer than ``least`` (1: some threads would hold nothing); else None."""
    if per_thread > most:
        return f"{per_thread} elements per thread (> {most})"
    if per_thread < least:
        return "fewer elements than threads"
    return None


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (n >= 1): Triton's block shapes are powers of two."""
    return 1 << max(0, (n - 1).bit_length())


# -- code generation -----------------------------------------------------------------------------

def eviction(policy: str) -> str:
    """The ``, eviction_policy="..."`` argument of a ``tl.load``; nothing for the default ("")."""
    return f', eviction_policy="{policy}"' if policy else ""


def cache_modifier(modifier: str) -> str:
    """The ``, cache_modifier="..."`` argument of a ``tl.store``; nothing for the default ("")."""
    return f', cache_modifier="{modifier}"' if modifier else ""


def indent(lines: Iterable[str], depth: int = 1) -> list[str]:
    """``lines`` indented by ``depth`` levels of four spaces."""
    return ["    " * depth + ln for ln in lines]


def in_order(order: Iterable[str], steps: dict[str, list[str]]) -> list[str]:
    """The statements of ``steps`` (token -> its lines, none for a token that writes nothing here)
    in the genome's ``order`` of tokens."""
    return [ln for tok in order for ln in steps[tok]]


def even_twin(bare: list[str], masked: list[str]) -> list[str]:
    """``if EVEN:`` the unmasked statements ``bare``, ``else:`` the ``masked`` ones."""
    return ["if EVEN:", *indent(bare), "else:", *indent(masked)]
