"""The exported ``run_kernel.py``: one script for every workload x backend, generated from the spec.

An exported kernel folder holds ``kernel.json`` (workload, backend, problem and the rendered kernel)
and ``abebot/core/``, a copy of the AbeBot code that evaluated it. ``run_kernel.py`` compiles the
kernel, then runs the same protocol the run did -- verification on fresh random inputs over every
shape (the odd ones too), timing beside every library baseline, stability -- in its own process, and
exits 1 when the kernel fails. So the verdict at home is reached by the very code that reached it
during evolution, not by a re-implementation. ``--problem`` re-checks it on other sizes: a champion is
tuned for one shape. Bad input -- not a JSON object, a setting the workload does not have, a size out
of its bounds, a problem too big for the device's memory -- is refused as the CLI refuses it: one line
on stderr and exit status 2, before anything is compiled. A baseline whose library is not installed
(torch, beside numpy on a CPU) is reported as skipped in one line, without a traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from core.backends.base import KernelSource

SCRIPT = '''#!/usr/bin/env python3
"""AbeBot kernel: {workload} on {backend}, exported with the code that evaluated it.

    python run_kernel.py                         # verify and time on the problem it was evolved for
    python run_kernel.py --problem '{example}'  # re-verify on other sizes (it was tuned for one)

Needs numpy{needs}. Exits 1 when verification fails, 2 on bad input."""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "abebot"))

from core.evaluation.standalone import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(HERE / "kernel.json", sys.argv[1:]))
'''
NEEDS = {"numpy": "", "torch": ", torch and an NVIDIA GPU (cupy for CUDA C, triton for Triton)"}


def write_standalone(folder: Path, kernel: KernelSource, workload: str, problem: dict) -> None:
    """Write ``run_kernel.py``, ``kernel.json`` and the ``abebot/core`` copy into ``folder``."""
    from core.backends import backend_class

    folder = Path(folder)
    manifest = {"workload": workload, "backend": kernel.backend, "problem": dict(problem), "kernel": asdict(kernel)}
    (folder / "kernel.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    needs = NEEDS.get(backend_class(kernel.backend).arrays, "")
    example = json.dumps(example_problem(workload, kernel.backend, problem))
    (folder / "run_kernel.py").write_text(SCRIPT.format(workload=workload, backend=kernel.backend, needs=needs,
                                                        example=example))
    core = Path(__file__).resolve().parents[1]
    shutil.copytree(core, folder / "abebot" / "core", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def example_problem(workload: str, backend: str, problem: dict) -> dict:
    """A ``--problem`` override in ``workload``'s own settings, for the docs of an export: the first
    size setting halved (or doubled) that the workload accepts; ``{}`` when none is."""
    from core.workloads import get_workload

    wl = get_workload(workload)
    for p in wl.params:
        value = problem.get(p.name)
        if p.kind != "size" or isinstance(value, bool) or not isinstance(value, int):
            continue
        for other in (value // 2, value * 2):
            try:
                if other >= 1 and other != value:
                    wl.validate_problem({**problem, p.name: other}, backend)
                    return {p.name: other}
            except ValueError:
                continue
    return {}


def checked_problem(manifest: dict, text: str | None, device: int) -> dict:
    """The manifest's problem with the ``--problem`` JSON over it, validated as the CLI validates it:
    the workload's own settings and bounds, and the memory bound (:func:`core.evaluation.bounds.check_fits`).
    ValueError, one line, when it is not."""
    from core.evaluation.bounds import check_fits
    from core.workloads import get_workload

    try:
        override = json.loads(text) if text is not None else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"--problem is not valid JSON: {exc.msg}") from None
    if not isinstance(override, dict):
        raise ValueError(f"--problem must be a JSON object of settings (got {type(override).__name__})")
    try:
        problem = get_workload(manifest["workload"]).validate_problem({**manifest["problem"], **override},
                                                                       manifest["backend"])
    except ValueError as exc:
        raise ValueError(f"--problem: {exc}") from None
    if device < 0:
        raise ValueError(f"--device must be a device index >= 0 (got {device})")
    check_fits(SimpleNamespace(workload=manifest["workload"], backend=manifest["backend"], device=device,
                               problem=problem))
    return problem


def main(manifest_path: Path, argv: list[str]) -> int:
    """Compile, verify and time the exported kernel; 0 when it verifies, 1 when it does not, 2 on bad
    input (one line on stderr, nothing compiled)."""
    from core.evaluation.protocol import Protocol

    manifest = json.loads(Path(manifest_path).read_text())
    args = _parser().parse_args(argv)
    try:
        problem = checked_problem(manifest, args.problem, args.device)
    except ValueError as exc:
        print(f"run_kernel.py: error: {exc}", file=sys.stderr)
        return 2
    k = manifest["kernel"]
    kernel = KernelSource(k["backend"], k["source"], k["entry"], tuple(k["flags"]), k["launch"], k["resources"])
    spec = {"backend": kernel.backend, "device": args.device, "workload": manifest["workload"], "problem": problem,
            "stability_launches": args.stability_launches, "timing_target_s": args.seconds,
            "launcher": "inline"}  # your own kernel, in this process (core.evaluation.judge: no separate launcher)
    with tempfile.TemporaryDirectory(prefix="abebot-kernel-") as cache:
        protocol = Protocol(spec)
        artifact = protocol.backend.compile(kernel, Path(cache))
        seed = random.SystemRandom().getrandbits(31)
        baseline = _quiet_baseline(protocol, seed)
        result = protocol.evaluate(artifact, seed + 1)
    _report(manifest, problem, protocol, baseline, result)
    return 0 if result["status"] == "ok" else 1


def _quiet_baseline(protocol, seed: int) -> dict:
    """``protocol.baseline(seed)`` with the tracebacks of baselines that failed to import their library
    held back: each such baseline is reported by :func:`_report` in one line ("skipped"). Any other
    failure's traceback is passed on to stderr."""
    held = io.StringIO()
    with contextlib.redirect_stderr(held):
        baseline = protocol.baseline(seed)
    causes = [str(e.get("cause") or "") for e in (baseline.get("baselines") or {}).values()]
    missing = [c for c in causes if c.startswith(("ModuleNotFoundError", "ImportError"))]
    if len(missing) < sum(1 for c in causes if c) or baseline.get("status") != "ok":
        sys.stderr.write(held.getvalue())
    return baseline


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Verify and time an exported AbeBot kernel.")
    p.add_argument("--problem", help="JSON object overriding the workload's settings (see kernel.json's \"problem\")")
    p.add_argument("--device", type=int, default=0, help="device index (default 0)")
    p.add_argument("--seconds", type=float, default=0.5, help="timing target per measurement (default 0.5)")
    p.add_argument("--stability-launches", type=int, default=20, help="repeated launches, bit-compared (default 20)")
    return p


