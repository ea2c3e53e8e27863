"""A call's dispatch key, and the lookup order over a library's entries.

The key of a problem is :func:`core.library.models.entry_key` -- the one convention the build tool
writes entries with -- plus the device: (op, fmt, N, K, M, device name). :func:`choose` applies the
lookup order of the library format (docs/library.md) to the entries of one backend kind:

1. ``exact`` -- this device's name, the same (op, fmt, N, K) and M equal to the entry's bucket;
2. ``nearest`` -- this device's name, the nearest M bucket: the smallest bucket >= M, else the largest;
3. ``arch`` -- another device of the same architecture, by the same nearest-bucket rule;
4. none: the native path.

An entry of another architecture is never chosen.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from core.library.models import entry_key

#: the problem setting that is M, per op the runtime serves (its token count)
M_PARAM = {"rmsnorm": "rows", "rope": "tokens", "silu_mul": "tokens", "w4a16": "m", "rmsnorm_w4a16": "m",
           "attention_decode": "queries"}


@dataclass(frozen=True)
class CallKey:
    """The dispatch key of one call: (op, fmt, N, K, M) and the device it runs on."""

    op: str
    fmt: str
    N: int
    K: int
    M: int
    device: str
    arch: str

    def as_miss(self) -> dict:
        """The miss record's fields (``misses.jsonl``), without the time."""
        return {"op": self.op, "fmt": self.fmt, "N": self.N, "K": self.K, "M": self.M, "device": self.device,
                "arch": self.arch}


def call_key(op: str, problem: dict, device: str, arch: str) -> CallKey:
    """The key of ``op`` on ``problem`` on the device named ``device`` of architecture ``arch``."""
    fmt, n, k, m = entry_key(op, problem)
    return CallKey(op, fmt, n, k, m, device, arch)


def nearest_bucket(buckets: Iterable[int], m: int) -> int | None:
    """The smallest bucket >= ``m``, else the largest; None when there are none."""
    buckets = list(buckets)
    if not buckets:
        return None
    above = [b for b in buckets if b >= m]
    return min(above) if above else max(buckets)


def choose(entries: Iterable[Any], key: CallKey, refused: frozenset[str] = frozenset()) -> tuple[str, Any]:
    """(how, entry): how is ``exact``, ``nearest`` or ``arch``; ("native", None) when no entry serves
    ``key``. ``entries`` are manifest entries (:class:`core.library.manifest.Entry`) of backends that
    run on this kind of device; those whose id is in ``refused`` are skipped."""
    same = [e for e in entries if e.id not in refused and e.op == key.op and e.fmt == key.fmt
            and e.shape["N"] == key.N and e.shape["K"] == key.K and e.device.get("arch") == key.arch]
    here = [e for e in same if e.device.get("name") == key.device]
    for how, pool in (("nearest", here), ("arch", [e for e in same if e.device.get("name") != key.device])):
        bucket = nearest_bucket((e.shape["M"] for e in pool), key.M)
        if bucket is None:
            continue
        picked = sorted((e for e in pool if e.shape["M"] == bucket), key=_speed)[0]
        if how == "nearest" and bucket == key.M:
            how = "exact"
        return how, picked
    return "native", None


def _speed(entry: Any) -> tuple:
    """Fastest first among entries of one key (several backends may serve it), then by id."""
    figures = entry.figures or {}
    time_us = figures.get("time_us")
    return (time_us if isinstance(time_us, (int, float)) else float("inf"), entry.id)
