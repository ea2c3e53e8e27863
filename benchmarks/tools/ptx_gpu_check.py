#!/usr/bin/env python3
"""On one GPU (an H200): machine_code edits on seed kernels, verified and timed by the normal protocol.

    python3 -m benchmarks.tools.ptx_gpu_check --out /tmp/ptx_check             # six targets, about 3 minutes
    python3 -m benchmarks.tools.ptx_gpu_check --out DIR --targets rope:triton --variants nc,pf256

Targets (``workload:backend``, seed genome 0 of each template): w4a16 down projection at M=1
(K 28672 -> N 8192), RMSNorm + residual at 16 rows, RoPE at 16 tokens; CUDA C and Triton each. For
each target, one :class:`core.tools.check.Checker` (the sandbox, the baselines timed once) checks:

1. the unedited seed (verification on every shape, paired timing against the primary baseline);
2. each variant: a few edits chosen from the unedited PTX (``nc`` on the provably read-only loads,
   ``evict_first`` / ``pf256`` / ``l2_first`` / ``prefetch`` on the first global loads, ``hoist``
   moves; ``roundtrip`` is one edit that matches nothing, so it measures the edit path alone: for
   CUDA C, a cubin assembled by the standalone ptxas instead of NVRTC's built-in one), carried in the source exactly as the GA's ``machine_code`` gene carries them
   (:mod:`core.backends.ptx.carry`), compiled by the backend's real path (NVRTC -> PTX -> edits ->
   ptxas, or Triton's PTX stage) and verified and timed the same way;
3. the unedited seed again (the drift of the unedited time over the target's checks).

Writes, under ``--out DIR``: ``ptx_gpu_check.json`` (everything below, per target and variant),
``ptx_gpu_check.log`` (the same in words), ``ptx/<target>.ptx`` (the unedited PTX the edits were
chosen from), ``sass/<target>_<variant>.diff`` (``cuobjdump -sass`` of the unedited and the edited
cubin, addresses and encodings stripped, as a unified diff) and the sandbox logs. Per variant: each
edit's outcome (applied / noop / refused, and why), the verdict (an edit is semantics-preserving by
construction, so ``wrong_result`` or ``compile_error`` here is a bug in the editor: exit status 1),
the time, the speed-up against the unedited seed and against the primary baseline. ``--budget-s``
(default 170) bounds the whole run: checks past it, and targets with less than 40 s of it left,
are listed as skipped, not run (run them again with ``--targets``). The compile cache is the fresh
``DIR/runs/.cache`` (``TRITON_CACHE_DIR`` is ignored), so every kernel is compiled here and its cubin
found for the SASS diff. Speed-ups against the unedited seed come two ways: the ratio of the two
times, and the ratio of the two speed-ups each measured in pairs against the primary baseline
(``paired``: what load on the machine does to both cancels).
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.backends import backend_class  # noqa: E402
from core.backends.ptx import carry, dataflow  # noqa: E402
from core.backends.ptx.apply import apply_edits, census, family_matches  # noqa: E402
from core.backends.ptx.parse import parse  # noqa: E402

TARGETS = {
    "w4a16:cuda": ("w4a16", "cuda", {"m": 1}), "w4a16:triton": ("w4a16", "triton", {"m": 1}),
    "rmsnorm:cuda": ("rmsnorm", "cuda", {"rows": 16, "residual": True}),
    "rmsnorm:triton": ("rmsnorm", "triton", {"rows": 16, "residual": True}),
    "rope:cuda": ("rope", "cuda", {"tokens": 16}), "rope:triton": ("rope", "triton", {"tokens": 16}),
}
VARIANTS = ("roundtrip", "nc", "evict_first", "pf256", "l2_first", "prefetch", "hoist")


def menu(ptx_text: str) -> dict[str, list[str]]:
    """Variant name -> edits (at most 8, as the gene allows), chosen from the unedited PTX."""
    ptx = parse(ptx_text)
    loads = [ins for _, ins in ptx.instructions() if family_matches("ld.global", ins)]
    read_only: set[int] = set()
    for fn in ptx.functions:
        read_only |= dataflow.read_only_loads(ptx, fn)
    lines = [i for i, ins in ptx.instructions() if family_matches("ld.global", ins)]
    nc = [f"nc:ld.global#{k}" for k, i in enumerate(lines) if i in read_only and "nc" not in loads[k].parts]
    first = range(min(8, len(loads)))
    return {
        "roundtrip": ["cop:ld.global#999=cg"],  # a no-op: the PTX path alone (CUDA C: ptxas instead of NVRTC's own)
        "nc": nc[:8],
        "evict_first": [f"evict:ld.global#{k}=evict_first" for k in first],
        "pf256": [f"pfsize:ld.global#{k}=256B" for k in first],
        "l2_first": [f"l2hint:ld.global#{k}=evict_first" for k in range(min(4, len(loads)))],
        "prefetch": [f"prefetch:ld.global#{k}=L2" for k in range(min(4, len(loads)))],
        "hoist": [f"move:ld.global#{k}=-4" for k in range(min(4, len(loads)))],
    }


_ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")
_ENCODING = re.compile(r"/\* 0x[0-9a-f]+ \*/")


def tool(name: str) -> str | None:
    """cuobjdump (or another CUDA binary tool) on PATH or in Triton's bundle."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import triton
    except ImportError:
        return None
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
    return str(path) if path.exists() else None


