"""Synthetic but schema-correct runs, written with the real :class:`store.writer.RunWriter`.

Used by the dashboard's tests and by ``benchmarks/monitor_render.py`` (5,000 generations x 64
individuals) where running the real engine would take days. Fitness values are made up; every
row has the columns and types of docs/CONTRACTS.md, genomes are real :class:`core.genome.Genome`
JSON with the four gene groups, and every genome has a rendered (fake C) kernel source.
"""
from __future__ import annotations

import random
import time
from pathlib import Path

from core.search.fitness import score
from core.genome import Genome
from core.objectives import default_weights
from store.runs import new_run_id
from store.writer import RunWriter

_TILES = (8, 16, 32, 64)
_ORDERS = ("ijk", "ikj", "jik")
_PATTERNS = ("row", "blocked", "transposed")
_TOKENS = ("LDG", "FFMA", "STG", "SYNC")
CAUSES = ("compile_error", "wrong_result", "timeout", "crashed", "resource_exceeded", "unstable")


def random_genome(rng: random.Random) -> Genome:
    """A genome with the seed's four gene groups (synthetic genes, real Genome JSON)."""
    seq = list(_TOKENS)
    rng.shuffle(seq)
    return Genome({
        "parallel_config": {"tile_m": rng.choice(_TILES), "tile_n": rng.choice(_TILES), "threads": rng.choice((1, 2, 4))},
        "memory_pattern": {"b_layout": rng.choice(_PATTERNS), "vector": rng.choice((1, 4, 8))},
        "register_allocation": {"map": {"acc": rng.choice(("registers", "stack")), "a": rng.choice(("registers", "cache"))}},
        "instruction_sequence": {"order": seq, "loop": rng.choice(_ORDERS)},
    })


def mutate(genome: Genome, rng: random.Random) -> Genome:
    """The same genome with one gene changed."""
    other = random_genome(rng)
    group = rng.choice(("parallel_config", "memory_pattern", "register_allocation", "instruction_sequence"))
    name = rng.choice(sorted(genome[group]))
    return genome.replace(group, name, other[group][name])


def render(genome: Genome) -> str:
    """A C-looking source whose lines follow the genes, so diffs between genomes are meaningful."""
    g = genome.to_dict()
    pc, mp, ra, seq = (g["parallel_config"], g["memory_pattern"], g["register_allocation"]["map"],
                       g["instruction_sequence"])
    body = "\n".join(f"            /* {tok} */ step_{tok.lower()}(acc, a, b, i, j, p);" for tok in seq["order"])
    return f"""// genome {genome.hash}
#include <stdlib.h>
#define TILE_M {pc['tile_m']}
#define TILE_N {pc['tile_n']}
#define VEC {mp['vector']}
#define THREADS {pc['threads']}
void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {{
    /* B layout: {mp['b_layout']} */
    /* acc in {ra['acc']}, A tile in {ra['a']} */
    for (int i0 = 0; i0 < M; i0 += TILE_M)
        for (int j0 = 0; j0 < N; j0 += TILE_N) {{
            /* loop order {seq['loop']} */
{body}
        }}
}}
"""


