"""machine_code edits inside Triton's compile: Triton -> its PTX -> edits -> its ptxas -> cubin.

Triton compiles a ``@triton.jit`` function at its first launch for each specialisation (argument
types, alignments), in the compile processes of :mod:`core.backends.triton_aot` or in the sandbox.
Two pieces make each of those compiles apply a module's edits:

* :func:`attach` -- once a generated module carrying edits (:mod:`.carry`) is imported, every
  ``@triton.jit`` function it launches (under any autotune/heuristics wrappers) is launched with the
  compile option ``ir_override="abebot-ptx-edits:[...]"``. The option is part of Triton's cache key,
  so an edited kernel is filed apart from the unedited one and from other edit lists, and the
  sandbox's JIT finds what the compile processes built. (Triton reads ``ir_override`` as a file name
  only when it ends in ``.ptx``/``.ttir``...; ours never does.)
* :func:`install` -- a pipeline-stages hook (``triton.knobs.runtime.add_stages_inspection_hook``)
  that wraps the ``ptx`` stage of a compile whose ``ir_override`` holds edits: Triton's PTX goes
  through :func:`.apply.apply_edits`, and the ``cubin`` stage (Triton's own ptxas) assembles the
  result. A ptxas failure is Triton's ``PTXASError``, which :class:`core.backends.triton.TritonKernel`
  reports as a compile error. The edit counts land in the kernel's metadata (``abebot_ptx_edits``).
"""
from __future__ import annotations

import json
from typing import Any

from core.backends.ptx.apply import apply_edits, summary

MARK = "abebot-ptx-edits:"
_installed: list = []


def marker(edits) -> str:
    """The ``ir_override`` value that carries ``edits``."""
    return MARK + json.dumps(list(edits), separators=(",", ":"))


def edits_of(options: Any) -> tuple[str, ...]:
    """The edits a compile's options carry, () when none."""
    value = getattr(options, "ir_override", None)
    return tuple(json.loads(value[len(MARK):])) if isinstance(value, str) and value.startswith(MARK) else ()


def install() -> None:
    """Hook the PTX stage of every Triton compile in this process (once; an earlier hook still runs)."""
    if _installed:
        return
    from triton import knobs

    previous = knobs.runtime.add_stages_inspection_hook

    def hook(backend, stages, options, language, capability):
        if previous is not None:
            previous(backend, stages, options, language, capability)
        edits = edits_of(options)
        if edits and "ptx" in stages:
            stages["ptx"] = _edited_stage(stages["ptx"], edits)

    knobs.runtime.add_stages_inspection_hook = hook
    _installed.append(hook)


def _edited_stage(make_ptx, edits):
    def stage(src, metadata):
        edited, report = apply_edits(make_ptx(src, metadata), edits)
        metadata["abebot_ptx_edits"] = {**summary(report), "report": [[o.edit, o.status, o.detail] for o in report]}
        return edited
    return stage


def attach(module: Any, edits) -> int:
    """Launch every ``@triton.jit`` function of ``module`` with the edits' compile option; returns how
    many functions were wrapped."""
    from triton.runtime.jit import JITFunction, KernelInterface

    install()
    value, done = marker(edits), 0
    for obj in list(vars(module).values()):
        for _ in range(8):  # Autotuner -> Heuristics -> JITFunction
            if isinstance(obj, JITFunction):
                if "run" not in vars(obj) and getattr(obj.fn, "__module__", None) == module.__name__:  # its own only
                    obj.run = _run_with(obj, value)
                    done += 1
                break
            if not isinstance(obj, KernelInterface):
                break
            obj = getattr(obj, "fn", None)
    return done


def _run_with(fn: Any, value: str):
    def run(*args, **kwargs):
        if kwargs.get("ir_override") is None:
            kwargs["ir_override"] = value
        return type(fn).run(fn, *args, **kwargs)  # the class's run at call time (compile-only processes patch it)
    return run
