#!/usr/bin/env python3
"""On one H200: the wgmma GEMM template (core/workloads/gemm/wgmma.py) compiled, checked and timed.

    python3 benchmarks/tools/wgmma_gpu_check.py --out /tmp/wgmma_check        # about 2-3 minutes

First the TMA probe (benchmarks/tools/wgmma_tma_probe.py: tensor maps, by-value launch, one box
per swizzle copied into shared memory and read back, no wgmma), then each configuration in CONFIGS
(the simplest first), each in a child process of its own with a time limit (a deadlocked pipeline
or a sticky CUDA error ends that configuration only):

1. render the genome and compile it through the cuda backend (NVRTC, sm_90a); on a compile error
   print NVRTC's and ptxas's full log; print ptxas's registers and spills and whether HGMMA
   (wgmma) made it into the code;
2. on every shape (two small ones first, then 4096^3, 4095 x 4097 x 1023 and the Llama-3.1-70B
   projections at M = 64, 128, 256): launch once on fresh N(0, K^-1/2)-scaled bf16 inputs into an
   output poisoned with NaN inside NaN guard zones, compare with the fp32 product
   (a.float() @ b.float()) at the gemm workload's bf16 tolerance, and on a failure print the first
   wrong element, how many are wrong or unwritten and where they lie; then poison C again, launch a
   second time and require the same bits (split-K adds its partials in a fixed order, and its
   counters must be back at zero for the second launch);
3. time the kernel and torch.matmul (cuBLAS) by CUDA graph replay over enough copies of A, B and C
   that each launch finds its operands out of the 60 MB L2, interleaved, median and spread.

Writes ``<out>/wgmma_gpu_check.json`` (every figure), ``<out>/wgmma_gpu_check.log`` (everything
printed) and one ``<out>/<config>.json`` per configuration. Exit status 0 when every configuration
compiled and verified on every shape, 1 otherwise, 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.genome import Genome  # noqa: E402
from core.workloads.gemm import TOLERANCE  # noqa: E402
from core.workloads.gemm.wgmma import SEEDS  # noqa: E402
from core.workloads.gemm.wgmma_source import derived, violation  # noqa: E402

PROBE = "tma_probe"  # benchmarks/tools/wgmma_tma_probe.py: the copies alone, run first

SIMPLE = {"parallel_config": {"block_m": 128, "block_n": 128, "block_k": 64, "consumers": 2, "persistent": "grid",
                              "raster": "row", "cluster_m": 1, "split_k": 1},
          "memory_pattern": {"stages": 4, "swizzle": 128, "epilogue": "direct"},
          "register_allocation": {"reg_split": "none"},
          "instruction_sequence": {"inflight": 0, "load_order": "AB"}}


def variant(base: dict, **genes) -> dict:
    out = {group: dict(values) for group, values in base.items()}
    for name, value in genes.items():
        next(values for values in out.values() if name in values)[name] = value
    return out


# The simplest first: if it fails, the others say little; each later one adds one or two features.
CONFIGS = {
    "simple_128x128x64": SIMPLE,
    "simple_setmaxnreg": variant(SIMPLE, reg_split="40/232"),
    "seed0_128x256_persistent_inflight1": SEEDS[0],
    "seed1_tma_epilogue": SEEDS[1],
    "seed2_64x128_one_consumer": SEEDS[2],
    "swizzle64_bk32_column": variant(SIMPLE, block_k=32, swizzle=64, stages=6, inflight=1, load_order="BA",
                                     persistent="persistent", raster="column"),
    "256x128_two_m64_per_consumer": variant(SIMPLE, block_m=256, stages=3, epilogue="tma", reg_split="24/240",
                                            persistent="persistent", raster="grouped"),
    "64x80x64_swizzle32": variant(SIMPLE, block_m=64, block_n=80, consumers=1, swizzle=32, stages=6,
                                  persistent="persistent", raster="column"),  # N = 10240 in 128 tiles
    "seed0_cluster2_multicast": variant(SEEDS[0], cluster_m=2),
    # split-K: where 64 x 128 or 128 x 128 tiles leave SMs idle (M <= 128 at N = 8192: 64 tiles for 132 SMs)
    "seed2_split2": variant(SEEDS[2], split_k=2),
    "seed2_split4": variant(SEEDS[2], split_k=4),
    "seed2_split8": variant(SEEDS[2], split_k=8),  # N = 10240: 80 tiles x 8 = 640 units, 4.85 rounds of 132
    "seed1_tma_epilogue_split2": variant(SEEDS[1], split_k=2),
    "seed0_cluster2_split8": variant(SEEDS[0], cluster_m=2, split_k=8),  # the small shapes: slices without k-tiles
}
LLAMA_NK = ((10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672))
SHAPES = ([(128, 256, 64), (200, 300, 100), (4096, 4096, 4096), (4095, 4097, 1023)]
          + [(m, n, k) for m in (64, 128, 256) for n, k in LLAMA_NK])
GUARD = 4096  # NaN elements each side of C: a write outside C changes them
DEVICE = "cuda"  # where the cases live (the CPU tests set "cpu" and check the untimed path)
BUDGET_S = 230.0  # the lead's call is 4 minutes
CHILD_LIMIT_S = 45.0  # one configuration normally takes 15-25 s; past this it is taken to hang


# What a CUDA error most likely means for this kernel (the words as the driver or torch print them)
ERROR_HINTS = {
    "illegal instruction": "an sm_90a instruction (wgmma, setmaxnreg) run from a cubin not built for sm_90a, or a "
                           "warpgroup-wide instruction not reached by all 128 threads of the warpgroup",
    "misaligned": "a shared tile or barrier off its alignment (1024 B for the 128-byte swizzle), or a 4-byte store "
                  "to C at an odd address",
    "illegal address": "a TMA coordinate, the staging buffer, or the direct epilogue's guards",
    "out of resources": "the dynamic shared memory over the opt-in limit, or registers x threads over the SM's file",
    "invalid argument": "the launch: grid, block, shared-memory size, or a kernel parameter (the 128-byte tensor maps)",
}


class Tee:
    def __init__(self, path: Path):
        self.file = path.open("a")

    def __call__(self, *parts: object) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


# ---- the child: one configuration ---------------------------------------------------------------

def full_nvrtc_log(source: str, options: list[str]) -> str:
    """NVRTC's whole log (with ptxas's) for ``source``: the backend's CompileError keeps its tail."""
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, "wgmma.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, options)
        except nvrtc.NVRTCError as exc:
            return f"{exc}\n{nvrtc.getProgramLog(prog)}"
        return nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


