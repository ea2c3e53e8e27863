#!/usr/bin/env python3
"""Host time per call of the library's torch ops (issue 28's goal: <= 5 us on the H200), and a check.

Builds a library in a temporary folder at decode shapes -- on ``--device cuda`` from the champion
genomes of ``benchmarks/suites/cold_recheck_genomes.json`` (w4a16 down M=1, RMSNorm with residual
at 1 row, RoPE at 1 token; SiLU*mul from its template's seed), Llama-3.1-70B's sizes in bf16; on
``--device cpu`` from the C templates' seed genomes at tiny sizes in fp32 (a call's own time near a
microsecond, so that the dispatch cost shows) -- then, per op, the host microseconds of one call of:

* ``op_us`` -- the public op, eager (``core.library.ops``): the fast path's key lookup, the output
  allocation, one call of the compiled launcher (the figure the goal is about);
* ``custom_op_us`` -- the same through ``torch.ops.abebot.<op>`` called eagerly (torch's
  dispatcher around the same body: what a call costs inside a compiled graph run without CUDA graphs);
* ``dispatcher_us`` -- the dispatcher path every call took before the fast path (problem dict,
  signature lookup, pointer update, launch): ``ops.<op>_impl``;
* ``plan_call_us`` -- the fast path's launch callable alone, its outputs allocated beforehand (the
  compiled launcher writing the call's pointers, then ``cuLaunchKernel``);
* ``compiled_us`` -- the compiled launcher with nothing to write (its arguments as packed);
* ``ctypes_us`` -- the same launch through ctypes ``cuLaunchKernel`` (arguments packed once);
* ``backend_us`` -- the backend's own bound launch (CuPy's ``RawKernel`` launch on a GPU, as an
  export launches; the C kernel's ctypes call on a CPU);
* ``alloc_us`` -- the output allocation alone (inside ``op_us``); ``native_us`` -- the PyTorch path
  (at most 10 rounds of 20 calls).

Calls are queued back to back and timed by the host clock; the device is waited for between
rounds, outside the timed window (on a CPU a call is synchronous, so each figure includes the
kernel's own time). Each path is timed in ``--rounds`` rounds of ``--calls`` calls; a figure is the
median over the rounds of the per-call mean, with ``iqr`` its interquartile range (p25, p75).
Then ``check``: the first op's public call on fresh activations twice (new tensors each time, so
the fast path writes new pointers; ``fast_path`` says whether the dispatcher was bypassed), against
the native path. Prints one JSON object; exits 1 when the check fails.

    python3 -m benchmarks.tools.library_overhead --device cuda [--ops w4a16,rmsnorm] [--calls 100] [--rounds 60]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GENOMES = ROOT / "benchmarks" / "suites" / "cold_recheck_genomes.json"
CHAMPIONS = {"w4a16": "down_m1", "rmsnorm": "rmsnorm_res_1", "rope": "rope_1"}
OPS = ("w4a16", "rmsnorm", "rope", "silu_mul")


def specs(device: str, wanted: tuple) -> list[tuple[str, dict, dict | None]]:
    """(op, problem, genome or None for the seed) of the library the tool builds."""
    if device == "cpu":
        tiny = {"rmsnorm": {"rows": 1, "cols": 256, "residual": True},
                "rope": {"tokens": 1, "q_heads": 2, "kv_heads": 1, "half_dim": 32, "max_positions": 64},
                "silu_mul": {"tokens": 1, "hidden": 256}, "w4a16": {"m": 1, "n": 64, "k_groups": 1}}
        return [(op, tiny[op], None) for op in wanted]
    known = {e["name"]: e for e in json.loads(GENOMES.read_text())}
    out = []
    for op in wanted:
        if op in CHAMPIONS:
            e = known[CHAMPIONS[op]]
            out.append((op, dict(e["problem"]), json.loads(e["genome"])))
        else:
            out.append((op, {"tokens": 1, "hidden": 28672}, None))
    return out


def inputs(op: str, problem: dict, dev: str, seed: int = 0) -> tuple:
    """The op's public-function arguments at ``problem``'s sizes."""
    import torch

    g = torch.Generator(device=dev).manual_seed(seed)
    dt = getattr(torch, problem["dtype"])
    if op == "rmsnorm":
        x = torch.randn(problem["rows"], problem["cols"], device=dev, dtype=dt, generator=g)
        w = torch.rand(problem["cols"], device=dev, dtype=dt, generator=g) + 0.5
        return (x, w, torch.randn(x.shape, device=dev, dtype=dt, generator=g) if problem["residual"] else None,
                problem["eps"])
    if op == "rope":
        t, h = problem["tokens"], 2 * problem["half_dim"]
        pos = torch.randint(0, problem["max_positions"], (t,), device=dev, dtype=torch.int32, generator=g)
        cache = torch.rand(problem["max_positions"], 2, problem["half_dim"], device=dev, dtype=dt, generator=g)
        return (pos, torch.randn(t, problem["q_heads"] * h, device=dev, dtype=dt, generator=g),
                torch.randn(t, problem["kv_heads"] * h, device=dev, dtype=dt, generator=g), cache)
    if op == "silu_mul":
        return tuple(torch.randn(problem["tokens"], problem["hidden"], device=dev, dtype=dt, generator=g)
                     for _ in range(2))
    k, n = 128 * problem["k_groups"], problem["n"]
    qw = torch.randint(-2**31, 2**31 - 1, (k // 8, n), device=dev, dtype=torch.int32, generator=g)
    scales = (torch.rand(k // 128, n, device=dev, generator=g) * 1e-3 + 1e-3).to(dt)
    return (torch.randn(problem["m"], k, device=dev, dtype=dt, generator=g), qw, scales, None)


def host_us(fn, calls: int, rounds: int, sync) -> dict:
    """Median and interquartile range over ``rounds`` of the host microseconds per call of ``calls``
    calls queued back to back (the device waited for between rounds, untimed)."""
    for _ in range(10):
        fn()
    sync()
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
        sync()
    q = statistics.quantiles(per_call, n=4, method="inclusive") if len(per_call) > 1 else per_call * 3
    return {"median": round(statistics.median(per_call), 3), "iqr": [round(q[0], 3), round(q[2], 3)]}


def sources(op: str, args: tuple) -> tuple:
    """The fast path's launch sources for ``args`` (its outputs allocated here)."""
    import torch

    if op == "rmsnorm":
        x, w, res, _eps = args
        return (x, w, torch.empty_like(x)) + (() if res is None else (res,))
    if op == "rope":
        pos, q, k, cache = args
        return (pos, cache, q, k)
    if op == "silu_mul":
        return (args[0], args[1], torch.empty_like(args[0]))
    x, qw, _s, _z = args
    return (x, x.new_empty((*x.shape[:-1], qw.shape[-1])))


