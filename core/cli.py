"""``python -m core``: run, resume, list and export evolutions from the shell.

Bad input (unknown workload or backend, population < 2, bad weights, a missing or corrupt run, an
unavailable backend, a problem too big for the device's memory (``core/evaluation/bounds.py``), a device another
run holds (``core/run/device_lock.py``)) prints one line on stderr and exits with status 2 before anything
is written.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from core.config import FIELDS, LEGACY_WEIGHT_NAMES, ConfigError, RunConfig, parse_weights

from core.cli_parser import UsageError, build_parser

EXIT_USAGE = 2


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """RunConfig from ``--config FILE`` (if given) overridden by the flags given, validated (ConfigError on bad input)."""
    raw = _config_file(args.config) if getattr(args, "config", None) else {}
    raw.update({name: getattr(args, name) for name in FIELDS
                if name not in ("weights", "problem") and getattr(args, name, None) is not None})
    if args.weights is not None:
        for name in LEGACY_WEIGHT_NAMES:  # an old config file's weights are replaced too
            raw.pop(f"weight_{name}", None)
        raw["weights"] = parse_weights(args.weights)
    if args.problem is not None:
        try:
            raw["problem"] = json.loads(args.problem)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--problem is not valid JSON: {exc.msg}") from None
    return RunConfig.from_dict(raw)


def _config_file(path: str) -> dict:
    """The JSON object in ``path`` (ConfigError, one line, when it is unreadable or not an object)."""
    try:
        raw = json.loads(_read_small(Path(path)))
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--config {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except ValueError as exc:  # too large, not UTF-8
        raise ConfigError(f"--config {path}: {_first_line(exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--config {path} must hold a JSON object of settings")
    return raw


def existing_run(args: argparse.Namespace) -> Path:
    """The folder of ``args.run_id`` inside ``args.runs_dir``; UsageError when unsafe or missing."""
    from store.runs import run_dir

    target = run_dir(Path(args.runs_dir), args.run_id)
    if not target.is_dir():
        raise UsageError(f"no run {args.run_id!r} in {args.runs_dir}")
    return target


def cmd_run(args: argparse.Namespace) -> int:
    from core.backends import availability, backend_class
    from store.runs import new_run_id, run_dir
    from store.writer import RunWriter

    cfg = config_from_args(args)
    from core.evaluation.disk_space import parse_bytes

    try:  # a bad disk threshold is bad input: refused before the run folder is written
        parse_bytes(os.environ.get("ABEBOT_MIN_FREE_BYTES", "") or "0")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not cfg.cluster:  # on a cluster the workers' devices count, not this host's (each worker checks its own)
        reason = availability(cfg.backend)
        if reason:
            raise UsageError(f"backend {cfg.backend!r} is not available here: {reason}")
        devices = backend_class(cfg.backend).devices()
        n_devices = len(devices)
        if cfg.device >= n_devices:
            raise UsageError(f"backend {cfg.backend!r} has {n_devices} device(s); --device {cfg.device} does not exist")
        from core.evaluation.bounds import check_fits

        check_fits(cfg, devices[cfg.device])  # ProblemTooBig (exit 2) before anything is written
        run_slots(cfg)  # UsageError (exit 2) for devices this machine does not have
    runs_dir = Path(args.runs_dir)
    run_id = args.run_id if args.run_id is not None else new_run_id(cfg.workload, cfg.backend)
    target = run_dir(runs_dir, run_id)
    if target.exists():
        raise UsageError(f"run {run_id!r} already exists in {runs_dir}")
    from core.run.warm_start import WarmStartError, check

    try:  # the runs to start from exist and evolved the same workload on the same backend
        check(runs_dir, cfg.start_from, cfg.workload, cfg.backend)
    except WarmStartError as exc:
        raise UsageError(str(exc)) from None
    with hold_devices(runs_dir, cfg, f"run {run_id}"):  # DeviceBusy (exit 2) when taken
        writer = RunWriter.create(runs_dir, run_id, json.loads(cfg.to_json()))
        print(f"run {run_id}", flush=True)
        return _work(writer, cfg, target, runs_dir)


def run_slots(cfg: RunConfig) -> list:
    """The device slots of ``cfg`` on this machine (UsageError for devices it does not have)."""
    from core.backends import backend_class
    from core.evaluation import devices

    cls = backend_class(cfg.backend)
    try:
        return devices.plan(cls.device_kind, cfg.backend, cfg.devices, cfg.device, len(cls.devices()))
    except devices.DevicesError as exc:
        raise UsageError(str(exc)) from None


@contextlib.contextmanager
def hold_devices(runs_dir: Path, cfg: RunConfig, holder: str):
    """The device lock of every device the run evaluates on (DeviceBusy, exit 2, for one taken)."""
    from core.run.device_lock import cluster_devices, hold_device

    on_cluster = cluster_devices(cfg.cluster, cfg.device)  # local:N holds its device here, like any run
    with contextlib.ExitStack() as stack:
        for index in sorted({slot.index for slot in run_slots(cfg)} if on_cluster is None else on_cluster):
            stack.enter_context(hold_device(runs_dir, cfg.backend, index, holder))
        yield


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue a run from its last committed generation.

    A pause or stop left in ``control.json`` (from the dashboard) is cleared, saying so, once this
    process holds the run: resuming means running. ``--keep-paused`` keeps (or makes) it paused.
    """
    from core.evaluation.bounds import check_fits
    from store.writer import RunWriter

    runs_dir = Path(args.runs_dir)
    target = existing_run(args)
    try:
        cfg = RunConfig.from_dict(json.loads(_read_small(target / "config.json")))
    except (OSError, ValueError) as exc:
        raise UsageError(f"run {args.run_id!r} has an unreadable config.json: {_first_line(exc)}") from None
    finished = _finished(target)
    if finished:  # nothing to continue: say so, measure nothing, change nothing
        print(finished, flush=True)
        return 0
    _same_run(target, cfg)
    if not cfg.cluster:  # ProblemTooBig (exit 2): the machine may have less memory free than when it started
        check_fits(cfg)
    with hold_devices(runs_dir, cfg, f"run {args.run_id} (resumed)"):  # DeviceBusy: exit 2
        writer = RunWriter.open(target)
        print(f"run {args.run_id}", flush=True)
        note = _take_control(target, bool(getattr(args, "keep_paused", False)))
        if note:
            print(note, flush=True)
        return _work(writer, cfg, target, runs_dir)


