"""Target devices for the launch form: every device of every backend that can run here."""
from __future__ import annotations

import functools

from core.backends import BACKENDS, all_devices, availability, backend_class


def _label(d) -> str:
    cls = backend_class(d.backend)
    mem = f"{d.memory_bytes / 2**30:.0f} GiB" if d.memory_bytes else "? GiB"
    units = "cores" if cls.device_kind == "cpu" else "SMs"
    return f"{cls.title} · {d.backend}:{d.index} {d.name} ({mem}, {d.multiprocessors} {units})"


def _is_cpu(name: str) -> bool:
    try:
        return backend_class(name).device_kind == "cpu"
    except ImportError:  # a backend that cannot even import is listed as unavailable, not offered
        return False


@functools.lru_cache(maxsize=1)
def device_choices() -> tuple[list[dict], dict[str, str]]:
    """([{backend, index, label}], {unavailable backend: reason}); probed once per dashboard process."""
    unavailable = {name: why for name in BACKENDS if (why := availability(name))}
    try:
        found = all_devices()
    except Exception as exc:  # a broken driver must not take the form down
        unavailable["probe"] = str(exc)
        found = []
    choices = [{"backend": d.backend, "index": d.index, "label": _label(d)} for d in found]
    # The CPU is always offered, even when probing found nothing, so the form can launch a run.
    listed = {c["backend"] for c in choices}
    cpu = [name for name in BACKENDS if name not in listed and _is_cpu(name)]
    choices[:0] = [{"backend": name, "index": 0, "label": f"{backend_class(name).title} · {name}:0"} for name in cpu]
    return choices, unavailable
