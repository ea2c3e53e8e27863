"""The baseline re-timed in every generation, elites re-timed, the champion by its median, --init.

A fake evaluator and a fake baseline stand in for the sandbox (core/search/retiming.py, core/search/ga.py); the
real CPU end-to-end checks are in tests/test_run_resume.py.
"""
from __future__ import annotations

import json
import random
import shutil
import statistics
import sys
from pathlib import Path

import pytest

from core.config import RunConfig
from core.search.ga import GAContext, Individual, _evaluate_and_score, initial_population, step, summarise
from core.search.known import KnownMeasures
from core.search.retiming import (NOISY_REL_SPREAD, baseline_summary, combine, describe, measure_generation, remeasured,
                           time_samples, with_reference)
from store import RunReader, RunWriter, new_run_id
from store.schema import SCHEMA_VERSION, columns
from tests.helpers import fake_measure, toy_space

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
def test_each_generation_times_its_own_baseline_and_terms_use_the_run_reference():
    machine = Machine()
    ctx = ctx_for(machine)
    rng = random.Random(1)
    pop = initial_population(ctx, rng)
    first = {i.hash: i.terms["time"] for i in pop if i.ok}
    assert ctx.baseline["time_us"] == 50.0 and ctx.baseline["reference"] == {"time_us": 50.0, "generations": 1}
    for ind in pop:  # one generation: the reference is its own baseline
        if ind.ok:
            assert ind.terms["time"] == pytest.approx(50.0 / ind.measure["time_us"])
    machine.slowdown = 3.0  # the machine turns busy: everything, the library too, takes 3x as long
    nxt = step(pop, ctx, rng)
    # the generation's own baseline is kept as measured; the terms divide the median of 50 and 150
    assert ctx.baseline["time_us"] == 150.0 and ctx.baseline["samples_us"] == [150.0] * 3
    assert ctx.baseline["reference"] == {"time_us": 100.0, "generations": 2} and ctx.baseline_times == [50.0, 150.0]
    for ind in nxt:
        if ind.ok and not ind.remeasured:
            assert ind.terms["time"] == pytest.approx(100.0 / ind.measure["time_us"])
    elites = [i for i in nxt if i.remeasured]
    assert len(elites) == 2
    for ind in elites:  # timed idle then busy: the median of (t, 3t) against the run's reference
        t = fake_measure(ind.genome)["time_us"]
        assert ind.measure["time_samples_us"] == pytest.approx([t, 3 * t])
        assert ind.terms["time"] == pytest.approx(100.0 / (2 * t)) and first[ind.hash] == pytest.approx(50.0 / t)


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


def test_every_fresh_genome_starts_compiling_before_the_first_baseline_timing():
    machine = Machine()
    ctx = ctx_for(machine, population=8)
    ahead: list = []
    ctx.compile_ahead = lambda genomes: (ahead.append(len(genomes)), machine.calls.append(f"compile ahead {len(genomes)}"))
    pop = initial_population(ctx, random.Random(5))
    assert machine.calls[:2] == ["compile ahead 8", "baseline"] and ahead == [8]
    machine.calls.clear()
    step(pop, ctx, random.Random(6))
    assert machine.calls[0] == "compile ahead 6"  # the children, not the re-timed elites


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


# -- the run-level reference ---------------------------------------------------------------------------
SWING = (45.0, 61.0, 104.0, 61.0)  # the baseline of successive generations (torch.compile RMSNorm on an H200)


class SwingingBaseline(Machine):
    """The candidates time steadily; the baseline of generation g times ``schedule[g % len]`` in all of
    its timings (``checks`` per generation). ``start`` is the first generation it measures."""

    def __init__(self, schedule=SWING, checks: int = 3, start: int = 0):
        super().__init__()
        self.schedule, self.checks, self.timings = schedule, checks, start * checks

    def remeasure(self):
        g = self.timings // self.checks
        self.timings += 1
        return record(self.schedule[g % len(self.schedule)], 0.1)