def check_output(got, ref, tol: tuple[float, float], buf, m: int, n: int) -> dict:
    """Verdict on one launch: guards, unwritten elements, and the first element out of tolerance."""
    import torch

    guards_ok = bool(torch.isnan(buf[:GUARD].float()).all() and torch.isnan(buf[GUARD + m * n:].float()).all())
    g = got.float()
    atol, rtol = tol
    bad = ~((g - ref).abs() <= atol + rtol * ref.abs())  # NaN (unwritten) counts as bad
    nbad, nnan = int(bad.sum()), int(torch.isnan(g).sum())
    out = {"ok": guards_ok and nbad == 0, "guards_ok": guards_ok, "wrong": nbad, "unwritten": nnan,
           "max_abs_err": float((g - ref).abs().nan_to_num(float("inf")).max())}
    if nbad:
        flat = int(bad.flatten().nonzero()[0])
        r, c = divmod(flat, n)
        rows, cols = bad.any(1).nonzero().flatten(), bad.any(0).nonzero().flatten()
        out["first_mismatch"] = {"row": r, "col": c, "got": float(g[r, c]), "want": float(ref[r, c])}
        out["wrong_rows"] = [int(rows.min()), int(rows.max()), int(rows.numel())]
        out["wrong_cols"] = [int(cols.min()), int(cols.max()), int(cols.numel())]
        out["map_16x16"] = error_map(bad)
        if nnan == m * n:
            out["hint"] = "every element is still NaN: the kernel wrote nothing (did it run? c_tma path?)"
        elif float(g.nan_to_num(0).abs().max()) == 0.0:
            out["hint"] = "the output is all zeros: accumulators never reached C"
    if not guards_ok:
        out["hint"] = "a guard zone changed: the kernel wrote outside C (epilogue guards or TMA store box)"
    return out


