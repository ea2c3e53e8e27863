"""The quick check a library entry passes on this device before its first use, and its memory.

:func:`check_kernel` runs a loaded kernel once on every verification shape of its workload
problem (the entry's own shape and the odd shapes the evolution verified it on): fresh random
inputs drawn as the workload draws them, outputs poisoned with NaN inside guard zones, the
template's repack where it has one, then every output against the workload's float64 reference
with the workload's tolerance, the guards intact and the inputs unchanged. It is the evaluation
protocol's verification in small (``core.evaluation`` is a layer above this package, so it is
written here again against the same workload and array APIs), without the timing.

:class:`VerifiedCache` remembers the outcome by artefact hash and device, in memory and in a small
JSON file (``$ABEBOT_CACHE_DIR/library_verified.json``, default ``~/.cache/abebot/``), so a process
checks an artefact once and later processes not at all.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

SEED = 20261203


def check_kernel(workload: Any, template_for: Any, runtime: Any, kernel: Any, problem: dict,
                 shapes: list[dict] | None = None) -> str | None:
    """None when ``kernel`` is right on every verification shape of ``problem`` (or on ``shapes``),
    else why not (one line). ``template_for(shape)`` gives the workload's template for that shape."""
    arrays = runtime.arrays
    for index, shape in enumerate(shapes if shapes is not None else workload.shapes(problem)):
        template = template_for(shape)
        why = _check_shape(workload, template, runtime, arrays, kernel, {**problem, **shape}, shape, SEED + index)
        if why:
            return f"shape {shape}: {why}"
    return None


def _check_shape(workload: Any, template: Any, runtime: Any, arrays: Any, kernel: Any, problem: dict, shape: dict,
                 seed: int) -> str | None:
    gen = arrays.generator(seed)
    tensors = workload.tensors(problem)
    data, flats, pristine = {}, {}, {}
    for t in tensors:
        dims, dtype = t.shape(shape), t.dtype_in(problem)
        if t.read:
            pristine[t.name] = t.init.draw(arrays, dims, dtype, gen, shape)
        if t.written:
            flats[t.name], data[t.name] = arrays.poisoned(dims, dtype)
            if t.read:
                arrays.copy_into(data[t.name], pristine[t.name])
        else:
            data[t.name] = arrays.clone(pristine[t.name])
    expected = workload.reference(arrays.xp, {n: arrays.float64(x) for n, x in pristine.items()}, problem)
    weights = {name: arrays.clone(pristine[name]) for name in workload.weights(problem)}
    packed = template.repack(kernel, arrays, weights, dict(shape)) if weights else {}
    template.bind(kernel, {**data, **packed}, dict(shape))()
    runtime.synchronize()
    for t in tensors:
        if t.written and not arrays.guards_intact(flats[t.name]):
            return f"wrote outside {t.name!r}"
        if not t.written and not arrays.same_bits(data[t.name], pristine[t.name]):
            return f"changed its input {t.name!r}"
    for t in tensors:
        if t.written:
            atol, rtol = workload.tolerance(t.dtype_in(problem), shape)
            res = arrays.compare(data[t.name], expected[t.name], atol, rtol)
            if not res.ok:
                return f"{t.name}: {res.cause}: {res.detail}"
    return None


def default_cache_path() -> Path:
    """``$ABEBOT_CACHE_DIR/library_verified.json``, else ``~/.cache/abebot/library_verified.json``."""
    root = os.environ.get("ABEBOT_CACHE_DIR") or str(Path.home() / ".cache" / "abebot")
    return Path(root) / "library_verified.json"


class VerifiedCache:
    """Outcomes of :func:`check_kernel` by (artefact hash, device name): ``None`` for "passed", a
    reason for "failed". ``path`` None keeps them in memory only. A file that cannot be read or
    written is ignored (the check runs again), never an error."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else None
        self._memory: dict[str, dict] = {}
        self._loaded = False

    @staticmethod
    def key(artefact_hash: str, device_name: str) -> str:
        return f"{artefact_hash}|{device_name}"

    def get(self, key: str) -> dict | None:
        """``{"ok": bool, "detail": str, "time": float}`` remembered for ``key``, or None."""
        self._load()
        return self._memory.get(key)

    def put(self, key: str, why: str | None) -> None:
        self._load()
        self._memory[key] = {"ok": why is None, "detail": why or "", "time": time.time()}
        self._save()

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self.path is None:
            return
        try:
            raw = json.loads(self.path.read_text())
            if isinstance(raw, dict):
                self._memory.update({k: v for k, v in raw.items() if isinstance(v, dict) and "ok" in v})
        except (OSError, ValueError):
            pass

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".verified.", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump(self._memory, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError:
            pass
