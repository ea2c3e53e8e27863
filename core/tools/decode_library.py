"""A small kernel library for the decode step, built here from genomes (no evolution run).

:func:`decode_specs` lists every (op, problem) a :class:`~core.library.decode_model.DecodeLlama`
step at M tokens calls; :func:`build_library` writes one entry per spec with
:func:`core.library.from_genome.write_entry`: from the template's seed genome, or, with
``champions`` (a JSON list as in ``benchmarks/suites/cold_recheck_genomes.json``: name, workload,
backend, genome), from the champion genome named for that part (``qkv_m1``, ``o_m1``,
``gate_up_m1`` for both gate and up, ``down_m1``, ``rmsnorm_1``, ``rmsnorm_res_1``, ``rope_1``,
``fused_qkv_m1`` for the fused RMSNorm + QKV)
rendered at this model's shapes. A champion that does not render at these shapes falls back to the
seed genome; :func:`build_library` says which genome each entry came from.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from core.backends import backend_class
from core.library.from_genome import write_entry
from core.library.manifest import Library
from core.library.models import ModelShape
from core.library.quant_linear import GROUP

DTYPE_NAMES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16"}


def decode_specs(s: ModelShape, tokens: int, dtype: str, eps: float, max_positions: int,
                 fuse: tuple[str, ...] = (), kv_capacities: tuple[int, ...] = ()) -> list[tuple[str, dict, str]]:
    """(op, problem, part) of every library call of a step at M = ``tokens``; ``dtype`` a workload
    dtype name ("float32" is left out of the problems: the C backend's default). With ``"norm-qkv"``
    in ``fuse`` (:mod:`core.tools.decode_fuse`), the QKV GEMV and the residual-free RMSNorm give way
    to one ``rmsnorm_w4a16`` entry (part ``fused_qkv_m1``). Attention gets one entry per KV cache
    capacity in ``kv_capacities`` (default ``max_positions``): its kernels split the cache they are
    given, so each context's cache has its own entry."""
    extra = {} if dtype == "float32" else {"dtype": dtype}
    qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
    parts = {"qkv_m1": (qkv, s.hidden), "o_m1": (s.hidden, s.heads * s.head_dim),
             "gate_up_m1": (s.intermediate, s.hidden), "down_m1": (s.hidden, s.intermediate)}
    fused = "norm-qkv" in fuse
    if fused:
        del parts["qkv_m1"]
    specs, seen = [], set()
    for part, (n, k) in parts.items():
        if (n, k) in seen:  # two parts of one shape share a key: one entry
            continue
        seen.add((n, k))
        specs.append(("w4a16", {"m": tokens, "n": n, "k_groups": k // GROUP, "zero_points": False, **extra}, part))
    specs += [("rmsnorm", {"rows": tokens, "cols": s.hidden, "residual": r, "eps": eps, **extra},
               "rmsnorm_res_1" if r else "rmsnorm_1") for r in ((True,) if fused else (False, True))]
    if fused:
        specs.append(("rmsnorm_w4a16", {"m": tokens, "n": qkv, "k_groups": s.hidden // GROUP, "eps": eps, **extra},
                      "fused_qkv_m1"))
    specs.append(("rope", {"tokens": tokens, "q_heads": s.heads, "kv_heads": s.kv_heads, "half_dim": s.head_dim // 2,
                           "max_positions": max_positions, **extra}, "rope_1"))
    specs.append(("silu_mul", {"tokens": tokens, "hidden": s.intermediate, **extra}, "silu_mul_1"))
    specs += [("attention_decode", {"batch": 1, "queries": tokens, "kv_heads": s.kv_heads, "group": s.heads // s.kv_heads,
                                    "head_dim": s.head_dim, "context": cap, **extra}, "attention_1")
              for cap in (kv_capacities or (max_positions,))]
    return specs


# Decode attention reads the step's length on the device, which only the Triton template does
# (core.library.attention): its entry is built with Triton beside a CUDA C library, from the fast
# seed (flash-decoding over 16 splits) when no champion is named, and left to the native path on a CPU.
ATTENTION_BACKEND = "triton"
ATTENTION_SEED = 1


def load_champions(path: str | Path, backend: str) -> dict[str, dict]:
    """{part name: genome dict} of the champions in ``path`` for ``backend``; ValueError (one line)
    for a missing or malformed file."""
    try:
        rows = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"champion file {path} does not exist") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"champion file {path} is unreadable: {exc}") from None
    if not isinstance(rows, list):
        raise ValueError(f"champion file {path} must hold a JSON list")
    out = {}
    for row in rows:
        if isinstance(row, dict) and row.get("backend") == backend and isinstance(row.get("name"), str):
            g = row.get("genome")
            out[row["name"]] = json.loads(g) if isinstance(g, str) else g
    return out


def build_library(root: Path, specs: list[tuple[str, dict, str]], backend: str, cache: Path,
                  champions: dict[str, dict] | None = None, say=lambda line: None) -> tuple[Library, list[dict]]:
    """The library at ``root`` with one entry per spec, and per entry where its genome came from
    ({op, part, genome: "champion" | "seed" | "seed (champion failed: ...)"})."""
    lib = Library(model=None, root=Path(root))
    origins = []
    for op, problem, part in specs:
        genome, origin = (champions or {}).get(part), "seed"
        entry, b, seed = None, backend, 0
        if op == "attention_decode":
            if backend_class(backend).device_kind != "gpu":
                continue
            b, seed = ATTENTION_BACKEND, ATTENTION_SEED
        if genome is not None:
            try:
                entry, origin = write_entry(Path(root), op, problem, b, cache, genome=genome), "champion"
            except Exception as exc:  # noqa: BLE001 -- a champion of other shapes may not render here
                origin = f"seed (champion failed: {type(exc).__name__}: {str(exc)[:160]})"
        if entry is None:
            entry = write_entry(Path(root), op, problem, b, cache, seed=seed)
        say(f"library entry {op} {part}: {origin}")
        lib.add(entry)
        origins.append({"op": op, "part": part, "genome": origin})
    lib.save(root)
    return Library.load(root), origins


def library_for(args, shape, device, dtype_name: str, capacity: int, champions, fuse: tuple[str, ...],
                say, kv_capacities: tuple[int, ...] = ()) -> tuple:
    """(b)'s library for decode-bench's ``args``: (library or None, what (b) runs, entry origins); built
    here (:func:`build_library`) for ``--seed-library`` or ``--champions``."""
    from core.tools.decode_bench import EPS

    if args.library:
        return Library.load(args.library), f"library {args.library}", []
    if not (args.seed_library or args.champions):
        return None, "native ops (no library): every call misses and runs the native PyTorch path", []
    from core.backends import availability

    backend = backend_for(args, device)
    why = availability(backend)
    if why:
        raise ValueError(f"cannot build a {backend} library here: {why}")
    root = Path(args.library_out or tempfile.mkdtemp(prefix="decode-lib-"))
    cache = Path(args.build_cache) if args.build_cache else root / ".cc"
    lib, origins = build_library(root, decode_specs(shape, 1, dtype_name, EPS, capacity, fuse, kv_capacities), backend,
                                 cache, champions, say)
    used = sum(o["genome"] == "champion" for o in origins)
    source = f"{used} champion genomes of {args.champions}, the rest seeds" if champions is not None \
        else "the templates' seed genomes"
    return lib, f"library built at {root} from {source} ({backend}, M=1 entries)", origins


def backend_for(args, device) -> str:
    """The backend of a built library: ``--backend``, else the first one for the device's kind."""
    from core.backends import BACKENDS, backend_class

    kind = "cpu" if device.type == "cpu" else "gpu"
    backend = args.backend or next(b for b in BACKENDS if backend_class(b).device_kind == kind)
    if backend not in BACKENDS or backend_class(backend).device_kind != kind:
        raise ValueError(f"--backend {backend} does not run on {device} (choose from: {', '.join(BACKENDS)})")
    return backend