def sass(cubin: Path) -> list[str]:
    """The SASS of ``cubin``, one instruction a line, addresses and encodings stripped."""
    exe = tool("cuobjdump")
    if exe is None:
        return ["(no cuobjdump found)"]
    res = subprocess.run([exe, "-sass", str(cubin)], capture_output=True, text=True, timeout=60)
    out = []
    for line in (res.stdout or res.stderr).splitlines():
        line = _ENCODING.sub("", _ADDRESS.sub("", line)).rstrip()
        if line.strip() and not line.strip().startswith("/*"):
            out.append(line.strip())
    return out


def sass_diff(before: Path | None, after: Path | None, label: str) -> tuple[list[str], int]:
    """(unified diff lines, changed instruction lines) between two cubins' SASS."""
    if before is None or after is None:
        return [f"(no cubin to compare: before={before}, after={after})"], 0
    diff = list(difflib.unified_diff(sass(before), sass(after), f"{label} unedited", f"{label} edited", lineterm="", n=2))
    return diff, sum(1 for d in diff if d[:1] in "+-" and not d.startswith(("+++", "---")))


def cubins(root: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime for p in root.rglob("*.cubin")} if root.exists() else {}


def new_cubins(before: dict, root: Path) -> list[Path]:
    after = cubins(root)
    return sorted((p for p in after if p not in before), key=lambda p: after[p])


def pair(unedited: list[Path], edited: list[Path]) -> tuple[Path | None, Path | None]:
    """The first unedited cubin and the first edited one of the same kernel name."""
    for e in edited:
        match = next((u for u in unedited if u.stem == e.stem), None)
        if match is not None:
            return match, e
    return (unedited[0] if unedited else None), (edited[0] if edited else None)


