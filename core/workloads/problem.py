"""Small helpers for validating a workload's problem dictionary."""
from __future__ import annotations

from typing import Any


def merge_problem(defaults: dict, given: dict, backend: str, workload: str) -> dict:
    """Defaults overlaid with ``given``; ValueError for keys the workload does not know."""
    unknown = set(given) - set(defaults)
    if unknown:
        raise ValueError(f"{workload} on {backend} has no setting {', '.join(sorted(unknown))} (has: {', '.join(sorted(defaults))})")
    return {**defaults, **given}


def positive_int(problem: dict, key: str, upper: int) -> int:
    value: Any = problem[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise ValueError(f"{key} must be an integer from 1 to {upper} (got {value!r})")
    return value


def one_of(problem: dict, key: str, choices: tuple) -> Any:
    if problem[key] not in choices:
        raise ValueError(f"{key} must be one of {', '.join(map(str, choices))} (got {problem[key]!r})")
    return problem[key]
