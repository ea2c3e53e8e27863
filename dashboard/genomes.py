"""Genome comparison for the Genomes page: gene tables, source diffs and the champion's lineage."""
from __future__ import annotations

import difflib
import json
from typing import Any

import pandas as pd

from core.backends import backend_class
from core.genome import Genome, diff


def parents_of(value: Any) -> list[str]:
    """The ``parents`` column as a list of hashes (stored as a list or as JSON text)."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value] if value else []
    try:
        return [str(p) for p in list(value)]
    except TypeError:
        return []


def first_appearances(inds: pd.DataFrame) -> pd.DataFrame:
    """One row per genome hash: the generation it was created in, with its parents and origin.

    Elites carried over keep their hash; their first appearance is where they were bred.
    """
    if inds.empty:
        return inds
    return inds.sort_values("generation").drop_duplicates("genome_hash", keep="first").set_index("genome_hash")


def lineage(firsts: pd.DataFrame, genome_hash: str, max_steps: int = 500) -> list[dict]:
    """The chain from ``genome_hash`` back to a seed or random genome, following the fitter parent.

    Each step: generation, genome_hash, origin, fitness, status, parents (all of them).
    """
    chain: list[dict] = []
    seen: set[str] = set()
    current: str | None = genome_hash
    while current and current not in seen and current in firsts.index and len(chain) < max_steps:
        seen.add(current)
        row = firsts.loc[current]
        parents = [p for p in parents_of(row.get("parents")) if p != current]
        chain.append({"generation": int(row["generation"]), "genome_hash": current, "origin": row.get("origin"),
                      "fitness": row.get("fitness"), "status": row.get("status"), "parents": parents})
        known = [p for p in parents if p in firsts.index]
        current = max(known, key=lambda p: _fitness(firsts.loc[p])) if known else None
    return chain


def default_partner(history: pd.DataFrame, chain: list[dict]) -> str:
    """What to compare the champion (``chain[0]``) with: its parent, else the best other genome of
    the first generation, else the best other genome of the run, else the champion itself."""
    champion = chain[0]["genome_hash"] if chain else None
    if len(chain) > 1:
        return chain[1]["genome_hash"]
    others = history[history["genome_hash"] != champion].sort_values(["fitness", "generation"], ascending=[False, True])
    if others.empty:
        return str(champion)
    first = others[others["generation"] == history["generation"].min()]
    return str((first if not first.empty else others).iloc[0]["genome_hash"])


def _fitness(row: pd.Series) -> float:
    try:
        value = float(row.get("fitness"))
        return value if value == value else -1.0
    except (TypeError, ValueError):
        return -1.0


def gene_table(a_json: str, b_json: str) -> pd.DataFrame:
    """Genes of A and B side by side, one row per gene, with a ``changed`` flag (core.genome.diff)."""
    rows = diff(Genome.from_json(a_json), Genome.from_json(b_json))
    return pd.DataFrame([{"group": r["group"], "gene": r["gene"], "A": _show(r["a"]), "B": _show(r["b"]),
                          "changed": bool(r["changed"])} for r in rows])


def _show(value: Any) -> str:
    if isinstance(value, list):
        return " → ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items())
    return "—" if value is None else str(value)


def source_language(backend: str | None) -> str:
    """The syntax-highlight language of ``backend``'s kernels ("text" for a backend this version lacks)."""
    try:
        return backend_class(backend or "").language
    except (ValueError, ImportError):
        return "text"


def source_diff(a_src: str, b_src: str, a_name: str = "A", b_name: str = "B", context: int = 3) -> str:
    """Unified diff (difflib) of two rendered kernel sources; empty when they are identical."""
    return "".join(difflib.unified_diff(a_src.splitlines(keepends=True), b_src.splitlines(keepends=True),
                                        fromfile=a_name, tofile=b_name, n=context))


def individual_label(row: dict) -> str:
    """One line for an individual selector."""
    fit = row.get("fitness")
    fit_txt = f"{fit:.4f}" if isinstance(fit, (int, float)) and fit == fit else "—"
    return f"{row['genome_hash']} · fitness {fit_txt} · {row.get('status', '?')} · {row.get('origin', '?')}"
