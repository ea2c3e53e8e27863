"""The library build's plan and its refusals: model tables, keys, misses, budgets, bad input (exit 2,
nothing written). No run is started here."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.library.manifest import FORMAT, MANIFEST, Entry, Library, entry_id, sha256_bytes
from core.library.models import MODELS, ModelError, entry_key, load_model
from core.tools.library_build import Budget, open_library
from core.tools.library_plan import (PARTS, PlanError, parse_ms, parse_parts, plan, plan_from_misses,
                                     problem_from_key, read_misses)
from tests.helpers import cli


def test_the_70b_projections_are_missions_decode_gemms():
    assert load_model("llama-3.1-70b").projections() == {
        "qkv": (10240, 8192), "o": (8192, 8192), "gate_up": (57344, 8192), "down": (8192, 28672)}
    assert load_model("Qwen2.5-72B").intermediate == 29568


def test_a_full_gpu_plan_has_one_item_per_part_and_bucket_with_keys_of_the_model():
    items = plan(MODELS["llama-3.1-70b"], PARTS, (1, 2, 4, 8, 16, 32, 64), "cuda")
    assert len(items) == len(PARTS) * 7 and len({i.run_id for i in items}) == len(items)
    keys = {(i.part, i.key[4]): i.key for i in items}
    assert keys[("down", 1)] == ("w4a16", "w4g128-bf16", 8192, 28672, 1)
    assert keys[("rmsnorm", 64)] == ("rmsnorm", "bf16-res", 8192, 8192, 64)
    assert keys[("rope", 8)] == ("rope", "bf16", 64 * 128, 8 * 128, 8)
    assert keys[("silu_mul", 2)] == ("silu_mul", "bf16", 28672, 1, 2)
    assert keys[("lm_head", 16)] == ("gather_gemv", "bf16", 128256, 8192, 16)
    assert all(len(i.run_id) <= 64 for i in items)


def test_small_divides_the_model_and_keeps_every_problem_valid_on_the_c_backend():
    items = plan(MODELS["qwen2.5-72b"], PARTS, (1, 64), "c", divisor=64)
    assert {i.key[1] for i in items if i.op == "w4a16"} == {"w4g128-fp32"}
    assert all(i.run_id.endswith("-s64") for i in items)


@pytest.mark.parametrize("op, problem", [
    ("w4a16", {"m": 4, "n": 96, "k_groups": 2, "zero_points": True, "dtype": "bfloat16"}),
    ("rmsnorm", {"rows": 3, "cols": 64, "residual": True, "dtype": "float32"}),
    ("rmsnorm", {"rows": 3, "cols": 64, "residual": False, "dtype": "float32"}),
    ("rope", {"tokens": 2, "q_heads": 8, "kv_heads": 2, "half_dim": 64, "dtype": "float16"}),
    ("silu_mul", {"tokens": 5, "hidden": 224, "dtype": "float32"}),
    ("gather_gemv", {"tokens": 1, "vocab": 2004, "hidden": 64, "dtype": "float32"}),
    ("gemm", {"m": 8, "n": 16, "k": 32, "dtype": "float32"}),
])
def test_a_miss_key_maps_back_to_a_problem_with_the_same_key(op, problem):
    fmt, n, k, m = entry_key(op, problem)
    again = problem_from_key(op, fmt, n, k, m, head_dim=128)
    assert entry_key(op, again) == (fmt, n, k, m)


def test_misses_plan_one_run_per_distinct_key(tmp_path):
    log = tmp_path / "misses.jsonl"
    miss = {"op": "silu_mul", "fmt": "fp32", "N": 224, "K": 1, "M": 3, "device": "cpu", "time": 1.0}
    log.write_text("\n".join(json.dumps(x) for x in (miss, miss, {**miss, "M": 5})) + "\n\n")
    items = plan_from_misses(read_misses(log), "c")
    assert [i.key for i in items] == [("silu_mul", "fp32", 224, 1, 3), ("silu_mul", "fp32", 224, 1, 5)]


def test_a_malformed_misses_line_is_named(tmp_path):
    log = tmp_path / "misses.jsonl"
    log.write_text('{"op": "rope", "fmt": "fp32", "N": 4}\n')
    with pytest.raises(PlanError, match="line 1 lacks op, fmt and positive integers N, K, M"):
        read_misses(log)


@pytest.mark.parametrize("text, want", [("8", Budget(generations=8)), ("2h", Budget(hours=0.25)),
                                        ("10m/entry", Budget(hours=10 / 60))])
def test_a_budget_is_generations_per_entry_or_time_in_all_or_per_entry(text, want):
    assert Budget.parse(text, entries=8) == want


@pytest.mark.parametrize("text", ["0", "fast", "-1h", "1d", "nanh"])
def test_a_bad_budget_is_refused(text):
    with pytest.raises(ValueError, match="--budget takes"):
        Budget.parse(text, entries=2)


def test_bad_m_and_ops_are_refused():
    with pytest.raises(PlanError, match="--m takes"):
        parse_ms("1,x")
    with pytest.raises(PlanError, match="unknown op 'mlp'"):
        parse_parts("qkv,mlp")
    assert parse_ms("4,1,4") == (1, 4)


@pytest.mark.parametrize("content, words", [
    ("[1, 2]", "must hold a JSON object"),
    ('{"name": "x"}', "lacks hidden"),
    ('{"name": "x", "hidden": "4096", "intermediate": 1, "heads": 1, "kv_heads": 1, "head_dim": 2, "vocab": 1, '
     '"layers": 1}', "hidden must be an integer"),
    ('{"name": "x", "hidden": 64, "intermediate": 1, "heads": 3, "kv_heads": 2, "head_dim": 2, "vocab": 1, '
     '"layers": 1}', "multiple of kv_heads"),
    ("{oops", "not valid JSON"),
])
def test_a_malformed_model_file_is_refused_in_one_line(tmp_path, content, words):
    path = tmp_path / "model.json"
    path.write_text(content)
    with pytest.raises(ModelError) as e:
        load_model(str(path))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_model_file_gives_a_plan(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"name": "tiny", "hidden": 256, "intermediate": 512, "heads": 4, "kv_heads": 2,
                                "head_dim": 64, "vocab": 1000, "layers": 2}))
    items = plan(load_model(str(path)), ("qkv",), (1,), "c")
    assert items[0].key == ("w4a16", "w4g128-fp32", (4 + 4) * 64, 256, 1)


def refused(tmp_path: Path, *args: str) -> str:
    res = cli(*args, runs_dir=tmp_path / "runs", timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stdout == "", res.stderr
    assert not (tmp_path / "runs").exists()
    return res.stderr


def test_an_unknown_model_is_refused_and_nothing_is_written(tmp_path):
    err = refused(tmp_path, "library", "build", "--model", "llama-9", "--out", str(tmp_path / "lib"))
    assert "unknown model 'llama-9'" in err and not (tmp_path / "lib").exists()


def test_a_malformed_model_file_is_refused_by_the_cli(tmp_path):
    (tmp_path / "m.json").write_text("[]")
    err = refused(tmp_path, "library", "build", "--model", str(tmp_path / "m.json"), "--out", str(tmp_path / "lib"))
    assert "must hold a JSON object" in err and not (tmp_path / "lib").exists()


def test_a_library_of_another_version_is_refused_and_left_as_it_was(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    text = json.dumps({"format": FORMAT, "version": 99, "entries": []})
    (lib / MANIFEST).write_text(text)
    for args in (("library", "build", "--model", "llama-3.1-8b", "--small", "--out", str(lib)),
                 ("library", "verify", str(lib)), ("library", "add", str(lib), "no-such-run")):
        err = refused(tmp_path, *args)
        assert "version 99 is not supported" in err or "no run 'no-such-run'" in err
        assert (lib / MANIFEST).read_text() == text


def test_a_tampered_entry_refuses_adding_to_its_library(tmp_path):
    source = b"void k(void) {}\n"
    eid = entry_id("silu_mul", "fp32", 224, 1, 1, "c", sha256_bytes(source))
    folder = tmp_path / "entries" / eid
    folder.mkdir(parents=True)
    (folder / "kernel.c").write_bytes(source + b"/* edited */")
    entry = Entry(id=eid, op="silu_mul", fmt="fp32", shape={"N": 224, "K": 1, "M": 1}, problem={}, backend="c",
                  device={"name": "cpu", "arch": "x86_64", "kind": "cpu"}, toolchain={},
                  source=f"entries/{eid}/kernel.c", source_hash=sha256_bytes(source), artefact=None, artefact_hash=None)
    Library(entries=[entry]).save(tmp_path)
    with pytest.raises(ValueError, match="source kernel.c does not match its sha256"):
        open_library(tmp_path, None)


def test_verify_of_a_folder_that_is_no_library_is_bad_input(tmp_path):
    assert "not a library folder" in refused(tmp_path, "library", "verify", str(tmp_path))


def test_a_library_export_holds_the_champion_only(tmp_path):
    from core.tools.export import export_champions

    with pytest.raises(ValueError, match="holds the champion only"):
        export_champions(tmp_path, tmp_path / "out", which="top", library=True)


def fake_item(tmp_path: Path):
    from core.tools.library_build import BuildSettings

    item = plan(MODELS["llama-3.1-8b"], ("silu_mul",), (2,), "c", divisor=64)[0]
    return item, BuildSettings(runs_dir=tmp_path, budget=Budget(generations=1))


@pytest.mark.parametrize("status, command", [("stopped", "resume"), ("dead", "resume"), ("finished", None)])
def test_an_interrupted_run_is_resumed_and_a_finished_one_only_retimed(tmp_path, monkeypatch, status, command):
    from core.tools import library_build

    item, settings = fake_item(tmp_path)
    (tmp_path / item.run_id).mkdir()
    monkeypatch.setattr("store.runs.effective_status", lambda folder, *a, **k: status)
    calls = []
    monkeypatch.setattr(library_build, "_child", lambda argv, log: calls.append(argv) or 0)
    assert library_build.evolve(item, settings, [], log=lambda line: None) == tmp_path / item.run_id
    assert [c[0] for c in calls] == ([command] if command else [])


def test_a_new_run_gets_the_plans_problem_and_budget_and_a_failed_one_stops_the_build(tmp_path, monkeypatch):
    from core.tools import library_build

    item, settings = fake_item(tmp_path)
    seen = []

    def child(argv, log):
        seen.append(json.loads(Path(argv[argv.index("--config") + 1]).read_text()))
        return 2

    monkeypatch.setattr(library_build, "_child", child)
    with pytest.raises(RuntimeError, match="exited with status 2"):
        library_build.evolve(item, settings, [], log=lambda line: None)
    assert seen[0]["problem"] == item.problem and seen[0]["generations"] == 1 and seen[0]["workload"] == "silu_mul"


def test_a_backend_this_machine_lacks_is_refused_before_anything_is_written(tmp_path):
    from core.backends import availability

    if availability("cuda") is None:
        pytest.skip("this machine has a CUDA device")
    err = refused(tmp_path, "library", "build", "--model", "llama-3.1-70b", "--backend", "cuda", "--ops", "down",
                  "--m", "1", "--out", str(tmp_path / "lib"), "--runs-dir", str(tmp_path / "runs"))
    assert "backend 'cuda' is not available here" in err and not (tmp_path / "lib").exists()


def test_a_torn_last_miss_line_is_skipped_but_a_bad_middle_line_is_refused(tmp_path):
    log = tmp_path / "misses.jsonl"
    good = json.dumps({"op": "silu_mul", "fmt": "fp32", "N": 224, "K": 1, "M": 3})
    log.write_text(good + "\n" + '{"op": "sil')
    assert len(read_misses(log)) == 1
    log.write_text('{"op": "sil\n' + good + "\n")
    with pytest.raises(PlanError, match="line 1 is not JSON"):
        read_misses(log)