def test_a_noisy_baseline_does_not_move_a_steady_kernels_time_term():
    machine = SwingingBaseline()
    ctx = ctx_for(machine)
    rng = random.Random(6)
    history = [initial_population(ctx, rng)]
    for _ in range(11):
        history.append(step(history[-1], ctx, rng))
    own = [SWING[g % 4] for g in range(12)]
    assert ctx.baseline_times == own  # one entry per generation
    refs = [statistics.median(own[: g + 1]) for g in range(12)]
    # every term divides the run's reference, a steady 61 µs from generation 2 on, whatever the generation timed
    for g, pop in enumerate(history):
        for ind in pop:
            if ind.ok:
                assert ind.terms["time"] == pytest.approx(refs[g] / ind.measure["time_us"])
    assert refs[2:] == [61.0] * 10
    terms: dict[str, set] = {}
    for pop in history[2:]:  # the same kernel (the same time) has the same time term in every generation
        for ind in pop:
            if ind.ok:
                terms.setdefault(ind.hash, set()).add(round(ind.terms["time"], 9))
    carried = [h for h, seen in terms.items() if sum(h in {i.hash for i in pop} for pop in history[2:]) > 1]
    assert carried and all(len(terms[h]) == 1 for h in carried)
    # the generation's own baseline is what it measured: 45 and 104 µs generations stay visible
    assert ctx.baseline["time_us"] == own[-1] and baseline_summary(ctx.baseline)["baseline_reference_us"] == 61.0
    assert baseline_summary(ctx.baseline)["baseline_time_us"] == own[-1]
    assert "reference 61.00us (median of 12 generations)" in describe(ctx.baseline)


def test_the_reference_falls_back_to_the_generations_own_baseline_and_leaves_memory_alone():
    from core.objectives import objective

    m = {"status": "ok", "time_us": 20.0, "memory_bytes": 500, "stability": 1.0}
    old = record(100.0)  # a record from before the reference (an old run's state)
    assert objective("time").term(m, old) == 5.0 and objective("memory").term(m, old) == 2.0
    new = with_reference(old, [40.0, 100.0, 60.0])
    assert new["reference"] == {"time_us": 60.0, "generations": 3} and new["time_us"] == 100.0
    assert objective("time").term(m, new) == 3.0 and objective("memory").term(m, new) == 2.0
    assert with_reference(old, []) == old and baseline_summary(old)["baseline_reference_us"] is None


def _commit(w, g, pop, ctx):
    from core.run.rows import individual_row

    w.commit_generation(g, [individual_row(g, i) for i in pop], [], {**summarise(pop), **baseline_summary(ctx.baseline)},
                        {"baseline": dict(ctx.baseline)})


@pytest.mark.parametrize("with_reference_on", [True, False])
def test_a_kernel_first_timed_in_a_slow_baseline_generation_does_not_outrank_a_faster_one(tmp_path, with_reference_on,
                                                                                           monkeypatch):
    """The H200 run: a 24.0 µs kernel first measured when the baseline timed 104 µs was the champion
    over an 18.9 µs one first measured when it timed 45 µs."""
    import core.search.ga as ga

    if not with_reference_on:  # what the run did before: every term against its own generation's baseline
        monkeypatch.setattr(ga, "with_reference", lambda baseline, history: dict(baseline))
    space = toy_space()
    rng = random.Random(11)
    genomes = list({g.hash: g for g in (space.random(rng) for _ in range(40))}.values())[:10]
    slow, fast, others = genomes[0], genomes[1], genomes[2:]
    times = {slow.hash: 24.0, fast.hash: 18.9}
    schedule = [61.0, 45.0, 61.0, 104.0, 61.0, 61.0, 104.0, 45.0]
    gen = {"g": 0}

    def measure(gs):
        return [{"status": "ok", "time_us": times.get(g.hash, 200.0), "memory_bytes": 1000, "stability": 1.0}
                for g in gs]

    ctx = GAContext(RunConfig(population=4, generations=10, elites=1, weights={"time": 1.0}), space, record(61.0),
                    measure, retime=measure, remeasure=lambda: record(schedule[gen["g"]]))
    w = RunWriter.create(tmp_path, new_run_id("rmsnorm", "c"), {"workload": "rmsnorm", "backend": "c",
                                                                 "weights": {"time": 1.0}})
    try:
        for g in range(len(schedule)):  # slow is new in generation 6 (104 µs), fast in generation 7 (45 µs)
            gen["g"] = g
            members = [others[g]] + ([slow] if g == 6 else []) + ([fast] if g == 7 else [])
            pop = _evaluate_and_score([Individual(x, "random") for x in members], ctx)
            _commit(w, g, pop, ctx)
    finally:
        w.close()
    top = RunReader(w.path).top(2)
    stored = RunReader(w.path).generations()
    if with_reference_on:
        assert list(top["genome_hash"]) == [fast.hash, slow.hash]
        assert RunReader(w.path).champion()["time_us"] == 18.9
        assert list(stored["baseline_time_us"]) == schedule  # what each generation measured, kept
        assert list(stored["baseline_reference_us"]) == [statistics.median(schedule[: g + 1]) for g in range(8)]
    else:  # the bug this guards against
        assert list(top["genome_hash"]) == [slow.hash, fast.hash]


