"""The Benchmark page's decode-step view (AppTest), on a record the CPU tiny model made: tokens/s of (a)
and (b), the verify steps' cost, the projected tokens/s, the per-op breakdown; where records live."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.cli_parser import build_parser
from core.library import ops
from core.tools import decode_records as R
from core.tools.decode_bench import run
from dashboard import decode as D
from dashboard import launch
from dashboard import library as L

APP = str(Path(__file__).resolve().parents[1] / "app.py")


@pytest.fixture(scope="module")
def record() -> dict:
    args = build_parser().parse_args(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", "40",
                                      "--steps", "2", "--rounds", "1", "--iters", "1", "--verify", "1,3"])
    try:
        return run(args)
    finally:
        ops.activate(None)


@pytest.fixture
def folders(tmp_path, monkeypatch) -> dict:
    runs, libs, decode = tmp_path / "runs", tmp_path / "libraries", tmp_path / "decode"
    runs.mkdir()
    monkeypatch.setenv("ABEBOT_RUNS_DIR", str(runs))
    monkeypatch.setenv("ABEBOT_LIBRARIES_DIR", str(libs))
    monkeypatch.setenv("ABEBOT_DECODE_DIR", str(decode))
    monkeypatch.setattr(launch, "_launched", {})
    monkeypatch.setattr(L, "REPO_ROOT", tmp_path)  # the repository's own libraries/ stay out of the test
    return {"runs": runs, "libs": libs, "decode": decode}


def decode_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/benchmark.py").run()
    at.sidebar.radio(key="bench_view").set_value("A library's decode step").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def frame(at: AppTest, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_the_page_shows_tokens_per_s_verify_costs_projections_and_the_breakdown(record, folders):
    R.save(record, folders["decode"])
    at = decode_page()
    ways = frame(at, "model_tokens_per_s")
    assert ways["way"].tolist() == ["(a) PyTorch baseline", "(b) AbeBot library"]
    assert ways["tokens_per_s"].tolist() == [record["a"]["tokens_per_s"], record["b"]["tokens_per_s"]]
    assert ways["model_figure"].tolist() == ["measured", "measured"]  # the tiny model is built whole
    verify = frame(at, "b_x_one_token")
    assert verify["M"].tolist() == [2, 4]
    assert verify["b_x_one_token"].tolist() == [v["b"]["x_one_token_step"] for v in record["verify"]]
    proj = frame(at, "acceptance_length")
    assert [(k, a) for k, a in zip(proj["K"], proj["acceptance_length"])] == [(1, 2), (3, 2), (3, 3), (3, 4)]
    assert set(proj["figure"]) == {"projected"}
    assert "Projected" in " ".join(m.value for m in at.markdown)
    ops_a, ops_b = [d.value for d in at.dataframe if "share" in d.value.columns]
    assert "self_attn.qkv_proj" in ops_b["op"].tolist() and 0.99 < ops_b["share"].sum() < 1.01
    assert any("op replay" in c.value and "whole step" in c.value for c in at.caption)
    assert any("tokens/s" in m.label for m in at.metric)


def test_a_record_beside_a_library_is_found_and_a_broken_file_is_skipped(record, folders):
    lib = folders["libs"] / "tiny"
    lib.mkdir(parents=True)
    (lib / "manifest.json").write_text(json.dumps({"entries": []}))
    path = R.save({**record, "context": 99}, lib / R.FOLDER)
    (lib / R.FOLDER / "broken.json").write_text("{not json")
    found = D.records(folders["runs"])
    assert [p for p, _ in found] == [path]
    at = decode_page()
    assert "context 99" in at.selectbox(key="decode_record").format_func(at.selectbox(key="decode_record").value)


def test_without_records_the_view_says_how_to_make_one(folders):
    at = decode_page()
    assert "decode-bench" in at.info[0].value and "--save" in at.info[0].value


def test_a_record_of_fewer_layers_than_the_model_marks_whole_model_figures_projected(record):
    cut = {**record, "model_layers": 80,
           **{w: {**record[w], "projected_full_model_tokens_per_s": 10.0 * (i + 1)} for i, w in enumerate("ab")}}
    ways = D.ways(cut)
    assert ways["model_figure"].tolist() == ["projected", "projected"]
    assert ways["model_tokens_per_s"].tolist() == [10.0, 20.0]
    proj = D.projection(cut)
    ratio = record["verify"][0]["b"]["x_one_token_step"]
    assert proj["model_b_tokens_per_s"].iloc[0] == round(20.0 * 2 / ratio, 2)


def test_save_alone_puts_the_record_beside_a_lasting_library_else_in_the_decode_folder(folders, tmp_path):
    from core.tools.decode_bench import lasting_library

    def parsed(*flags):
        return build_parser().parse_args(["decode-bench", "--model", "tiny", *flags])

    lib = str(tmp_path / "lib")
    built = parsed("--seed-library", "--library-out", lib)
    assert R.save_folder("auto", lasting_library(built)) == Path(lib) / R.FOLDER
    assert R.save_folder("auto", lasting_library(parsed("--library", lib))) == Path(lib) / R.FOLDER
    assert R.save_folder("auto", lasting_library(parsed("--library-out", lib))) == folders["decode"]  # nothing built
    assert R.save_folder("auto", lasting_library(parsed())) == folders["decode"]
    assert R.save_folder(str(tmp_path / "x"), lib) == tmp_path / "x"


def test_decode_bench_save_writes_a_record_that_names_its_command(folders, capsys):
    from core.cli import main

    assert main(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", "33", "--steps", "1",
                 "--rounds", "1", "--iters", "1", "--save"]) == 0
    (path,) = R.find([folders["decode"]])
    rec = R.load(path)
    assert rec["context"] == 33 and path.name.endswith("-tiny-2L-ctx33.json")
    assert rec["command"] == ("python -m core decode-bench --model tiny --context 33 --steps 1 --device cpu "
                              "--rounds 1 --iters 1")
    assert f"record saved to {path}" in capsys.readouterr().err


def test_a_record_from_before_the_op_replay_shows_the_profilers_breakdown(record, folders, tmp_path):
    old = {k: v for k, v in record.items() if k not in ("measured_at", "command", "kv_capacity", "fused")}
    old = {**old, **{w: {k: v for k, v in record[w].items() if k != "ops"} for w in "ab"}}
    (folders["decode"]).mkdir()
    (folders["decode"] / "old.json").write_text(json.dumps(old))
    at = decode_page()
    ops_a, ops_b = [d.value for d in at.dataframe if "share" in d.value.columns]
    assert list(ops_b["op"]) == list(record["b"]["breakdown"]["by_kind"])
    assert any("No op replay in this record" in c.value for c in at.caption)
    from benchmarks.tools.decode_report import main

    assert main([str(folders["decode"] / "old.json"), "--out", str(tmp_path / "r.md")]) == 0
    assert "(no command in the record)" in (tmp_path / "r.md").read_text()
