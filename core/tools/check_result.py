"""What ``core check`` reports: the result as plain data, its rooflines and tolerances, and the
plain-text report printed by the CLI."""
from __future__ import annotations

import json
import math
from typing import Any

from core.backends.base import KernelSource


def rooflines(baseline: dict, min_bytes: float | None, flops: float | None, time_us: float | None) -> dict:
    """The memory floor (fewest bytes / measured bandwidth) and compute floor (operations / measured
    peak rate) of one call, the roofline (the larger), the protocol's ``suspect`` threshold (which an
    empty launch, where timed, also bounds), and the kernel's share of the roofline in percent
    (roofline / time). None where a number is unknown."""
    peaks = baseline.get("peaks") or {}
    bandwidth, rate = peaks.get("bandwidth_bytes_per_s"), peaks.get("flops_per_s")
    memory = min_bytes / bandwidth * 1e6 if (bandwidth and min_bytes) else None
    compute = flops / rate * 1e6 if (rate and flops) else None
    floors = [v for v in (memory, compute) if v is not None]
    roofline = max(floors) if floors else _positive(baseline.get("roofline_us"))
    bound = None
    if floors:
        bound = "compute" if roofline == compute else "memory"
    return {"memory_us": memory, "compute_us": compute, "roofline_us": roofline, "bound": bound,
            "suspect_below_us": _positive(baseline.get("floor_us")),
            "empty_launch_us": _positive(baseline.get("launch_us")),
            "percent": roofline / time_us * 100.0 if (roofline and time_us) else None,
            "bandwidth_bytes_per_s": bandwidth, "flops_per_s": rate}