def allocation(op: str, args: tuple, plan):
    import torch

    x = args[2] if op == "rope" else args[0]
    if op == "w4a16":
        return lambda: torch.empty_like(plan.like)
    return (lambda: None) if op == "rope" else (lambda: torch.empty_like(x))


def native_call(op: str, args: tuple):
    from core.library import native

    if op == "rmsnorm":
        x, w, res, eps = args
        return lambda: native.rmsnorm(x, w, res, eps)
    if op == "rope":
        pos, q, k, cache = args
        t, half = pos.numel(), cache.shape[-1]
        return lambda: native.rope(pos, q.view(t, -1, 2, half), k.view(t, -1, 2, half), cache)
    if op == "silu_mul":
        return lambda: native.silu_mul(*args)
    x, qw, s, _z = args
    return lambda: native.w4a16(x, qw.view(-1, 16, qw.shape[-1]), s, None)


def measure(device: str, wanted: tuple, calls: int, rounds: int, folder: Path) -> dict:
    import torch

    from core.library import fast_launch, ops
    from core.library.dispatcher import Dispatcher
    from core.library.verify import VerifiedCache

    backend, dev = ("cuda", "cuda") if device == "cuda" else ("c", "cpu")
    lib = build(specs(device, wanted), backend, folder)
    d = Dispatcher(lib, verified=VerifiedCache(None), build_dir=folder / "builds", log_misses=False)
    ops.activate(d)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    report = {"device": d._device("gpu" if dev == "cuda" else "cpu", 0)[0], "backend": backend, "calls": calls,
              "rounds": rounds, "torch": torch.__version__, "python": sys.version.split()[0],
              "launcher": "compiled" if fast_launch.module() is not None else "ctypes", "ops": {}}
    used = {}
    for entry in lib.entries:
        op, problem = entry.op, dict(entry.problem)
        args = used[op] = inputs(op, problem, dev)
        public, impl = getattr(ops, op), getattr(ops, f"{op}_impl")
        public(*args)  # loads and verifies the entry, then makes the fast path's plan
        sync()
        plans = [p for k, p in ops._plans.items() if k[0] == op and p is not None]
        row = {"entry": entry.id, "how": d.calls_by(op), "refused": d.refused.get(entry.id), "fast_path": bool(plans)}
        row["op_us"] = host_us(lambda: public(*args), calls, rounds, sync)
        custom = getattr(torch.ops.abebot, op)
        row["custom_op_us"] = host_us(lambda: custom(*args), calls, rounds, sync)
        row["dispatcher_us"] = host_us(lambda: impl(*args), calls, rounds, sync)
        if plans:
            src = sources(op, args)
            row["plan_call_us"] = host_us(lambda: plans[0].call(*src), calls, rounds, sync)
            row["alloc_us"] = host_us(allocation(op, args, plans[0]), calls, rounds, sync)
        loaded = d._loaded.get(entry.id)
        if loaded is not None:
            row.update(raw_launches(loaded, d, impl, args, calls, rounds, sync))
        # the native path is slow (a w4a16 dequantises its whole weight): fewer calls, to stay within a minute
        row["native_us"] = host_us(native_call(op, args), min(calls, 20), min(rounds, 10), sync)
        report["ops"][op] = row
    first = lib.entries[0]
    report["check"] = check(first.op, dict(first.problem), dev, d, used[first.op])
    ops.activate(None)
    return report


