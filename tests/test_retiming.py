"""The baseline re-timed in every generation, elites re-timed, the champion by its median, --init.

A fake evaluator and a fake baseline stand in for the sandbox (core/retiming.py, core/ga.py); the
real CPU end-to-end checks are in tests/test_run_resume.py.
"""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from core.config import RunConfig
from core.ga import GAContext, Individual, _evaluate_and_score, initial_population, step, summarise
from core.retiming import (NOISY_REL_SPREAD, baseline_summary, combine, measure_generation, remeasured,
                           time_samples)
from store import RunReader, RunWriter, new_run_id
from store.schema import SCHEMA_VERSION, columns
from tests.test_ga import fake_measure
from tests.test_genome import toy_space

ROOT = Path(__file__).resolve().parents[1]
H200_RUNS = sorted(p for p in (ROOT / "benchmarks" / "h200_runs").iterdir() if p.is_dir())


def record(time_us: float, spread_us: float = 0.0, name: str = "lib", others: dict | None = None) -> dict:
    """A baseline record as ``Evaluator.remeasure_baselines`` returns it."""
    entries = {name: {"time_us": time_us, "spread_us": spread_us, "memory_bytes": 1000, "verified": True, "cause": ""}}
    entries.update(others or {})
    return {"device": {"name": "fake"}, "primary": name, "time_us": time_us, "spread_us": spread_us,
            "memory_bytes": 1000, "baselines": entries}


class Machine:
    """A fake machine whose speed changes: the candidates and the baseline both take ``slowdown``
    times as long. Counts what it was asked to do, in order."""

    def __init__(self):
        self.slowdown = 1.0
        self.calls: list[str] = []

    def evaluate(self, genomes):
        self.calls.append(f"evaluate {len(genomes)}")
        return [self._measure(g) for g in genomes]

    def retime(self, genomes):
        self.calls.append(f"retime {len(genomes)}")
        return [self._measure(g) for g in genomes]

    def remeasure(self):
        self.calls.append("baseline")
        return record(50.0 * self.slowdown, 0.1)

    def _measure(self, genome):
        m = fake_measure(genome)
        if m["status"] == "ok":
            m["time_us"] *= self.slowdown
        return m


def ctx_for(machine: Machine, **overrides) -> GAContext:
    cfg = RunConfig(**{"population": 8, "generations": 10, "elites": 2, "weights": {"time": 1.0}, **overrides})
    return GAContext(cfg, toy_space(), record(50.0), machine.evaluate, retime=machine.retime, remeasure=machine.remeasure)


# -- the baseline of each generation -------------------------------------------------------------------
def test_each_generation_uses_its_own_baseline():
    machine = Machine()
    ctx = ctx_for(machine)
    rng = random.Random(1)
    pop = initial_population(ctx, rng)
    first = {i.hash: i.terms["time"] for i in pop if i.ok}
    assert ctx.baseline["time_us"] == 50.0
    machine.slowdown = 3.0  # the machine turns busy: everything, the library too, takes 3x as long
    nxt = step(pop, ctx, rng)
    assert ctx.baseline["time_us"] == 150.0 and ctx.baseline["samples_us"] == [150.0] * 3
    for ind in nxt:
        if ind.ok and not ind.remeasured:  # a new candidate: its term is as if the machine were idle
            assert ind.terms["time"] == pytest.approx(150.0 / ind.measure["time_us"])
            assert ind.terms["time"] == pytest.approx(50.0 / fake_measure(ind.genome)["time_us"])
    elites = [i for i in nxt if i.remeasured]
    assert len(elites) == 2
    for ind in elites:  # timed idle then busy: the median of (t, 3t) against this generation's baseline
        t = fake_measure(ind.genome)["time_us"]
        assert ind.measure["time_samples_us"] == pytest.approx([t, 3 * t])
        assert ind.terms["time"] == pytest.approx(150.0 / (2 * t)) and first[ind.hash] == pytest.approx(50.0 / t)


def test_the_baseline_is_timed_before_between_and_after_the_candidates():
    machine = Machine()
    ctx = ctx_for(machine)
    rng = random.Random(2)
    pop = initial_population(ctx, rng)
    assert machine.calls == ["baseline", "evaluate 4", "baseline", "evaluate 4", "baseline"]
    machine.calls.clear()
    step(pop, ctx, rng)
    # the 6 children in two halves, one elite re-timed in each half, a baseline timing around each half
    assert machine.calls == ["baseline", "evaluate 3", "retime 1", "baseline", "evaluate 3", "retime 1", "baseline"]
    machine.calls.clear()
    measure_generation([], [], machine.evaluate, machine.retime, machine.remeasure, checks=2)
    assert machine.calls == ["baseline", "baseline"]  # nothing new: the baseline is still timed


