"""CUDA C with machine_code edits: NVRTC -> PTX -> edits -> ptxas -> cubin.

:func:`compile_edited` is what :func:`core.backends.cuda.nvrtc_compile` does for a source that
carries edits (:mod:`.carry`): NVRTC compiles for the virtual architecture (``compute_XY``) to PTX,
:func:`.apply.apply_edits` edits it, ptxas assembles it for the device's ``sm_XY`` with ``-v`` (its
resource report feeds ``core.backends.cuda.parse_ptxas`` as for any kernel). The log ends with one
line per edit (applied, noop or refused, and why) and a summary line. Invalid edited PTX is a
CompileError with ptxas's log: the candidate's lethal cause ``compile_error``.
"""
from __future__ import annotations

import re

from core.backends.base import CompileError
from core.backends.ptx import ptxas
from core.backends.ptx.apply import apply_edits, summary

_ARCH = re.compile(r"^--gpu-architecture=(?:sm|compute)_(\w+)$|^-arch=(?:sm|compute)_(\w+)$")
_PTX_VERSION = re.compile(r"Unsupported \.version (\d+\.\d+); current version is '(\d+\.\d+)'")


def nvrtc_ptx(source: str, name: str, options: list[str]) -> tuple[str, str]:
    """(PTX text, NVRTC log) through CuPy's NVRTC binding; CompileError with the log on failure."""
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            raise CompileError((log or str(exc))[-8000:]) from None
        ptx = nvrtc.getPTX(prog)
        return (ptx.decode() if isinstance(ptx, bytes) else ptx).rstrip("\0"), nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


def split_arch(options: list[str]) -> tuple[str, list[str], tuple[str, ...]]:
    """(the ``sm_XY`` the options target, the options for a PTX compile to ``compute_XY``, the options
    NVRTC would have passed on to ptxas: ``--ptxas-options`` and ``--maxrregcount``)."""
    arch, rest, to_ptxas = "", [], ["-v"]
    for opt in options:
        m = _ARCH.match(opt)
        if m:
            arch = "sm_" + (m.group(1) or m.group(2))
        elif opt.startswith("--ptxas-options="):
            to_ptxas += [o for o in re.split(r"[,\s]+", opt.split("=", 1)[1]) if o and o not in to_ptxas]
        else:
            rest.append(opt)
            if re.match(r"^-{1,2}maxrregcount=\d+$", opt):
                to_ptxas.append("-maxrregcount=" + opt.split("=")[1])
    if not arch:
        raise CompileError("machine_code edits: no --gpu-architecture among the compile options")
    return arch, [f"--gpu-architecture=compute_{arch[3:]}", *rest], tuple(to_ptxas)


def assemble(ptx: str, arch: str, options: tuple[str, ...] = ("-v",)) -> tuple[bytes, str]:
    """ptxas; a PTX version newer than this ptxas knows is lowered to its own once, and the log says so."""
    try:
        return ptxas.assemble(ptx, arch, options)
    except FileNotFoundError as exc:
        raise CompileError(f"machine_code edits need ptxas: {exc}") from None
    except ptxas.PtxasError as exc:
        m = _PTX_VERSION.search(str(exc))
        if not m:
            raise CompileError(f"ptxas refused the edited PTX:\n{exc}") from None
        lowered = re.sub(r"^\.version\s+\S+", f".version {m.group(2)}", ptx, count=1, flags=re.MULTILINE)
        try:
            cubin, log = ptxas.assemble(lowered, arch, options)
        except ptxas.PtxasError as again:
            raise CompileError(f"ptxas refused the edited PTX:\n{again}") from None
        return cubin, f"PTX .version {m.group(1)} lowered to {m.group(2)}, what this ptxas knows\n{log}"


def compile_edited(source: str, name: str, options: list[str], edits) -> tuple[bytes, str]:
    """(cubin, log) of CUDA C ``source`` with ``edits`` applied to its PTX."""
    arch, ptx_options, ptxas_options = split_arch(options)
    text, nvrtc_log = nvrtc_ptx(source, name, ptx_options)
    edited, report = apply_edits(text, edits)
    cubin, log = assemble(edited, arch, ptxas_options)
    lines = [f"machine_code {o.status}: {o.edit} ({o.detail})" for o in report]
    counts = summary(report)
    lines.append(f"machine_code: {counts['applied']} applied, {counts['noop']} noop, {counts['refused']} refused")
    return cubin, "\n".join([nvrtc_log.strip(), log, *lines]).strip()