def build(wanted: list, backend: str, folder: Path):
    """The library of ``wanted`` (op, problem, genome), its entries compiled in parallel."""
    from concurrent.futures import ThreadPoolExecutor

    from core.library.from_genome import write_entry
    from core.library.manifest import Library

    root = folder / "lib"
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:  # the compilers are subprocesses
        entries = list(pool.map(lambda w: write_entry(root, w[0], w[1], backend, folder / "cc", genome=w[2]), wanted))
    lib = Library(model=None, root=root)
    for entry in entries:
        lib.add(entry)
    lib.save(root)
    return Library.load(root)


def raw_launches(loaded, d, impl, args, calls: int, rounds: int, sync) -> dict:
    """``compiled_us``, ``ctypes_us`` and ``backend_us``: the entry's template bound again on the
    call's tensors with each kind of launch object, called with no argument (no pointer to write)."""
    from core.library import fast_launch
    from core.library.launch import FastCudaKernel

    problem, shaped = _capture(d, impl, args)
    original = getattr(loaded.kernel, "_kernel", None)
    if original is None:
        return {}
    out = {}
    if isinstance(loaded.kernel, FastCudaKernel):
        if fast_launch.module() is not None:
            out["compiled_us"] = host_us(_bound(loaded, FastCudaKernel(original), problem, shaped), calls, rounds, sync)
        out["ctypes_us"] = host_us(_bound(loaded, FastCudaKernel(original, compiled=False), problem, shaped),
                                   calls, rounds, sync)
    out["backend_us"] = host_us(_bound(loaded, original, problem, shaped), calls, rounds, sync)
    return out


