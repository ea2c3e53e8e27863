"""The rows a run stores: a generation's individuals and kernels, the measures kept in memory
once it is committed, and the population rebuilt from them at a resume."""
from __future__ import annotations

import json
from typing import Any

from core.evaluation.record import STORED_COLUMNS
from core.genome import Genome
from core.search.ga import GAContext, Individual
from core.search.known import KnownMeasures
from core.search.retiming import champion_figures, time_samples


def rebuild_population(saved: list[dict], ctx: GAContext, baseline: dict | None) -> list[Individual]:
    """The committed population, rescored from stored measurements against its generation's
    baseline (nothing is measured, so the resumed run continues as if it had never stopped)."""
    from core.search.ga import _score

    pop = [Individual(Genome(s["genome"]), s["origin"], tuple(s["parents"])) for s in saved]
    missing = [i.hash for i in pop if i.hash not in ctx.known]
    if missing:
        raise RuntimeError(f"stored state names genomes with no stored measurements: {missing[:3]}")
    measures = ctx.known.load(i.hash for i in pop)  # one read of the store for the whole population
    for ind in pop:
        ind.measure = measures[ind.hash]
    if baseline:
        ctx.baseline = baseline
    return _score(pop, ctx)


# What a genome's measure keeps in memory once its generation is committed. ``GAContext.known`` holds one
# for every genome of the run (so that none is evaluated twice, and a reused genome's row can be written):
# every stored field of the measurement record (``core.evaluation.record.STORED_COLUMNS``), the JSON ones as
# their text, plus what scoring reads (every objective's measurement, the time samples). The kernel's source,
# compile log, flags, launch and entry are in the kernels table, written with the generation that first
# measured it. The soak showed the worker's memory growing with every individual: on its rmsnorm run the full
# measure (its dicts and lists) took 4.4 kB a genome, this 2.2 kB (tracemalloc, 600 genomes).
_AS_TEXT = {"resources": lambda v: _json_text(v), "phases": lambda v: _json_text(v),
            "shape_errors": lambda v: _json_list(v), "speedup_samples": lambda v: _json_list(v)}
KEPT = tuple(name for name in STORED_COLUMNS if name not in _AS_TEXT) + ("time_samples_us",)


def known_measures(writer: Any) -> KnownMeasures:
    """Every genome stored by ``writer`` (a :class:`store.writer.RunWriter`); their measures are read
    back, compact, when needed."""
    return KnownMeasures(writer.evaluations, writer.genome_hashes(), compact_measure)


def compact_measure(measure: dict) -> dict:
    """``measure`` as kept in memory after its generation is committed (see :data:`KEPT`): the same
    individuals row and the same score, half the memory."""
    from core.objectives import OBJECTIVES

    keep = KEPT + tuple(o.measure for o in OBJECTIVES if o.measure not in KEPT)
    out = {k: measure[k] for k in keep if k in measure}
    for key, text in _AS_TEXT.items():
        if key in measure:
            out[key] = text(measure[key])
    return out


def measure_columns(m: dict) -> dict:
    """The individuals row's columns of the measurement ``m``: every stored field of the record."""
    out = {name: m.get(name) for name in STORED_COLUMNS}
    out.update({key: text(m.get(key)) for key, text in _AS_TEXT.items()})
    out["cause"], out["device"] = m.get("cause", ""), m.get("device") or None
    return out


def individual_row(generation: int, ind: Individual) -> dict:
    """The individuals row of ``ind`` in ``generation``."""
    return {
        "generation": generation, "genome_hash": ind.hash, "genome": ind.genome.to_json(),
        "parents": list(ind.parents), "origin": ind.origin, "fitness": ind.fitness, "pareto_rank": ind.pareto_rank,
        "reused": ind.reused, "remeasured": ind.remeasured, "time_samples_us": json.dumps(time_samples(ind.measure)),
        **measure_columns(ind.measure),
        **{f"{name}_term": term for name, term in ind.terms.items()},
    }


def champion_text(ind: Individual, baseline_name: str) -> str:
    """The champion's median time, its spread and its term per objective, e.g.
    ``12.30us median of 4 (IQR 0.21us) (time 1.210x memory 1.000x vs numpy)``."""
    terms = " ".join(f"{name} {term:.3f}x" for name, term in ind.terms.items() if term is not None)
    c = champion_figures(ind.measure)
    n = c["champion_samples"]
    spread = f" ({'IQR' if n > 1 else 'launch IQR'} {c['champion_spread_us']:.2f}us)" if c["champion_spread_us"] is not None else ""
    return f"{ind.measure['time_us']:.2f}us median of {n}{spread} ({terms} vs {baseline_name})"


def _json_list(value: Any) -> str:
    """JSON text of a list; measurements reloaded from the store already hold the text."""
    return value if isinstance(value, str) else json.dumps(value or [])


def _json_text(value: Any) -> str:
    """JSON text of a dict; measurements reloaded from the store already hold the text."""
    return value if isinstance(value, str) else json.dumps(value or {}, sort_keys=True)


def kernel_rows(new: list[Individual], backend: str) -> list[dict]:
    rows: dict[str, dict] = {}
    for ind in new:
        m = ind.measure
        if m.get("source_hash") and m.get("source"):
            rows[m["source_hash"]] = {
                "source_hash": m["source_hash"], "backend": backend, "entry": m.get("entry") or "",
                "source": m["source"], "flags": json.dumps(list(m.get("flags") or [])),
                "launch": json.dumps(m.get("launch") or {}, sort_keys=True),
                "resources": _json_text(m.get("resources")), "compile_log": m.get("compile_log") or "",
            }
    return list(rows.values())

