"""The launches a backend compiles ahead of time: one per shape the protocol will launch.

A backend that specialises at the real call (Triton) compiles each of these in its compile
processes before the sandbox runs the kernel. They are built here, where workloads are known, and
handed down as a picklable callable, so that ``core/backends/`` never imports a workload.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

Launches = Callable[[Callable[[], Any]], Iterator[tuple[tuple, Callable[[], Any]]]]


def workload_launches(workload: str, backend: str, problem: dict, device: Any) -> Launches:
    """A picklable ``launches(load)``: given ``load()`` (a fresh kernel module each call), it
    yields ``(shape, launch)`` for every shape of ``problem``, bound on CPU tensors of the sizes
    and alignment the sandbox will use."""
    return functools.partial(_launches, workload, backend, dict(problem), device)


def _launches(workload: str, backend: str, problem: dict, device: Any,
              load: Callable[[], Any]) -> Iterator[tuple[tuple, Callable[[], Any]]]:
    import torch

    from core.backends.torch_arrays import torch_dtype
    from core.workloads import get_workload

    wl = get_workload(workload)
    template = wl.template(backend, problem, device)
    for shape in wl.shapes(problem):
        tensors = {t.name: torch.empty(t.shape(shape), dtype=torch_dtype(t.dtype_in(problem)))
                   for t in wl.tensors(problem)}
        yield shape, template.bind(load(), tensors, shape)
