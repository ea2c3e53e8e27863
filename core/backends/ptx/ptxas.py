"""Finding and running ptxas: edited PTX assembled for the device's architecture.

ptxas needs no GPU. It is looked for in ``$ABEBOT_PTXAS``, then on ``PATH``, in ``$CUDA_HOME/bin``
(``$CUDA_PATH``, ``/usr/local/cuda``), in the ``nvidia-cuda-nvcc`` wheel, and last beside Triton (which
bundles one: ``triton/backends/nvidia/bin/ptxas``): a toolkit's ptxas is likelier to know the PTX
version its NVRTC writes.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from importlib import util
from pathlib import Path


@functools.lru_cache(maxsize=1)
def find_ptxas() -> str | None:
    """The path of a ptxas binary, or None when there is none on this machine."""
    candidates = [os.environ.get("ABEBOT_PTXAS", ""), shutil.which("ptxas") or ""]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(str(Path(home) / "bin" / "ptxas"))
    for package, where in (("nvidia", ("cuda_nvcc", "bin", "ptxas")), ("triton", ("backends", "nvidia", "bin", "ptxas"))):
        try:
            spec = util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            candidates.append(str(Path(root).joinpath(*where)))
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


class PtxasError(Exception):
    """ptxas refused the PTX; ``str(err)`` is its log."""


def ptx_arch(arch: str, ptx: str) -> str:
    """The ``-arch`` for ptxas: the device's ``sm_XY``, with the ``a`` suffix when the PTX targets it."""
    target = next((line.split()[1] for line in ptx.splitlines() if line.strip().startswith(".target")), "")
    return target.split(",")[0] if target.rstrip("a") == arch.rstrip("a") and target.endswith("a") else arch


def assemble(ptx: str, arch: str, options: tuple[str, ...] = ("-v",), timeout_s: float = 120.0) -> tuple[bytes, str]:
    """(cubin, ptxas log) of ``ptx`` for ``arch`` (``sm_90``/``sm_90a``); PtxasError with the log on failure,
    FileNotFoundError when there is no ptxas."""
    exe = find_ptxas()
    if exe is None:
        raise FileNotFoundError("no ptxas found ($ABEBOT_PTXAS, triton's bundle, PATH, $CUDA_HOME/bin)")
    with tempfile.TemporaryDirectory(prefix="abebot-ptxas-") as tmp:
        src, out = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        res = subprocess.run([exe, f"-arch={ptx_arch(arch, ptx)}", *options, str(src), "-o", str(out)],
                             capture_output=True, text=True, timeout=timeout_s)
        log = (res.stdout + res.stderr).strip()
        if res.returncode != 0 or not out.exists():
            raise PtxasError(log[-8000:] or f"ptxas exited {res.returncode}")
        return out.read_bytes(), log