def test_the_primary_is_rechosen_as_the_fastest_verified_baseline_by_median():
    slow_then_fast = [record(100.0, others={"blas": {"time_us": t, "spread_us": 0.0, "memory_bytes": 500,
                                                     "verified": True}}) for t in (90.0, 120.0, 95.0)]
    b = combine(slow_then_fast)
    assert b["primary"] == "blas" and b["time_us"] == 95.0 and b["samples_us"] == [90.0, 120.0, 95.0]
    assert b["memory_bytes"] == 500 and b["baselines"]["lib"]["time_us"] == 100.0
    broken = [record(10.0, others={"blas": {"time_us": None, "verified": False, "cause": "wrong"}})] * 2
    assert combine(broken)["primary"] == "lib"  # one that failed verification is never primary


def test_a_noisy_generation_is_flagged():
    steady = combine([record(100.0, 1.0), record(101.0, 1.0), record(100.5, 1.0)])
    assert steady["rel_spread"] == pytest.approx(1.0 / 100.5) and steady["noisy"] is False
    drifting = combine([record(100.0, 1.0), record(180.0, 1.0), record(104.0, 1.0)])  # a burst mid-generation
    assert drifting["time_us"] == 104.0  # the median of three outvotes the burst...
    assert drifting["spread_us"] == 80.0 and drifting["noisy"] is True  # ...but the generation is flagged
    jittery = combine([record(100.0, 8.0), record(100.0, 7.0), record(100.0, 9.0)])  # launches scatter by 8 %
    assert jittery["spread_us"] == 8.0 and jittery["rel_spread"] > NOISY_REL_SPREAD and jittery["noisy"] is True
    row = baseline_summary(drifting)
    assert row["noisy"] is True and row["baseline_primary"] == "lib" and json.loads(row["baseline_samples_us"]) == [
        100.0, 180.0, 104.0]


# -- elites and the champion ---------------------------------------------------------------------------
class Lucky:
    """Genome A measures 10 µs once (a lucky showing), 40 µs ever after; B always 20 µs; the rest 1000 µs."""

    def __init__(self, a, b):
        self.a, self.b, self.seen = a.hash, b.hash, {}
        self.new: list[str] = []

    def measure(self, genome):
        n = self.seen.get(genome.hash, 0)
        self.seen[genome.hash] = n + 1
        t = {self.a: 10.0 if n == 0 else 40.0, self.b: 20.0}.get(genome.hash, 1000.0)
        return {"status": "ok", "time_us": t, "time_spread_us": 0.5, "memory_bytes": 1000, "stability": 1.0}

    def evaluate(self, genomes):
        self.new += [g.hash for g in genomes]
        return [self.measure(g) for g in genomes]

    def retime(self, genomes):
        return [self.measure(g) for g in genomes]


def lucky_run(retiming: bool, generations: int = 2):
    space = toy_space()
    rng = random.Random(5)
    genomes = list({g.hash: g for g in (space.random(rng) for _ in range(20))}.values())[:4]
    fake = Lucky(genomes[0], genomes[1])
    cfg = RunConfig(population=4, generations=10, elites=2, weights={"time": 1.0})
    ctx = GAContext(cfg, space, record(100.0), fake.evaluate, retime=fake.retime if retiming else None,
                    remeasure=lambda: record(100.0))
    pop = _evaluate_and_score([Individual(g, "random") for g in genomes], ctx)
    history = [pop]
    for _ in range(generations):
        history.append(step(history[-1], ctx, rng))
    return history, genomes, fake


def test_champion_is_chosen_by_the_median_of_its_remeasurements():
    history, (a, b, *_), fake = lucky_run(retiming=True)
    assert summarise(history[0])["champion_hash"] == a.hash  # its lucky first showing
    last = summarise(history[-1])
    assert last["champion_hash"] == b.hash
    assert (last["champion_time_us"], last["champion_spread_us"], last["champion_samples"]) == (20.0, 0.0, 3)
    lucky = next(i for i in history[-1] if i.hash == a.hash)
    assert lucky.measure["time_samples_us"] == [10.0, 40.0, 40.0] and lucky.measure["time_us"] == 40.0
    assert lucky.terms["time"] == pytest.approx(100.0 / 40.0) and lucky.remeasured and not lucky.reused
    # without re-timing the lucky showing would have stayed the champion
    frozen, (a2, *_), _ = lucky_run(retiming=False)
    assert summarise(frozen[-1])["champion_hash"] == a2.hash and summarise(frozen[-1])["champion_time_us"] == 10.0


