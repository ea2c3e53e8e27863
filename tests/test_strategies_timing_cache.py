"""The timing cache across runs (core/search/timing_cache.py, --timing-cache 1)."""
from __future__ import annotations

from core.config import RunConfig
from core.search.timing_cache import TimingCache, cached, identity, timer_version
from tests.helpers import fake_measure


def _evaluate(calls):
    def run(genomes):
        calls.append([g.hash for g in genomes])
        return [{"genome_hash": g.hash, "compile_log": "long", **fake_measure(g)} for g in genomes]
    return run


def test_a_genome_measured_by_an_earlier_run_is_not_measured_again(tmp_path, toy_space):
    import random

    genomes = [toy_space.random(random.Random(i)) for i in range(4)]
    ident = identity(RunConfig(), {"name": "cpu", "versions": {"compiler": "cc 12"}})
    first_calls, second_calls = [], []
    first = cached(_evaluate(first_calls), TimingCache(tmp_path, ident))(genomes[:3])
    lines = []
    second = cached(_evaluate(second_calls), TimingCache(tmp_path, ident), lines.append)(genomes)  # a new run
    ok = [g.hash for g, m in zip(genomes[:3], first) if m["status"] == "ok"]
    assert second_calls == [[g.hash for g in genomes if g.hash not in ok]]
    assert [m["time_us"] for m in second[:3] if m["status"] == "ok"] == [m["time_us"] for m in first if m["status"] == "ok"]
    assert "compile_log" not in second[0] or second[0]["genome_hash"] not in ok
    assert lines and "not measured again" in lines[0]


def test_another_device_toolchain_or_problem_does_not_share_the_cache(tmp_path, toy_space):
    import random

    g = toy_space.random(random.Random(0))
    base = identity(RunConfig(), {"name": "cpu", "versions": {"compiler": "cc 12"}})
    TimingCache(tmp_path, base).put({"genome_hash": g.hash, "status": "ok", "time_us": 1.0})
    others = [identity(RunConfig(), {"name": "other cpu", "versions": {"compiler": "cc 12"}}),
              identity(RunConfig(), {"name": "cpu", "versions": {"compiler": "cc 13"}}),
              identity(RunConfig(problem={"m": 64}), {"name": "cpu", "versions": {"compiler": "cc 12"}})]
    assert TimingCache(tmp_path, base).get(g.hash)["time_us"] == 1.0
    assert all(TimingCache(tmp_path, o).get(g.hash) is None for o in others)
    assert base["timer"] == timer_version()


def test_lethal_measurements_are_not_cached_and_a_torn_line_is_skipped(tmp_path):
    cache = TimingCache(tmp_path, {"k": 1})
    cache.put({"genome_hash": "a", "status": "timeout"})
    cache.put({"genome_hash": "b", "status": "ok", "time_us": 2.0})
    with open(cache.path, "a") as f:
        f.write('{"genome_hash": "c", "sta')
    again = TimingCache(tmp_path, {"k": 1})
    assert again.get("a") is None and again.get("b")["time_us"] == 2.0 and again.get("c") is None and len(again) == 1


def test_the_timing_cache_is_a_run_setting_off_by_default():
    assert RunConfig().timing_cache == 0 and RunConfig.from_dict({"timing_cache": 1}).timing_cache == 1