def _take_control(target: Path, keep_paused: bool) -> str | None:
    """Clear a pause or stop the dashboard left for the run (we hold its lock: no worker reads it
    now); with ``keep_paused`` leave it paused instead. The line to print, or None."""
    from store.control import read_control, write_control

    pending = read_control(target)
    if keep_paused:
        if pending != "pause":
            write_control(target, "pause")
        return "resuming paused (--keep-paused): Resume it from the dashboard's Monitor page"
    if pending in ("pause", "stop"):
        write_control(target, "resume")
        asked = "paused" if pending == "pause" else "stopped"
        return f"control.json asked the run to be {asked}; cleared: resuming (--keep-paused keeps a run paused)"
    return None


# What makes a run the run it is: resuming with another of these in config.json would mix two runs.
IDENTITY = ("workload", "backend", "problem", "weights")


def _same_run(target: Path, cfg: RunConfig) -> None:
    """UsageError when config.json was edited to another run (workload, backend, problem, weights)
    than the one its database holds."""
    from store.run_file import stored_config

    stored = stored_config(target / "run.duckdb")  # StoreError (exit 2) when missing or corrupt
    if stored is None:
        return  # a live worker holds it: its lock refuses us
    try:
        was = RunConfig.from_dict(stored)
    except ValueError:
        return
    changed = [name for name in IDENTITY if getattr(was, name) != getattr(cfg, name)]
    if changed:
        name = changed[0]
        raise UsageError(f"run {target.name}: config.json says {name} {getattr(cfg, name)!r}, but the run evolved "
                         f"{name} {getattr(was, name)!r}; restore config.json or start a new run")


