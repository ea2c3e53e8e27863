"""Issue 27: the cache policy, paired timing, the noisy mark, the second method and one champion figure."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.evaluation.timing import NOISY_PAIR_SPREAD, Side, paired_times
from core.objectives import objective
from core.search.retiming import champion_figures, first_measure, remeasured
from core.workloads import WORKLOADS, get_workload

ROOT = Path(__file__).resolve().parents[1]


class LoadedRuntime:
    """A runtime whose every call takes ``base`` seconds times the machine's load at that moment;
    the load changes between the time() calls (chunks), as load that comes and goes does. It
    records how each side was timed."""

    chunk_statistic = "median"

    def __init__(self, base: dict, loads: list[float]):
        self.base, self.loads, self.calls, self.last_timing = base, loads, [], "events"

    def time(self, fn, reps, warmup, before=None, after=None, method=None):
        load = self.loads[len(self.calls) % len(self.loads)]
        self.calls.append((fn.__name__, method, reps, before))
        for i in range(warmup + reps):
            if before:
                before(i)
            fn(i)
        self.last_timing = method or "events"
        return [self.base[fn.__name__] * load] * reps

    def forget(self):
        pass


def _named(name):
    def fn(_i):
        return None
    fn.__name__ = name
    return fn


def test_a_pair_ratio_cancels_load_that_comes_and_goes():
    rt = LoadedRuntime({"kernel": 1e-4, "baseline": 2e-4}, loads=[1.0, 1.0, 7.0, 7.0, 1.0, 1.0, 30.0, 30.0])
    p = paired_times(rt, Side(_named("kernel")), Side(_named("baseline")), target_s=0.01)
    assert p.speedup == pytest.approx(2.0)  # every pair's two chunks saw the same load
    assert not p.noisy
    assert len(set(p.kernel)) > 2  # the load did move during the measurement (a 30x spread of the kernel's times)


def test_both_sides_are_timed_the_same_way_and_the_kernel_chunk_comes_last():
    rt = LoadedRuntime({"kernel": 1e-4, "baseline": 2e-4}, loads=[1.0])
    marker_k, marker_b = _named("prep_k"), _named("prep_b")
    paired_times(rt, Side(_named("kernel"), marker_k), Side(_named("baseline"), marker_b), target_s=0.01)
    timed = rt.calls[2:]  # after the two pilots
    assert [c[0] for c in timed] == ["baseline", "kernel"] * (len(timed) // 2)
    assert len({(c[1], c[2]) for c in timed}) == 1  # one method and one chunk size for both sides
    assert all(c[3] is (marker_k if c[0] == "kernel" else marker_b) for c in timed)  # each with its preparation


def test_pairs_whose_ratios_spread_over_ten_percent_are_noisy():
    class Jittery(LoadedRuntime):
        def time(self, fn, reps, warmup, before=None, after=None, method=None):
            out = super().time(fn, reps, warmup, before, after, method)
            if fn.__name__ == "kernel":  # the kernel alone slows in every other chunk: the ratio itself moves
                slow = sum(c[0] == "kernel" for c in self.calls) % 2
                out = [t * (1.5 if slow else 1.0) for t in out]
            return out

    p = paired_times(Jittery({"kernel": 1e-4, "baseline": 2e-4}, [1.0]), Side(_named("kernel")),
                     Side(_named("baseline")), target_s=0.01)
    assert p.spread > NOISY_PAIR_SPREAD * p.speedup and p.noisy


def test_the_time_term_is_the_paired_speedup_and_the_reference_only_a_fallback():
    time = objective("time")
    baseline = {"time_us": 100.0, "reference": {"time_us": 400.0}}
    assert time.term({"time_us": 50.0, "speedup": 1.9}, baseline) == pytest.approx(1.9)
    assert time.term({"time_us": 50.0}, baseline) == pytest.approx(8.0)  # a record from before pairs


def test_re_measurements_accumulate_speedups_and_the_champion_figure_is_their_median():
    m = first_measure({"status": "ok", "time_us": 10.0, "speedup": 2.0, "speedup_spread": 0.01, "noisy": False})
    m = remeasured(m, {"status": "ok", "time_us": 11.0, "speedup": 1.8, "noisy": False})
    m = remeasured(m, {"status": "ok", "time_us": 12.0, "speedup": 1.9, "noisy": False})
    assert m["speedup_samples"] == [2.0, 1.8, 1.9] and m["speedup"] == pytest.approx(1.9)
    fig = champion_figures(m)
    assert fig["champion_speedup"] == pytest.approx(1.9) and fig["champion_samples"] == 3
    assert fig["champion_noisy"] is False
    wild = remeasured(m, {"status": "ok", "time_us": 30.0, "speedup": 0.9, "noisy": False})
    wild = remeasured(wild, {"status": "ok", "time_us": 30.0, "speedup": 0.8, "noisy": False})
    assert champion_figures(wild)["champion_noisy"] is True  # re-measurements that disagree


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_every_workload_takes_a_cache_policy_and_refuses_a_wrong_one(name):
    wl = get_workload(name)
    assert wl.validate_problem({"cache": "hot"}, "c")["cache"] == "hot"
    assert "cache" not in wl.validate_problem({}, "c")  # the default (cold) leaves renders and tables as they were
    with pytest.raises(ValueError, match="cache must be one of cold, hot"):
        wl.validate_problem({"cache": "lukewarm"}, "c")


def test_cold_evicts_every_buffer_of_the_case_before_each_timed_launch_of_kernel_and_baseline(tmp_path):
    from core.evaluation.protocol import Protocol

    spec = {"backend": "c", "workload": "gemm", "problem": {"m": 32, "n": 32, "k": 32}, "timing_target_s": 0.02,
            "launcher": "inline"}  # the launcher's timing loops in this process, on proto.runtime
    for policy, evicts in (("cold", True), ("hot", False)):
        proto = Protocol({**spec, "problem": get_workload("gemm").validate_problem({**spec["problem"], "cache": policy}, "c")})
        seen: list[int] = []
        proto.runtime.evict = lambda arrays, seen=seen: seen.append(len(arrays))
        base = proto.baseline(1)
        assert base["cache"] == policy and (base["evict"] != "") == evicts
        baseline_evictions = len(seen)
        artifact = checker_artifact(proto, tmp_path)
        result = proto.evaluate(artifact, 2)
        assert result["status"] == "ok", result
        assert result["cache"] == policy and result["speedup"] > 0 and result["pair_baseline"] == base["primary"]
        if evicts:
            assert baseline_evictions > 0 and len(seen) > baseline_evictions
            assert min(seen) >= 3  # the case's inputs and its output's guarded buffer, at least
        else:
            assert seen == []


def checker_artifact(proto, folder):
    from core.backends import make_backend
    from core.tools.check import seed_kernel

    backend = make_backend("c", 0)
    return backend.compile(seed_kernel(proto.template), folder / "cc")


def test_the_c_runtime_evicts_exactly_the_buffers_by_cache_line():
    from core.backends.cpu_cache import evictor

    ev = evictor(1 << 20)
    a = np.arange(1 << 16, dtype=np.float32)
    ev.evict([a, a[::3]])  # a view too; nothing changes
    assert a[12345] == 12345.0
    if Path("/proc/cpuinfo").exists() and any(m in (sys.platform, __import__("platform").machine())
                                              for m in ("x86_64", "aarch64", "AMD64")):
        assert ev.method.startswith("clflush")


@pytest.mark.slow
def test_bench_json_has_the_cache_policy_host_overhead_second_method_and_noisy(tmp_path):
    runs = tmp_path / "runs"
    env_cmd = [sys.executable, "-m", "core"]
    out = subprocess.run([*env_cmd, "run", "--workload", "gemm", "--backend", "c", "--population", "4",
                          "--generations", "2", "--seed", "1", "--runs-dir", str(runs),
                          "--problem", '{"m": 48, "n": 48, "k": 48}'], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.split()[1]
    bench = subprocess.run([*env_cmd, "bench", run_id, "--runs-dir", str(runs), "--rounds", "1", "--json"], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert bench.returncode == 0, bench.stderr
    result = json.loads(bench.stdout)
    for name, entry in [("champion", result["champion"]), *result["baselines"].items()]:
        assert entry["cache"] == "cold", name
        assert "host_overhead_us" in entry and "noisy" in entry, name
        assert entry["independent_us"] and entry["independent_us"] > 0, name
    champ = result["champion"]
    assert champ["speedup"] > 0 and champ["independent_speedup"] > 0 and isinstance(champ["disagree"], bool)
    # One champion figure: core runs shows the heartbeat's and Export's champion
    from store.runs import champion_figure, champion_text, read_json

    fig = champion_figure(runs / run_id)
    hb = read_json(runs / run_id / "heartbeat.json")
    assert hb["best_fitness"] == pytest.approx(fig["best_fitness"])
    assert hb["champion_speedup"] == pytest.approx(fig["champion_speedup"])
    listing = subprocess.run([*env_cmd, "runs", "--runs-dir", str(runs)], cwd=ROOT, capture_output=True, text=True)
    assert champion_text(fig) in listing.stdout
    exported = subprocess.run([*env_cmd, "export", run_id, "--runs-dir", str(runs), "--out", str(tmp_path / "x")],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr
    report = json.loads(next((tmp_path / "x").rglob("report.json")).read_text())
    assert report["genome_hash"] == fig["champion_hash"]
    assert report["vs_baseline"]["speedup"] == pytest.approx(fig["champion_speedup"])


def test_the_primary_is_decided_in_pairs_not_by_each_baselines_own_timing():
    """Timed alone, ``int4`` looked 4x slower than ``compiled`` (its host cost in per-call events, as on
    the H200); in pairs, one method for both, it is the faster, so it leads."""
    from core.evaluation.primary import CONTEST_FACTOR, choose_primary

    rt = LoadedRuntime({"int4": 27e-6, "compiled": 112e-6, "eager": 1160e-6}, loads=[1.0, 3.0])
    single = {"int4": 120.0, "compiled": 112.0, "eager": 1160.0}
    primary, paired, timed_s = choose_primary(rt, single, lambda n: Side(_named(n)), target_s=0.01)
    assert timed_s > 0
    assert primary == "int4"
    assert paired["int4"][0] < paired["compiled"][0]
    assert "eager" not in paired and single["eager"] > CONTEST_FACTOR * single["compiled"]  # never contested
    assert [c[0] for c in rt.calls if c[0] == "eager"] == []


def test_a_lone_contender_is_the_primary_without_any_pairing():
    from core.evaluation.primary import choose_primary

    rt = LoadedRuntime({"numpy": 1e-4, "slow": 1e-2}, loads=[1.0])
    assert choose_primary(rt, {"numpy": 100.0, "slow": 10_000.0}, lambda n: Side(_named(n)), 0.01) == ("numpy", {}, 0.0)
    assert rt.calls == []


def test_the_protocols_primary_comes_from_pairs_timed_in_the_launcher():
    """Two CPU baselines within the contest factor (numpy and torch's rms_norm): both are paired, in
    the launcher process, and their figures are the paired ones (the single timing kept beside)."""
    pytest.importorskip("torch")
    from core.evaluation.primary import CONTEST_FACTOR
    from core.evaluation.protocol import Protocol

    problem = get_workload("rmsnorm").validate_problem({"rows": 16, "cols": 256}, "c")
    proto = Protocol({"backend": "c", "workload": "rmsnorm", "problem": problem, "timing_target_s": 0.02})
    try:
        base = proto.baseline(3)
    finally:
        proto.close()
    single = {n: e.get("single_us", e["time_us"]) for n, e in base["baselines"].items() if e.get("verified")}
    contested = [n for n, us in single.items() if us <= CONTEST_FACTOR * min(single.values())]
    assert base["primary"] in single
    if len(contested) >= 2:
        assert all("single_us" in base["baselines"][n] for n in contested)
        assert base["time_us"] == base["baselines"][base["primary"]]["time_us"]