class Run:
    """One invocation: the output folder, the log, the budget, the JSON being built."""

    def __init__(self, out: Path, budget_s: float):
        self.out, self.t0, self.budget_s = out, time.monotonic(), budget_s
        for sub in ("sass", "ptx"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        self.log_file = open(out / "ptx_gpu_check.log", "w")
        self.result: dict = {"targets": [], "budget_s": budget_s}

    def log(self, line: str) -> None:
        stamp = f"[{time.monotonic() - self.t0:6.1f}s] {line}"
        print(stamp, flush=True)
        self.log_file.write(stamp + "\n")
        self.log_file.flush()

    def over(self, margin_s: float = 0.0) -> bool:
        return time.monotonic() - self.t0 > self.budget_s - margin_s

    def save(self) -> None:
        self.result["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        (self.out / "ptx_gpu_check.json").write_text(json.dumps(self.result, indent=1, default=str))


def unedited_ptx(checker, seed, backend: str, fresh: list[Path]) -> str:
    """The PTX the edits are chosen from: NVRTC's for CUDA C (as the compile path makes it), the one
    Triton filed beside the first new cubin for a Triton module."""
    if backend == "cuda":
        from core.backends.ptx.nvrtc import nvrtc_ptx, split_arch

        arch = checker.evaluator.backend.device.arch
        _, options, _ = split_arch([f"--gpu-architecture={arch}", *seed.flags])
        return nvrtc_ptx(seed.source, "seed.cu", options)[0]
    for cubin in fresh:
        if cubin.with_suffix(".ptx").exists():
            return cubin.with_suffix(".ptx").read_text()
    raise RuntimeError("Triton filed no PTX beside its cubins (TRITON_STORE_BINARY_ONLY set?)")


def summary_of(r: dict) -> dict:
    ev = r.get("evaluation") or {}
    return {"status": r.get("status"), "cause": r.get("cause"), "time_us": r.get("time_us"),
            "spread_us": r.get("time_spread_us"), "speedup_vs_primary": r.get("speedup"), "primary": r.get("primary"),
            "registers": (ev.get("resources") or {}).get("registers"),
            "ptx_edits": {k: v for k, v in (ev.get("resources") or {}).items() if k.startswith("ptx_edits_")},
            "compile_log_tail": (ev.get("compile_log") or "")[-1500:] if r.get("status") != "ok" else ""}


def check_target(run: Run, name: str, variants: list[str], timing_s: float) -> dict:
    from core.tools.check import Checker

    workload, backend, problem = TARGETS[name]
    tag = name.replace(":", "_")
    entry: dict = {"target": name, "workload": workload, "backend": backend, "problem": problem, "variants": []}
    run.result["targets"].append(entry)
    if run.over(margin_s=40.0):
        entry["skipped"] = "budget (nearly) spent before this target: run it alone with --targets"
        run.log(f"[{name}] skipped: budget spent")
        return entry
    cache = run.out / "runs" / ".cache"
    with Checker(workload, backend, problem, runs_dir=run.out / "runs", timing_target_s=timing_s, stability_launches=5,
                 second_method=False, log_path=run.out / f"sandbox_{tag}.log") as checker:
        b = checker.baseline
        entry["baseline"] = {"primary": b.get("primary"), "time_us": b.get("time_us"), "device": (b.get("device") or {}).get("name")}
        run.log(f"[{name}] baseline {b.get('primary')}: {b.get('time_us'):.2f} us; problem {checker.problem}")
        seed, comment = checker.seed, backend_class(backend).line_comment
        before = cubins(cache)
        entry["unedited"] = summary_of(checker.check(seed.source))
        plain = new_cubins(before, cache)
        u = entry["unedited"]
        run.log(f"[{name}] unedited: {u['status']} {u['time_us']} us (x{u['speedup_vs_primary']} vs primary), "
                f"{len(plain)} cubins")
        ptx = unedited_ptx(checker, seed, backend, plain)
        (run.out / "ptx" / f"{tag}.ptx").write_text(ptx)
        entry["census"] = census(ptx)
        choices = menu(ptx)
        for variant in variants:
            edits = choices.get(variant) or []
            v: dict = {"variant": variant, "edits": edits}
            entry["variants"].append(v)
            if not edits:
                v["skipped"] = "no load to edit this way"
                continue
            if run.over():
                v["skipped"] = "budget spent"
                run.log(f"[{name}] {variant}: skipped (budget spent)")
                continue
            v["outcomes"] = [{"edit": o.edit, "status": o.status, "detail": o.detail} for o in apply_edits(ptx, edits)[1]]
            before = cubins(cache)
            v.update(summary_of(checker.check(carry.attach(seed.source, edits, comment))))
            edited = new_cubins(before, cache)
            diff, changed = sass_diff(*pair(plain, edited), f"{name} {variant}")
            (run.out / "sass" / f"{tag}_{variant}.diff").write_text("\n".join(diff) + "\n")
            v["sass_changed_lines"], v["sass_diff"] = changed, f"sass/{tag}_{variant}.diff"
            if v.get("time_us") and u.get("time_us"):
                v["speedup_vs_unedited"] = round(u["time_us"] / v["time_us"], 4)
            if v.get("speedup_vs_primary") and u.get("speedup_vs_primary"):
                v["speedup_vs_unedited_paired"] = round(v["speedup_vs_primary"] / u["speedup_vs_primary"], 4)
            counts = {s: sum(o["status"] == s for o in v["outcomes"]) for s in ("applied", "noop", "refused")}
            why = next((f" (first refusal: {o['edit']}: {o['detail']})" for o in v["outcomes"] if o["status"] == "refused"), "")
            run.log(f"[{name}] {variant}: edits {counts}{why} -> {v['status']} {v.get('time_us')} us, "
                    f"x{v.get('speedup_vs_unedited')} vs unedited (paired x{v.get('speedup_vs_unedited_paired')}); "
                    f"SASS {changed} lines changed ({v['sass_diff']})" + (f"; cause: {v['cause']}" if v["status"] != "ok" else ""))
            run.save()
        again = summary_of(checker.check(seed.source))
        entry["unedited_again"] = again
        run.log(f"[{name}] unedited again: {again['status']} {again['time_us']} us (drift of the unedited time)")
    return entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the JSON, the log, the SASS diffs and the PTX")
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of: {', '.join(TARGETS)}")
    ap.add_argument("--variants", default="roundtrip,nc,evict_first,pf256,l2_first", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--budget-s", type=float, default=170.0, help="stop starting checks after this many seconds")
    ap.add_argument("--timing-s", type=float, default=0.1, help="timing target per kernel (seconds)")
    args = ap.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    variants = [v for v in args.variants.split(",") if v]
    bad = [t for t in targets if t not in TARGETS] + [v for v in variants if v not in VARIANTS]
    if bad:
        print(f"ptx_gpu_check: unknown target or variant {', '.join(bad)}", file=sys.stderr)
        return 2
    os.environ.pop("TRITON_CACHE_DIR", None)  # Triton's cache under DIR/runs/.cache, fresh: every kernel compiled here
    shutil.rmtree(Path(args.out) / "runs", ignore_errors=True)
    run = Run(Path(args.out), args.budget_s)
    from core.backends.ptx.ptxas import find_ptxas

    run.result.update({"ptxas": find_ptxas(), "cuobjdump": tool("cuobjdump"), "variants": variants})
    run.log(f"ptxas {find_ptxas()}, cuobjdump {tool('cuobjdump')}; targets {targets}; variants {variants}")
    for name in targets:
        try:
            check_target(run, name, variants, args.timing_s)
        except Exception as exc:  # one target's failure (no device, a missing baseline) is reported, the rest run
            run.result["targets"][-1]["error"] = f"{type(exc).__name__}: {exc}"
            run.log(f"[{name}] ERROR {type(exc).__name__}: {exc}")
        run.save()
    broken = [f"{t['target']} {v['variant']}: {v.get('status')}" for t in run.result["targets"]
              for v in t.get("variants", []) if v.get("status") in ("wrong_result", "compile_error", "crashed")]
    run.result["editor_bugs"] = broken
    run.save()
    run.log("editor bugs (an edit broke a kernel): " + ("; ".join(broken) if broken else "none"))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