def error_map(bad) -> list[str]:
    """The top-left 256 x 256 of C in blocks of 16 x 16: '.' right, '+' partly wrong, '#' all wrong
    (which rows, consumers or column chunks a layout error hits shows at a glance)."""
    rows = []
    for r in range(0, min(bad.shape[0], 256), 16):
        line = ""
        for c in range(0, min(bad.shape[1], 256), 16):
            block = bad[r:r + 16, c:c + 16]
            frac = float(block.float().mean())
            line += "." if frac == 0 else "#" if frac == 1 else "+"
        rows.append(line)
    return rows


def graph_time(fns: list, reps: int, trials: int, other=None) -> tuple[list[float], list[float] | None]:
    """Per-launch microseconds of ``trials`` replays of a graph of ``reps`` launches cycling through
    ``fns`` (and of ``other``'s, interleaved, when given)."""
    import torch

    graphs = []
    for group in (fns, other) if other else (fns,):
        for f in group:
            f()  # warm: lazy initialisation stays out of the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for r in range(reps):
                group[r % len(group)]()
        graphs.append(g)
    times: list[list[float]] = [[] for _ in graphs]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for g in graphs:
        g.replay()
    for _ in range(trials):
        for i, g in enumerate(graphs):
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end) * 1000.0 / reps)
    return times[0], (times[1] if other else None)


def stats(ts: list[float]) -> dict:
    s = sorted(ts)
    q = lambda p: s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]  # noqa: E731
    return {"median_us": q(0.5), "min_us": s[0], "max_us": s[-1], "iqr_over_median": (q(0.75) - q(0.25)) / q(0.5)}


def run_shape(say, template, kernel, shape: tuple[int, int, int], l2_bytes: int) -> dict:
    import torch

    m, n, k = shape
    res: dict = {"m": m, "n": n, "k": k}
    gen = torch.Generator(device=DEVICE).manual_seed(m * 31 + n * 7 + k)
    scale = k ** -0.25

    def operands():
        a = (torch.randn(m, k, device=DEVICE, generator=gen) * scale).to(torch.bfloat16)
        b = (torch.randn(k, n, device=DEVICE, generator=gen) * scale).to(torch.bfloat16)
        return a, b

    a, b = operands()
    buf = torch.full((m * n + 2 * GUARD,), float("nan"), device=DEVICE, dtype=torch.bfloat16)
    c = buf[GUARD:GUARD + m * n].view(m, n)
    dims = {"m": m, "n": n, "k": k}
    t0 = time.perf_counter()
    launch = template.bind(kernel, {"a": a, "b": b, "c": c}, dims)  # one workspace and counters for both launches
    launch()
    if DEVICE == "cuda":
        torch.cuda.synchronize()  # a CUDA error of the launch surfaces here
    ref = a.float() @ b.float()
    res.update(check_output(c, ref, TOLERANCE["bfloat16"], buf, m, n))
    res["cublas_max_abs_err"] = float((torch.matmul(a, b).float() - ref).abs().max())
    del ref
    if res["ok"]:
        res.update(repeat(launch, c))
    verdict = "ok" if res["ok"] else "WRONG"
    say(f"  {m}x{n}x{k}: {verdict} (max |err| {res['max_abs_err']:.3g}, cuBLAS bf16 {res['cublas_max_abs_err']:.3g})"
        f" in {time.perf_counter() - t0:.1f} s")
    if not res["ok"]:
        say("    " + json.dumps({k2: res[k2] for k2 in res if k2 in ("first_mismatch", "wrong", "unwritten", "wrong_rows",
                                                                    "wrong_cols", "guards_ok", "hint", "repeat_differs",
                                                                    "unwritten_on_repeat")}))
        if "map_16x16" in res:
            say("    wrong elements in the top-left 256 x 256, 16 x 16 blocks ('.' none, '+' some, '#' all):")
            say("\n".join("      " + line for line in res["map_16x16"]))
        return res
    if m * n * k < 1 << 24:
        return res  # the small smoke shapes are not timed
    per_copy = 2 * (m * k + k * n + m * n)
    copies = max(2, min(12, math.ceil(3 * l2_bytes / per_copy)))
    sets = [operands() for _ in range(copies)]
    outs = [torch.empty(m, n, device=DEVICE, dtype=torch.bfloat16) for _ in range(copies)]
    mine = [template.bind(kernel, {"a": x, "b": y, "c": z}, dims) for (x, y), z in zip(sets, outs)]
    theirs = [(lambda x=x, y=y, z=z: torch.matmul(x, y, out=z)) for (x, y), z in zip(sets, outs)]
    est = 2.0 * m * n * k / 600e12 * 1e6  # microseconds at 600 TFLOP/s, to size the graph
    reps = max(copies, min(200, math.ceil(3000.0 / max(est, 1.0))))
    try:
        kt, ct = graph_time(mine, reps, 7, theirs)
        res["timing"] = f"CUDA graph of {reps} launches over {copies} copies (L2 {l2_bytes >> 20} MB)"
    except Exception as exc:  # noqa: BLE001 -- report and fall back to per-launch events
        say(f"    graph timing failed ({type(exc).__name__}: {exc}); timing with events per launch")
        kt, ct = _event_time(mine, theirs)
        res["timing"] = f"events per launch over {copies} copies (graph capture failed)"
    res["kernel"], res["cublas"] = stats(kt), stats(ct)
    res["speedup_vs_cublas"] = res["cublas"]["median_us"] / res["kernel"]["median_us"]
    res["kernel_tflops"] = 2.0 * m * n * k / res["kernel"]["median_us"] / 1e6
    say(f"    kernel {res['kernel']['median_us']:.1f} us (IQR {100 * res['kernel']['iqr_over_median']:.1f}%), "
        f"cuBLAS {res['cublas']['median_us']:.1f} us: {res['speedup_vs_cublas']:.3f}x, {res['kernel_tflops']:.0f} TFLOP/s")
    return res


