"""The entry contract of each workload x backend: what a hand-written kernel must look like.

Generated from the templates themselves (their first seed's rendered source, launch dict and
``bind()``, recorded on simulated devices), so docs/contract.md's "Bring your own kernel" cannot drift from
the code: ``python -m core check --contract [W [B]]`` prints it.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import platform
import re
import textwrap
from typing import Any, Callable

from core.backends.base import DeviceInfo, KernelSource
from core.tools.check import CheckInputError, seed_kernel
from core.tools.check_result import fmt_shape, jsonable

# The devices the contract is printed for, on any machine (so docs/contract.md does not depend on where it was made).
SIMULATED = {
    "gpu": DeviceInfo(backend="", index=0, name="NVIDIA H200 (simulated)", memory_bytes=141 << 30, multiprocessors=132,
                      shared_mem_per_block=232448, registers_per_block=65536, registers_per_thread=255,
                      max_threads_per_block=1024, l2_bytes=60 << 20, memory_bandwidth=4.8e12, arch="sm_90"),
    "cpu": DeviceInfo(backend="", index=0, name="CPU (simulated)", memory_bytes=16 << 30, multiprocessors=2,
                      l2_bytes=32 << 20, arch=platform.machine()),
}


class _Launch(dict):
    """A launch dict that remembers which keys were read."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.read: list[str] = []

    def __getitem__(self, key: str) -> Any:
        if key not in self.read:
            self.read.append(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self.read:
            self.read.append(key)
        return super().get(key, default)


class _Tensor:
    """A stand-in for a tensor argument, named."""

    def __init__(self, name: str):
        self.name = name


class _Module:
    """A stand-in for a generated (Triton) module: records the functions bind() calls on it."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("__"):
            raise AttributeError(name)

        def fn(*args: Any) -> int:
            self.calls.append((name, args))
            return 0
        return fn


class _Recorder:
    """A stand-in for a loaded kernel: records what ``Template.bind`` passes to it."""

    def __init__(self, launch: dict):
        self.launch_params = _Launch(launch)
        self.resources: dict = {}
        self.module = _Module()
        self.calls: list[tuple] = []

    def bind(self, *args: Any) -> Callable[[], None]:
        self.calls.append(args)
        return lambda: None

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)


def _device(backend: str) -> DeviceInfo:
    """A simulated device of the backend's kind: the contract reads the same on every machine."""
    return dataclasses.replace(SIMULATED[_caps(backend).device_kind], backend=backend)


def _record_bind(template: Any, kernel: KernelSource, shape: dict) -> _Recorder:
    tensors = {t.name: _Tensor(t.name) for t in template.workload.tensors(template.problem)}
    rec = _Recorder(kernel.launch)
    launch = template.bind(rec, tensors, shape)
    if callable(launch):
        launch()
    return rec


def _markers(shape: dict) -> dict:
    """The shape with a distinct odd value per dimension, so each int argument names its dimension."""
    return {k: 1009 + 12 * i for i, k in enumerate(shape)}


def _describe(value: Any, shape: dict, problem: dict, tensors: dict, language: str = "c",
              single_dtype: bool = True) -> tuple[str, str]:
    """(what an argument is, its role) from what bind() passed."""
    if isinstance(value, _Tensor):
        t = tensors[value.name]
        dims = ", ".join(str(d) for d in t.dims)
        role = {"input": "input: read only, must come back unchanged",
                "output": "output: write every element, nothing outside it",
                "inout": "input and output: read, then updated in place"}[t.role]
        dtype = t.dtype or (problem["dtype"] if single_dtype else "of the problem's dtype")
        return f"`{t.name}` ({dims}) {dtype}, row-major, contiguous", role
    if value is None:
        return ("`None`" if language == "python" else "`NULL`"), "absent in this problem"
    if isinstance(value, int) and not isinstance(value, bool):
        for k, v in shape.items():
            if v == value:
                return f"`{k}`", "size of the shape being run"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for k, v in problem.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v) == float(value):
                return f"`{k}` = {v}", "problem setting"
    return f"`{value!r}`", "value worked out by bind()"


def _signature(source: str, entry: str) -> str | None:
    """The C/CUDA declaration of ``entry`` in ``source``, on one line."""
    m = re.search(r"(?:^|\n)([^\n;{}#]*?\bvoid\b[^;{}]*?\b%s\s*\(([^)]*)\))\s*\{" % re.escape(entry), source)
    if not m:
        return None
    text = re.sub(r"__launch_bounds__\s*\([^)]*\)\s*", "", m.group(1))
    return " ".join(text.split())


def _parameters(signature: str) -> list[str]:
    inside = signature[signature.index("(") + 1: signature.rindex(")")]
    return [" ".join(p.split()) for p in inside.split(",") if p.strip()]


def _python_def(source: str, name: str) -> str | None:
    m = re.search(r"^def %s\((.*?)\)\s*(?:->[^:]*)?:" % re.escape(name), source, re.M | re.S)
    return f"def {name}({' '.join(m.group(1).split())})" if m else None


