"""Backend registry. ``c`` always exists; ``cuda`` and ``triton`` need a CUDA GPU."""
from __future__ import annotations

import importlib

from core.backends.base import Backend, BackendUnavailable, DeviceInfo

BACKENDS: dict[str, str] = {
    "c": "core.backends.c:CBackend",
    "cuda": "core.backends.cuda:CudaBackend",
    "triton": "core.backends.triton:TritonBackend",
}


def backend_class(name: str) -> type[Backend]:
    """The backend class for ``name``; ValueError for an unknown name."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r} (choose from: {', '.join(BACKENDS)})")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def availability(name: str) -> str | None:
    """None when ``name`` can run here, else why not."""
    try:
        return backend_class(name).availability()
    except ImportError as exc:  # a backend module failing to import is "unavailable", not a crash
        return f"cannot import: {exc}"


def all_devices() -> list[DeviceInfo]:
    """Every device of every available backend (the launch form's target list)."""
    out: list[DeviceInfo] = []
    for name in BACKENDS:
        if availability(name) is None:
            out.extend(backend_class(name).devices())
    return out


def make_backend(name: str, device_index: int = 0) -> Backend:
    """An instance for ``device_index``; BackendUnavailable with the reason when it cannot run."""
    cls = backend_class(name)
    return cls(device_index)


__all__ = ["BACKENDS", "Backend", "BackendUnavailable", "DeviceInfo", "all_devices", "availability", "backend_class", "make_backend"]
