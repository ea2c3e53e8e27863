#!/usr/bin/env python3
"""Which genes mattered in the saved H200 decode GA runs: the dashboard's gene importance, offline.

    python3 -m benchmarks.tools.decode_genes [CSV | ARCHIVE[:GLOB] ...] [--top 8] [--seeds 5]

Reads the individuals ``benchmarks/tools/gpu_runs.py`` saved for each run
(``<out>/<run_id>.individuals.csv.gz``: generation, genome_hash, genome JSON, status, fitness,
time_us, ...; by default every such file in the archives ``benchmarks/raw/CALL.tar.xz``; an
argument ``benchmarks/raw/CALL.tar.xz:GLOB`` takes the members matching GLOB, a bare archive all of them). For each run it flattens
the genomes into one column per gene (:func:`core.search.operators.flat_genes`: a map gene gives one
column per key), then calls :func:`dashboard.importance.gene_importance` -- scikit-learn's
permutation importance of a random forest on held-out rows, the Individuals page's method -- on
two targets: ``fitness`` (what the GA selected on) and ``log time_us`` of the ok rows (the
measured time, free of the per-generation baseline that normalises fitness). It prints, per run
and target, the rows used, the forest's held-out R², the top genes (with their number of
distinct values) with importance ± spread (standard deviation over permutation repeats), how often
each was in the top 3 over ``--seeds`` train/test splits, and for the top 2 genes of each target
the median time_us per value; then which genes every ok genome within 20 % of the fastest shares.

Prints Markdown on stdout; nothing is written. Needs pandas and scikit-learn (the dashboard's).
"""
from __future__ import annotations

import argparse
import json
import fnmatch
import re
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]

from core.genome import Genome  # noqa: E402
from core.search.operators import flat_genes  # noqa: E402
from dashboard.importance import gene_importance  # noqa: E402

SUFFIX = ".individuals.csv.gz"
LOG_TIME = "log_time_us"
NEAR_BEST = 1.2  # "near the fastest": within 20 % of the run's fastest ok genome