def _report(manifest: dict, problem: dict, protocol, baseline: dict, result: dict) -> None:
    print(f"{manifest['workload']} on {manifest['backend']} ({protocol.device.label()}), problem {json.dumps(problem)}")
    print("shapes verified: " + "; ".join(json.dumps(s) for s in protocol.shapes))
    status = result["status"]
    print(f"verification: {'passed' if status == 'ok' else 'FAILED'} ({status}{': ' + result['cause'] if result['cause'] else ''})")
    if status != "ok":
        return
    t = result["time_us"]
    print(f"kernel: {t:.2f} us (IQR {result['time_spread_us']:.2f}), stability {result['stability']:.2f}, "
          f"max |err| {result['max_abs_err']:.3g}")
    for name, entry in (baseline.get("baselines") or {}).items():
        cause = str(entry.get("cause") or "")
        if entry.get("time_us") is None and cause.startswith(("ModuleNotFoundError", "ImportError")):
            print(f"  {name}: skipped ({cause.split(': ', 1)[-1]}; optional: install it to time this baseline)")
            continue
        if entry.get("time_us") is None:
            print(f"  {name}: not timed ({cause})")
            continue
        mark = " (fastest library path)" if name == baseline.get("primary") else ""
        print(f"  {name}: {entry['time_us']:.2f} us (IQR {entry['spread_us']:.2f}) -> kernel is "
              f"{entry['time_us'] / t:.3f}x{mark}")
    if protocol.roofline_us:
        print(f"memory roofline: {protocol.roofline_us:.2f} us")


if __name__ == "__main__":  # pragma: no cover - run through an exported run_kernel.py
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
