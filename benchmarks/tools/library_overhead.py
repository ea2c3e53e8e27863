#!/usr/bin/env python3
"""Host time per call of the library's torch ops (issue 28's goal: <= 5 us on the H200).

Builds a library in a temporary folder at decode shapes -- on ``--device cuda`` from the champion
genomes of ``benchmarks/suites/cold_recheck_genomes.json`` (w4a16 down M=1, RMSNorm with residual
at 1 row, RoPE at 1 token; SiLU*mul from its template's seed), Llama-3.1-70B's sizes in bf16; on
``--device cpu`` from the C templates' seed genomes at tiny sizes in fp32 (a call's own time near a
microsecond, so that the dispatch cost shows) -- then, per op,
the microseconds of host time of one eager call of:

* ``library_us`` -- the public op (``core.library.ops``): dispatcher lookup, cached launcher, launch;
* ``raw_us`` -- the cached launcher alone (the kernel launch the dispatcher ends in);
* ``backend_us`` -- the backend's own bound launch (CuPy on a GPU), what an export's launch costs;
* ``native_us`` -- the native path (the workload's PyTorch implementation).

Calls are queued back to back and timed by the host clock before the device is waited for (on a
CPU a call is synchronous, so each figure includes the kernel's own time; compare ``library_us``
with ``raw_us``). Each figure is the median over ``--reps`` rounds of ``--calls`` calls, and
``fastest_round_us`` the fastest round of each (on a shared machine, contention only adds). Prints
one JSON object.

    python3 -m benchmarks.tools.library_overhead --device cuda [--calls 200] [--reps 9]
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
MINIMA: list[float] = []  # the fastest round of each host_us call (contention only ever adds)


def specs(device: str) -> list[tuple[str, dict, dict | None]]:
    """(op, problem, genome or None for the seed) of the library the tool builds."""
    if device == "cpu":
        # tiny sizes: a call's own time stays near a microsecond, so the dispatch cost shows
        return [("rmsnorm", {"rows": 1, "cols": 256, "residual": True}, None),
                ("rope", {"tokens": 1, "q_heads": 2, "kv_heads": 1, "half_dim": 32, "max_positions": 64}, None),
                ("silu_mul", {"tokens": 1, "hidden": 256}, None),
                ("w4a16", {"m": 1, "n": 64, "k_groups": 1}, None)]
    known = {e["name"]: e for e in json.loads(GENOMES.read_text())}
    out = [(op, dict(known[name]["problem"]), json.loads(known[name]["genome"])) for op, name in CHAMPIONS.items()]
    return out + [("silu_mul", {"tokens": 1, "hidden": 28672}, None)]


def inputs(op: str, problem: dict, dev: str):
    """The op's public-function arguments at ``problem``'s sizes, and the native call's."""
    import torch

    dt = getattr(torch, problem["dtype"])
    if op == "rmsnorm":
        x, res = torch.randn(problem["rows"], problem["cols"], device=dev, dtype=dt), None
        res = torch.randn_like(x)
        w = torch.rand(problem["cols"], device=dev, dtype=dt) + 0.5
        return (x, w, res, problem["eps"])
    if op == "rope":
        t, h = problem["tokens"], 2 * problem["half_dim"]
        pos = torch.randint(0, problem["max_positions"], (t,), device=dev, dtype=torch.int32)
        cache = torch.rand(problem["max_positions"], 2, problem["half_dim"], device=dev, dtype=dt)
        return (pos, torch.randn(t, problem["q_heads"] * h, device=dev, dtype=dt),
                torch.randn(t, problem["kv_heads"] * h, device=dev, dtype=dt), cache)
    if op == "silu_mul":
        return tuple(torch.randn(problem["tokens"], problem["hidden"], device=dev, dtype=dt) for _ in range(2))
    k, n = 128 * problem["k_groups"], problem["n"]
    qw = torch.randint(-2**31, 2**31 - 1, (k // 8, n), device=dev, dtype=torch.int32)
    scales = (torch.rand(k // 128, n, device=dev) * 1e-3 + 1e-3).to(dt)
    return (torch.randn(problem["m"], k, device=dev, dtype=dt), qw, scales, None)


def host_us(fn, calls: int, reps: int, sync) -> float:
    """Median over ``reps`` of the host microseconds per call of ``calls`` calls queued back to back."""
    for _ in range(10):
        fn()
    sync()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        sync()
    MINIMA.append(round(min(out), 3))
    return round(statistics.median(out), 3)


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


def measure(device: str, calls: int, reps: int, folder: Path) -> dict:
    import torch

    from core.library import ops
    from core.library.dispatcher import Dispatcher
    from core.library.from_genome import seed_library
    from core.library.verify import VerifiedCache

    backend, dev = ("cuda", "cuda") if device == "cuda" else ("c", "cpu")
    built = [(op, problem, genome) for op, problem, genome in specs(device)]
    lib = None
    for op, problem, genome in built:
        lib = seed_library(folder / "lib", [(op, problem)], backend, folder / "cc", genome=genome) if lib is None else \
            _add(lib, op, problem, backend, folder / "cc", genome)
    d = Dispatcher(lib, verified=VerifiedCache(None), build_dir=folder / "builds", log_misses=False)
    ops.activate(d)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    report = {"device": d._device("gpu" if dev == "cuda" else "cpu", 0)[0], "backend": backend, "calls": calls,
              "reps": reps, "torch": torch.__version__, "ops": {}}
    for entry in lib.entries:
        op, problem = entry.op, dict(entry.problem)
        args = inputs(op, problem, dev)
        public = getattr(ops, op)
        public(*args)  # loads and verifies the entry
        sync()
        loaded = d._loaded.get(entry.id)
        row = {"entry": entry.id, "how": d.calls_by(op), "refused": d.refused.get(entry.id)}
        row["library_us"] = host_us(lambda: public(*args), calls, reps, sync)
        if loaded is not None:
            sig, problem_, tensors, shaped = _capture(d, public, args)  # tensors kept alive while timed
            row["raw_us"] = host_us(_raw(loaded, sig, problem_, tensors), calls, reps, sync)
            row["dispatch_us"] = round(row["library_us"] - row["raw_us"], 3)
            original = getattr(loaded.kernel, "_kernel", None)
            if original is not None:  # the backend's own launch (CuPy; ctypes on a CPU) on the same tensors
                row["backend_us"] = host_us(_backend_launch(loaded, original, problem_, shaped), calls, reps, sync)
        row["native_us"] = host_us(native_call(op, args), calls, reps, sync)
        names = [k for k in ("library_us", "raw_us", "backend_us", "native_us") if k in row]
        row["fastest_round_us"] = dict(zip(names, MINIMA))  # host_us ran in this order
        MINIMA.clear()
        report["ops"][op] = row
    ops.activate(None)
    return report


def _add(lib, op, problem, backend, cache, genome):
    from core.library.from_genome import write_entry

    lib.add(write_entry(lib.root, op, problem, backend, cache, genome=genome))
    lib.save(lib.root)
    return lib


def _raw(loaded, sig: tuple, problem: dict, tensors: dict):
    """The launcher a call ends in, its pointers set to ``tensors`` (what a call does before it)."""
    names = loaded._weight_names
    bound = loaded._bound[(sig, *[tensors[n].data_ptr() for n in names if n in tensors]) if names else sig]
    if bound.slots is None:
        return bound.by_address[tuple(t.data_ptr() for t in tensors.values())]
    for launch, positions, names in bound.slots:
        launch.update(positions, [tensors[n].data_ptr() for n in names])
    return bound.fn


def _capture(d, public, args) -> tuple:
    """(signature, problem, tensors, the tensors in the workload's shapes) of one call of ``public`` on
    ``args`` through dispatcher ``d``."""
    captured: dict = {}
    real = d.run

    def spy(op, problem, tensors, kind="cpu", index=0, shaped=None):
        captured.update(sig=(op, kind, index, *problem.values()), problem=problem, tensors=tensors,
                        shaped=shaped() if shaped is not None else tensors)
        return real(op, problem, tensors, kind, index, shaped)

    d.run = spy
    try:
        captured["result"] = public(*args)
    finally:
        del d.run  # the instance attribute goes; the method is back
    return captured["sig"], captured["problem"], captured["tensors"], captured["shaped"]


def _backend_launch(loaded, kernel, problem: dict, tensors: dict):
    """The template's bind with the backend's own kernel object on the captured tensors."""
    shape = {k: v for k, v in problem.items() if isinstance(v, int) and not isinstance(v, bool)}
    template = loaded.template({**loaded.entry.problem, **problem})
    arrays = {n: (t.detach().numpy() if loaded.numpy else t) for n, t in tensors.items()}
    weights = {n: arrays[n] for n in loaded.weights if n in arrays}
    packed = template.repack(kernel, loaded.runtime.arrays, weights, shape) if weights else {}
    launch = template.bind(kernel, {**arrays, **packed}, shape)
    launch.keep = (tensors, packed)
    return launch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args(argv)
    if args.calls < 1 or args.reps < 1:
        print("--calls and --reps must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="abebot-libovh-") as tmp:
        print(json.dumps(measure(args.device, args.calls, args.reps, Path(tmp)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
