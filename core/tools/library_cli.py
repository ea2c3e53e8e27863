"""``python -m core library build|add|verify``: the grammar (:func:`add_parser`) and the commands.

Bad input (an unknown model, a malformed model file, a library of another format version, a
tampered entry in the library being added to, a bad ``--budget``/``--m``/``--ops``) is one line on
stderr and exit status 2, before anything is written. ``verify`` exits 1 when an entry fails.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub, runs_dir_default: str) -> None:
    """Add the ``library`` command and its three subcommands to ``sub`` (an argparse subparsers)."""
    lib = sub.add_parser("library", help="build, extend and verify a kernel library (docs/library.md)")
    cmds = lib.add_subparsers(dest="library_command", required=True, parser_class=type(lib))
    build = cmds.add_parser("build", help="evolve one entry per (op, shape, M bucket) of a model into a library")
    build.add_argument("--model", default=None,
                       help="llama-3.1-8b, llama-3.1-70b, qwen2.5-72b or a JSON shape file (docs/library.md)")
    build.add_argument("--ops", default="all", help="parts to build, comma-separated: qkv,o,gate_up,down,rmsnorm,"
                                                    "rope,silu_mul,lm_head (default all)")
    build.add_argument("--m", default="1,2,4,8,16,32,64", help="M buckets (tokens), comma-separated")
    build.add_argument("--budget", default="8", help="generations per entry (8), a total time (2h, 90m) or a time "
                                                     "per entry (10m/entry)")
    build.add_argument("--backend", default="c", help="c, cuda or triton")
    build.add_argument("--device", type=int, default=0, help="device index for the backend")
    build.add_argument("--out", required=True, help="the library folder (created, or extended)")
    build.add_argument("--from-misses", default=None, metavar="LOG",
                       help="plan the entries a dispatcher missed (a misses.jsonl) instead of a model's table")
    build.add_argument("--small", action="store_true",
                       help="divide every model size by 64: a real library of tiny shapes in seconds (CI)")
    build.add_argument("--population", type=int, default=None, help="individuals per generation (default 16)")
    build.add_argument("--seed", type=int, default=None, help="random seed of every run")
    build.add_argument("--run-config", default=None, metavar="FILE",
                       help="more run settings as a JSON object (as in a run's config.json), e.g. timeout_s")
    build.add_argument("--rounds", type=int, default=3, help="bench rounds when re-timing each champion")
    build.add_argument("--no-warm-start", action="store_true", help="start every run from the seeds alone")
    build.add_argument("--runs-dir", default=runs_dir_default, help="folder holding the runs (and the device lock)")
    add = cmds.add_parser("add", help="add the champions of existing runs to a library")
    add.add_argument("dir", help="the library folder (created, or extended)")
    add.add_argument("runs", nargs="+", metavar="RUN", help="run ids in --runs-dir")
    add.add_argument("--rounds", type=int, default=3, help="bench rounds when re-timing each champion")
    add.add_argument("--runs-dir", default=runs_dir_default)
    verify = cmds.add_parser("verify", help="re-verify and re-time every entry here (exit 1 when one fails)")
    verify.add_argument("dir", help="the library folder")
    verify.add_argument("--device", type=int, default=0, help="device index for each entry's backend")
    verify.add_argument("--min-speedup", type=float, default=None,
                        help="also fail an entry slower than this times its fastest baseline (e.g. 1.0)")
    verify.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    verify.add_argument("--runs-dir", default=runs_dir_default, help="its .locks hold the device lock")


def cmd_library(args: argparse.Namespace) -> int:
    """Dispatch ``library build|add|verify``; bad input raises ValueError (the CLI: exit 2)."""
    return {"build": _build, "add": _add, "verify": _verify}[args.library_command](args)


def _say(line: str) -> None:
    print(line, flush=True)


def _build(args: argparse.Namespace) -> int:
    from core.library.models import load_model
    from core.tools.library_build import Budget, BuildSettings, build, open_library
    from core.tools.library_plan import SMALL_DIVISOR, parse_ms, parse_parts, plan, plan_from_misses, read_misses

    if not 1 <= args.rounds <= 100:
        raise ValueError("--rounds must be from 1 to 100")
    model = load_model(args.model) if args.model else None
    if args.from_misses:
        items = plan_from_misses(read_misses(args.from_misses), args.backend,
                                 head_dim=model.head_dim if model else 128)
    elif model is None:
        raise ValueError("library build needs --model (or --from-misses LOG)")
    else:
        items = plan(model, parse_parts(args.ops), parse_ms(args.m), args.backend,
                     SMALL_DIVISOR if args.small else 1)
    settings = _settings(args)
    budget = Budget.parse(args.budget, len(items))
    out = Path(args.out)
    lib = open_library(out, model.name if model else None)
    s = BuildSettings(runs_dir=Path(args.runs_dir), device=args.device, budget=budget, settings=settings,
                      rounds=args.rounds, warm_start=not args.no_warm_start, label=out.name)
    if items:
        from core.tools.library_build import run_config

        for item in items:  # a bad setting or a workload without this backend: exit 2 before any run starts
            run_config(item, s, "")
        _check_backend(args.backend, args.device)
    each = f"{budget.generations} generations" if budget.generations else f"{budget.hours * 60:.1f} min"
    _say(f"library {out}: {len(items)} entries planned ({each} each)")
    written = build(lib, out, items, s, log=_say)
    _say(f"library {out}: {len(written)} entries written, {len(lib.entries)} in all")
    return 0


def _settings(args: argparse.Namespace) -> dict:
    out: dict = {}
    if args.run_config:
        try:
            out = json.loads(Path(args.run_config).read_text())
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--run-config {args.run_config}: {getattr(exc, 'strerror', None) or exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"--run-config {args.run_config} is not valid JSON: {exc.msg}") from None
        if not isinstance(out, dict):
            raise ValueError(f"--run-config {args.run_config} must hold a JSON object of settings")
        for fixed in ("workload", "backend", "problem", "device", "generations", "hours", "start_from"):
            out.pop(fixed, None)
    for name in ("population", "seed"):
        if getattr(args, name) is not None:
            out[name] = getattr(args, name)
    return out


def _check_backend(backend: str, device: int) -> None:
    from core.backends import availability, backend_class

    reason = availability(backend)
    if reason:
        raise ValueError(f"backend {backend!r} is not available here: {reason}")
    if not 0 <= device < len(backend_class(backend).devices()):
        raise ValueError(f"backend {backend!r} has no device {device}")


def _add(args: argparse.Namespace) -> int:
    from core.tools.library_build import open_library
    from core.tools.library_entry import add_run
    from store.runs import run_dir

    if not 1 <= args.rounds <= 100:
        raise ValueError("--rounds must be from 1 to 100")
    runs_dir = Path(args.runs_dir)
    folders = [run_dir(runs_dir, rid) for rid in args.runs]
    missing = [f.name for f in folders if not f.is_dir()]
    if missing:
        raise ValueError(f"no run {missing[0]!r} in {runs_dir}")
    out = Path(args.dir)
    lib = open_library(out, None)
    for folder in folders:
        entry = add_run(lib, out, folder, runs_dir, rounds=args.rounds, log=lambda line: _say("  " + line))
        lib.save(out)
        _say(f"entry {entry.id}: {entry.figures['time_us']:.2f} us, {entry.figures['speedup']:.3f}x "
             f"{entry.figures['primary']} (run {folder.name})")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from core.library.manifest import Library
    from core.tools.library_verify import format_rows, verify_library

    lib = Library.load(args.dir)
    rows = verify_library(lib, Path(args.dir), Path(args.runs_dir), device=args.device,
                          min_speedup=args.min_speedup, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(rows, indent=1) if args.json else format_rows(rows))
    return 1 if any(not r["ok"] for r in rows) else 0