def test_a_remeasurement_is_not_a_new_evaluation():
    history, (a, b, *_), fake = lucky_run(retiming=True, generations=3)
    assert len(fake.new) == len(set(fake.new))  # no genome is evaluated as new twice
    for pop in history[1:]:
        again = [i for i in pop if i.remeasured]
        assert {i.hash for i in again} <= {a.hash, b.hash} and again and not any(i.reused for i in again)
        summary = summarise(pop)
        assert summary["n_remeasured"] == len(again)


@pytest.mark.parametrize("selection", ["top10", "tournament", "nsga2"])
def test_every_selection_retimes_exactly_its_elites(selection):
    machine = Machine()
    ctx = ctx_for(machine, selection=selection)
    rng = random.Random(4)
    history = [initial_population(ctx, rng)]
    new_hashes: list[str] = [i.hash for i in history[0]]
    for _ in range(4):
        history.append(step(history[-1], ctx, rng))
        pop = history[-1]
        assert len(pop) == 8 and len({i.hash for i in pop}) == 8
        elites = sorted(history[-2], key=lambda i: i.fitness, reverse=True)[:2]
        again = [i for i in pop if i.remeasured]
        survivors = [e for e in elites if e.ok and e.hash in {i.hash for i in pop}]  # NSGA-II: children may displace them
        assert {i.hash for i in again} == {e.hash for e in survivors}
        assert selection == "nsga2" or len(again) == sum(e.ok for e in elites)
        for ind in again:
            assert len(ind.measure["time_samples_us"]) >= 2 and ind.origin == "elite"
        new_hashes += [i.hash for i in pop if not i.reused and not i.remeasured]
        for ind in pop:
            assert ind.fitness == pytest.approx(score_of(ind, ctx))
    assert len(new_hashes) == len(set(new_hashes))  # a genome is new once; after that it is re-timed or reused


def score_of(ind, ctx) -> float:
    from core.fitness import score

    return score(ind.measure, ctx.baseline, ctx.config.weights).fitness


def test_a_failed_remeasurement_makes_the_elite_lethal():
    before = {"status": "ok", "time_us": 10.0, "time_samples_us": [10.0, 12.0]}
    after = remeasured(before, {"status": "wrong_result", "cause": "max error 3.1", "source": "int main;"})
    assert after["status"] == "wrong_result" and after["cause"] == "re-measurement: max error 3.1"
    assert after["time_samples_us"] == [10.0, 12.0] and "source" not in after
    ok = remeasured(before, {"status": "ok", "time_us": 30.0, "time_spread_us": 1.0})
    assert ok["time_samples_us"] == [10.0, 12.0, 30.0] and ok["time_us"] == 12.0 and ok["time_spread_us"] == 1.0
    assert time_samples({"status": "ok", "time_us": 5.0, "time_samples_us": "[4.0, 6.0]"}) == [4.0, 6.0]  # stored text
    assert time_samples({"status": "ok", "time_us": 5.0}) == [5.0] and time_samples({"status": "crashed"}) == []


def test_a_resumed_population_is_rescored_against_its_own_generations_baseline():
    from core.worker import _rebuild

    history, genomes, fake = lucky_run(retiming=True)
    pop = history[-1]
    stored = {i.hash: {**i.measure, "time_samples_us": json.dumps(i.measure.get("time_samples_us", []))} for i in pop}
    state = [{"genome": i.genome.to_dict(), "origin": i.origin, "parents": list(i.parents)} for i in pop]
    cfg = RunConfig(population=4, generations=10, elites=2, weights={"time": 1.0})
    fresh = GAContext(cfg, toy_space(), record(999.0), fake.evaluate, known=stored)
    rebuilt = _rebuild(state, fresh, record(100.0))
    assert [i.fitness for i in rebuilt] == pytest.approx([i.fitness for i in pop])


# -- --init ------------------------------------------------------------------------------------------
def test_random_init_places_no_seed():
    machine = Machine()
    seed = toy_space().seed_genomes()[0]
    seeded = initial_population(ctx_for(machine, init="seeds"), random.Random(3))
    assert seeded[0].origin == "seed" and seeded[0].hash == seed.hash
    rand = initial_population(ctx_for(machine, init="random"), random.Random(3))
    assert len(rand) == 8 and {i.origin for i in rand} == {"random"} and seed.hash not in {i.hash for i in rand}


