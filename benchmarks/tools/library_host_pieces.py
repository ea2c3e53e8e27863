#!/usr/bin/env python3
"""Where an op call's host time goes, measured on the CPU without a GPU (issue 28, the 5 us goal).

The CUDA launch path is run for real up to the driver: ``cuLaunchKernel`` is a stub library compiled
here (it returns at once), so each figure is the host cost of a piece *besides* the driver's own
launch time (which only a GPU measures: ``library_overhead.py --device cuda``'s ``compiled_us``).
Torch CPU tensors stand in for CUDA ones (same Python objects and calls). Each figure is the fastest
of ``--repeats`` rounds of ``--number`` calls, the pieces taking turns round by round (on a shared
machine contention only adds, and each piece meets the same quiet moments):

* ``custom_op_empty`` -- a ``torch.library.custom_op`` with 4 tensor arguments whose body returns
  a fresh empty tensor, called eagerly (what routing eager calls through the custom op would add);
* ``is_compiling``, ``key_lookup`` (the w4a16 fast-path key: shape, dtype, device, weights'
  addresses, one dict lookup), ``is_contiguous``, ``alloc_new_empty`` and ``alloc_empty_like`` (the w4a16
  output allocated from its shape, or like a tensor of its shape: what the fast path does),
  ``data_ptr``;
* ``ctypes_launch`` -- :class:`core.library.launch.CudaLaunch`'s call (ctypes, 11 arguments);
* ``compiled_launch`` / ``compiled_call_2_tensors`` -- the compiled launcher as packed, and writing
  two tensors' addresses first (the fast path's call);
* ``fast_path_w4a16`` -- ``core.library.ops.w4a16`` end to end with its plan's call on the stub.

    python3 -m benchmarks.tools.library_host_pieces [--number 5000] [--repeats 40]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STUB = ("int cuLaunchKernel(void *f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,"
        " unsigned s, void *st, void **p, void **x) { return 0; }\n")


def stub_driver(folder: Path) -> ctypes.CDLL:
    (folder / "stub.c").write_text(STUB)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", str(folder / "stub.c"), "-o", str(folder / "stub.so")], check=True)
    return ctypes.CDLL(str(folder / "stub.so"))


def pieces(number: int, repeats: int, folder: Path) -> dict:
    import torch

    from core.library import fast_launch, launch, ops
    from core.library.fast_launch_plan import Plan

    stub = stub_driver(folder)
    fn = stub.cuLaunchKernel
    fn.argtypes, fn.restype = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3, ctypes.c_int
    stream = (lambda device: 0)
    launch._cu_launch_kernel = lambda: fn  # this process only: the stub stands for the driver
    launch._stream_reader = lambda: stream
    launch._driver_address = lambda: ctypes.cast(fn, ctypes.c_void_p).value
    mod = fast_launch.module()

    @torch.library.custom_op("abebot_probe::empty4", mutates_args=(),
                             schema="(Tensor x, Tensor qw, Tensor s, Tensor? z) -> Tensor")
    def empty4(x, qw, s, z):
        return torch.empty(0)

    empty4.register_fake(lambda x, qw, s, z: torch.empty(0))
    x, y = torch.randn(1, 8192), torch.empty(1, 1024)
    qw, s = torch.zeros(1024, 1024, dtype=torch.int32), torch.ones(64, 1024)
    args = (x, qw, s, qw, y, 1, 1024, 64)
    ctypes_launch = launch.CudaLaunch(0xABC, (64,), (128,), args, 0, 0)
    out = {"launcher": "compiled" if mod is not None else "ctypes (no compiler)"}
    if mod is not None:
        compiled = launch.compiled_launch(0xABC, (64,), (128,), args, 0, 0)
        call = launch.caller(compiled, [(0,), (4,)], ("x", "y"))
        key = ("w4a16", x.shape, x.dtype, x.device, qw.data_ptr(), s.data_ptr(), None)
        ops._plans[key] = Plan([0], call, y, (qw, s))
    table = {
        "custom_op_empty": lambda: empty4(x, qw, s, None),
        "is_compiling": torch.compiler.is_compiling,
        "key_lookup": lambda: ops._plans.get(("w4a16", x.shape, x.dtype, x.device, qw.data_ptr(), s.data_ptr(), None)),
        "is_contiguous": x.is_contiguous,
        "alloc_new_empty": lambda: x.new_empty((1, 1024)),
        "alloc_empty_like": lambda: torch.empty_like(y),
        "data_ptr": x.data_ptr,
        "ctypes_launch": ctypes_launch,
    }
    if mod is not None:
        table.update({"compiled_launch": compiled, "compiled_call_2_tensors": lambda: call(x, y),
                      "fast_path_w4a16": lambda: ops.w4a16(x, qw, s)})
    best = {name: float("inf") for name in table}
    for f in table.values():
        f()
    for _ in range(repeats):  # round-robin: every piece meets the same quiet and busy moments
        for name, f in table.items():
            best[name] = min(best[name], timeit.timeit(f, number=number) / number * 1e6)
    out.update({name: round(t, 3) for name, t in best.items()})
    ops._plans.clear()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=40)
    a = ap.parse_args(argv)
    if a.number < 1 or a.repeats < 1:
        print("--number and --repeats must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="abebot-pieces-") as tmp:
        print(json.dumps({"us_per_call": pieces(a.number, a.repeats, Path(tmp))}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
