"""decode-bench at several contexts from one model (the CPU tiny model), and the memory estimate that
refuses a run the GPU cannot hold, before anything is built."""
from __future__ import annotations

import json

import pytest
import torch

from core.cli import main
from core.library import ops
from core.library.models import load_model
from core.tools import decode_records as R
from core.tools.decode_memory import check_fits, estimate


@pytest.fixture(autouse=True)
def no_dispatcher_left_active():
    yield
    ops.activate(None)


def test_several_contexts_give_one_record_each_with_its_own_cache_and_checked_logits(tmp_path, capsys):
    assert main(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", "24,100", "--steps", "2",
                 "--rounds", "1", "--iters", "1", "--verify", "1", "--json", "--save", str(tmp_path)]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["context"], r["kv_capacity"]) for r in records] == [(24, 64), (100, 128)]
    for r in records:
        for w in "ab":
            assert r[w]["logits"]["max_abs_error"] < 1e-3 and r[w]["ops"]["rows"]
        assert r["verify"][0]["M"] == 2 and "--context 24,100" in r["command"]
    assert sorted(R.load(p)["context"] for p in R.find([tmp_path])) == [24, 100]


@pytest.mark.parametrize("flag", ["0", "abc", "1024,2000000"])
def test_a_bad_context_is_one_line_and_exit_status_2(flag, capsys):
    assert main(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", flag]) == 2
    err = capsys.readouterr().err.strip()
    assert "--context" in err and len(err.splitlines()) == 1


def test_the_estimate_counts_a_32k_bf16_kv_cache_as_128_mib_per_layer_and_way():
    s = load_model("llama-3.1-70b")
    short, long = (estimate(s, 8, 1, c) for c in (1024, 32768))
    grown = long["two KV caches ((a), (b))"] - short["two KV caches ((a), (b))"]
    assert grown == 2 * 8 * (2 * 8 * 128 * (32768 - 1024) * 2)  # two ways, 8 layers
    assert 6 << 30 < long["4-bit weights ((b) and the reference)"] + long["(a)'s repacked int4 weights"] < 8 << 30


def test_a_run_the_gpu_cannot_hold_is_refused_in_one_line_before_anything_is_built(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (40 << 30, 141 << 30))
    s = load_model("llama-3.1-70b")
    assert check_fits(s, 8, 1, 32832, "cuda")["total"] < 40 << 30
    with pytest.raises(ValueError, match="needs about .* GiB of GPU memory, 40.0 GiB are free") as exc:
        check_fits(s, 80, 1, 32832, "cuda")
    assert "\n" not in str(exc.value)


def test_a_run_cut_short_keeps_the_records_of_the_contexts_it_finished(tmp_path, monkeypatch):
    from core.tools import decode_bench

    real = decode_bench._context

    def dies_at_100(args, s, ctx, *rest):
        if ctx == 100:
            raise RuntimeError("the timeout came")
        return real(args, s, ctx, *rest)

    monkeypatch.setattr(decode_bench, "_context", dies_at_100)
    assert main(["decode-bench", "--model", "tiny", "--device", "cpu", "--context", "24,100", "--steps", "1",
                 "--rounds", "1", "--iters", "1", "--save", str(tmp_path)]) == 1
    assert [R.load(p)["context"] for p in R.find([tmp_path])] == [24]


def test_a_library_run_counts_the_weights_its_kernels_may_repack():
    s = load_model("llama-3.1-8b")
    plain, lib = estimate(s, 32, 1, 1088), estimate(s, 32, 1, 1088, library=True)
    assert lib["total"] - plain["total"] == plain["(a)'s repacked int4 weights"] > 3 << 30  # 8B: 3.4 GiB of int4
