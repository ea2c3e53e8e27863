#!/usr/bin/env python3
"""The same short CPU run twice, on a quiet machine and beside a CPU hog: the baseline's spread per
generation (re-timed three times in every generation), the generations flagged noisy, and the
distribution of every fitness term over the run's individuals.

    python3 -m benchmarks.tools.cpu_noise --out benchmarks/reports/cpu_noise [--workload gemm --generations 4]

Writes ``<out>/report.md`` and ``<out>/runs.json``. The hogs are plain busy loops, one per core.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _spin(stop) -> None:
    while not stop.is_set():
        pass


def run(workload: str, generations: int, population: int, hogs: int) -> dict:
    runs = Path(tempfile.mkdtemp(prefix="abebot-noise-"))
    stop = mp.Event()
    procs = [mp.Process(target=_spin, args=(stop,), daemon=True) for _ in range(hogs)]
    for p in procs:
        p.start()
    t0 = time.time()
    try:
        out = subprocess.run([sys.executable, "-m", "core", "run", "--workload", workload, "--backend", "c",
                              "--population", str(population), "--generations", str(generations), "--seed", "1",
                              "--runs-dir", str(runs)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    finally:
        stop.set()
        for p in procs:
            p.join(5)
    run_dir = next(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    return {"hogs": hogs, "seconds": round(time.time() - t0, 1), "returncode": out.returncode,
            "stdout": out.stdout[-3000:], **read(run_dir)}


def read(run_dir: Path) -> dict:
    import duckdb

    con = duckdb.connect(str(run_dir / "run.duckdb"), read_only=True)
    try:
        gens = con.execute("SELECT generation, baseline_primary, baseline_time_us, baseline_rel_spread, noisy, "
                           "champion_time_us, champion_spread_us FROM generations ORDER BY generation").fetchall()
        champion = con.execute("SELECT generation, best_fitness, champion_speedup, champion_speedup_spread, "
                               "champion_noisy, champion_samples FROM generations ORDER BY generation").fetchall()
        speedups = dict(con.execute("SELECT genome_hash, arg_max(speedup, generation) FROM individuals "
                                    "WHERE status = 'ok' AND speedup IS NOT NULL GROUP BY genome_hash").fetchall())
        champ_hash = con.execute("SELECT champion_hash FROM generations ORDER BY generation DESC LIMIT 1").fetchone()[0]
        cols = [c for c in ("time_term", "memory_term", "stability_term", "stability", "determinism", "steadiness",
                            "error_margin")]
        terms = {}
        for c in cols:
            q = con.execute(f"SELECT min({c}), quantile_cont({c}, 0.25), median({c}), quantile_cont({c}, 0.75), max({c}), "
                            f"count({c}) FROM individuals WHERE status = 'ok'").fetchone()
            terms[c] = q
        statuses = dict(con.execute("SELECT status, count(*) FROM individuals GROUP BY status").fetchall())
    finally:
        con.close()
    return {"generations": gens, "terms": terms, "statuses": statuses, "champion": champion, "speedups": speedups,
            "champion_hash": champ_hash}


def verdict(results: list[dict]) -> list[str]:
    """Issue 27's test: beside the busy loops, the stored champion speed-up is within 20% of the quiet
    run's, and no generation's best fitness exceeds 3x the quiet run's best."""
    quiet, busy = results[0]["champion"], results[1]["champion"]
    if not quiet or not busy or quiet[-1][2] is None or busy[-1][2] is None:
        return ["no paired speed-up stored (a run from before paired timing?)"]
    q, b = quiet[-1][2], busy[-1][2]
    top = max(f for _, f, *_ in quiet if f is not None)
    worst = max(f for _, f, *_ in busy if f is not None)
    same = [(results[0]["speedups"][h], results[1]["speedups"][h]) for h in results[0]["speedups"]
            if h in results[1]["speedups"]]
    diffs = sorted(abs(y / x - 1) for x, y in same if x)
    ch = results[1]["champion_hash"]
    mine = results[0]["speedups"].get(ch)
    return [f"stored champion speed-up: quiet {q:.3f}x, busy {b:.3f}x: {100 * (b / q - 1):+.1f}% "
            f"({'within' if abs(b / q - 1) <= 0.2 else 'NOT within'} 20%); the two runs' champions "
            f"{'are the same genome' if ch == results[0]['champion_hash'] else 'are different genomes'}",
            (f"the busy run's champion measured in the quiet run: {mine:.3f}x against {b:.3f}x busy "
             f"({100 * (b / mine - 1):+.1f}%)" if mine else "the busy run's champion was not measured in the quiet run"),
            (f"the {len(same)} genomes measured in both runs: speed-ups differ by a median of "
             f"{100 * diffs[len(diffs) // 2]:.1f}% (largest {100 * diffs[-1]:.1f}%)" if diffs else "no genome in both runs"),
            f"highest best fitness of any generation: quiet {top:.4f}, busy {worst:.4f}: {worst / top:.2f}x "
            f"({'under' if worst <= 3 * top else 'OVER'} 3x)"]


def report(results: list[dict], args) -> str:
    lines = [f"# Baseline noise on the CPU: quiet vs beside {os.cpu_count()} busy loops", "",
             f"`python3 -m benchmarks.tools.cpu_noise --workload {args.workload} --generations {args.generations} "
             f"--population {args.population}` on this machine ({os.cpu_count()} cores). Each run: `core run --backend c "
             f"--seed 1`; the baseline is re-timed 3 times in every generation, interleaved with the candidates.", ""]
    for r in results:
        title = "quiet" if not r["hogs"] else f"beside {r['hogs']} busy loops"
        lines += [f"## {title} ({r['seconds']} s, exit {r['returncode']}, statuses {r['statuses']})", "",
                  "| generation | primary | baseline µs | relative spread | noisy | champion µs (IQR) |", "|---|---|---|---|---|---|"]
        for g, prim, t, rel, noisy, ct, cs in r["generations"]:
            lines.append(f"| {g} | {prim} | {t:.1f} | {rel * 100:.1f} % | {'yes' if noisy else 'no'} | "
                         f"{ct:.1f} ({cs:.1f}) |" if ct is not None else f"| {g} | {prim} | {t:.1f} | {rel * 100:.1f} % | "
                         f"{'yes' if noisy else 'no'} | — |")
        lines += ["", "| generation | best fitness | champion speed-up (pairs) | spread | noisy | timings |", "|---|---|---|---|---|---|"]
        for g, fit, sp, spr, noisy, n in r.get("champion") or []:
            lines.append(f"| {g} | {fit:.4f} | {sp if sp is None else f'{sp:.3f}x'} | "
                         f"{spr if spr is None else f'{spr:.3f}'} | {'yes' if noisy else 'no'} | {n} |")
        lines += ["", "| over the ok individuals | min | q25 | median | q75 | max | n |", "|---|---|---|---|---|---|---|"]
        for name, q in r["terms"].items():
            if q[-1]:
                lines.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in q[:-1]) + f" | {q[-1]} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "reports" / "cpu_noise")
    ap.add_argument("--workload", default="gemm")
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--population", type=int, default=8)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = [run(args.workload, args.generations, args.population, hogs) for hogs in (0, os.cpu_count() or 2)]
    (args.out / "runs.json").write_text(json.dumps(results, indent=1, default=str))
    text = report(results, args) + "\n## Verdict\n\n" + "\n".join(f"- {line}" for line in verdict(results)) + "\n"
    (args.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