def test_a_kernel_dropped_while_the_reference_stood_high_does_not_outrank_faster_ones(tmp_path):
    """Call 31 on the H200: the reference (a median of noisy baselines) rose and fell again; a 20.3 us
    kernel dropped from the elites while it stood high kept the fitness of that moment and was
    reported champion over a 16.8 us kernel measured later. The ranking takes every kernel's time
    against the latest reference; the stored fitness stays as it was scored."""
    space = toy_space()
    rng = random.Random(12)
    genomes = list({g.hash: g for g in (space.random(rng) for _ in range(40))}.values())[:13]
    slow, medium, fast, others = genomes[0], genomes[1], genomes[2], genomes[3:]
    times = {slow.hash: 24.0, medium.hash: 20.0, fast.hash: 18.9}
    schedule = [45.0, 45.0, 104.0, 104.0, 104.0, 104.0, 45.0, 45.0, 45.0, 45.0]
    gen = {"g": 0}

    def measure(gs):
        return [{"status": "ok", "time_us": times.get(g.hash, 200.0), "memory_bytes": 1000, "stability": 1.0}
                for g in gs]

    weights = {"time": 0.8, "memory": 0.2}
    ctx = GAContext(RunConfig(population=4, generations=10, elites=1, weights=weights), space, record(45.0),
                    measure, retime=measure, remeasure=lambda: record(schedule[gen["g"]]))
    w = RunWriter.create(tmp_path, new_run_id("rmsnorm", "c"), {"workload": "rmsnorm", "backend": "c", "weights": weights})
    elite = None
    try:
        for g in range(len(schedule)):  # slow new in generation 4, medium in 5 (then the elite), fast in 9
            gen["g"] = g
            members = [others[g]] + [x for x, at in ((slow, 4), (medium, 5), (fast, 9)) if at == g]
            carried = [Individual(elite.genome, "elite")] if elite is not None else []
            pop = _evaluate_and_score([Individual(x, "random") for x in members] + carried, ctx, carried)
            _commit(w, g, pop, ctx)
            elite = max(pop, key=lambda i: i.fitness)
    finally:
        w.close()
    reader = RunReader(w.path)
    rows = reader.individuals()
    latest = rows.sort_values("generation").groupby("genome_hash").tail(1).set_index("genome_hash")
    assert latest.loc[slow.hash, "generation"] == 5 and latest.loc[slow.hash, "fitness"] > latest.loc[fast.hash, "fitness"]
    assert reader.time_reference() == (45.0, 0.8)
    top = reader.top(3)
    assert list(top["genome_hash"]) == [fast.hash, medium.hash, slow.hash]
    assert list(top["fitness"]) == [latest.loc[h, "fitness"] for h in top["genome_hash"]]  # as stored
    assert reader.champion()["time_us"] == 18.9


