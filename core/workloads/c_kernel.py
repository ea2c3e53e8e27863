"""What every OpenMP C template renders alike: the base template, its configuration, the prelude
and the loops.

A C template (``core/workloads/<family>/c.py``) declares its genes (:mod:`core.workloads.openmp`)
and writes the loop body that is its kernel. The frame around that body is the same everywhere
and lives here:

* :class:`CTemplate` -- backend ``"c"``, the cores its thread options are built for, the
  :class:`~core.backends.base.KernelSource` of a rendered configuration (``-std=gnu11``, the ctypes
  signature, threads and workspace);
* :class:`CConfig` -- the genome's values as attributes, which each template's ``from_genome``
  names;
* :func:`prelude`, :func:`float_vectors`, :func:`vector_type`, :func:`streaming` -- the opening
  comment, includes, ``#define``s, GCC vector types, and non-temporal stores with their fence;
* :class:`Lanes` -- how one slot of a loop body reads and writes: a GCC vector, a lane of an
  ``omp simd`` loop, or a scalar;
* :func:`main_loop`, :func:`tail_loop`, :func:`align_head`, :func:`parallel_for`,
  :func:`over_token_groups` -- the loops every body runs in.
"""
from __future__ import annotations

import os
from typing import Any

from core.backends.base import KernelSource
from core.workloads.kernel_files import defines
from core.workloads.template import Template


class CTemplate(Template):
    """The base of the OpenMP C templates."""

    backend = "c"

    @property
    def cores(self) -> int:
        """The cores the thread options are built for: the target's, else this host's."""
        return cpu_cores(self.device)

    def c_kernel(self, source: str, entry: str, argtypes: tuple[str, ...], threads: int,
                 workspace_bytes: int = 0, **launch: Any) -> KernelSource:
        """The kernel of one rendered configuration: ``argtypes`` is the entry's C signature for
        ctypes; ``launch`` adds what the backend and the report read (vector width, tile sizes)."""
        return KernelSource(backend="c", source=source, entry=entry, flags=("-std=gnu11",),
                            launch={"argtypes": argtypes, "threads": threads, **launch},
                            resources={"workspace_bytes": workspace_bytes, "threads": threads})


def cpu_cores(device: Any) -> int:
    """The cores of ``device`` (a :class:`~core.backends.base.DeviceInfo`), else of this host; at least 1."""
    return max(1, int(getattr(device, "multiprocessors", 0) or os.cpu_count() or 1))


class CConfig:
    """A genome's values for rendering, as attributes (each template's ``from_genome`` names them)."""

    def __init__(self, **kw: Any):
        self.__dict__.update(kw)


# ---- the prelude ---------------------------------------------------------------------------------

_ELEMENT_BYTES = {"float": 4, "int32_t": 4, "double": 8}


def prelude(comment: str, includes: tuple[str, ...], values: dict[str, object]) -> str:
    """The kernel's opening: ``/* comment */``, the ``#include <...>`` lines, then ``#define`` each value."""
    return f"/* {comment} */\n" + "".join(f"#include <{h}>\n" for h in includes) + defines(values)


def vector_type(name: str, element: str, lanes: int, *attributes: str) -> str:
    """``typedef element name`` as a GCC vector of ``lanes`` elements, with further ``attributes``."""
    extra = "".join(f", {a}" for a in attributes)
    return f"typedef {element} {name} __attribute__((vector_size({_ELEMENT_BYTES[element] * lanes}){extra}));\n"


def float_vectors(vw: int) -> str:
    """``vf``, ``vw`` floats, and ``vfu``, the same at any float's alignment (unaligned loads and
    stores); both may alias the float arrays they are loaded from."""
    return vector_type("vf", "float", vw, "may_alias") + vector_type("vfu", "float", vw, "aligned(4)", "may_alias")


_STREAM = {4: ("__SSE__", "_mm_stream_ps", "__m128"), 8: ("__AVX__", "_mm256_stream_ps", "__m256"),
           16: ("__AVX512F__", "_mm512_stream_ps", "__m512")}


def streaming(vw: int, vector: bool) -> str:
    """Non-temporal stores: ``STREAM(p, v)`` for a GCC vector of ``vw`` floats (when ``vector``; a
    plain store where the CPU has no such instruction), and ``FENCE()``, which orders them before
    the kernel returns."""
    out = ""
    if vector:
        guard, fn, typ = _STREAM[vw]
        out += (f"#if defined({guard})\n#include <immintrin.h>\n#define STREAM(p, v) {fn}((p), ({typ})(v))\n"
                "#else\n#define STREAM(p, v) (*(vfu *)(p) = (v))\n#endif\n")
    return out + ("#if defined(__SSE2__)\n#include <immintrin.h>\n#define FENCE() _mm_sfence()\n"
                  "#else\n#define FENCE() ((void)0)\n#endif\n")


