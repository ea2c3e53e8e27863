"""Replay: run a search strategy against a recorded sweep (:mod:`core.search.table`) instead of a device.

The strategy is driven through :func:`core.search.strategies.steps`, the functions a live run calls,
with an evaluate callback that looks the genome up in the table and draws one of its recorded samples
(seeded: the same seed replays the same draws), so selection meets the noise it meets on the device.
Elites re-timed by the GA draw again (not counted as evaluations, as in a live run). A genome that the
table does not hold is lethal with status ``not_recorded`` (an exhaustive table holds every genome of its
space, so there it cannot happen). Fitness weighs time only (``{"time": 1}``): the paired speed-up
when the table has one, else the baseline time / the drawn time.

A trace is the order in which genomes were first measured; its *best-so-far curve* is, after each
evaluation, the lowest recorded median time (µs) among the genomes measured so far -- what the
search has found, judged by the table, not by the draw it happened to get.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from core.genome import GeneSpace, Genome
from core.search.table import best_known, read_header, read_rows

NOT_RECORDED = "not_recorded"
STALLS = 3  # generations in a row that measure nothing new: the space is exhausted


@dataclass
class Recorded:
    """A sweep in memory: header, rows by genome hash, the best median time and the space it covers."""

    header: dict
    rows: dict[str, dict]
    best: float
    space: GeneSpace
    order: list[str] = field(default_factory=list)

    @property
    def exhaustive(self) -> bool:
        return self.header.get("mode") == "exhaustive"


def load(folder: Path) -> Recorded:
    """The sweep in ``folder`` (TableError for a folder that is not one, or one with no ok genome)."""
    from core.search.space import subspace, workload_space
    from core.search.table import TableError

    header = read_header(Path(folder))
    rows = read_rows(Path(folder))
    best = best_known(rows)
    if best is None:
        raise TableError(f"{folder}: no genome of the table is ok: nothing to search for")
    space = workload_space(header["workload"], header["backend"], header.get("problem") or {}, header.get("device_record"))
    if header.get("vary"):
        space = subspace(space, Genome.from_json(header["base_genome"]), header["vary"])
    return Recorded(header, {r["genome_hash"]: r for r in rows}, best, space, [r["genome_hash"] for r in rows])


class TableEvaluator:
    """The evaluate callback: genomes -> measure dicts drawn from the table; counts first measurements."""

    def __init__(self, table: Recorded, rng: random.Random):
        self.table, self.rng = table, rng
        self.trace: list[str] = []  # genome hashes in the order first measured
        self._seen: set[str] = set()

    def measure(self, g: Genome) -> dict:
        row = self.table.rows.get(g.hash)
        if row is None:
            return {"genome_hash": g.hash, "status": NOT_RECORDED, "cause": "genome not in the recorded table"}
        if row["status"] != "ok":
            return {"genome_hash": g.hash, "status": row["status"], "cause": row.get("cause") or ""}
        times = list(row.get("time_samples_us") or [row["time_us"]])
        i = self.rng.randrange(len(times))
        ratios = list(row.get("speedup_samples") or [])
        speedup = ratios[i] if len(ratios) == len(times) else (self.rng.choice(ratios) if ratios else None)
        return {"genome_hash": g.hash, "status": "ok", "cause": "", "time_us": float(times[i]), "speedup": speedup,
                "memory_bytes": row.get("memory_bytes") or 1, "stability": row.get("stability") or 0.0}

    def evaluate(self, genomes: list[Genome]) -> list[dict]:
        out = []
        for g in genomes:
            if g.hash not in self._seen:
                self._seen.add(g.hash)
                self.trace.append(g.hash)
            out.append(self.measure(g))
        return out

    def retime(self, genomes: list[Genome]) -> list[dict]:
        return [self.measure(g) for g in genomes]


def run(table: Recorded, strategy: str, budget: int, seed: int, init: str = "random", population: int = 8,
        elites: int = 2, surrogate: int = 0) -> dict:
    """One replay: the strategy searches until ``budget`` genomes are measured (or the space runs dry).

    ``strategy`` is a live strategy name, or ``nsga2`` (the GA with NSGA-II selection). Returns the trace
    (first ``budget`` genome hashes), the best-so-far curve, the surrogate's hit rate when it ran."""
    from core.config import RunConfig
    from core.search.ga import GAContext
    from core.search.strategies import steps
    from core.search.surrogate import hit_rate

    h = table.header
    cfg = RunConfig.from_dict({
        "workload": h["workload"], "backend": h["backend"], "problem": h.get("problem") or {}, "seed": seed,
        "population": population, "elites": min(elites, population - 1), "init": init, "weights": {"time": 1.0},
        "selection": "nsga2" if strategy == "nsga2" else "top10", "surrogate": surrogate,
        "strategy": "ga" if strategy == "nsga2" else strategy})
    base = h.get("baseline") or {}
    baseline = {"time_us": base.get("time_us") or table.best, "memory_bytes": base.get("memory_bytes") or 1,
                "stability": base.get("stability") or 1.0}
    rng = random.Random(seed)
    ev = TableEvaluator(table, random.Random(rng.getrandbits(62)))
    ctx = GAContext(cfg, table.space, baseline, ev.evaluate, retime=ev.retime)
    first, step = steps(cfg.strategy)
    population_ = first(ctx, rng)
    stalls = 0
    while len(ev.trace) < budget and stalls < STALLS:
        before = len(ev.trace)
        population_ = step(population_, ctx, rng)
        stalls = stalls + 1 if len(ev.trace) == before else 0
    trace = ev.trace[:budget]
    return {"strategy": strategy, "seed": seed, "trace": trace, "curve": curve(table, trace),
            "not_recorded": sum(1 for x in trace if x not in table.rows),
            "surrogate_hit_rate": hit_rate(ctx.strategy_state)}


def curve(table: Recorded, trace: list[str]) -> list[float | None]:
    """Best-so-far recorded median time after each evaluation (None until an ok genome is measured)."""
    out: list[float | None] = []
    best = math.inf
    for hsh in trace:
        row = table.rows.get(hsh)
        if row and row["status"] == "ok" and row["time_us"] is not None:
            best = min(best, float(row["time_us"]))
        out.append(None if best == math.inf else best)
    return out