def _typedefs(workload: Any, backend: str, device: DeviceInfo) -> list[tuple[str, str]]:
    """(dtype, what ``T`` is) over the dtypes the backend offers, where the source typedefs T."""
    from core.backends import backend_class

    param = next((p for p in workload.params if p.kind == "dtype"), None)
    if param is None:
        return []
    out = []
    for dtype in backend_class(backend).dtypes:
        if param.choices and dtype not in param.choices:
            continue
        problem = workload.validate_problem({param.name: dtype}, backend)
        tpl = workload.template(backend, problem, device)
        m = re.search(r"typedef\s+([\w ]+?)\s+T\s*;", seed_kernel(tpl).source)
        if m:
            out.append((dtype, m.group(1)))
    return out


def _runtime_keys(backend: str) -> list[str]:
    """Launch keys the backend's runtime reads itself (``artifact.launch[...]``), from its source."""
    from core.backends import BACKENDS

    module = __import__(BACKENDS[backend].split(":")[0], fromlist=["_"])
    text = inspect.getsource(module)
    return sorted(set(re.findall(r"artifact\.launch(?:\.get\(|\[)\s*[\"'](\w+)[\"']", text)))


def _binding(template: Any, kernel: KernelSource) -> tuple[list[tuple[str, str]], _Recorder, _Recorder]:
    """What each argument of the call bind() makes is, on a marker shape; and the two recordings
    (marker shape, the problem's own shape)."""
    shape = template.workload.shapes(template.problem)[0]
    marked = _markers(shape)
    rec = _record_bind(template, kernel, marked)
    real = _record_bind(template, kernel, shape)
    tensors = {t.name: t for t in template.workload.tensors(template.problem)}
    caps = _caps(template.backend)
    single = len(caps.dtypes) == 1
    return [_describe(a, marked, template.problem, tensors, caps.language, single) for a in _call_args(rec)], rec, real


def _caps(backend: str) -> Any:
    from core.backends import backend_class

    return backend_class(backend)


def _call_args(rec: _Recorder) -> tuple:
    """The kernel arguments of the recorded call (a CUDA bind passes (grid, block, args, shared))."""
    if not rec.calls:
        return ()
    call = rec.calls[-1]
    if len(call) >= 3 and isinstance(call[2], tuple) and isinstance(call[0], tuple):
        return call[2]
    return call


def contract(workload_name: str, backend: str) -> dict:
    """The entry contract of one workload x backend, from its template: entry, declaration,
    arguments, launch keys, and for GPU launches how bind() makes the grid."""
    from core.backends import backend_class
    from core.workloads import get_workload

    wl = get_workload(workload_name)
    if backend not in wl.templates:
        raise CheckInputError(f"workload {workload_name!r} has no {backend!r} template (has: {', '.join(wl.templates)})")
    caps = backend_class(backend)
    device = _device(backend)
    problem = wl.default_problem(backend)
    tpl = wl.template(backend, problem, device)
    kernel = seed_kernel(tpl)
    described, rec, real = _binding(tpl, kernel)
    out: dict[str, Any] = {
        "workload": workload_name, "backend": backend, "language": caps.language, "entry_kind": caps.entry_kind,
        "entry": kernel.entry,
        "flags": list(kernel.flags), "device": device.name, "problem": problem,
        "launch": jsonable(kernel.launch), "bind_reads": list(rec.launch_params.read),
        "runtime_reads": _runtime_keys(backend), "module_calls": [n for n, _ in rec.module.calls],
        "arguments": described, "variants": [],
    }
    out["shapes"] = [fmt_shape(s) for s in wl.shapes(problem)]
    out["tolerances"] = _tolerance_by_dtype(wl, backend)
    if caps.language == "python":
        out["launch_def"] = _python_def(kernel.source, "launch")
        out["module_defs"] = {n: _python_def(kernel.source, n) for n in out["module_calls"]}
        out["parameters"] = _parameters(out["launch_def"]) if out["launch_def"] else []
    else:
        sig = _signature(kernel.source, kernel.entry)
        out["signature"] = sig
        out["parameters"] = _parameters(sig) if sig else []
        out["types"] = _typedefs(wl, backend, device)
    if real.calls and _call_args(real) is not real.calls[-1]:  # a grid launch: (grid, block, args[, shared])
        call = real.calls[-1]
        out["grid_example"] = {"shape": wl.shapes(problem)[0], "grid": list(call[0]), "block": list(call[1]),
                               "shared_bytes": int(call[3]) if len(call) > 3 else 0}
        out["bind_source"] = textwrap.dedent(inspect.getsource(type(tpl).bind)).strip()
    # A flag of the problem that changes what bind() passes (rmsnorm's residual) is listed too.
    for p in wl.params:
        if p.kind != "flag":
            continue
        flipped = wl.validate_problem({p.name: not problem[p.name]}, backend)
        other = wl.template(backend, flipped, device)
        args, _, _ = _binding(other, seed_kernel(other))
        if args != described:
            out["variants"].append({"setting": {p.name: flipped[p.name]}, "arguments": args})
    return out


