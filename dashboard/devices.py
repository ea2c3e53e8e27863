"""Target devices for the launch form: every device of every backend that can run here."""
from __future__ import annotations

import functools

from core.backends import BACKENDS, all_devices, availability

BACKEND_TITLES = {"c": "CPU · C", "cuda": "CUDA C", "triton": "Triton"}


def _label(d) -> str:
    title = BACKEND_TITLES.get(d.backend, d.backend)
    mem = f"{d.memory_bytes / 2**30:.0f} GiB" if d.memory_bytes else "? GiB"
    units = "cores" if d.backend == "c" else "SMs"
    return f"{title} · {d.backend}:{d.index} {d.name} ({mem}, {d.multiprocessors} {units})"


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
    if not any(c["backend"] == "c" for c in choices):
        choices.insert(0, {"backend": "c", "index": 0, "label": "CPU · C · c:0"})
    return choices, unavailable
