"""Launching and resuming the GA worker from the dashboard.

The worker is the same process the CLI starts (``python -m core run ...``), spawned in its own
process session (it writes ``runs/<id>/worker.log`` itself; its stderr goes to
``runs/.launch/<id>.log``): closing the browser or restarting the dashboard never stops it. The
form is validated once into a :class:`~core.config.RunConfig`, which is handed to the worker as one
JSON file (``runs/.launch/<id>.json``, read by ``python -m core run --config``) rather than
re-encoded setting by setting as flags; nothing is passed through a shell.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from core.evaluation.bounds import check_fits
from core.config import FIELDS, ConfigError, RunConfig
from core.run.device_lock import device_holder
from core.objectives import OBJECTIVES
from dashboard.runs import all_runs, load_json
from dashboard.settings import REPO_ROOT
from store.control import read_control, write_control
from store.runs import atomic_write_json, new_run_id, run_dir

# Fields of the launch form, in order (the weights get one input per objective after "seed"); the
# others go under "Advanced".
MAIN_FIELDS = ("population", "generations", "hours", "seed", "mutation_rate", "elites", "selection")
ADVANCED_FIELDS = ("crossover_rate", "parent_fraction", "tournament_size", "stability_launches", "timeout_s",
                   "compile_workers")
# Flags the CLI names differently from the field.
_CLI_SKIP = {"workload", "backend", "weights", "problem"}
BUSY_STATUSES = ("running", "paused")
DOUBLE_CLICK_S = 10.0

_lock = threading.Lock()
_launched: dict[str, "Launched"] = {}  # process-wide: every session of this dashboard server sees it


@dataclass
class Launched:
    """A worker process this dashboard server started."""

    run_id: str
    backend: str
    device: int
    process: subprocess.Popen
    started_at: float

    def alive(self) -> bool:
        return self.process.poll() is None


def field_spec(name: str) -> dict[str, Any]:
    """What the form needs for one RunConfig field: label, kind, default, bounds, help."""
    f = FIELDS[name]
    meta = dict(f.metadata)
    default = f.default
    kind = "choice" if "choices" in meta else type(default).__name__
    return {
        "name": name,
        "label": name.replace("_", " ").capitalize(),
        "kind": kind,
        "default": default,
        "min": meta.get("min"),
        "max": meta.get("max"),
        "choices": tuple(meta.get("choices", ())),
        "help": meta.get("help", ""),
    }


def weight_specs() -> list[dict[str, Any]]:
    """One number input per fitness objective, in the order of OBJECTIVES: objective name, widget
    key, label, default weight and help. Bounds are checked by RunConfig, not the widget."""
    return [{"name": o.name, "key": f"launch_weight_{o.name}", "label": f"Weight: {o.label.lower()}",
             "default": float(o.default_weight), "help": o.help} for o in OBJECTIVES]


def parse_problem(text: str) -> dict:
    """The problem-size box: empty means the workload's defaults; else a JSON object."""
    text = (text or "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"problem: not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise ConfigError('problem: must be a JSON object such as {"m": 64, "n": 64, "k": 64}')
    return value


def build_config(values: dict[str, Any]) -> RunConfig:
    """Validate form values into a RunConfig (ConfigError with a one-line reason otherwise).

    Integers arrive from number inputs as ``int`` and floats as ``float``; the weights as a dict
    under ``weights`` (objective name -> number); the problem as JSON text under ``problem_text`` or
    as a dict under ``problem``.
    """
    raw = {k: v for k, v in values.items() if k in FIELDS and k != "problem"}
    raw["problem"] = values["problem"] if isinstance(values.get("problem"), dict) else parse_problem(values.get("problem_text", ""))
    for name, value in list(raw.items()):  # number inputs may hand back 3.0 for an int field
        want = type(FIELDS[name].default)
        if want is int and isinstance(value, float) and value.is_integer():
            raw[name] = int(value)
    cfg = RunConfig.from_dict(raw)
    check_fits(cfg)  # the CLI's own bound: a problem too big for the device's memory is a ConfigError here too
    return cfg


def start_from_choices(runs: Path, workload: str, backend: str) -> list[str]:
    """Runs a new run of ``workload`` on ``backend`` may warm-start from (``--start-from``): those
    of the same workload and backend in ``runs``, newest first."""
    from dashboard.runs import all_runs

    return [r["run_id"] for r in all_runs(runs) if r.get("workload") == workload and r.get("backend") == backend]


def run_args(cfg: RunConfig) -> list[str]:
    """CLI arguments for ``python -m core run`` that reproduce ``cfg`` (without runs dir and id)."""
    args = ["--workload", cfg.workload, "--backend", cfg.backend,
            "--weights", ",".join(f"{name}={float(w)!r}" for name, w in cfg.weights.items())]
    for f in fields(RunConfig):
        if f.name in _CLI_SKIP:
            continue
        value = getattr(cfg, f.name)
        if (f.name in ADVANCED_FIELDS or f.default == "") and value == f.default:
            continue  # keep the command line short; the CLI's defaults are the same fields
        args += ["--" + f.name.replace("_", "-"), str(value)]
    if cfg.problem:
        args += ["--problem", json.dumps(cfg.problem, sort_keys=True)]
    return args


def terminal_command(cfg: RunConfig, runs: Path) -> str:
    """The shell command that starts the same run as ``cfg`` from a terminal (for the Launch page)."""
    python = Path(sys.executable).name
    return shlex.join([python, "-m", "core", "run", *run_args(cfg), "--runs-dir", str(runs)])


def relaunch_state(cfg: dict) -> dict[str, Any]:
    """Launch-form widget values (by widget key) that reproduce a stored run configuration.

    The stored values are taken as they are (the form validates them again on Start): a
    configuration this version would refuse still fills the form, so the user can fix it there.
    """
    from core.config import _upgrade_legacy_weights

    try:
        raw = _upgrade_legacy_weights(dict(cfg))
    except ConfigError:
        raw = dict(cfg)
    state: dict[str, Any] = {"_relaunch_device": (raw.get("backend"), int(raw.get("device") or 0))}
    from core.workloads import WORKLOADS

    if raw.get("workload") in WORKLOADS:
        state["launch_workload"] = raw["workload"]
    if raw.get("selection") in FIELDS["selection"].metadata["choices"]:
        state["launch_selection"] = raw["selection"]
    if isinstance(raw.get("problem"), dict):
        state["launch_problem"] = json.dumps(raw["problem"], sort_keys=True)
    for name in MAIN_FIELDS + ADVANCED_FIELDS:
        want = type(FIELDS[name].default)
        if name != "selection" and isinstance(raw.get(name), (int, float)) and not isinstance(raw.get(name), bool):
            state[f"launch_{name}"] = want(raw[name])
    weights = raw.get("weights") if isinstance(raw.get("weights"), dict) else {}
    for spec in weight_specs():
        if isinstance(weights.get(spec["name"]), (int, float)):
            state[spec["key"]] = float(weights[spec["name"]])
    return state


def apply_relaunch(session: Any, devices: list[dict]) -> None:
    """Move a pending ``relaunch_form`` (set by the Runs page) into the launch form's widgets, once."""
    state = session.pop("relaunch_form", None)
    if not state:
        return
    device = state.pop("_relaunch_device", None)
    for key, value in state.items():
        session[key] = float(value) if isinstance(value, float) else value
    match = [d for d in devices if (d["backend"], d["index"]) == device]
    if match:
        session["launch_device"] = match[0]


def stderr_log(runs: Path, run_id: str) -> Path:
    """Where a spawned worker's stderr goes: ``<runs>/.launch/<run_id>.log``.

    The worker writes its own ``worker.log`` inside the run folder (and echoes the same lines to
    stdout, which is discarded so the log holds each line once). stderr -- usage errors before the
    run folder exists, an interpreter crash -- is kept here, beside the run folder, because
    ``python -m core run`` refuses a run folder that already exists.
    """
    return _launch_folder(runs, run_id) / f"{run_id}.log"


def launch_file(runs: Path, run_id: str) -> Path:
    """Where the validated configuration of a run started here goes: ``<runs>/.launch/<run_id>.json``."""
    return _launch_folder(runs, run_id) / f"{run_id}.json"


def _launch_folder(runs: Path, run_id: str) -> Path:
    folder = run_dir(runs, run_id).parent / ".launch"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _spawn(argv: list[str], log_path: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True, close_fds=True, env=env)


def run_devices(cfg: RunConfig) -> list[int]:
    """The device indices a run holds: its ``devices`` (GPU indices; CPU core sets share device 0),
    else its one ``device``; on a Dask cluster its device for ``local:N``, none for a remote one."""
    from core.run.device_lock import cluster_devices

    if cfg.cluster:
        return cluster_devices(cfg.cluster, cfg.device) or []
    from core.backends import backend_class

    if cfg.devices and backend_class(cfg.backend).device_kind != "cpu":
        from core.evaluation.devices import parse

        return parse(cfg.devices, len(backend_class(cfg.backend).devices())) or [cfg.device]
    return [cfg.device]


def busy_reason(runs: Path, backend: str, device: int | list[int], last_launch_at: float | None = None) -> str | None:
    """Why a new run on ``backend:device`` (or on each of a list of devices) must not start now, or None.

    Refuses a second click within a few seconds of a launch, a run this dashboard started that is
    still alive on the device, the device's lock held by any run, bench or check
    (:mod:`core.run.device_lock`: ``cuda`` and ``triton`` share a GPU's lock), and any run whose
    heartbeat says it is running or paused there.
    """
    if last_launch_at is not None and time.time() - last_launch_at < DOUBLE_CLICK_S:
        return "A run was started from this page a moment ago; open Monitor to watch it."
    if isinstance(device, list):
        return next((r for d in device if (r := busy_reason(runs, backend, d))), None)
    with _lock:
        for key, item in _launched.items():
            if item.alive() and (item.backend, item.device) == (backend, device):
                what = "a benchmark of run" if key.startswith("bench:") else "run"
                return f"Device {backend}:{device} is busy: {what} {item.run_id} started from this dashboard is still running."
    holder = device_holder(runs, backend, device)  # the lock the CLI takes: a non-blocking try, nothing written
    if holder:
        return holder[:1].upper() + holder[1:] + "."
    for row in all_runs(runs):
        if row.get("status") not in BUSY_STATUSES:
            continue
        cfg = load_json(runs / row["run_id"] / "config.json") or {}
        if cfg.get("backend", row.get("backend")) == backend and int(cfg.get("device", 0)) == device:
            return f"Device {backend}:{device} is busy: run {row['run_id']} is {row['status']} on it (stop it on Monitor first)."
    return None


def launch_run(cfg: RunConfig, runs: Path) -> Launched:
    """Start ``python -m core run --config <file>`` for the validated ``cfg`` in its own session.

    ``cfg`` is written once, atomically, to :func:`launch_file`; the worker reads it back through
    the same :meth:`RunConfig.from_dict`. Returns the new run's handle.
    """
    run_id = new_run_id(cfg.workload, cfg.backend)
    config_path = launch_file(runs, run_id)
    atomic_write_json(config_path, json.loads(cfg.to_json()))
    argv = [sys.executable, "-m", "core", "run", "--config", str(config_path),
            "--runs-dir", str(runs), "--run-id", run_id]
    proc = _spawn(argv, stderr_log(runs, run_id))
    item = Launched(run_id, cfg.backend, cfg.device, proc, time.time())
    with _lock:
        _launched[run_id] = item
    return item


def resume_run(runs: Path, run_id: str) -> Launched:
    """Start ``python -m core resume <run_id>`` for a dead or stopped run."""
    folder = run_dir(runs, run_id)
    cfg = load_json(folder / "config.json") or {}
    if read_control(folder) in ("stop", "pause"):  # a stale command would stop or pause it at once
        write_control(folder, "resume")
    argv = [sys.executable, "-m", "core", "resume", run_id, "--runs-dir", str(runs)]
    proc = _spawn(argv, stderr_log(runs, run_id))
    item = Launched(run_id, str(cfg.get("backend", "?")), int(cfg.get("device", 0)), proc, time.time())
    with _lock:
        _launched[run_id] = item
    return item


def bench_run(runs: Path, run_id: str) -> Launched:
    """Start ``python -m core bench <run_id>``: re-measure the champion and every baseline side by side
    (it writes ``<run>/bench.json``)."""
    folder = run_dir(runs, run_id)
    cfg = load_json(folder / "config.json") or {}
    argv = [sys.executable, "-m", "core", "bench", run_id, "--runs-dir", str(runs)]
    proc = _spawn(argv, stderr_log(runs, run_id).with_suffix(".bench.log"))
    item = Launched(run_id, str(cfg.get("backend", "?")), int(cfg.get("device", 0)), proc, time.time())
    with _lock:
        _launched[f"bench:{run_id}"] = item
    return item


def launched(run_id: str) -> Launched | None:
    """The handle of a worker this dashboard started for ``run_id`` (None if none)."""
    with _lock:
        return _launched.get(run_id)


def stderr_tail(runs: Path, run_id: str, n: int = 30) -> list[str]:
    """The last ``n`` lines the worker wrote to stderr (empty when none)."""
    try:
        return stderr_log(runs, run_id).read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def wait_until_listed(runs: Path, item: Launched, timeout_s: float = 20.0) -> bool:
    """Wait until the new run's ``config.json`` exists (True) or its worker exited (False)."""
    folder = run_dir(runs, item.run_id)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if (folder / "config.json").exists():
            return True
        if not item.alive():
            return (folder / "config.json").exists()
        time.sleep(0.2)
    return (folder / "config.json").exists()
