"""benchmarks/tools/decode_report.py: DECODE_STEP.md's tables from decode-bench records (a CPU tiny-model
record, and the same record dressed as a cut 70B one), the command behind each figure, bad input."""
from __future__ import annotations

import copy
import json

import pytest

from benchmarks.tools.decode_report import main
from core.cli_parser import build_parser
from core.library import ops
from core.tools.decode_bench import run_all


@pytest.fixture(scope="module")
def records() -> list[dict]:
    args = build_parser().parse_args(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", "24,100",
                                      "--steps", "2", "--rounds", "1", "--iters", "1", "--verify", "1,4"])
    try:
        return run_all(args)
    finally:
        ops.activate(None)


def as_cut_70b(rec: dict, a: float, b: float, ratio: float) -> dict:
    r = copy.deepcopy(rec)
    r.update(model="llama-3.1-70b", layers=8, model_layers=80, context=1024, command="python -m core decode-bench X")
    r["a"]["label"] = "torch._weight_int4pack_mm, torch.compile per layer, CUDA graph"
    r["a"]["projected_full_model_tokens_per_s"], r["b"]["projected_full_model_tokens_per_s"] = a, b
    r["verify"][-1]["b"]["x_one_token_step"] = ratio
    return r


def report(tmp_path, *files) -> str:
    out = tmp_path / "DECODE_STEP.md"
    assert main([*map(str, files), "--out", str(out)]) == 0
    return out.read_text()


def test_the_report_has_each_records_tokens_per_s_verify_costs_breakdown_and_command(records, tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(records))  # decode-bench --json of two contexts: a list
    md = report(tmp_path, path)
    for r in records:
        row = next(line for line in md.splitlines() if line.startswith(f"| tiny | 2/2 | {r['context']} |"))
        assert f"{r['a']['tokens_per_s']:,.4g}" in row and f"{r['b']['tokens_per_s']:,.4g}" in row
        assert "measured" in row and row.endswith("[1] |")
        assert f"### tiny, 2 layers, context {r['context']} [1]" in md
    assert "| tiny | 100 | 4 | 5 |" in md and "**Projected** whole-model tokens/s" in md
    assert "| self_attn.cache_attn | attention (KV write + SDPA) |" in md and "Method: op replay" in md
    assert f"1. `{records[0]['command']}`" in md
    assert "## The issue's goals" not in md  # the tiny model is no goal model


def test_a_cut_70b_record_is_marked_projected_and_checked_against_the_goals(records, tmp_path):
    path = tmp_path / "70b.json"
    path.write_text(json.dumps(as_cut_70b(records[0], a=45.0, b=90.0, ratio=1.1)))
    md = report(tmp_path, path)
    row = next(line for line in md.splitlines() if line.startswith("| llama-3.1-70b | 8/80 | 1024 |"))
    assert "| 45 | 90 | 2 | projected |" in row
    assert "| (b) >= 85 tokens/s | met |" in md and "| (b) >= 1.75x (a) | met |" in md
    assert "| (b) verify K=4 <= 1.15x a one-token step | met |" in md
    assert "1. `python -m core decode-bench X`" in md
    path.write_text(json.dumps(as_cut_70b(records[0], a=60.0, b=80.0, ratio=1.3)))
    md = report(tmp_path, path)
    assert md.count("**not met**") == 3


def test_the_speed_up_goal_is_not_judged_against_a_baseline_without_torch_compile(records, tmp_path):
    path = tmp_path / "70b.json"
    rec = as_cut_70b(records[0], a=45.0, b=90.0, ratio=1.1)
    rec["a"]["label"] = "torch._weight_int4pack_mm, eager, CUDA graph"
    path.write_text(json.dumps(rec))
    assert "| (b) >= 1.75x (a) | n/a: (a) ran without torch.compile |" in report(tmp_path, path)


@pytest.mark.parametrize("content, message", [("{", "not a readable JSON file"), ('{"model": 1}', "not a decode-bench"),
                                              ("[]", "not a decode-bench")])
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_missing_file_is_one_line_and_exit_status_2(tmp_path, capsys):
    assert main([str(tmp_path / "none.json")]) == 2
    assert "not a readable JSON file" in capsys.readouterr().err


def test_an_op_whose_weights_stayed_in_the_l2_on_replay_is_marked_so(records, tmp_path):
    rec = copy.deepcopy(records[0])
    for w in "ab":
        for row in rec[w]["ops"]["rows"]:
            row["weights_from_memory"] = row["op"] != "input_layernorm"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rec))
    lines = report(tmp_path, path).splitlines()
    assert next(x for x in lines if x.startswith("| input_layernorm |")).endswith("| no (in the L2 on replay) |")
    assert next(x for x in lines if x.startswith("| self_attn.qkv_proj |")).endswith("| yes |")
    assert next(x for x in lines if x.startswith("| step_meta |")).endswith("| – |")  # no weights