def _positive(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return float(v) if ok else None


def result_dict(checker: Any, kernel: KernelSource, ev: Any, path: str = "") -> dict:
    """What ``check`` reports of ``checker`` (a :class:`core.tools.check.Checker`), as plain data (JSON-serialisable)."""
    b = checker.baseline or {}
    record = {k: v for k, v in ev.to_dict().items() if k not in ("source", "genome_hash", "launch", "entry", "flags")}
    time_us = ev.time_us  # a rejected kernel's time, when it got that far, is shown too (its verdict says why)
    baselines = {}
    for name, e in (b.get("baselines") or {}).items():
        t = e.get("time_us")
        baselines[name] = {"time_us": t, "spread_us": e.get("spread_us"), "verified": bool(e.get("verified")),
                           "cause": e.get("cause", ""),
                           "speedup": (t / time_us) if (t and time_us) else None}
        if name == b.get("primary") and getattr(ev, "speedup", None):  # timed beside the kernel, in pairs
            baselines[name]["speedup"] = ev.speedup
    return {
        "verdict": ev.status, "ok": ev.ok, "status": ev.status, "cause": ev.cause,
        "workload": checker.config.workload, "backend": checker.config.backend, "problem": dict(checker.problem),
        "device": checker.evaluator.backend.device.label() if checker.evaluator else "", "kernel": path,
        "entry": kernel.entry, "launch": jsonable(kernel.launch), "flags": list(kernel.flags),
        "time_us": ev.time_us, "time_spread_us": ev.time_spread_us, "stability": ev.stability,
        "memory_bytes": ev.memory_bytes, "extra_bytes": ev.extra_bytes,
        "repack_us": getattr(ev, "repack_us", None), "repack_bytes": getattr(ev, "repack_bytes", None),
        "max_abs_err": ev.max_abs_err, "rel_err": ev.rel_err,
        "shape_errors": jsonable(getattr(ev, "shape_errors", None) or []),
        "tolerance": tolerances(checker.workload, checker.problem),
        "primary": b.get("primary"), "baselines": baselines, "shape": b.get("shape"),
        "roofline": rooflines(b, checker.min_bytes, checker.flops, ev.time_us),
        "sandbox_log": str(checker.log_path), "evaluation": jsonable(record),
        "cache": getattr(ev, "cache", None) or b.get("cache"), "noisy": getattr(ev, "noisy", None),
        "speedup": getattr(ev, "speedup", None),
    }


def add_independent(result: dict, reply: dict) -> dict:
    """``result`` with the second method's figures (:mod:`core.evaluation.crosscheck`): the kernel's
    and the primary baseline's times on rotated copies, each one's host overhead, the speed-up that
    gives and whether it disagrees with the paired one by more than 5%."""
    from core.evaluation.crosscheck import agreement

    if reply.get("status") != "ok":
        result["independent"] = {"status": reply.get("status"), "cause": reply.get("cause")}
        return result
    times, primary = reply["times_us"], result.get("primary")
    speedup = times[primary] / times["kernel"] if primary in times and times.get("kernel") else None
    result["independent"] = {"method": reply["method"], "copies": reply["copies"], "cold": reply["cold"],
                             "rotation_bytes": reply["rotation_bytes"], "llc_bytes": reply["llc_bytes"],
                             "times_us": times, "host_overhead_us": reply["host_overhead_us"], "speedup": speedup,
                             **agreement(result.get("speedup"), speedup)}
    return result


def tolerances(workload: Any, problem: dict) -> dict:
    """(atol, rtol) per verification shape (by its text) of the first written tensor's dtype."""
    out = next((t for t in workload.tensors(problem) if t.written), None)
    if out is None:
        return {}
    dtype = out.dtype_in(problem)
    return {fmt_shape(s): list(workload.tolerance(dtype, s)) for s in workload.shapes(problem)}


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def fmt_shape(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _num(v: Any, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def format_report(r: dict) -> str:
    """The plain-text report of a result dict."""
    lines = [f"check {r['workload']} on {r['backend']} ({r['device']}), problem {json.dumps(r['problem'])}",
             f"kernel {r['kernel'] or '(source)'}: entry {r['entry']}"]
    if r["ok"]:
        lines.append("verdict: ok")
    else:
        lines.append(f"verdict: REJECTED {r['status']}: {r['cause']}")
    lines.append("verification (worst error on each shape):")
    tol = r.get("tolerance") or {}
    if r["shape_errors"]:
        for e in r["shape_errors"]:
            shape = e.get("shape", {})
            key = fmt_shape(shape) if isinstance(shape, dict) else str(shape)
            extra = "  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                              for k, v in e.items() if k not in ("shape", "max_abs_err", "rel_err"))
            t = tol.get(key)
            lines.append(f"  {key:28s} max_abs_err {_sci(e.get('max_abs_err'))}  rel_err {_sci(e.get('rel_err'))}"
                         + (f"  (atol {t[0]:g}, rtol {t[1]:g})" if t else "") + (f"  {extra}" if extra else ""))
    elif not r["baselines"]:  # rejected by the static check or the compile, before anything ran
        lines.append("  not run: the kernel was rejected before verification")
    else:
        lines.append(f"  over every shape checked: max_abs_err {_sci(r['max_abs_err'])}  rel_err {_sci(r['rel_err'])}"
                     "  (the evaluator reported no per-shape errors)")
        for key, t in tol.items():
            lines.append(f"  {key:28s} tolerance atol {t[0]:g}, rtol {t[1]:g}")
    if r["time_us"] is not None:
        lines.append(f"time: median {r['time_us']:.2f} us, spread (IQR) {_num(r['time_spread_us'])} us"
                     f" on shape {fmt_shape(r['shape'] or {})}")
    else:
        lines.append("time: not measured (rejected before timing)")
    repack = repack_line(r)
    if repack:
        lines.append(repack)
    if not r["baselines"]:
        lines.append("baselines: not timed (the kernel failed before they would have been)")
        if r["status"] == "compile_error" and (r["evaluation"].get("compile_log") or ""):
            lines.append("compiler log:")
            lines += ["  " + ln for ln in r["evaluation"]["compile_log"].splitlines()]
        return "\n".join(lines)
    lines.append(f"{'baseline':24s} {'median us':>11s} {'spread us':>10s} {'kernel speed-up':>16s}")
    for name, b in sorted(r["baselines"].items(), key=lambda kv: kv[1]["time_us"] or math.inf):
        speed = f"{b['speedup']:.3f}x" if b["speedup"] else "-"
        mark = " (primary)" if name == r.get("primary") else ("" if b["verified"] else f" (not verified: {b['cause']})")
        lines.append(f"  {name:22s} {_num(b['time_us']):>11s} {_num(b['spread_us']):>10s} {speed:>16s}{mark}")
    lines += independent_lines(r)
    rf = r["roofline"]
    parts = []
    if rf["memory_us"] is not None:
        parts.append(f"memory {rf['memory_us']:.2f} us at {rf['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s")
    if rf["compute_us"] is not None:
        parts.append(f"compute {rf['compute_us']:.2f} us at {rf['flops_per_s'] / 1e9:.1f} GFLOP/s")
    if rf["suspect_below_us"] is not None:
        parts.append(f"suspect below {rf['suspect_below_us']:.2f} us")
    if rf["empty_launch_us"] is not None:
        parts.append(f"an empty launch {rf['empty_launch_us']:.2f} us")
    detail = f" ({'; '.join(parts)})" if parts else ""
    if rf["roofline_us"] is None:
        lines.append("roofline: unknown on this device (no measured bandwidth or peak)")
    elif rf["percent"] is not None:
        bound = f"{rf['bound']}-bound " if rf["bound"] else ""
        lines.append(f"roofline: {rf['percent']:.1f}% of the {bound}roofline {rf['roofline_us']:.2f} us{detail}")
    else:
        lines.append(f"roofline: {rf['roofline_us']:.2f} us{detail}")
    ev = r["evaluation"]
    if r["ok"] or r["stability"]:
        parts = [f"{k} {ev[k]:.3f}" for k in ("determinism", "steadiness", "error_margin") if ev.get(k) is not None]
        lines.append(f"stability: {r['stability']:.3f}" + (f" ({', '.join(parts)})" if parts else ""))
    if r["memory_bytes"] is not None:
        lines.append(f"memory: {r['memory_bytes']} bytes ({r['extra_bytes'] or 0} beyond inputs and outputs)")
    log = r["evaluation"].get("compile_log") or ""
    if r["status"] == "compile_error" and log:
        lines.append("compiler log:")
        lines += ["  " + ln for ln in log.splitlines()]
    if r["status"] in ("crashed", "timeout"):
        lines.append(f"sandbox log: {r['sandbox_log']}")
    return "\n".join(lines)


def independent_lines(r: dict) -> list[str]:
    """The cache policy, the paired speed-up and the second method's, with the warnings."""
    out = [f"cache: {r.get('cache') or '-'}; speed-up over {r.get('primary')} in interleaved pairs: "
           f"{_num(r.get('speedup'), 3)}x" + (" NOISY (the pair ratios spread over 10%)" if r.get("noisy") else "")]
    ind = r.get("independent")
    if ind and ind.get("times_us"):
        host = ind["host_overhead_us"].get("kernel")
        out.append(f"second method ({ind['method']}, {ind['copies']} copies, {ind['rotation_bytes'] / 1e6:.0f} MB "
                   f"rotated{'' if ind['cold'] else ', less than 2.5x the cache: partly warm'}): kernel "
                   f"{ind['times_us']['kernel']:.2f} us, {_num(ind.get('speedup'), 3)}x"
                   + (f"; host overhead {host:.1f} us a call" if host is not None else ""))
        if ind.get("disagree"):
            out.append(f"WARNING: the two methods disagree by {100 * abs(ind['methods_ratio'] - 1):.1f}% (over 5%)")
    elif ind:
        out.append(f"second method: {ind.get('status')}: {ind.get('cause')}")
    return out


def repack_line(r: dict) -> str:
    """The template's one-time weight repack (``repack_us``: median on the timed shape's cases, apart
    from the timed launches), or "" when the kernel reads the canonical layout. The repacked bytes
    are named when the record has them; they are counted in ``extra_bytes`` either way."""
    ev = r.get("evaluation") or {}
    us = r.get("repack_us", ev.get("repack_us"))
    if us is None:
        return ""
    nbytes = r.get("repack_bytes", ev.get("repack_bytes"))
    made = (f"{int(nbytes)} bytes of repacked weights" if isinstance(nbytes, (int, float)) and not isinstance(nbytes, bool)
            else "the repacked weights")
    return (f"repack: {us:.2f} us once per case (median on the timed shape), not in the time above;"
            f" {made} count in memory's extra bytes")


def _sci(v: Any) -> str:
    return "-" if v is None else f"{v:.3g}"