# ---- the loops -----------------------------------------------------------------------------------

class Lanes:
    """How one slot of a loop body reads and writes at element ``j``: a GCC vector (``vector``),
    a lane ``l`` of an ``omp simd`` loop (``simd``) or a scalar (``scalar``); slot ``s`` is
    ``s * width`` elements on."""

    def __init__(self, kind: str, vw: int):
        self.kind = kind
        self.width = vw if kind != "scalar" else 1
        self.vtype = "vf" if kind == "vector" and vw > 1 else "float"
        self.indent = "      " if kind == "simd" else "    "  # inside the simd loop's lane loop

    def idx(self, slot: int) -> str:
        base = f"j + {slot * self.width}" if slot else "j"
        return f"{base} + l" if self.kind == "simd" else base

    def load(self, ptr: str, slot: int) -> str:
        if self.vtype == "vf":
            return f"*(const vfu *)({ptr} + {self.idx(slot)})"
        return f"{ptr}[{self.idx(slot)}]"

    def store(self, ptr: str, slot: int, value: str) -> str:
        if self.vtype == "vf":
            return f"*(vfu *)({ptr} + {self.idx(slot)}) = {value};"
        return f"{ptr}[{self.idx(slot)}] = {value};"

    def stream(self, ptr: str, slot: int, value: str) -> str:
        """A non-temporal store; :func:`align_head` aligned the address to the vector size."""
        if self.vtype == "vf":
            return f"STREAM({ptr} + {self.idx(slot)}, {value});"
        return self.store(ptr, slot, value)  # omp simd: the loop's nontemporal clause asks for it

    def lines(self, lines: list[str]) -> str:
        """``lines`` as the body of this loop, indented."""
        return "".join(f"{self.indent}{ln}\n" for ln in lines)


def main_loop(lanes: Lanes, step: int, bound: str, body: str, nontemporal: str = "") -> str:
    """``for (; j + step <= bound; j += step)`` around ``body``; with ``simd`` lanes the body runs
    in an ``omp simd`` lane loop (``nontemporal``: the pointer its clause names, if any)."""
    head = f"  for (; j + {step} <= {bound}; j += {step}) {{\n"
    if lanes.kind == "simd":
        nt = f" nontemporal({nontemporal})" if nontemporal else ""
        return head + f"#pragma omp simd simdlen(VW){nt}\n    for (int l = 0; l < VW; ++l) {{\n{body}    }}\n  }}\n"
    return head + body + "  }\n"


def tail_loop(bound: str, body: str) -> str:
    """The scalar loop over what the main loop left, up to ``bound``."""
    return f"  for (; j < {bound}; ++j) {{\n{body}  }}\n"


def align_head(ptr: str, bound: str, vw: int, body: str) -> str:
    """Scalar elements up to the vector boundary of ``ptr``: non-temporal vector stores need aligned addresses."""
    return f"  for (; j < {bound} && ((uintptr_t)({ptr} + j) & {4 * vw - 1}); ++j) {{\n{body}  }}\n"


def over_token_groups(split: str, call: str) -> str:
    """The entry's loop over ``tokens`` tokens by ``G`` groups, closing the entry: nested (``split``
    ``"tokens"``: each iteration of the parallel loop a whole token) or flat over the pairs (a single
    token still spreads over the threads). ``call`` runs one group, with ``{t}`` and ``{g}``."""
    if split == "tokens":
        return ("  for (int t = 0; t < tokens; ++t)\n    for (int g = 0; g < G; ++g)\n"
                f"      {call.format(t='t', g='g')}\n}}\n")
    return ("  for (long w = 0; w < (long)tokens * G; ++w)\n"
            f"    {call.format(t='(int)(w / G)', g='(int)(w % G)')}\n}}\n")


def parallel_for(threads: int, schedule: str, chunk: int) -> str:
    """The ``omp parallel for`` line of the entry's loop; nothing on one thread."""
    if threads <= 1:
        return ""
    return f"  #pragma omp parallel for num_threads({threads}) schedule({schedule}, {chunk})\n"
