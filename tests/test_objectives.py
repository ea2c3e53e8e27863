"""Objectives as data, and the fitness weights: one field, one validator, old configs still load."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.config import ConfigError, RunConfig, parse_weights, validate_weights
from core.objectives import NAMES, OBJECTIVES, default_weights, objective

ROOT = Path(__file__).resolve().parents[1]
STORED_CONFIGS = sorted((ROOT / "benchmarks" / "h200_runs").glob("*/config.json"))


def test_each_objective_normalises_its_term_against_the_baseline():
    base = {"time_us": 100.0, "memory_bytes": 1000.0}
    measure = {"time_us": 50.0, "memory_bytes": 4000.0, "stability": 0.75}
    assert {o.name: o.term(measure, base) for o in OBJECTIVES} == {"time": 2.0, "memory": 0.25, "stability": 0.75}
    assert [o.minimised(measure) for o in OBJECTIVES] == [50.0, 4000.0, -0.75]
    assert objective("memory").column == "memory_term" and objective("time").direction == "minimize"
    with pytest.raises(KeyError, match="unknown objective 'speed'"):
        objective("speed")


def test_the_default_weights_are_the_seeds():
    assert NAMES == ("time", "memory", "stability")
    assert default_weights() == {"time": 0.6, "memory": 0.3, "stability": 0.1}
    assert RunConfig().weights == default_weights()


@pytest.mark.parametrize("path", STORED_CONFIGS, ids=[p.parent.name for p in STORED_CONFIGS])
def test_old_weight_fields_in_a_stored_config_still_load(path):
    raw = json.loads(path.read_text())
    assert "weight_time" in raw and "weights" not in raw
    cfg = RunConfig.from_dict(raw)
    assert cfg.weights == {"time": raw["weight_time"], "memory": raw["weight_memory"],
                           "stability": raw["weight_stability"]}
    assert "weight_time" not in json.loads(cfg.to_json())


def test_an_old_config_missing_a_weight_field_keeps_that_fields_old_default():
    cfg = RunConfig.from_dict({"workload": "gemm", "backend": "c", "weight_time": 1.0})
    assert cfg.weights == {"time": 1.0, "memory": 0.3, "stability": 0.1}
    with pytest.raises(ConfigError, match="not both"):
        RunConfig.from_dict({"weights": {"time": 1.0}, "weight_time": 1.0})


def test_objectives_left_out_of_the_weights_weigh_zero():
    assert RunConfig.from_dict({"weights": {"time": 2}}).weights == {"time": 2.0, "memory": 0.0, "stability": 0.0}


BAD_WEIGHTS = [
    ({"time": -0.1}, "fitness weight of time must be a non-negative finite number (got -0.1)"),
    ({"memory": float("nan")}, "fitness weight of memory must be a non-negative finite number (got nan)"),
    ({"time": float("inf")}, "fitness weight of time must be a non-negative finite number (got inf)"),
    ({"time": "fast"}, "fitness weight of time must be a non-negative finite number (got 'fast')"),
    ({"time": True}, "fitness weight of time must be a non-negative finite number (got True)"),
    ({"time": 0, "memory": 0}, "fitness weights must not all be zero"),
    ({"speed": 1}, "unknown objective 'speed' in fitness weights (choose from: time, memory, stability)"),
    ([0.6, 0.3, 0.1], "fitness weights must map objectives (time, memory, stability) to numbers"),
]


@pytest.mark.parametrize("weights, message", BAD_WEIGHTS, ids=[m.split(" (")[0] for _, m in BAD_WEIGHTS])
def test_weights_are_validated_in_one_place_with_one_message(weights, message):
    """The config dict, the CLI text and the direct call all say the same thing."""
    with pytest.raises(ConfigError) as direct:
        validate_weights(weights)
    with pytest.raises(ConfigError) as via_config:
        RunConfig.from_dict({"weights": weights})
    assert message in str(direct.value) and str(via_config.value) == str(direct.value)
    if isinstance(weights, dict):
        text = ",".join(f"{name}={value}" for name, value in weights.items())
        with pytest.raises(ConfigError) as via_text:
            parse_weights(text)
        assert str(via_text.value).split(" (got")[0] == str(direct.value).split(" (got")[0]


def test_parse_weights_takes_names_or_the_old_positional_form():
    assert parse_weights("time=0.6,memory=0.3,stability=0.1") == {"time": 0.6, "memory": 0.3, "stability": 0.1}
    assert parse_weights("0.6,0.3,0.1") == {"time": 0.6, "memory": 0.3, "stability": 0.1}
    assert parse_weights(" memory = 1 ") == {"time": 0.0, "memory": 1.0, "stability": 0.0}
    for text in ("fast", "0.5,0.5", "time=1,0.5", "time=1,time=2"):
        with pytest.raises(ConfigError, match="--weights"):
            parse_weights(text)
    with pytest.raises(ConfigError, match="must not all be zero"):
        parse_weights("0,0,0")
