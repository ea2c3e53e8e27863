"""Run configuration: one dataclass whose fields carry their own help text and bounds.

The CLI's flags and the dashboard's launch form are both generated from :data:`FIELDS`, and both
validate through :func:`validate`, so a setting means the same thing everywhere.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from core.objectives import NAMES, OBJECTIVES, default_weights, objective

SELECTIONS = ("top10", "tournament", "nsga2")
INITS = ("seeds", "random")
STRATEGIES = ("ga", "random", "tpe", "cmaes")  # core/search/strategies.py
EFFORTS = ("", "smoke", "quick", "full")
# --effort: settings a preset gives where neither --config nor a flag gives them (docs/search.md)
EFFORT_PRESETS = {
    "smoke": {"population": 4, "elites": 1, "generations": 2, "stability_launches": 3, "baseline_checks": 2},
    "quick": {"population": 8, "elites": 2, "generations": 6, "stability_launches": 10},
    "full": {"population": 32, "elites": 2, "generations": 40, "stability_launches": 20},
}
# Configurations written before objectives were data carry these as weight_<name> fields.
LEGACY_WEIGHT_NAMES = ("time", "memory", "stability")


class ConfigError(ValueError):
    """A setting is invalid; the message says which and why, in one line."""


def _f(default: Any, help: str, **bounds: Any):
    return field(default=default, metadata={"help": help, **bounds})


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run. Stored as ``config.json`` in the run folder."""

    workload: str = _f("gemm", "kernel family to evolve")
    backend: str = _f("c", "code generator: c (CPU), cuda (CUDA C via NVRTC) or triton")
    device: int = _f(0, "device index for the backend", min=0, max=4095)
    devices: str = _f("", "devices to spread the evaluations over: indices such as 0,1 or all (empty: --device "
                          "only); on the CPU backend N entries split the cores into N disjoint core sets")
    cluster: str = _f("", "evaluate on a Dask cluster: a scheduler address (tcp://host:8786) or local:N for N local "
                          "worker processes (empty: this host only; docs/CLUSTER.md)")
    population: int = _f(16, "individuals per generation, more than --elites (so at least 3 with the default 2 elites)",
                         min=2, max=4096)
    generations: int = _f(8, "generations to run (0 = until --hours runs out)", min=0, max=1_000_000)
    hours: float = _f(0.0, "wall-clock budget in hours (0 = no limit)", min=0.0, max=10_000.0)
    seed: int = _f(0, "random seed: the same seed on the same machine gives the same genomes", min=0, max=2**63 - 1)
    weights: dict = field(default_factory=default_weights, metadata={
        "help": "fitness weight per objective, e.g. {\"time\": 0.6, \"memory\": 0.3, \"stability\": 0.1}; "
                "an objective left out weighs 0"})
    mutation_rate: float = _f(0.2, "probability that each gene of a child mutates", min=0.0, max=1.0)
    crossover_rate: float = _f(0.9, "probability that a child is a crossover of two parents", min=0.0, max=1.0)
    elites: int = _f(2, "best individuals carried unchanged into the next generation", min=0, max=4095)
    parent_fraction: float = _f(0.1, "fraction of the population used as parents (top10 selection)", min=0.01, max=1.0)
    selection: str = _f("top10", "parent selection: top10 (the seed), tournament or nsga2", choices=SELECTIONS)
    tournament_size: int = _f(3, "contestants per tournament", min=2, max=64)
    stability_launches: int = _f(20, "repeated launches for the stability test", min=2, max=100_000)
    timeout_s: float = _f(30.0, "seconds one candidate may take before it is killed as an endless loop", min=1.0,
                          max=86_400.0)
    tail_timeout: float = _f(0.0, "per-candidate timeout at k x the running median sandbox time of the run's ok "
                                  "candidates (after 8 of them; at least 5 s, at most --timeout-s); 0 = off",
                             min=0.0, max=10_000.0)
    timing_cache: int = _f(0, "1: reuse the measurement of a genome an earlier run measured on the same device, "
                              "toolchain, problem and timer (<runs>/.cache/timings; docs/search.md); 0: measure every "
                              "genome", min=0, max=1)
    compile_workers: int = _f(0, "parallel compiles (0 = one per CPU core)", min=0, max=256)
    problem: dict = field(default_factory=dict, metadata={"help": "problem sizes, e.g. {\"m\": 512} (workload defaults fill the rest)"})
    init: str = _f("seeds", "initial population: seeds (the hand-written seed genomes, then random ones) or random "
                            "(random genomes only, to compare GA search with random search)", choices=INITS)
    baseline_checks: int = _f(3, "baseline timings per generation, interleaved with the candidates (2 = before and "
                                 "after; 3 = also between the halves, so one burst of load is outvoted)", min=2, max=9)
    strategy: str = _f("ga", "search strategy: ga (the genetic algorithm), random (random search), tpe or cmaes "
                             "(Optuna's samplers, pip install optuna; docs/search.md)", choices=STRATEGIES)
    surrogate: int = _f(0, "GA surrogate filter: breed k x the children, measure only those a random forest trained "
                           "on the run's evaluations predicts best (0 or 1 = off)", min=0, max=64)
    effort: str = _f("", "preset of population, generations, elites and stability launches: smoke (does it work at "
                         "all), quick or full; settings given explicitly win (empty: no preset)", choices=EFFORTS)
    start_from: str = _f("", "runs (ids in the runs folder, comma-separated) of the same workload and backend whose best "
                             "genomes join generation 0 after the seeds: another shape's champions as a start")
    machine_code: int = _f(0, "1: add the machine_code gene group, PTX edits applied after the source compiles "
                              "(cuda and triton backends; docs/machine-code.md); 0: off, genomes as before",
                           min=0, max=1)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict) -> "RunConfig":
        """A validated RunConfig from a JSON-like dict (``config.json``, the dashboard's launch file).

        The weights of configurations written before objectives were data (``weight_time``,
        ``weight_memory``, ``weight_stability``) are read into :attr:`weights`.
        """
        raw = _upgrade_legacy_weights(raw)
        if isinstance(raw.get("effort"), str):  # the preset fills what the settings leave out
            raw = {**EFFORT_PRESETS.get(raw["effort"], {}), **raw}
        known = {f.name for f in fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
        return validate(cls(**raw))


FIELDS = {f.name: f for f in fields(RunConfig)}


def validate(cfg: RunConfig) -> RunConfig:
    """Return ``cfg`` with the workload's problem defaults filled in, or raise ConfigError.

    Checks types and bounds of every field, the workload and backend names, the weights (through
    :func:`validate_weights`) and the problem sizes (through the workload).
    """
    from core.backends import BACKENDS
    from core.workloads import get_workload
    from store.runs import RUN_ID_RE

    for f in fields(cfg):
        value, meta = getattr(cfg, f.name), f.metadata
        if f.name == "problem":
            if not isinstance(value, dict):
                raise ConfigError("problem must be a JSON object of sizes")
            continue
        if f.name == "weights":
            object.__setattr__(cfg, "weights", validate_weights(value))
            continue
        want = type(f.default)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
            object.__setattr__(cfg, f.name, value)
        if not isinstance(value, want) or isinstance(value, bool):
            raise ConfigError(f"{f.name} must be {want.__name__}, got {value!r}")
        if value != value or value in (math.inf, -math.inf):  # NaN, inf: no setting is endless
            raise ConfigError(f"{f.name} must be a finite number (got {value})")
        if "min" in meta and value < meta["min"]:
            raise ConfigError(f"{f.name} must be >= {meta['min']} (got {value})")
        if "max" in meta and value > meta["max"]:
            raise ConfigError(f"{f.name} must be <= {meta['max']} (got {value})")
        if "choices" in meta and value not in meta["choices"]:
            raise ConfigError(f"{f.name} must be one of {', '.join(meta['choices'])} (got {value!r})")
    if cfg.backend not in BACKENDS:
        raise ConfigError(f"unknown backend {cfg.backend!r} (choose from: {', '.join(BACKENDS)})")
    try:
        workload = get_workload(cfg.workload)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if cfg.backend not in workload.templates:
        raise ConfigError(f"workload {cfg.workload!r} has no {cfg.backend!r} backend (has: {', '.join(workload.templates)})")
    if cfg.generations == 0 and cfg.hours == 0:
        raise ConfigError("give a budget: generations > 0 or hours > 0")
    if not re.fullmatch(r"(all|\d+(,\d+)*)?", cfg.devices.strip().lower().replace(" ", "")):
        raise ConfigError(f"devices must be comma-separated device indices or 'all' (got {cfg.devices!r})")
    if cfg.cluster and not re.fullmatch(r"local:[1-9]\d{0,2}|(tcp|tls|ucx|inproc)://[\w.\-\[\]:/]+", cfg.cluster):
        raise ConfigError(f"cluster must be a scheduler address such as tcp://host:8786, or local:N (got {cfg.cluster!r})")
    if cfg.cluster and cfg.devices:
        raise ConfigError("devices and cluster exclude each other: on a cluster, each Dask worker is one device")
    for rid in (s.strip() for s in cfg.start_from.split(",")):  # run ids, never paths (core/run/warm_start.py)
        if rid and not RUN_ID_RE.match(rid):
            raise ConfigError(f"start_from: {rid!r} is not a run id (letters, digits, '-' and '_')")
    if cfg.strategy in ("tpe", "cmaes"):  # Optuna is optional: say so before anything is written
        optuna_installed(cfg.strategy)
    if cfg.elites >= cfg.population:
        raise ConfigError(f"elites ({cfg.elites}) must be fewer than the population ({cfg.population}): "
                          f"raise the population to {cfg.elites + 1} or more, or lower elites")
    try:
        problem = workload.validate_problem(dict(cfg.problem), cfg.backend)
    except ValueError as exc:
        raise ConfigError(f"problem: {exc}") from None
    object.__setattr__(cfg, "problem", problem)
    return cfg


def optuna_installed(strategy: str) -> None:
    """ConfigError (a ValueError, one line) when the optional packages of strategy tpe or cmaes are
    missing."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise ConfigError(f"strategy {strategy} needs Optuna, an optional dependency: pip install optuna "
                          "(requirements.txt pins the version tested)") from None
    if strategy == "cmaes":
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise ConfigError("strategy cmaes needs Optuna's CMA-ES package: pip install cmaes") from None


def validate_weights(raw: Any) -> dict[str, float]:
    """The one check of fitness weights: objective name -> non-negative finite number, not all zero.

    Returns every objective of :data:`~core.objectives.OBJECTIVES` in their order, an objective
    left out weighing 0; ConfigError (one line) otherwise.
    """
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"fitness weights must map objectives ({', '.join(NAMES)}) to numbers (got {raw!r})")
    unknown = [str(name) for name in raw if name not in NAMES]
    if unknown:
        raise ConfigError(f"unknown objective {unknown[0]!r} in fitness weights (choose from: {', '.join(NAMES)})")
    weights = {}
    for name in NAMES:
        value = raw.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"fitness weight of {name} must be a non-negative finite number (got {value!r})")
        weights[name] = float(value)
    if sum(weights.values()) <= 0:
        raise ConfigError("fitness weights must not all be zero")
    return weights


def parse_weights(text: str) -> dict[str, float]:
    """``"time=0.6,memory=0.3,stability=0.1"`` or the positional ``"0.6,0.3,0.1"`` -> validated weights.

    Values are checked by :func:`validate_weights`; ConfigError for anything else.
    """
    parts = [p.strip() for p in text.split(",")]
    if all("=" in p for p in parts):
        pairs = [p.split("=", 1) for p in parts]
        raw = {name.strip(): _number(value) for name, value in pairs}
        if len(raw) != len(pairs):
            raise ConfigError(f"--weights names an objective twice (got {text!r})")
    elif len(parts) == len(NAMES) and not any("=" in p for p in parts):
        raw = {name: _number(value) for name, value in zip(NAMES, parts)}
    else:
        raise ConfigError(f"--weights takes name=value pairs such as {_example()} or {len(NAMES)} numbers "
                          f"in the order {','.join(NAMES)} (got {text!r})")
    return validate_weights(raw)


def _number(text: str) -> float | str:
    """A float when ``text`` is one; else the text, for :func:`validate_weights` to reject."""
    try:
        return float(text)
    except ValueError:
        return text.strip()


def _example() -> str:
    return ",".join(f"{o.name}={o.default_weight}" for o in OBJECTIVES)


def _upgrade_legacy_weights(raw: dict) -> dict:
    """Turn the old ``weight_<name>`` keys into ``weights`` (an old key left out kept its default)."""
    legacy = {f"weight_{name}": name for name in LEGACY_WEIGHT_NAMES}
    if not any(key in raw for key in legacy):
        return raw
    if "weights" in raw:
        raise ConfigError("give weights or the old weight_time/weight_memory/weight_stability, not both")
    out = {k: v for k, v in raw.items() if k not in legacy}
    out["weights"] = {name: raw.get(key, objective(name).default_weight) for key, name in legacy.items()}
    return out