def _read_small(path: Path, limit: int = 1 << 20) -> str:
    """The text of a settings file, refusing one larger than ``limit`` bytes (or endless, as /dev/zero)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit >> 20} MiB: not a settings file")
    return data.decode("utf-8", errors="strict")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _finished(target: Path) -> str | None:
    """A line saying the run at ``target`` already finished its budget, or None if it has not."""
    from store.runs import effective_status, read_json

    if effective_status(target) != "finished":
        return None
    hb = read_json(target / "heartbeat.json") or {}
    done = int(hb["generation"]) + 1 if isinstance(hb.get("generation"), int) else None
    return (f"run {target.name} is already finished" + (f" ({done} generations done)" if done is not None else "")
            + "; nothing to resume")


def _work(writer, cfg: RunConfig, target: Path, runs_dir: Path) -> int:
    from core.run.worker import RunWorker

    try:
        return RunWorker(writer, cfg, target, runs_dir, echo=lambda line: print(line, flush=True)).run()
    finally:
        writer.close()


def cmd_repair(args: argparse.Namespace) -> int:
    """Read every live/ file in full and rewrite the damaged or missing ones from run.duckdb."""
    from store.run_file import RunLocked
    from store.writer import RunWriter

    from store.run_file import stored_config

    target = existing_run(args)
    stored_config(target / "run.duckdb")  # a missing or corrupt database: StoreError, before anything is touched
    try:
        writer = RunWriter.open(target)  # opening repairs live/; repair_live reads it all again and reports
    except RunLocked as exc:
        raise UsageError(f"{exc}: its worker repairs live/ itself at its next commit") from None
    names = list(writer.repaired)
    try:
        names += writer.repair_live()
    finally:
        writer.close()
    if names:
        names = sorted(set(names))
        print(f"run {args.run_id}: live/ rebuilt from run.duckdb ({len(names)} file(s): {', '.join(names)})")
    else:
        print(f"run {args.run_id}: live/ matches run.duckdb; nothing to repair")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from store.runs import list_runs, read_json

    rows = list_runs(Path(args.runs_dir))
    if not rows:
        print(f"no runs in {args.runs_dir}")
        return 0
    # Generations are numbered from 0 (as in the per-generation lines); "done" counts them.
    from store.runs import champion_text

    cols = ("run_id", "name", "workload", "backend", "status", "done", "champion fitness (speed-up in pairs)")
    for r in rows:  # the name given on the dashboard's Runs page (<run>/meta.json), printable characters only
        meta = read_json(Path(args.runs_dir) / r["run_id"] / "meta.json")
        name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
        r["name"] = "".join(ch for ch in name if ch.isprintable()) or "-"
    table = [[_fmt(r.get(c)) for c in cols[:5]] + [_done(r), champion_text(r)] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in table)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for row in table:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)))
    return 0


def _done(row: dict) -> str:
    done = int(row["generation"]) + 1 if isinstance(row.get("generation"), int) else 0
    return f"{done}/{row['total_generations']}" if row.get("total_generations") else str(done)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "-" if v is None else str(v)


def cmd_workloads(args: argparse.Namespace) -> int:
    from core.backends import BACKENDS, availability, backend_class
    from core.workloads import WORKLOADS, get_workload

    for name in BACKENDS:
        reason = availability(name)
        devices = [] if reason else backend_class(name).devices()
        where = "; ".join(d.label() for d in devices) if devices else f"unavailable: {reason}"
        print(f"backend {name:7s} {where}")
    for name in WORKLOADS:
        w = get_workload(name)
        usable = [b for b in w.templates if availability(b) is None]
        print(f"workload {name:8s} backends {', '.join(w.templates)} (usable here: {', '.join(usable) or 'none'}) - {w.description}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from core.tools.export import export_champions

    target = existing_run(args)
    if not 1 <= args.k <= 10_000:
        raise UsageError("-k must be from 1 to 10000")
    out = export_champions(target, Path(args.out), args.which, args.k, args.library, Path(args.runs_dir))
    print(f"exported to {out}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from core.tools.bench import bench_champion, format_table

    target = existing_run(args)
    if not 1 <= args.rounds <= 100:
        raise UsageError("--rounds must be from 1 to 100")

    try:
        cfg = RunConfig.from_dict(json.loads((target / "config.json").read_text()))
    except (OSError, ValueError) as exc:
        raise UsageError(f"run {args.run_id!r} has an unreadable config.json: {exc}") from None
    with hold_devices(Path(args.runs_dir), cfg, f"bench of run {args.run_id}"):  # DeviceBusy: exit 2
        result = bench_champion(target, Path(args.runs_dir), rounds=args.rounds,
                                log=lambda line: print(line, file=sys.stderr if args.json else sys.stdout, flush=True))
    if args.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    device = result["device"]
    print(f"{args.run_id}: {device.get('name')} shape {result.get('shape')}, median of {result['rounds']} rounds")
    print(format_table(result))
    return 0


COMMANDS = {"run": cmd_run, "bench": cmd_bench, "resume": cmd_resume, "repair": cmd_repair, "runs": cmd_runs,
            "workloads": cmd_workloads, "export": cmd_export}


# Commands whose handler lives in core/tools, imported only when one of them runs.
TOOL_COMMANDS = {"check": "check_cli:cmd_check", "decode-bench": "decode_bench:cmd", "library": "library_cli:cmd_library", "sweep": "sweep:cmd_sweep",
                 "replay": "replay:cmd_replay"}


def main(argv: Sequence[str] | None = None) -> int:
    from core.backends import BackendUnavailable
    from store import StoreError

    try:
        args = build_parser().parse_args(argv)
        if args.command in TOOL_COMMANDS:
            module, name = TOOL_COMMANDS[args.command].split(":")
            return getattr(importlib.import_module(f"core.tools.{module}"), name)(args)
        return COMMANDS[args.command](args)
    except (UsageError, ConfigError, BackendUnavailable, StoreError, ValueError, FileExistsError) as exc:
        print(f"abebot: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("abebot: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a failed run: the traceback is in the run's worker.log
        print(f"abebot: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
