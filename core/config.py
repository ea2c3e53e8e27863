"""Run configuration: one dataclass whose fields carry their own help text and bounds.

The CLI's flags and the dashboard's launch form are both generated from :data:`FIELDS`, and both
validate through :func:`validate`, so a setting means the same thing everywhere.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

SELECTIONS = ("top10", "tournament", "nsga2")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


class ConfigError(ValueError):
    """A setting is invalid; the message says which and why, in one line."""


def _f(default: Any, help: str, **bounds: Any):
    return field(default=default, metadata={"help": help, **bounds})


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run. Stored as ``config.json`` in the run folder."""

    workload: str = _f("gemm", "kernel family to evolve")
    backend: str = _f("c", "code generator: c (CPU), cuda (CUDA C via NVRTC) or triton")
    device: int = _f(0, "device index for the backend", min=0)
    population: int = _f(16, "individuals per generation", min=2, max=4096)
    generations: int = _f(8, "generations to run (0 = until --hours runs out)", min=0, max=1_000_000)
    hours: float = _f(0.0, "wall-clock budget in hours (0 = no limit)", min=0.0, max=10_000.0)
    seed: int = _f(0, "random seed: the same seed on the same machine gives the same genomes", min=0)
    weight_time: float = _f(0.6, "fitness weight of speed (baseline time / time)", min=0.0)
    weight_memory: float = _f(0.3, "fitness weight of memory (baseline bytes / bytes)", min=0.0)
    weight_stability: float = _f(0.1, "fitness weight of stability (clean fraction of repeated launches)", min=0.0)
    mutation_rate: float = _f(0.2, "probability that each gene of a child mutates", min=0.0, max=1.0)
    crossover_rate: float = _f(0.9, "probability that a child is a crossover of two parents", min=0.0, max=1.0)
    elites: int = _f(2, "best individuals carried unchanged into the next generation", min=0)
    parent_fraction: float = _f(0.1, "fraction of the population used as parents (top10 selection)", min=0.01, max=1.0)
    selection: str = _f("top10", "parent selection: top10 (the seed), tournament or nsga2", choices=SELECTIONS)
    tournament_size: int = _f(3, "contestants per tournament", min=2, max=64)
    stability_launches: int = _f(20, "repeated launches for the stability test", min=2, max=100_000)
    timeout_s: float = _f(30.0, "seconds one candidate may take before it is killed as an endless loop", min=1.0)
    compile_workers: int = _f(0, "parallel compiles (0 = one per CPU core)", min=0, max=256)
    problem: dict = field(default_factory=dict, metadata={"help": "problem sizes, e.g. {\"m\": 512} (workload defaults fill the rest)"})

    @property
    def weights(self) -> tuple[float, float, float]:
        return (self.weight_time, self.weight_memory, self.weight_stability)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict) -> "RunConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
        return validate(cls(**raw))


FIELDS = {f.name: f for f in fields(RunConfig)}


def validate(cfg: RunConfig) -> RunConfig:
    """Return ``cfg`` with the workload's problem defaults filled in, or raise ConfigError.

    Checks types and bounds of every field, the workload and backend names, the weights (none
    negative, not all zero) and the problem sizes (through the workload).
    """
    from core.backends import BACKENDS
    from core.workloads import get_workload

    for f in fields(cfg):
        value, meta = getattr(cfg, f.name), f.metadata
        if f.name == "problem":
            if not isinstance(value, dict):
                raise ConfigError("problem must be a JSON object of sizes")
            continue
        want = type(f.default)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
            object.__setattr__(cfg, f.name, value)
        if not isinstance(value, want) or isinstance(value, bool):
            raise ConfigError(f"{f.name} must be {want.__name__}, got {value!r}")
        if value != value:  # NaN
            raise ConfigError(f"{f.name} must be a number")
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
    if sum(cfg.weights) <= 0:
        raise ConfigError("fitness weights must not all be zero")
    if cfg.generations == 0 and cfg.hours == 0:
        raise ConfigError("give a budget: generations > 0 or hours > 0")
    if cfg.elites >= cfg.population:
        raise ConfigError(f"elites ({cfg.elites}) must be fewer than the population ({cfg.population})")
    try:
        problem = workload.validate_problem(dict(cfg.problem), cfg.backend)
    except ValueError as exc:
        raise ConfigError(f"problem: {exc}") from None
    object.__setattr__(cfg, "problem", problem)
    return cfg


def parse_weights(text: str) -> tuple[float, float, float]:
    """``"0.6,0.3,0.1"`` -> (0.6, 0.3, 0.1); ConfigError for anything else."""
    parts = text.split(",")
    if len(parts) != 3:
        raise ConfigError(f"--weights needs three numbers time,memory,stability (got {text!r})")
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ConfigError(f"--weights needs three numbers time,memory,stability (got {text!r})") from None
    if any(v < 0 or v != v for v in values):
        raise ConfigError("fitness weights must not be negative")
    if sum(values) == 0:
        raise ConfigError("fitness weights must not all be zero")
    return values  # type: ignore[return-value]
