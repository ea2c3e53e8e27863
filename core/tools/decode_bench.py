"""``python -m core decode-bench``: one decode step of a random 4-bit Llama, two ways, in one process.

* (a) the PyTorch baseline: projections on torch's int4 kernel (``torch._weight_int4pack_mm``; the
  native dequantise-then-matmul on a CPU), each decoder layer under ``torch.compile`` (unless
  ``--no-compile`` or it fails: the report says which), the step replayed as a CUDA graph;
* (b) AbeBot: the same weights, ``core.library.patch(model, library)``, the step replayed as a CUDA
  graph. Without a library every op call misses and runs the native path: (b) is then labelled
  "native ops (no library)", not AbeBot's kernels.

It reports ms per step and tokens/s (batch 1; when ``--layers`` is below the model's count, the
full-model figure is projected from the measured per-layer time and LM head, and says so), a per-
kernel breakdown (torch profiler), the library's dispatch counts, the speculative verify step at
M = K + 1 (``--verify``), and the logits of (b) (and (a)) against a float32 reference of the same
dequantised weights. Bad input is one line and exit status 2 (raised as ValueError).
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

from core.library.models import ModelError, ModelShape, load_model
from core.tools.decode_format import command_line, format_record

TINY = ModelShape("tiny", hidden=256, intermediate=512, heads=4, kv_heads=2, head_dim=64, vocab=512, layers=2)
EPS = 1e-5
TORCH_DEVICES = ("cpu", "cuda")


def add_parser(sub) -> None:
    """Add ``decode-bench`` to ``sub`` (an argparse subparsers)."""
    p = sub.add_parser("decode-bench", help="time one decode step of a random 4-bit Llama: PyTorch vs the library")
    p.add_argument("--model", default="llama-3.1-70b", help="llama-3.1-8b, llama-3.1-70b, qwen2.5-72b, tiny "
                                                            "(2 layers, hidden 256) or a JSON shape file")
    p.add_argument("--layers", type=int, default=None, help="decoder layers to build (default: all of the model's)")
    p.add_argument("--context", default="1024", help="tokens already in the KV cache; several, e.g. 1024,8192,32768: "
                                                     "one record each, from one model (one build, one compile)")
    p.add_argument("--batch", type=int, default=1, help="sequences per step (only 1 for now)")
    p.add_argument("--steps", type=int, default=None, help="steps of the logits check (default 100 on a GPU, 4 on a CPU)")
    p.add_argument("--device", default=None, help="cuda or cpu (default cuda where available)")
    p.add_argument("--library", default=None, metavar="DIR", help="an existing library folder for (b)")
    p.add_argument("--seed-library", action="store_true",
                   help="build (b)'s library here from the templates' seed genomes (C on a CPU, CUDA C on a GPU)")
    p.add_argument("--champions", default=None, metavar="JSON",
                   help="build (b)'s library from these champion genomes (e.g. benchmarks/suites/cold_recheck_genomes.json)")
    p.add_argument("--backend", default=None, help="the backend of a built library (default: the first backend for "
                                                    "the device: c on a CPU, cuda on a GPU)")
    p.add_argument("--library-out", default=None, metavar="DIR", help="where a built library goes (default a temp dir)")
    p.add_argument("--build-cache", default=None, metavar="DIR",
                   help="compile cache of a built library (default LIB/.cc): share it between runs of other contexts")
    p.add_argument("--verify", default="", help="speculative verify steps: drafted token counts K, e.g. 1,2,3,4,7")
    p.add_argument("--fuse", default="", help="fusions for (b) on top of the library's ops: norm-qkv (RMSNorm into "
                                             "the QKV GEMV, the rmsnorm_w4a16 workload); see core/tools/decode_fuse.py")
    p.add_argument("--no-compile", action="store_true", help="(a) without torch.compile")
    p.add_argument("--copies", type=int, default=None, help="layer copies rotated between steps (default: enough to "
                                                             "exceed 4x the L2 cache)")
    p.add_argument("--rounds", type=int, default=5, help="timing rounds (median reported)")
    p.add_argument("--iters", type=int, default=20, help="steps per timing round")
    p.add_argument("--tolerance", type=float, default=None,
                   help="reference top-2 logit gap below which a step is reported apart (default 0.05 GPU, 1e-3 CPU)")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.add_argument("--save", nargs="?", const="auto", default=None, metavar="DIR",
                   help="also write the record as JSON into DIR; bare: beside (b)'s library (LIB/decode-bench/), "
                        "else $ABEBOT_DECODE_DIR (default decode-bench/ beside the runs folder), where the "
                        "dashboard's Benchmark page finds it")
    p.set_defaults(decode_parser=p)


def cmd(args) -> int:
    """Run the benchmark (module docstring); prints a table or the JSON record (a JSON list, one record
    per context, when ``--context`` names several)."""
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731

    def saved(record: dict) -> None:
        if args.save:
            from core.tools.decode_records import save, save_folder

            say(f"record saved to {save(record, save_folder(args.save, lasting_library(args)))}")

    records = run_all(args, say=say, on_record=saved)
    if args.json:
        print(json.dumps(records[0] if len(records) == 1 else records, indent=1))
    else:
        print("\n\n".join(format_record(r) for r in records))
    return 0


def contexts(spec: str | int) -> list[int]:
    """The contexts of ``--context`` ("1024" or "1024,8192,32768"); ValueError for anything else."""
    try:
        out = [int(x) for x in str(spec).split(",")]
    except ValueError:
        raise ValueError(f"--context takes token counts like 1024 or 1024,8192,32768, not {spec!r}") from None
    if any(not 1 <= c <= 1 << 20 for c in out):
        raise ValueError("--context must be from 1 to 1048576")
    return out


def lasting_library(args) -> str | None:
    """(b)'s library folder when it outlives the process (``--library``, or a build's ``--library-out``)."""
    return args.library or (args.library_out if args.seed_library or args.champions else None)


def _validate(args) -> tuple[ModelShape, torch.device]:
    try:
        shape = TINY if args.model.strip().lower() == "tiny" else load_model(args.model)
    except ModelError as exc:
        raise ValueError(str(exc)) from None
    if args.batch != 1:
        raise ValueError("--batch: only batch 1 is supported for now")
    if args.layers is not None and not 1 <= args.layers <= shape.layers:
        raise ValueError(f"--layers must be from 1 to {shape.layers} for {shape.name}")
    contexts(args.context)
    fusions(args.fuse)
    for name in ("rounds", "iters"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name} must be at least 1")
    if args.steps is not None and not 1 <= args.steps <= 100000:
        raise ValueError("--steps must be from 1 to 100000")
    if args.copies is not None and not 1 <= args.copies <= 256:
        raise ValueError("--copies must be from 1 to 256")
    if sum(x is not None and x is not False for x in (args.library, args.champions, args.seed_library or None)) > 1:
        raise ValueError("give one of --library, --seed-library, --champions")
    if args.library and not Path(args.library).is_dir():
        raise ValueError(f"--library {args.library} is not a folder")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type not in TORCH_DEVICES:
        raise ValueError(f"--device must be cuda or cpu, not {args.device}")
    if device.type != "cpu" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA GPU here")
    return shape, device


def fusions(spec: str) -> tuple[str, ...]:
    """The fusions of ``--fuse`` ("norm-qkv"); ValueError for an unknown one."""
    from core.tools.decode_fuse import FUSIONS

    names = tuple(x.strip() for x in spec.split(",") if x.strip())
    bad = [x for x in names if x not in FUSIONS]
    if bad:
        raise ValueError(f"--fuse: unknown fusion {bad[0]!r} (choose from: {', '.join(FUSIONS)})")
    return names


def verify_counts(spec: str) -> list[int]:
    """The K values of ``--verify`` ("1,2,4"); ValueError for anything but integers 1 to 15."""
    if not spec.strip():
        return []
    try:
        ks = [int(x) for x in spec.split(",")]
    except ValueError:
        raise ValueError(f"--verify takes drafted token counts like 1,2,3,4,7, not {spec!r}") from None
    if any(not 1 <= k <= 15 for k in ks):
        raise ValueError("--verify: each K must be from 1 to 15")
    return ks


def _copies(shape: ModelShape, layers: int, device: torch.device) -> int:
    """Layer copies so that the weights the rotation reads are at least 4x the L2 cache."""
    if device.type == "cpu":
        return 1
    qkv = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    per_layer = sum(n * k // 2 + n * k // 64 for n, k in ((qkv, shape.hidden), (shape.hidden, shape.heads * shape.head_dim),
                    (2 * shape.intermediate, shape.hidden), (shape.hidden, shape.intermediate)))
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
    return max(1, min(64, math.ceil(4 * l2 / (per_layer * layers))))


def run(args, say=lambda line: None) -> dict:
    """The benchmark's record at ``--context`` (one context; module docstring)."""
    records = run_all(args, say)
    if len(records) != 1:
        raise ValueError("run() takes one --context; run_all() takes several")
    return records[0]