def _tolerance_by_dtype(workload: Any, backend: str) -> list[tuple[str, float, float]]:
    """(dtype, atol, rtol) of the outputs for every dtype the backend offers (on the default shape)."""
    param = next((p for p in workload.params if p.kind == "dtype"), None)
    dtypes = [d for d in _caps(backend).dtypes if param is None or not param.choices or d in param.choices]
    out = []
    for dtype in dtypes:
        problem = workload.validate_problem({param.name: dtype} if param else {}, backend)
        written = next(t for t in workload.tensors(problem) if t.written)
        atol, rtol = workload.tolerance(written.dtype_in(problem), workload.shapes(problem)[0])
        out.append((written.dtype_in(problem), atol, rtol))
    return out


def format_contract(c: dict) -> str:
    """One workload x backend's contract as Markdown (docs/contract.md's "Bring your own kernel")."""
    lines = [f"#### `{c['workload']}` × `{c['backend']}`", ""]
    launch = dict(c["launch"])
    if c["language"] == "python":
        names = [p.split("=")[0].strip() for p in c["parameters"]]
        lines.append(f"A Python module (Triton `@triton.jit` kernels) defining `{c['launch_def']}`, called as "
                     f"`launch({', '.join(names[:len(c['arguments'])])})` with torch tensors on the device; it picks "
                     f"the grid and launches (returning Triton's compiled handle, if it likes, for the register count). "
                     f"The entry name `{c['entry']}` is informational.")
        for name, d in c.get("module_defs", {}).items():
            lines.append(f"The module must also define `{d or name + '(...)'}` (bind() calls it; return 0 for no workspace).")
    else:
        lines.append(f"Entry `{c['entry']}`: {c['entry_kind']}; flags `{' '.join(c['flags'])}`.")
        lines += ["", "```c", f"{c['signature']}", "```"]
        if c.get("types"):
            by_type: dict[str, list[str]] = {}
            for d, t in c["types"]:
                by_type.setdefault(t, []).append(d)
            lines.append("`T` is " + ", ".join(f"`{t}` for {' and '.join(ds)}" for t, ds in by_type.items()) +
                         " (16-bit types arrive as their raw bits).")
    lines += ["", "| # | parameter | bound to | role |", "|---|---|---|---|"]
    params = c.get("parameters") or []
    for i, (what, role) in enumerate(c["arguments"]):
        p = f"`{params[i]}`" if i < len(params) else "-"
        lines.append(f"| {i} | {p} | {what} | {role} |")
    for v in c["variants"]:
        setting = ", ".join(f"{k}={json.dumps(x)}" for k, x in v["setting"].items())
        changed = [f"#{i} is {w} ({r})" for i, (w, r) in enumerate(v["arguments"])
                   if i >= len(c["arguments"]) or c["arguments"][i] != (w, r)]
        lines.append(f"\nWith {setting}: " + "; ".join(changed) + ".")
    keys = ", ".join(f"`{k}`" for k in launch) or "none"
    lines.append("")
    lines.append(f"Called on the problem's own shape ({c['shapes'][0]} by default; timed) and on "
                 f"{'; '.join(c['shapes'][1:])} (verification). Tolerance |out - ref| <= atol + rtol |ref|: "
                 + ", ".join(f"{d} atol {a:g} rtol {r:g}" for d, a, r in c["tolerances"]) + ".")
    lines.append("")
    lines.append(f"Launch dict of the first seed ({keys}): `{json.dumps(launch)}`; `--launch` merges into it. "
                 f"bind() reads {_keys(c['bind_reads'])}; the backend's loader looks up {_keys(c['runtime_reads'])}.")
    if "grid_example" in c:
        g = c["grid_example"]
        lines.append(f"Grid and block come from the launch dict through bind(); at {fmt_shape(g['shape'])} on "
                     f"{c['device']} the seed launches grid `{tuple(g['grid'])}`, block `{tuple(g['block'])}`, "
                     f"{g['shared_bytes']} B of dynamic shared memory:")
        lines += ["", "```python", c["bind_source"], "```"]
    return "\n".join(lines)


def _keys(keys: list[str]) -> str:
    return ", ".join(f"`{k}`" for k in keys) if keys else "none"


def contract_pairs(workload: str | None = None, backend: str | None = None) -> list[tuple[str, str]]:
    """Every registered (workload, backend) pair, narrowed to ``workload`` and ``backend`` when given."""
    from core.backends import backend_class
    from core.workloads import WORKLOADS, get_workload

    try:
        names = [workload] if workload else list(WORKLOADS)
        wls = {n: get_workload(n) for n in names}
        if backend:
            backend_class(backend)
    except ValueError as exc:
        raise CheckInputError(str(exc)) from None
    pairs = [(n, b) for n, wl in wls.items() for b in wl.templates if backend in (None, b)]
    if not pairs:
        raise CheckInputError(f"workload {workload!r} has no {backend!r} template")
    return pairs


def contract_text(workload: str | None = None, backend: str | None = None) -> str:
    """The contracts of the selected pairs, as docs/contract.md's Markdown."""
    return "\n\n".join(format_contract(contract(w, b)) for w, b in contract_pairs(workload, backend))
