"""The exported ``run_kernel.py``: one script for every workload x backend, generated from the spec.

An exported kernel folder holds ``kernel.json`` (workload, backend, problem and the rendered kernel)
and ``abebot/core/``, a copy of the AbeBot code that evaluated it. ``run_kernel.py`` compiles the
kernel, then runs the same protocol the run did -- verification on fresh random inputs over every
shape (the odd ones too), timing beside every library baseline, stability -- in its own process, and
exits 1 when the kernel fails. So the verdict at home is reached by the very code that reached it
during evolution, not by a re-implementation. ``--problem`` re-checks it on other sizes: a champion is
tuned for one shape.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from core.backends.base import KernelSource

SCRIPT = '''#!/usr/bin/env python3
"""AbeBot kernel: {workload} on {backend}, exported with the code that evaluated it.

    python run_kernel.py                         # verify and time on the problem it was evolved for
    python run_kernel.py --problem '{{"m": 512}}'  # re-verify on other sizes (it was tuned for one)

Needs numpy{needs}. Exits 1 when verification fails."""
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
    (folder / "run_kernel.py").write_text(SCRIPT.format(workload=workload, backend=kernel.backend, needs=needs))
    core = Path(__file__).resolve().parents[1]
    shutil.copytree(core, folder / "abebot" / "core", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def main(manifest_path: Path, argv: list[str]) -> int:
    """Compile, verify and time the exported kernel; 0 when it verifies, 1 when it does not."""
    from core.evaluation.protocol import Protocol

    manifest = json.loads(Path(manifest_path).read_text())
    args = _parser().parse_args(argv)
    problem = {**manifest["problem"], **json.loads(args.problem or "{}")}
    k = manifest["kernel"]
    kernel = KernelSource(k["backend"], k["source"], k["entry"], tuple(k["flags"]), k["launch"], k["resources"])
    spec = {"backend": kernel.backend, "device": args.device, "workload": manifest["workload"], "problem": problem,
            "stability_launches": args.stability_launches, "timing_target_s": args.seconds}
    with tempfile.TemporaryDirectory(prefix="abebot-kernel-") as cache:
        protocol = Protocol(spec)
        artifact = protocol.backend.compile(kernel, Path(cache))
        seed = random.SystemRandom().getrandbits(31)
        baseline = protocol.baseline(seed)
        result = protocol.evaluate(artifact, seed + 1)
    _report(manifest, problem, protocol, baseline, result)
    return 0 if result["status"] == "ok" else 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Verify and time an exported AbeBot kernel.")
    p.add_argument("--problem", help="JSON object overriding problem sizes, e.g. '{\"m\": 512}'")
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
        if entry.get("time_us") is None:
            print(f"  {name}: not timed ({entry.get('cause')})")
            continue
        mark = " (fastest library path)" if name == baseline.get("primary") else ""
        print(f"  {name}: {entry['time_us']:.2f} us (IQR {entry['spread_us']:.2f}) -> kernel is "
              f"{entry['time_us'] / t:.3f}x{mark}")
    if protocol.roofline_us:
        print(f"memory roofline: {protocol.roofline_us:.2f} us")


if __name__ == "__main__":  # pragma: no cover - run through an exported run_kernel.py
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