def run_all(args, say=lambda line: None, on_record=lambda record: None) -> list[dict]:
    """One record per context of ``--context``, from one model, baseline and library (module docstring);
    ``on_record`` gets each record as soon as it is complete (``--save`` writes it then, so a run cut
    short keeps the contexts it finished)."""
    from core.library import ops

    shape, device = _validate(args)
    ks, ctxs = verify_counts(args.verify), contexts(args.context)
    gpu = device.type != "cpu"
    steps = args.steps if args.steps is not None else (100 if gpu else 4)
    capacity = {c: -(-(c + steps + max(ks + [0]) + 1) // 64) * 64 for c in ctxs}
    champions = None
    if args.champions:  # read before the model is built: a bad file costs nothing
        from core.tools.decode_library import backend_for, load_champions

        champions = load_champions(args.champions, backend_for(args, device))
    layers = args.layers or shape.layers
    copies = args.copies or _copies(shape, layers, device)
    from core.tools.decode_memory import check_fits, estimate

    top = max(capacity.values())
    lib = bool(args.library or args.seed_library or args.champions)
    need = check_fits(shape, layers, copies, top, device, lib) if gpu else estimate(shape, layers, copies, top, 4, lib)
    s = _setup(args, shape, device, layers, copies, top, champions, say, tuple(sorted(set(capacity.values()))))
    records = []
    try:
        for c in ctxs:
            records.append(_context(args, s, c, capacity[c], ks, steps, say))
            records[-1]["memory_estimate_bytes"] = need["total"]  # of the largest context, before anything was built
            on_record(records[-1])
    finally:
        ops.activate(None)
    return records


class _Setup:
    """What every context of one run shares: the model, (a)'s twin, (b)'s patch, (a)'s compiled layer."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _setup(args, shape, device, layers, copies, capacity, champions, say, kv_capacities=()) -> _Setup:
    from core.library.decode_model import DecodeLlama, int4_baseline
    from core.library.manifest import Library
    from core.tools.decode_library import library_for
    from core.library.patch import patch
    from core.library.verify import VerifiedCache

    gpu = device.type != "cpu"
    dtype = torch.bfloat16 if gpu else torch.float32
    dtype_name = str(dtype).rpartition(".")[2]
    say(f"building {shape.name}: {layers} layers x {copies} copies, rotary up to {capacity}, {dtype_name} on {device}")
    model = DecodeLlama(shape, layers, capacity, copies, EPS, dtype, str(device)).eval()
    baseline, baseline_linear = int4_baseline(model)
    lib, b_label, origins = library_for(args, shape, device, dtype_name, capacity, champions, fusions(args.fuse), say,
                                        kv_capacities)
    root = Path(lib.root) if lib is not None and lib.root else Path(tempfile.mkdtemp(prefix="decode-verified-"))
    report = patch(model, lib if lib is not None else Library(), verified=VerifiedCache(root / "verified.json"),
                   build_dir=root / "builds", log_misses=lib is not None)
    fused = {}
    if "norm-qkv" in fusions(args.fuse):
        from core.tools.decode_fuse import FUSIONS, fuse_norm_qkv

        fused["norm-qkv"] = len(fuse_norm_qkv(model))
        b_label += f"; fused: {FUSIONS['norm-qkv']} in {fused['norm-qkv']} layers"
    layer_fn, a_label = None, "eager"
    if not args.no_compile and gpu:
        cfg = torch._dynamo.config  # one compiled layer serves every layer; the limit covers M and context changes
        limit = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
        setattr(cfg, limit, max(getattr(cfg, limit), 64))
        layer_fn, a_label = torch.compile(_run_layer), "torch.compile per layer"
    return _Setup(shape=shape, device=device, gpu=gpu, dtype=dtype, layers=layers, copies=copies, model=model,
                  baseline=baseline, baseline_linear=baseline_linear, b_label=b_label, origins=origins, report=report,
                  layer_fn=layer_fn, a_label=a_label, fused=fused)


def _context(args, s: _Setup, ctx: int, capacity: int, ks, steps, say) -> dict:
    """The record of one context (its own KV caches, freed after)."""
    from core.library.decode_model import KVCache

    say(f"context {ctx}: KV caches of capacity {capacity}")
    if s.gpu:
        torch.cuda.reset_peak_memory_stats(s.device)
    caches = [KVCache(s.shape, s.layers, capacity, ctx, s.dtype, s.device) for _ in "ab"]
    tolerance = args.tolerance if args.tolerance is not None else (0.05 if s.gpu else 1e-3)
    record = _measure(args, s, ctx, caches, ks, steps, tolerance, say)
    d = s.report.dispatcher
    record.update({
        "measured_at": time.time(), "command": command_line(args),
        "model": s.shape.name, "layers": s.layers, "model_layers": s.shape.layers, "copies": s.copies,
        "context": ctx, "kv_capacity": capacity, "batch": 1,
        "device": torch.cuda.get_device_name(s.device) if s.gpu else "cpu", "dtype": str(s.dtype).rpartition(".")[2],
        "weight_bytes_per_step": s.model.weight_bytes(), "torch": torch.__version__,
        "peak_memory_bytes": torch.cuda.max_memory_allocated(s.device) if s.gpu else None,
        "a": {**record["a"], "label": f"{s.baseline_linear}, {record['a']['mode']}" + (", CUDA graph" if s.gpu else "")},
        "b": {**record["b"], "label": s.b_label + (", CUDA graph" if s.gpu else ", eager")},
        "library_entries": s.origins, "dispatch": d.counts(),
        "dispatch_by_op": {op: d.calls_by(op) for op in ("rmsnorm", "rope", "silu_mul", "w4a16", "attention_decode")
                           + (("rmsnorm_w4a16",) if s.fused else ())},
        "fused": s.fused,
        "dispatch_note": "calls counted at eager and capture time, since the run began (all its contexts); a graph "
                         "replay repeats the captured launches; the op replays of the breakdown add their own calls",
        "refused": dict(d.refused), "patched": {k: len(v) for k, v in s.report.swapped.items()}})
    del caches
    if s.gpu:
        torch.cuda.empty_cache()
    return record


def _run_layer(layer, positions, hidden, residual, k_cache, v_cache, meta):
    return layer(positions, hidden, residual, k_cache, v_cache, meta)


def _measure(args, s: _Setup, ctx: int, caches, ks, steps, tolerance, say) -> dict:
    from core.tools.decode_engine import GraphFn, Step, breakdown, check_logits, time_steps
    from core.tools.decode_ops import op_breakdown

    model, baseline, gpu, device = s.model, s.baseline, s.gpu, s.device
    cache_a, cache_b = caches

    def make_a(positions):
        if s.layer_fn is not None:
            try:
                return Step(baseline, cache_a, positions, gpu, s.layer_fn)
            except Exception as exc:  # noqa: BLE001 -- "torch.compile where it works"
                say(f"torch.compile failed ({type(exc).__name__}: {str(exc)[:200]}); (a) runs eager")
                s.layer_fn, s.a_label = None, f"eager (torch.compile failed: {type(exc).__name__})"
        return Step(baseline, cache_a, positions, gpu)

    say("capturing the one-token steps")
    with torch.no_grad():
        a1, b1 = make_a([ctx]), Step(model, cache_b, [ctx], gpu)
        hidden = torch.randn(1, model.shape.hidden, dtype=model.lm_head.weight.dtype, device=device)
        head = GraphFn(lambda: baseline.head(hidden, hidden), device)
    say("timing")
    t = time_steps({"a": a1, "b": b1, "head": head}, device, args.rounds, args.iters)
    full = model.shape.layers

    def figures(ms):
        out = {"ms_per_step": round(ms, 4), "tokens_per_s": round(1000 / ms, 2)}
        if model.n_layers < full:
            proj = t["head"]["ms"] + (ms - t["head"]["ms"]) * full / model.n_layers
            out.update({"projected_full_model_ms": round(proj, 4), "projected_full_model_tokens_per_s":
                        round(1000 / proj, 2), "projection": f"(step - LM head) x {full}/{model.n_layers} + LM head"})
        return out

    rec = {"a": {**figures(t["a"]["ms"]), "timing": t["a"]}, "b": {**figures(t["b"]["ms"]), "timing": t["b"]},
           "lm_head_ms": round(t["head"]["ms"], 4)}
    rec["b_over_a_speedup"] = round(t["a"]["ms"] / t["b"]["ms"], 4)
    say("profiling")
    rec["a"]["breakdown"], rec["b"]["breakdown"] = breakdown(a1), breakdown(b1)
    say("replaying each op alone (the per-op breakdown)")
    for w, m, cache in (("a", baseline, cache_a), ("b", model, cache_b)):
        try:
            rec[w]["ops"] = op_breakdown(m, cache, [ctx], t[w]["ms"], device, args.rounds, args.iters)
        except Exception as exc:  # noqa: BLE001 -- the breakdown is not worth the step's own figures
            say(f"the op replay of ({w}) failed: {type(exc).__name__}: {str(exc)[:300]}")
            rec[w]["ops"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    if s.layer_fn is not None and "rows" in rec["a"]["ops"]:
        rec["a"]["ops"]["note"] = ("(a)'s ops replayed eager: the step itself runs each layer compiled, whose fused "
                                   "kernels the op replay does not see")
    verify = []
    for k in ks:
        say(f"verify step K={k}")
        with torch.no_grad():
            pos = list(range(ctx, ctx + k + 1))
            tk = time_steps({"a": make_a(pos), "b": Step(model, cache_b, pos, gpu)}, device, args.rounds, args.iters)
        verify.append({"K": k, "M": k + 1, **{w: {"ms": round(tk[w]["ms"], 4),
                                                  "x_one_token_step": round(tk[w]["ms"] / t[w]["ms"], 4)}
                                              for w in ("a", "b")}})
    rec["verify"] = verify
    rec["verify_projection"] = {
        "note": "projected, not measured: no draft model here, its cost excluded; tokens per verify step = the mean "
                "acceptance length (accepted drafts + the bonus token), at most K + 1",
        "rows": [{"K": v["K"], "acceptance_length": acc, **{f"{w}_tokens_per_s": round(1000 * acc / v[w]["ms"], 2)
                                                             for w in ("a", "b")}}
                 for v in verify for acc in (2, 3, 4) if acc <= v["K"] + 1]}
    rec["a"]["mode"] = s.a_label
    say(f"checking the logits over {steps} steps")
    rec["b"]["logits"] = check_logits(b1, model, cache_b.like(torch.float32), ctx, steps, tolerance)
    rec["a"]["logits"] = check_logits(a1, model, cache_a.like(torch.float32), ctx, steps, tolerance)
    return rec