def repeat(launch, c) -> dict:
    """A second launch into C poisoned again with NaN: whether it wrote the same bits as the first."""
    import torch

    first = c.clone()
    c.fill_(float("nan"))
    launch()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    same = bool(torch.equal(c, first))
    out = {"repeat_identical": same}
    if not same:
        diff = ~((c == first) | (torch.isnan(c) & torch.isnan(first)))
        out.update(ok=False, repeat_differs=int(diff.sum()), unwritten_on_repeat=int(torch.isnan(c).sum()),
                   hint="a second launch gave other bits: a reduction in no fixed order, or split-K counters "
                        "not back at zero (then C is left unwritten)")
    return out


def _event_time(mine: list, theirs: list) -> tuple[list[float], list[float]]:
    import torch

    out: list[list[float]] = [[], []]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(7 * len(mine)):
        for i, fns in enumerate((mine, theirs)):
            start.record(), fns[r % len(fns)](), end.record(), end.synchronize()
            out[i].append(start.elapsed_time(end) * 1000.0)
    return out[0], out[1]


def child(name: str, out: Path, shapes: list) -> int:
    say = Tee(out / "wgmma_gpu_check.log")
    result: dict = {"config": name, "genome": CONFIGS.get(name), "shapes": []}
    path = out / f"{name}.json"

    def save() -> None:
        path.write_text(json.dumps(result, indent=1))

    try:
        import torch

        from core.backends.base import CompileError
        from core.backends.cuda import CudaBackend, arch_options
        from core.workloads import get_workload

        backend = CudaBackend(0)
        if name == PROBE:
            from benchmarks.tools import wgmma_tma_probe

            result = wgmma_tma_probe.run(say, backend, out / "cache")
            save()
            return 0 if result["status"] == "ok" else 1
        gemm = get_workload("gemm")
        template = gemm.template("cuda", gemm.validate_problem({"template": "wgmma"}, "cuda"), backend.device)
        g = template.gene_space().from_json(CONFIGS[name])
        ks = template.render(g)
        result["launch"] = ks.launch
        try:
            art = backend.compile(ks, out / "cache")
        except CompileError:
            log = full_nvrtc_log(ks.source, arch_options(backend.device.arch, ks.flags) + ["--ptxas-options=-v"])
            (out / f"{name}.cu").write_text(ks.source)
            say(f"  COMPILE ERROR; source in {out / (name + '.cu')}; NVRTC and ptxas log in full:\n{log}")
            result.update(status="compile_error", log=log)
            save()
            return 1
        r = art.resources
        hg = "HGMMA" in _sass(art.path)
        say(f"  compiled in {art.compile_seconds:.1f} s: {r.get('registers')} registers, spills {r.get('spill_bytes', 0)} B, "
            f"shared {ks.launch['dynamic_shared_bytes']} B, HGMMA in SASS: {hg}")
        if any(w in art.log.lower() for w in ("c7508", "setmaxnreg", "warning")):  # e.g. setmaxnreg ignored
            say("  NVRTC/ptxas said:\n" + art.log)
        result.update(compile={"seconds": art.compile_seconds, "resources": r, "log": art.log, "hgmma": hg})
        kernel = backend.make_runtime().load(art)
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        for shape in shapes:
            result["shapes"].append(run_shape(say, template, kernel, tuple(shape), l2))
            save()
        result["status"] = "ok" if all(s["ok"] for s in result["shapes"]) else "wrong_result"
    except Exception as exc:  # noqa: BLE001 -- a CUDA error is sticky: this configuration ends here
        import traceback

        say(f"  ERROR {type(exc).__name__}: {exc}")
        say(traceback.format_exc())
        for words, hint in ERROR_HINTS.items():
            if words in str(exc).lower().replace("_", " "):
                say(f"  likely cause: {hint}")
        result.update(status="error", error=f"{type(exc).__name__}: {exc}")
    save()
    return 0 if result["status"] == "ok" else 1