def build_run(runs_dir: Path | str, generations: int = 5, population: int = 8, seed: int = 0,
              status: str = "finished", workload: str = "gemm", run_id: str | None = None,
              with_baseline: bool = True) -> str:
    """Write a run of ``generations`` x ``population`` with RunWriter; return its run id.

    ``status`` is the final recorded status (``running`` leaves a run that looks alive while this
    process lives: its heartbeat carries this pid).
    """
    rng = random.Random(seed)
    run_id = run_id or new_run_id(workload, "c")
    config = {"workload": workload, "backend": "c", "device": 0, "population": population,
              "generations": generations, "hours": 0.0, "seed": seed, "weights": default_weights(),
              "mutation_rate": 0.2, "crossover_rate": 0.9, "elites": 2,
              "parent_fraction": 0.1, "selection": "top10", "tournament_size": 3, "stability_launches": 20,
              "timeout_s": 30.0, "compile_workers": 0, "problem": {"m": 64, "n": 64, "k": 64, "dtype": "float32"}}
    writer = RunWriter.create(runs_dir, run_id, config)
    base_time, base_mem = 100.0, 3 * 64 * 64 * 4
    try:
        if with_baseline:
            writer.set_baseline({
                "primary": "numpy", "time_us": base_time, "memory_bytes": base_mem, "roofline_us": 2.5,
                "flops": 2.0 * 64 ** 3, "io_bytes": base_mem, "shape": {"m": 64, "n": 64, "k": 64},
                "device": {"backend": "c", "index": 0, "name": "synthetic CPU", "memory_bytes": 8 << 30,
                           "multiprocessors": 2, "arch": "x86_64", "versions": {"numpy": "2.x"}},
                "baselines": {"numpy": {"time_us": base_time, "spread_us": 4.0, "memory_bytes": base_mem},
                              "naive C": {"time_us": 900.0, "spread_us": 30.0, "memory_bytes": base_mem}}})
        pop = [random_genome(rng) for _ in range(population)]
        parents: dict[str, list[str]] = {g.hash: [] for g in pop}
        origins = {g.hash: "random" for g in pop}
        known_kernels: set[str] = set()
        best_so_far = 0.0
        t0 = time.time()
        for gen in range(generations):
            rows, kernels, fits = [], [], []
            lethal: dict[str, int] = {}
            progress = gen / max(1, generations - 1)
            for idx, g in enumerate(pop):
                src_hash = "s" + g.hash[:23]
                lethal_cause = rng.choice(CAUSES) if rng.random() < 0.12 else None
                t = base_time * (1.6 - 0.9 * progress) * (0.8 + 0.4 * rng.random())
                mem = int(base_mem * (1.0 + rng.random() * 0.5))
                stab = 1.0 if rng.random() < 0.9 else round(rng.random(), 2)
                scored = score({"status": lethal_cause or "ok", "time_us": t, "memory_bytes": mem, "stability": stab},
                               {"time_us": base_time, "memory_bytes": base_mem}, config["weights"])
                fit = scored.fitness
                if lethal_cause:
                    lethal[lethal_cause] = lethal.get(lethal_cause, 0) + 1
                fits.append(fit)
                rows.append({"genome_hash": g.hash, "genome": g.to_json(), "parents": parents.get(g.hash, []),
                             "origin": origins.get(g.hash, "mutation"), "status": lethal_cause or "ok",
                             "cause": f"synthetic {lethal_cause}" if lethal_cause else "", "fitness": fit,
                             "time_us": None if lethal_cause else t, "time_spread_us": None if lethal_cause else t * 0.03,
                             "memory_bytes": None if lethal_cause else mem, "extra_bytes": 0, "onchip_bytes": 0,
                             "stability": None if lethal_cause else stab,
                             **{f"{name}_term": term for name, term in scored.terms.items()}, "pareto_rank": 0 if idx < 3 else 1 + idx % 4,
                             "source_hash": src_hash, "compile_s": 0.03, "eval_s": 0.2, "max_abs_err": 1e-6,
                             "rel_err": 1e-7, "resources": {"workspace_bytes": 0}, "reused": False})
                if src_hash not in known_kernels:
                    known_kernels.add(src_hash)
                    kernels.append({"source_hash": src_hash, "backend": "c", "entry": "abebot_gemm", "source": render(g),
                                    "flags": ["-O3", "-march=native"], "launch": {"threads": 1},
                                    "resources": {"workspace_bytes": 0}, "compile_log": ""})
            ok = [f for f in fits if f > 0]
            best_idx = max(range(len(pop)), key=lambda i: fits[i])
            best_so_far = max(best_so_far, fits[best_idx])
            summary = {"best_fitness": best_so_far, "mean_fitness": sum(fits) / len(fits),
                       "worst_fitness": min(fits), "n_evaluated": len(pop), "n_lethal": len(pop) - len(ok),
                       "best_time_us": min(r["time_us"] for r in rows if r["time_us"] is not None) if ok else None,
                       "best_memory_bytes": min(r["memory_bytes"] for r in rows if r["memory_bytes"] is not None) if ok else None,
                       "diversity": len({g.hash for g in pop}) / len(pop) * (0.9 - 0.4 * progress),
                       "lethal_causes": lethal, "champion_hash": pop[best_idx].hash,
                       "elapsed_s": 12.0 * (gen + 1), "evals_per_s": len(pop) / 12.0}
            writer.commit_generation(gen, rows, kernels, summary, {"generation": gen})
            writer.heartbeat(elapsed_s=12.0 * (gen + 1), evals_per_s=len(pop) / 12.0, total_generations=generations,
                             started_at=t0)
            ranked = sorted(range(len(pop)), key=lambda i: -fits[i])
            elites = [pop[i] for i in ranked[:2]]
            nxt = list(elites)
            for e in elites:
                origins[e.hash] = "elite"
            while len(nxt) < population:
                parent = pop[rng.choice(ranked[: max(2, population // 4)])]
                child = mutate(parent, rng)
                if child in nxt:
                    continue
                parents.setdefault(child.hash, [parent.hash])
                origins.setdefault(child.hash, "mutation")
                nxt.append(child)
            pop = nxt
        writer.set_status(status, "synthetic run")
    finally:
        writer.close()
    return run_id