def _capture(d, impl, args) -> tuple:
    """(problem, the tensors in the workload's shapes) of one dispatcher call of ``impl`` on ``args``."""
    captured: dict = {}
    real = d.run

    def spy(op, problem, tensors, kind="cpu", index=0, shaped=None):
        captured.update(problem=problem, shaped=shaped() if shaped is not None else tensors)
        return real(op, problem, tensors, kind, index, shaped)

    d.run = spy
    try:
        captured["result"] = impl(*args)
    finally:
        del d.run  # the instance attribute goes; the method is back
    return captured["problem"], captured["shaped"]


def _bound(loaded, kernel, problem: dict, tensors: dict):
    """The template's bind with ``kernel`` on the captured tensors."""
    shape = {k: v for k, v in problem.items() if isinstance(v, int) and not isinstance(v, bool)}
    template = loaded.template({**loaded.entry.problem, **problem})
    arrays = {n: (t.detach().numpy() if loaded.numpy else t) for n, t in tensors.items()}
    weights = {n: arrays[n] for n in loaded.weights if n in arrays}
    packed = template.repack(kernel, loaded.runtime.arrays, weights, shape) if weights else {}
    launch = template.bind(kernel, {**arrays, **packed}, shape)
    return lambda: launch()  # (the tensors stay alive with the lambda's cells through ``launch``'s binder)


def check(op: str, problem: dict, dev: str, d, base: tuple) -> dict:
    """The public op on fresh activations, twice (new tensors: the fast path writes new pointers;
    the weights of ``base``, so the same plan serves them), against the native path on copies: the
    largest error relative to the reference's largest magnitude, and whether the dispatcher was
    bypassed (``fast_path``: no ``Dispatcher.run`` call) while counting both calls."""
    import torch

    from core.library import ops

    worst, before = 0.0, sum(v for k, v in d.calls_by(op).items() if k != "native")
    runs: list = []
    real = d.run
    d.run = lambda *a, **kw: runs.append(a[0]) or real(*a, **kw)
    try:
        for seed in (11, 12):
            args = _with_weights(op, inputs(op, problem, dev, seed), base)
            ref_args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
            got = _result(op, getattr(ops, op)(*args), args)
            want = _result(op, native_call(op, ref_args)(), ref_args)
            for g, w in zip(got, want):
                scale = max(float(w.float().abs().max()), 1e-6)
                worst = max(worst, float((g.float() - w.float()).abs().max()) / scale)
    finally:
        del d.run
    library_calls = sum(v for k, v in d.calls_by(op).items() if k != "native") - before
    tol = 2e-2 if problem.get("dtype") in ("bfloat16", "float16") else 1e-4
    return {"op": op, "max_rel_error": worst, "tolerance": tol, "library_calls": library_calls,
            "fast_path": not runs, "ok": worst <= tol and library_calls == 2}


def _with_weights(op: str, args: tuple, base: tuple) -> tuple:
    """``args`` with the weights of ``base`` (the 4-bit words and scales, the norm's weight, the
    rotary cache)."""
    if op == "w4a16":
        return (args[0], *base[1:])
    if op == "rmsnorm":
        return (args[0], base[1], args[2], args[3])
    if op == "rope":
        return (*args[:3], base[3])
    return args


def _result(op: str, out, args: tuple) -> tuple:
    if op == "rope":
        return (args[1], args[2])
    if op == "rmsnorm" and args[2] is not None:
        return (out, args[2])
    return (out,)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated, from " + ",".join(OPS))
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=60)
    args = ap.parse_args(argv)
    wanted = tuple(o for o in args.ops.split(",") if o)
    if args.calls < 1 or args.rounds < 1 or not wanted or any(o not in OPS for o in wanted):
        print(f"--calls and --rounds must be at least 1 and --ops a list from {','.join(OPS)}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="abebot-libovh-") as tmp:
        report = measure(args.device, wanted, args.calls, args.rounds, Path(tmp))
    print(json.dumps(report, indent=1))
    return 0 if report["check"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