def _sass(cubin: str) -> str:
    try:
        return subprocess.run(["cuobjdump", "--dump-sass", cubin], capture_output=True, text=True, timeout=60).stdout
    except Exception:  # noqa: BLE001 -- no cuobjdump: say False rather than fail
        return ""


# ---- the parent: every configuration, each in its own process ------------------------------------

def run_child(say, name: str, out: Path, limit: float, shapes: list) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, "--out", str(out), "--shapes", json.dumps(shapes)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    def echo() -> None:  # the child logs its own lines; the console sees them as they come
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line)

    reader = threading.Thread(target=echo, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        say(f"  TIMEOUT after {limit:.0f} s: the last line above is the shape it was on. A hang at the first launch "
            "points at the pipeline (mbarrier phases or expect_tx bytes never met) or at setmaxnreg waiting for registers.")
    reader.join(timeout=5)
    path = out / f"{name}.json"
    res = json.loads(path.read_text()) if path.exists() else {"config": name, "shapes": []}
    if proc.returncode not in (0, 1) or "status" not in res:
        res["status"] = res.get("status") or ("timeout" if proc.returncode in (-9, 137) else f"exit {proc.returncode}")
        if tail and "Traceback" in "".join(tail):
            say("  child output tail:\n" + "".join(tail[-30:]))
    return res


def goal_summary(results: list[dict]) -> dict:
    """Issue 30's small-M goal (the 70B projections at M = 64, 128, 256: geometric mean >= 1.3x
    cuBLAS, none below 1.0x) for each configuration alone and for the best configuration of each
    shape (what per-shape champions could reach); shapes a configuration did not time are left out
    of its figure and named."""
    goal = [(m, n, k) for m in (64, 128, 256) for n, k in LLAMA_NK]
    speed: dict[str, dict] = {}
    for res in results:
        for x in res.get("shapes", []):
            if (x["m"], x["n"], x["k"]) in goal and x.get("ok") and "speedup_vs_cublas" in x:
                speed.setdefault(res["config"], {})[(x["m"], x["n"], x["k"])] = x["speedup_vs_cublas"]

    def figure(values: list[float]) -> str:
        return f"geomean {math.exp(sum(map(math.log, values)) / len(values)):.3f}x, min {min(values):.3f}x"

    out: dict = {"per_config": {}, "best": {}, "lines": ["== issue 30's goal at M = 64-256 (>= 1.3x geomean, none < 1.0x)"]}
    for name, by_shape in speed.items():
        missing = len(goal) - len(by_shape)
        out["per_config"][name] = {"geomean": math.exp(sum(map(math.log, by_shape.values())) / len(by_shape)),
                                   "min": min(by_shape.values()), "shapes": len(by_shape)}
        out["lines"].append(f"  {name}: {figure(list(by_shape.values()))}" + (f" ({missing} shapes not timed)" if missing else ""))
    for shape in goal:
        cands = {name: by[shape] for name, by in speed.items() if shape in by}
        if cands:
            best = max(cands, key=cands.get)
            out["best"]["x".join(map(str, shape))] = {"config": best, "speedup": cands[best]}
    if out["best"]:
        best = [b["speedup"] for b in out["best"].values()]
        out["lines"].append(f"  best configuration per shape: {figure(best)} over {len(best)} of {len(goal)} shapes")
        out["lines"] += [f"    {shape}: {b['speedup']:.3f}x {b['config']}" for shape, b in out["best"].items()]
    return out


def parent(out: Path, names: list[str], shapes: list) -> int:
    out.mkdir(parents=True, exist_ok=True)
    say = Tee(out / "wgmma_gpu_check.log")
    say(f"wgmma GEMM GPU check, {time.strftime('%Y-%m-%d %H:%M:%S')}, {len(names)} configurations x {len(shapes)} shapes")
    for name in (n for n in names if n != PROBE):
        if why := violation(Genome(CONFIGS[name]), "bfloat16"):
            say(f"configuration {name} is invalid: {why}")
            return 2
    t0, results = time.monotonic(), []
    for name in names:
        left = BUDGET_S - (time.monotonic() - t0)
        if left < 20:
            say(f"== {name}: SKIPPED (time budget of {BUDGET_S:.0f} s spent)")
            results.append({"config": name, "status": "skipped", "shapes": []})
            continue
        if name == PROBE:
            say(f"== {name}: one TMA box per swizzle into shared memory and back (no wgmma)")
        else:
            d = derived(Genome(CONFIGS[name]))
            say(f"== {name}: {d['bm']}x{d['bn']}x{d['bk']}, {d['consumers']} consumer(s), {d['stages']} stages, "
                f"swizzle {d['swizzle']}, cluster {d['cluster_m']}, split-K {d['split_k']}, {json.dumps(CONFIGS[name])}")
        results.append(run_child(say, name, out, min(CHILD_LIMIT_S, left), shapes))
    say("\n== summary: speed-up over cuBLAS (torch.matmul), 'ok' where not timed, WRONG, or '-' not run")
    for i, res in enumerate(results):
        say(f"  c{i + 1} = {res['config']}: {res.get('status')}")
    say("shape".ljust(18) + "".join(f"c{i + 1}".rjust(8) for i in range(len(results))))
    for shape in map(tuple, shapes):
        cells = []
        for res in results:
            s = next((x for x in res.get("shapes", []) if (x["m"], x["n"], x["k"]) == shape), None)
            cells.append("-" if s is None else "WRONG" if not s["ok"] else
                         f"{s['speedup_vs_cublas']:.2f}x" if "speedup_vs_cublas" in s else "ok")
        say("x".join(map(str, shape)).ljust(18) + "".join(c.rjust(8) for c in cells))
    goal = goal_summary(results)
    for line in goal["lines"]:
        say(line)
    (out / "wgmma_gpu_check.json").write_text(json.dumps({"shapes": shapes, "results": results, "goal": goal}, indent=1))
    say(f"wrote {out / 'wgmma_gpu_check.json'} and {out / 'wgmma_gpu_check.log'} in {time.monotonic() - t0:.0f} s")
    return 0 if all(r.get("status") == "ok" for r in results) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the JSON, the log and the compile cache")
    ap.add_argument("--only", default="", help="comma-separated configuration names (default: all)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--shapes", default=None, help=argparse.SUPPRESS)
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    names = [n for n in args.only.split(",") if n] or [PROBE, *CONFIGS]
    unknown = [n for n in names if n not in CONFIGS and n != PROBE]
    if unknown:
        print(f"unknown configuration(s) {', '.join(unknown)}; known: {PROBE}, {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    shapes = json.loads(args.shapes) if args.shapes else [list(s) for s in SHAPES]
    if args.child:
        return child(args.child, Path(args.out), shapes)
    return parent(Path(args.out), names, shapes)


if __name__ == "__main__":
    sys.exit(main())
