"""``python -m core library verify DIR``: every entry re-checked and re-timed on this machine's device.

Per entry, in this order, the first failure is the entry's verdict:

1. its source and artefact match their sha256 in the manifest (``tampered``);
2. its backend runs here and this device has the entry's architecture (``other arch``; an entry of
   another device *name* with the same arch is verified: that is the dispatcher's third lookup);
3. the source, compiled here, passes the evolution's verification on fresh inputs (the sandboxed
   protocol: poisoned outputs, guard zones, several shapes; ``wrong result`` with its cause);
4. it is timed as the evolution times it (cold cache by default), in interleaved pairs with the
   fastest baseline and with every other baseline that verifies: its speed-up over the fastest.
   With ``min_speedup`` an entry slower than that is a failure too (``slow``).

Timing runs under the device lock of the runs folder, like ``bench``; compiles go to a temporary cache.
"""
from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Callable

from core.library.manifest import Entry, Library, device_record


def _row(entry: Entry, **fields) -> dict:
    f = entry.figures or {}
    return {"id": entry.id, "op": entry.op, "fmt": entry.fmt, "N": entry.shape["N"], "K": entry.shape["K"],
            "M": entry.shape["M"], "backend": entry.backend, "stored_us": f.get("time_us"),
            "stored_speedup": f.get("speedup"), "time_us": None, "speedup": None, "fastest": None,
            "baselines": {}, "ok": False, "verdict": "", **fields}


def this_device(backend: str, device: int) -> tuple[dict | None, str]:
    """(the device record of ``backend``'s device ``device`` here, "") or (None, why it cannot run)."""
    from core.backends import availability, backend_class

    reason = availability(backend)
    if reason:
        return None, f"backend {backend} unavailable here: {reason}"
    cls = backend_class(backend)
    devices = cls.devices()
    if not 0 <= device < len(devices):
        return None, f"backend {backend} has no device {device} here"
    d = devices[device]
    return device_record(d.name, d.arch, cls.device_kind, d.versions), ""


def kernel_source(entry: Entry, root: Path):
    """The entry's kept source as the backend compiles it: ``launch`` holds the template's launch
    parameters plus ``entry`` and ``flags``; the static resources are in the provenance."""
    from core.backends.base import KernelSource

    launch = {k: v for k, v in (entry.launch or {}).items() if k not in ("entry", "flags")}
    return KernelSource(backend=entry.backend, source=entry.source_path(root).read_text(),
                        entry=str(entry.launch.get("entry", "")), flags=tuple(entry.launch.get("flags") or ()),
                        launch=launch, resources=dict((entry.provenance or {}).get("resources") or {}))


def measure(entry: Entry, root: Path, device: int, cache_dir: Path, log: Callable[[str], None]) -> dict:
    """Verify and time ``entry``'s source here: {"ok", "cause", "time_us", "speedup", "fastest", "baselines"}."""
    from core.config import RunConfig
    from core.evaluation.cluster import make_evaluator

    cfg = RunConfig.from_dict({"workload": entry.op, "backend": entry.backend, "device": device,
                               "problem": entry.problem, "population": 2, "elites": 0, "generations": 1})
    kernel = kernel_source(entry, root)
    evaluator = make_evaluator(cfg, cache_dir, log=lambda line: None, log_path=cache_dir / "verify-sandbox.log")
    try:
        record = evaluator.start()
        ev = next(iter(evaluator.evaluate_everywhere(kernel).values()))
        if not ev.ok:
            return {"ok": False, "cause": f"{ev.status}: {ev.cause}"}
        times = {n: b["time_us"] for n, b in record["baselines"].items() if b.get("verified") and b.get("time_us")}
        speedups = {record["primary"]: ev.speedup} if ev.speedup else {}
        for name in times:
            if name not in speedups:
                reply = evaluator.pair(kernel, name)
                if reply.get("status") == "ok" and reply.get("speedup"):
                    speedups[name] = reply["speedup"]
                else:
                    log(f"{entry.id}: no pairs with {name}: {reply.get('status')}: {reply.get('cause')}")
    finally:
        evaluator.close()
    baselines = {n: {"time_us": t, "speedup": speedups.get(n, t / ev.time_us), "paired": n in speedups}
                 for n, t in times.items()}
    fastest = min(times, key=times.get) if times else None
    return {"ok": True, "cause": "", "time_us": ev.time_us, "fastest": fastest, "baselines": baselines,
            "speedup": baselines[fastest]["speedup"] if fastest else None, "cache": getattr(ev, "cache", None)}


def verify_entry(entry: Entry, root: Path, runs_dir: Path, device: int, cache_dir: Path,
                 min_speedup: float | None, log: Callable[[str], None]) -> dict:
    """One row of the table: the entry's stored and measured figures and its verdict."""
    from core.run.device_lock import hold_device

    why = entry.verify_files(root)
    if why:
        return _row(entry, verdict=f"tampered: {why}")
    here, reason = this_device(entry.backend, device)
    if here is None:
        return _row(entry, verdict=f"cannot run: {reason}")
    if here["arch"] != entry.device.get("arch"):
        return _row(entry, verdict=f"other arch: built for {entry.device.get('arch')}, this device is {here['arch']}")
    log(f"verifying {entry.id} on {here['name']}")
    with hold_device(runs_dir, entry.backend, device, f"library verify of {entry.id}"):
        got = measure(entry, root, device, cache_dir, log)
    if not got["ok"]:
        return _row(entry, verdict=f"wrong result: {got['cause']}")
    row = _row(entry, **{k: got[k] for k in ("time_us", "speedup", "fastest", "baselines")}, ok=True, verdict="ok",
               device=here["name"])
    if min_speedup is not None and (row["speedup"] or 0) < min_speedup:
        row.update(ok=False, verdict=f"slow: {row['speedup']:.3f}x {row['fastest']} < {min_speedup}x")
    return row


def verify_library(lib: Library, root: Path, runs_dir: Path, device: int = 0, min_speedup: float | None = None,
                   log: Callable[[str], None] = print) -> list[dict]:
    """Every entry of ``lib`` verified (:func:`verify_entry`), in manifest order."""
    with tempfile.TemporaryDirectory(prefix="abebot-libverify-") as cache:
        return [verify_entry(e, root, runs_dir, device, Path(cache), min_speedup, log) for e in lib.entries]


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def format_rows(rows: list[dict]) -> str:
    """The verify table, then the geometric-mean speed-up per op and the count of failures."""
    head = f"{'entry':58s} {'stored us':>9s} {'now us':>9s} {'speed-up':>9s} {'vs':24s} verdict"
    lines = [head]
    for r in rows:
        lines.append(f"{r['id'][:58]:58s} {_num(r['stored_us'], '9.2f')} {_num(r['time_us'], '9.2f')} "
                     f"{_num(r['speedup'], '8.3f')}x {str(r['fastest'] or '-')[:24]:24s} {r['verdict']}")
    by_op: dict[str, list[float]] = {}
    for r in rows:
        if r["ok"] and r["speedup"]:
            by_op.setdefault(r["op"], []).append(r["speedup"])
    for op, values in by_op.items():
        lines.append(f"geometric-mean speed-up of {op} over its fastest baseline: "
                     f"{statistics.geometric_mean(values):.3f}x ({len(values)} entries)")
    failed = sum(not r["ok"] for r in rows)
    lines.append(f"{len(rows) - failed} of {len(rows)} entries verified" + (f"; {failed} FAILED" if failed else ""))
    return "\n".join(lines)
