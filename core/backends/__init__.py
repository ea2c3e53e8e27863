"""Backend registry. ``c`` always exists; ``cuda`` and ``triton`` need a CUDA GPU."""
from __future__ import annotations

import importlib

from core.backends.base import Backend, BackendUnavailable, DeviceInfo

BACKENDS: dict[str, str] = {
    "c": "core.backends.c:CBackend",
    "cuda": "core.backends.cuda:CudaBackend",
    "triton": "core.backends.triton:TritonBackend",
}


ENTRY_POINT_GROUP = "abebot.backends"


def load_entry_points(registry: dict[str, str], group: str) -> dict[str, str]:
    """Add the ``group`` entry points of installed packages to ``registry`` (built-in names win).
    A broken entry point is skipped with one warning naming it, never an import-time crash."""
    import logging
    from importlib import metadata

    try:
        eps = metadata.entry_points(group=group)
    except Exception as exc:  # noqa: BLE001 -- broken package metadata must not take AbeBot down
        logging.getLogger(__name__).warning("abebot: cannot read entry points %r: %s", group, exc)
        return registry
    for ep in eps:
        try:
            name, value = str(ep.name), str(ep.value)
            module, sep, attr = value.partition(":")
            if not name or not sep or not module.strip() or not attr.strip():
                raise ValueError(f"{value!r} is not 'module:attribute'")
        except Exception as exc:  # noqa: BLE001
            logging.getLogger(__name__).warning("abebot: ignoring broken %s entry point %r: %s",
                                                group, getattr(ep, "name", ep), exc)
            continue
        registry.setdefault(name, f"{module.strip()}:{attr.strip()}")
    return registry


load_entry_points(BACKENDS, ENTRY_POINT_GROUP)


def backend_class(name: str) -> type[Backend]:
    """The backend class for ``name``; ValueError for an unknown name. A class that does not exist
    raises ImportError naming the backend and its entry (:func:`availability` reports it)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r} (choose from: {', '.join(BACKENDS)})")
    module, cls = BACKENDS[name].split(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"backend {name!r} ({BACKENDS[name]}) cannot be loaded: {type(exc).__name__}: {exc}") from exc


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


__all__ = ["BACKENDS", "ENTRY_POINT_GROUP", "load_entry_points", "Backend", "BackendUnavailable", "DeviceInfo", "all_devices", "availability", "backend_class", "make_backend"]