def gene_frame(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``frame`` plus one text column per gene (``gene.<group>.<name>[.<key>]``) and the gene names."""
    flats = [{"gene." + ".".join(path): _text(v) for path, v in flat_genes(Genome.from_json(raw)).items()}
             for raw in frame["genome"]]
    genes = sorted({k for f in flats for k in f})
    genes_df = pd.DataFrame(flats, index=frame.index, columns=genes)
    return pd.concat([frame, genes_df], axis=1), genes


def _text(v) -> str:
    return json.dumps(list(v)) if isinstance(v, (tuple, list)) else str(v)


def run_identity(csv: Path) -> dict:
    """Workload, backend and timed shape of a saved run, from its file name and its ``.run.log``
    (or, without the log, the spec ``runs.json`` beside it records)."""
    run_id = csv.name[: -len(SUFFIX)]
    workload, backend, _ = run_id.rsplit("-", 2)
    problem: dict = {}
    log = csv.with_name(run_id + ".run.log")
    runs = csv.with_name("runs.json")
    if log.exists():
        first = log.read_text().splitlines()[0]
        m = re.search(r"--problem (\{.*?\})(?= --|$)", first)
        if m:
            problem = json.loads(m.group(1))
    elif runs.exists():  # the spec gpu_runs.py ran: workload:backend:population:generations[:problem JSON]
        for entry in json.loads(runs.read_text()):
            parts = str(entry.get("spec", "")).split(":", 4)
            if entry.get("run_id") == run_id and len(parts) == 5:
                problem = json.loads(parts[4])
    info = {"run_id": run_id, "workload": workload, "backend": backend, "problem": problem, "shape": None}
    try:
        from core.workloads import get_workload

        wl = get_workload(workload)
        full = wl.validate_problem(problem, backend)
        info.update(problem=full, shape=wl.shapes(full)[0])
    except Exception as exc:  # an unknown workload here: the raw --problem is shown
        info["shape_error"] = f"{type(exc).__name__}: {exc}"
    return info


def latest(frame: pd.DataFrame) -> pd.DataFrame:
    """Each genome's latest row (an elite is re-timed in every generation), as gene_importance fits."""
    return frame.sort_values("generation", kind="stable").drop_duplicates("genome_hash", keep="last")


def importance_table(frame: pd.DataFrame, genes: list[str], target: str, top: int, seeds: int) -> tuple[pd.DataFrame, list[float]]:
    """gene_importance on ``target`` with seed 0, plus per gene how often it was in the top 3 over
    ``seeds`` splits; and the held-out R² of every seed."""
    runs = [gene_importance(frame, genes, target, seed=s) for s in range(seeds)]
    first = runs[0]
    if first.empty:
        return first, []
    counts: dict[str, int] = {}
    for r in runs:
        for g in r["gene"].head(3):
            counts[g] = counts.get(g, 0) + 1
    first = first.head(top).copy()
    first["top3_of_seeds"] = [counts.get(g, 0) for g in first["gene"]]
    return first, [float(r["r2"].iloc[0]) for r in runs if not r.empty]


def per_value(ok: pd.DataFrame, gene: str) -> str:
    """Median time_us (and genomes) per value of ``gene`` over the ok genomes, fastest first."""
    g = ok.groupby(gene)["time_us"].agg(["median", "size"]).sort_values("median")
    return "; ".join(f"`{v}` {row['median']:.2f} us (n={int(row['size'])})" for v, row in g.iterrows())


def report(csv: Path, top: int, seeds: int) -> list[str]:
    info = run_identity(csv)
    raw = pd.read_csv(csv)
    frame, genes = gene_frame(raw)
    distinct = latest(frame)
    ok = distinct[(distinct["status"] == "ok") & distinct["time_us"].gt(0)].copy()
    ok[LOG_TIME] = np.log(ok["time_us"].astype(float))
    varying = [g for g in genes if distinct[g].nunique(dropna=False) > 1]
    shape = info["shape"] if info["shape"] is not None else info["problem"]
    out = [f"## {info['run_id']}: {info['workload']} on {info['backend']}, timed shape {json.dumps(shape)}", ""]
    if "shape_error" in info:
        out.append(f"(problem from the run log, not validated here: {info['shape_error']})")
    statuses = raw["status"].value_counts().to_dict()
    out.append(f"{len(raw)} rows over {raw['generation'].nunique()} generations, {len(distinct)} distinct genomes "
               f"(each at its latest row), statuses {statuses}; {len(varying)} of {len(genes)} genes vary.")
    if "fitness" in distinct and len(ok) > 2:
        rho = ok["fitness"].corr(-ok["time_us"], method="spearman")
        out.append(f"Spearman rank correlation of fitness with -time_us over the ok genomes: {rho:.3f} "
                   "(1 would mean fitness ranks exactly as the measured time).")
    out.append("")
    tops: list[str] = []
    for target, data, label in (("fitness", distinct, "fitness (every distinct genome)"),
                                (LOG_TIME, ok, "log time_us (ok genomes)")):
        table, r2s = importance_table(data, varying, target, top, seeds)
        used = int(data[target].notna().sum())
        if table.empty:
            out += [f"### target {label}: too little data ({used} rows)", ""]
            continue
        spread = f"{min(r2s):.2f} to {max(r2s):.2f}" if len(r2s) > 1 else f"{r2s[0]:.2f}"
        out += [f"### target {label}: {used} rows; held-out R² {table['r2'].iloc[0]:.3f} "
                f"(seed 0; {spread} over {len(r2s)} splits)", "",
                "| gene | values | importance ± spread | in top 3 (of seeds) |", "|---|---|---|---|"]
        for r in table.itertuples():
            out.append(f"| `{r.gene[5:]}` | {data[r.gene].nunique()} | {r.importance:.3f} ± {r.spread:.3f} "
                       f"| {r.top3_of_seeds}/{len(r2s)} |")
        out.append("")
        tops += [g for g in table["gene"].head(2) if g not in tops]
    if tops and len(ok):
        out += ["Median time_us per value (ok genomes), for the top 2 genes of each target:", ""]
        out += [f"- `{g[5:]}`: {per_value(ok, g)}" for g in tops]
        out.append("")
    if len(ok):
        near = ok[ok["time_us"] <= NEAR_BEST * ok["time_us"].min()]
        fixed = [f"`{g[5:]}` = `{near[g].iloc[0]}`" for g in varying if near[g].nunique() == 1]
        free = [f"`{g[5:]}` ({near[g].nunique()})" for g in varying if near[g].nunique() > 1]
        out += [f"The {len(near)} ok genomes within {NEAR_BEST - 1:.0%} of the fastest ({ok['time_us'].min():.2f} us) "
                f"all share {', '.join(fixed) or 'no gene value'}; still varying there (values): "
                f"{', '.join(free) or 'none'}.", ""]
    return out


RAW = ROOT / "benchmarks" / "raw"


def resolve(specs: list[str], tmp: Path) -> list[Path]:
    """Saved individuals files: a path as is, or ``ARCHIVE.tar.xz[:GLOB]`` (a device call's raw
    output) extracted under ``tmp`` (so the ``.run.log`` and ``runs.json`` beside each file come too),
    keeping the members that match GLOB (default: every ``*SUFFIX``)."""
    files: list[Path] = []
    for spec in specs or [str(a) for a in sorted(RAW.glob("*.tar.xz"))]:
        archive, sep, pattern = spec.partition(".tar.xz")
        if not sep:
            files.append(Path(spec))
            continue
        pattern = pattern.lstrip(":") or f"*{SUFFIX}"
        with tarfile.open(archive + ".tar.xz") as tar:
            tar.extractall(tmp, filter="data")
            files += [tmp / m for m in sorted(tar.getnames()) if fnmatch.fnmatch(m, pattern) and m.endswith(SUFFIX)]
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="*", help=f"saved individuals (*{SUFFIX}) or ARCHIVE.tar.xz[:GLOB]; "
                    "default: every one in benchmarks/raw/*.tar.xz")
    ap.add_argument("--top", type=int, default=8, help="genes listed per target")
    ap.add_argument("--seeds", type=int, default=5, help="train/test splits whose top 3 and R² are summarised")
    args = ap.parse_args(argv)
    tmp = tempfile.TemporaryDirectory(prefix="decode-genes-")
    files = resolve(args.csv, Path(tmp.name))
    if not files:
        print("no saved individuals found", file=sys.stderr)
        return 1
    import sklearn

    print(f"pandas {pd.__version__}, scikit-learn {sklearn.__version__}, numpy {np.__version__}; "
          f"{len(files)} run(s)\n")
    for csv in files:
        print("\n".join(report(Path(csv), args.top, args.seeds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