def test_a_resumed_run_keeps_the_reference_history(tmp_path):
    """Stopped after generation 3 and resumed: the reference goes on over every generation's baseline,
    as in the run that never stopped."""
    from core.run.rows import known_measures
    from core.run.worker import RunWorker

    def run(name, generations, resume_from=None):
        cfg = RunConfig(population=6, generations=generations, elites=2, seed=4, weights={"time": 1.0})
        if resume_from is None:
            w = RunWriter.create(tmp_path, name, json.loads(cfg.to_json()))
        else:
            w = RunWriter.open(tmp_path / name)
        machine = SwingingBaseline(start=resume_from or 0)
        ctx = GAContext(cfg, toy_space(), record(50.0), machine.evaluate, known=known_measures(w),
                        retime=machine.retime, remeasure=machine.remeasure)
        try:
            assert RunWorker(w, cfg, tmp_path / name, tmp_path, echo=None)._generations(ctx, lambda _: None) == 0
        finally:
            w.close()
        return ctx

    whole = run("whole", 8)
    run("split", 4)
    resumed = run("split", 8, resume_from=4)
    assert resumed.baseline_times == whole.baseline_times == [SWING[g % 4] for g in range(8)]
    assert resumed.baseline["reference"] == whole.baseline["reference"] == {"time_us": 61.0, "generations": 8}
    gens = {k: RunReader(tmp_path / k).generations() for k in ("whole", "split")}
    assert gens["split"]["baseline_reference_us"].tolist() == gens["whole"]["baseline_reference_us"].tolist() == [
        statistics.median([SWING[i % 4] for i in range(g + 1)]) for g in range(8)]
    cols = ["generation", "genome_hash", "fitness", "time_term"]
    inds = {k: RunReader(tmp_path / k).individuals()[cols].sort_values(cols[:2]).reset_index(drop=True)
            for k in ("whole", "split")}
    assert inds["split"].equals(inds["whole"])
    log = (tmp_path / "split" / "worker.log").read_text()
    assert "resuming after generation 3 (reference: median of 4 generation baselines)" in log
    assert "reference 61.00us (median of 8 generations)" in log


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
    from core.search.fitness import score

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
    from core.run.rows import rebuild_population

    history, genomes, fake = lucky_run(retiming=True)
    pop = history[-1]
    stored = {i.hash: {**i.measure, "time_samples_us": json.dumps(i.measure.get("time_samples_us", []))} for i in pop}
    state = [{"genome": i.genome.to_dict(), "origin": i.origin, "parents": list(i.parents)} for i in pop]
    cfg = RunConfig(population=4, generations=10, elites=2, weights={"time": 1.0})
    fresh = GAContext(cfg, toy_space(), record(999.0), fake.evaluate, known=KnownMeasures(lambda hs: {h: stored[h] for h in hs}, stored))
    rebuilt = rebuild_population(state, fresh, record(100.0))
    assert [i.fitness for i in rebuilt] == pytest.approx([i.fitness for i in pop])


def test_a_committed_measure_is_kept_compact_with_the_same_row_and_score():
    """GAContext.known holds a measure for every genome of the run: after its generation is committed
    it keeps its row's fields (JSON ones as text) and what scoring reads, not the kernel's source,
    launch, flags or the lists and dicts of the evaluation."""
    import dataclasses

    from core.evaluation.record import Evaluation
    from core.search.fitness import score
    from core.run.rows import compact_measure, individual_row

    genome = toy_space().seed_genomes()[0]
    ev = Evaluation(genome_hash="k1", status="ok", time_us=12.5, time_spread_us=0.4, memory_bytes=4096, extra_bytes=96,
                    stability=0.9, determinism=1.0, steadiness=0.8, error_margin=0.9, max_abs_err=1e-6, rel_err=1e-7,
                    source_hash="k1", compile_s=0.3, eval_s=0.2, resources={"threads": 4, "regs": 32},
                    source="void k(void) {}" * 50, entry="k", flags=["-O3", "-march=native"],
                    launch={"grid": [4, 1, 1], "block": [64, 1, 1]}, compile_log="warning" * 40,
                    shape_errors=[{"shape": f"s{i}", "max_abs_err": 1e-6 * i, "rel_err": 1e-7, "margin_used": 0.1}
                                  for i in range(6)],
                    phases={"compile": 0.3, "verification": 0.05, "timing": 0.1}, device="c:0", device_time_us=12.5)
    full = {**dataclasses.asdict(ev), "time_samples_us": [12.0, 12.5, 13.0]}
    small = compact_measure(full)
    assert not {"source", "compile_log", "launch", "flags", "entry"} & set(small)
    ind = lambda m: Individual(genome, "elite", ("p",), measure=m, reused=True, fitness=1.5, terms={"time": 2.0})
    assert individual_row(3, ind(small)) == individual_row(3, ind(full))
    weights = {"time": 0.6, "memory": 0.3, "stability": 0.1}
    assert score(small, record(25.0), weights) == score(full, record(25.0), weights)
    assert compact_measure(small) == small and remeasured(small, {"status": "ok", "time_us": 14.0})["time_samples_us"] == [
        12.0, 12.5, 13.0, 14.0]

    def deep(o):
        if isinstance(o, dict):
            return sys.getsizeof(o) + sum(deep(v) for v in o.values())
        if isinstance(o, (list, tuple)):
            return sys.getsizeof(o) + sum(deep(v) for v in o)
        return sys.getsizeof(o)

    assert deep(small) < 0.5 * deep({k: v for k, v in full.items() if k not in ("source", "compile_log")})


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

        def call_retrying(self, request, slot=None, timeout_s=None, log=None):
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