def test_init_is_a_run_setting_and_a_cli_flag():
    from core.cli import build_parser, config_from_args
    from core.config import ConfigError

    assert RunConfig().init == "seeds"
    args = build_parser().parse_args(["run", "--workload", "gemm", "--backend", "c", "--init", "random"])
    assert config_from_args(args).init == "random"
    with pytest.raises(ConfigError, match="init must be one of seeds, random"):
        RunConfig.from_dict({"init": "lucky"})
    assert RunConfig.from_dict({}).baseline_checks == 3  # an old config.json gets the defaults


# -- the store -----------------------------------------------------------------------------------------
def test_the_runs_champion_is_the_latest_row_of_each_kernel(tmp_path):
    w = RunWriter.create(tmp_path, new_run_id("gemm", "c"), {"workload": "gemm", "backend": "c"})
    try:
        def row(g, h, fitness, status="ok"):
            return {"genome_hash": h, "source_hash": f"s{h}", "status": status, "fitness": fitness, "time_us": 100 / fitness
                    if fitness else None, "origin": "elite" if g else "random", "remeasured": bool(g)}
        w.commit_generation(0, [row(0, "a", 10.0), row(0, "b", 5.0), row(0, "c", 4.0)], [], {}, {})
        w.commit_generation(1, [row(1, "a", 2.5), row(1, "b", 5.0), row(1, "c", 0.0, "wrong_result")], [], {}, {})
    finally:
        w.close()
    r = RunReader(w.path)
    assert r.champion()["genome_hash"] == "b"  # a's best showing (gen 0) was luck; its latest says 2.5
    assert list(r.top(5)["genome_hash"]) == ["b", "a"]  # c failed its latest measurement


@pytest.mark.parametrize("path", H200_RUNS, ids=lambda p: p.name)
def test_an_old_run_without_baseline_columns_still_opens(tmp_path, path):
    from dashboard import data

    copy = tmp_path / path.name
    shutil.copytree(path, copy)
    r = RunReader(copy)
    gens = r.generations()
    assert list(gens.columns) == columns("generations") and gens["baseline_time_us"].isna().all()
    assert r.generations(["generation", "noisy", "baseline_time_us"])["noisy"].isna().all()
    inds = r.individuals(0, columns=["genome_hash", "remeasured", "time_samples_us"])
    assert len(inds) and inds["remeasured"].isna().all()
    assert "time_samples_us" in r.individuals().columns and r.champion()["time_term"] > 0
    assert data.baseline_noise(gens).empty and data.noise_summary(gens) is None and data.timing_caption(
        gens.iloc[-1], None) == ""
    last = int(gens["generation"].max())
    w = RunWriter.open(copy)  # resuming: the database gets the new columns, null in the old rows
    try:
        assert w._db.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        w.commit_generation(last + 1, [{"genome_hash": "new", "status": "ok", "fitness": 1.0, "remeasured": True,
                                        "time_samples_us": "[1.0, 2.0]"}], [],
                            {"baseline_time_us": 5.0, "baseline_rel_spread": 0.1, "noisy": True}, {"rng": []})
    finally:
        w.close()
    gens = RunReader(copy).generations()
    assert gens["noisy"].iloc[-1] == True and gens["baseline_time_us"].iloc[:-1].isna().all()  # noqa: E712
    assert list(data.baseline_noise(gens)["generation"]) == [last + 1]
    assert RunReader(copy).individuals(last + 1)["remeasured"].tolist() == [True]


def test_slow_baselines_are_timed_only_in_full_timings(tmp_path):
    """Between full timings, only the baselines within CONTENDER_RATIO of the fastest are re-timed;
    ``every=True`` (core bench) and every FULL_TIMING_EVERY-th call time them all."""
    from core.evaluation import evaluator as ev_mod

    asked: list = []

    class Sandbox:
        def each(self, run):
            return {"c:0": run("c:0")}

        def call(self, request, slot=None, timeout_s=None):
            return self._answer(request)

        def _answer(self, request):
            asked.append(request.get("names"))
            times = {"fast": 10.0, "close": 14.0, "slow": 100.0}
            names = request.get("names") or list(times)
            return {"status": "ok", "primary": "fast", "time_us": 10.0,
                    "baselines": {n: {"time_us": times[n], "verified": True} for n in names}}

    ev = ev_mod.Evaluator(RunConfig.from_dict({"workload": "gemm", "backend": "c"}), tmp_path)
    ev.sandbox = Sandbox()
    for _ in range(ev_mod.FULL_TIMING_EVERY + 1):
        ev.remeasure_baselines()
    ev.remeasure_baselines(every=True)
    contenders = ["close", "fast"]
    assert asked == [None] + [contenders] * (ev_mod.FULL_TIMING_EVERY - 1) + [None, None]
