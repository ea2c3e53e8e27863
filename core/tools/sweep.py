"""``python -m core sweep``: measure a gene space through the normal evaluator and record it.

Every genome goes the way a run's candidates go (render, static check, compile, sandbox, the
protocol's verification and paired timing) and is measured ``--repeats`` times, so the table holds
the noise a search meets. The space is the workload's, or a sub-space around the first seed
(``--vary``); it is listed exhaustively, or ``--sample N`` canonical genomes are drawn with ``--seed S``.
The record is a folder (``--out``, created; :mod:`core.search.table`), written part by part: running
the same command again resumes, measuring only the genomes not yet recorded.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import time
from pathlib import Path

from core.search.table import HEADER, compact, read_header, recorded_hashes, row_from_measures, write_header, write_part

# What a resumed sweep must share with the folder's header.
IDENTITY = ("workload", "backend", "problem", "vary", "mode", "sample", "seed", "repeats")


def add_parser(sub, default_runs_dir: str) -> None:
    p = sub.add_parser("sweep", help="measure a gene space (exhaustive or sampled) into a Parquet table; resumable")
    p.add_argument("--workload", required=True, help="workload family, e.g. rmsnorm")
    p.add_argument("--backend", required=True, help="c, cuda or triton")
    p.add_argument("--problem", default=None, help='problem sizes as JSON, e.g. \'{"rows": 16, "cols": 256}\'')
    p.add_argument("--vary", default="", help="comma-separated genes to vary (the others keep the first seed's "
                                              "values); empty: every gene")
    p.add_argument("--sample", type=int, default=0, help="measure N random canonical genomes (0: every genome)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample")
    p.add_argument("--repeats", type=int, default=3, help="measurements of each genome (its time samples)")
    p.add_argument("--out", required=True, help="the sweep folder (created; the same command resumes it)")
    p.add_argument("--device", type=int, default=0, help="device index for the backend")
    p.add_argument("--devices", default="", help="spread the genomes over these devices (0,1,... or all), as a run "
                                                 "does; times are scaled to the first device's")
    p.add_argument("--seconds", type=float, default=None, help="timed repetitions per kernel, in seconds")
    p.add_argument("--part", type=int, default=16, help="genomes per Parquet part (what an interruption can lose)")
    p.add_argument("--limit", type=int, default=0, help="stop after measuring this many genomes (0: all)")
    p.add_argument("--runs-dir", default=default_runs_dir, help="its .cache is the compile cache")


def plan(args: argparse.Namespace):
    """(config, space, genomes, header) of a sweep; UsageError/ConfigError for bad input."""
    from core.cli_parser import UsageError
    from core.config import RunConfig
    from core.search.space import SpaceError, enumerate_space, has_sequence, sample_space, subspace
    from core.search.timing_cache import timer_version

    for name, lo, hi in (("sample", 0, 10_000_000), ("repeats", 1, 100), ("part", 1, 100_000), ("limit", 0, 10_000_000)):
        if not lo <= getattr(args, name) <= hi:
            raise UsageError(f"--{name} must be from {lo} to {hi}")
    if args.seconds is not None and not 0 < args.seconds <= 60:
        raise UsageError("--seconds must be in (0, 60]")
    try:
        problem = json.loads(args.problem) if args.problem else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"--problem is not valid JSON: {exc.msg}") from None
    cfg = RunConfig.from_dict({"workload": args.workload, "backend": args.backend, "problem": problem,
                               "device": args.device, "devices": args.devices, "init": "random", "population": 2,
                               "elites": 0})
    space = full_space(cfg)
    vary = [v.strip() for v in args.vary.split(",") if v.strip()]
    try:
        base = space.seed_genomes()[0]
        space = subspace(space, base, vary)
        if args.sample:
            genomes = sample_space(space, args.sample, args.seed)
        elif has_sequence(space):
            raise SpaceError("the space has a sequence gene: give --sample N, or --vary the genes to list")
        else:
            genomes = enumerate_space(space)
    except SpaceError as exc:
        raise UsageError(str(exc)) from None
    header = {"workload": cfg.workload, "backend": cfg.backend, "problem": cfg.problem, "vary": vary,
              "base_genome": json.loads(base.to_json()), "mode": "sample" if args.sample else "exhaustive",
              "sample": args.sample, "seed": args.seed, "repeats": args.repeats, "n_genomes": len(genomes),
              "space_genomes": None if args.sample else len(genomes), "timer_version": timer_version(),
              "command": "python -m core sweep " + " ".join(shlex.quote(a) for a in sys.argv[2:])
              if sys.argv[1:2] == ["sweep"] else None}
    return cfg, space, genomes, header


def full_space(cfg):
    """The workload's whole gene space for ``cfg``'s backend and problem."""
    from core.search.space import workload_space

    return workload_space(cfg.workload, cfg.backend, cfg.problem)


def _check_resume(out: Path, header: dict) -> None:
    from core.cli_parser import UsageError

    if not (out / HEADER).exists():
        if out.exists() and any(out.iterdir()):
            raise UsageError(f"--out {out} exists and is not a sweep folder: give a new folder")
        return
    old = read_header(out)
    for key in IDENTITY:
        if old.get(key) != header.get(key):
            raise UsageError(f"--out {out} holds a sweep with {key} {old.get(key)!r}, not {header.get(key)!r}: "
                             "give another folder")


def cmd_sweep(args: argparse.Namespace) -> int:
    """Measure the planned genomes not yet recorded in ``--out``; exit 0 when every one is recorded."""
    from core.cli_parser import UsageError
    from core.evaluation.cluster import make_evaluator
    from core.tools.library_entry import toolchain

    cfg, space, genomes, header = plan(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder")
    _check_resume(out, header)
    done = recorded_hashes(out)
    todo = [g for g in genomes if g.hash not in done]
    if args.limit:
        todo = todo[: args.limit]
    print(f"sweep {cfg.workload}/{cfg.backend}: {len(genomes)} genomes ({header['mode']}), {len(done)} recorded, "
          f"measuring {len(todo)} x {args.repeats}", flush=True)
    if not todo:
        return 0
    runs_dir = Path(args.runs_dir)
    options = {} if args.seconds is None else {"timing_target_s": args.seconds}
    with _hold(runs_dir, cfg, f"sweep {out}"):  # DeviceBusy (exit 2) when a run holds one
        out.mkdir(parents=True, exist_ok=True)
        evaluator = make_evaluator(cfg, runs_dir / ".cache", log=lambda line: print(line, flush=True),
                                   log_path=out / "sandbox.log", **options)
        try:
            base = evaluator.start()
            device = base.get("device") or {}
            header.update(device=device.get("name"), device_record=device, toolchain=toolchain(device.get("versions") or {}),
                          baseline={k: base.get(k) for k in ("primary", "time_us", "memory_bytes", "stability", "spread_us")},
                          started_at=header.get("started_at") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            if (out / HEADER).exists():
                header = {**read_header(out), **{k: header[k] for k in ("command",) if header.get(k)}}
            _measure(evaluator, todo, args.repeats, args.part, out, header)
        finally:
            evaluator.close()
    recorded = recorded_hashes(out)
    if all(g.hash in recorded for g in genomes):
        compact(out)  # finished: one Parquet file
    print(f"recorded {len(recorded)} of {len(genomes)} genomes in {out}", flush=True)
    return 0


@contextlib.contextmanager
def _hold(runs_dir: Path, cfg, holder: str):
    """The device lock of every device the sweep measures on (UsageError for a device not here)."""
    from core.backends import backend_class
    from core.cli_parser import UsageError
    from core.evaluation import devices
    from core.run.device_lock import hold_device

    cls = backend_class(cfg.backend)
    try:
        slots = devices.plan(cls.device_kind, cfg.backend, cfg.devices, cfg.device, len(cls.devices()))
    except devices.DevicesError as exc:
        raise UsageError(str(exc)) from None
    with contextlib.ExitStack() as stack:
        for index in sorted({slot.index for slot in slots}):
            stack.enter_context(hold_device(runs_dir, cfg.backend, index, holder))
        yield


def _measure(evaluator, todo, repeats: int, part: int, out: Path, header: dict) -> None:
    t0 = time.monotonic()
    for start in range(0, len(todo), part):
        batch = todo[start: start + part]
        rounds = [[e.to_dict() for e in evaluator.evaluate(batch)] for _ in range(repeats)]
        rows = [row_from_measures(g.to_json(), g.hash, [r[i] for r in rounds]) for i, g in enumerate(batch)]
        cache = next((r["cache"] for r in rows if r.get("cache")), None)
        if cache and not header.get("cache"):
            header["cache"] = cache
        write_part(out, rows)
        write_header(out, header)
        n = start + len(batch)
        print(f"  {n}/{len(todo)} measured ({sum(r['status'] == 'ok' for r in rows)} of the last {len(batch)} ok, "
              f"{time.monotonic() - t0:.0f} s)", flush=True)
