"""The plan of a library build: one evolution per (part, shape, M bucket) of a model.

A *part* is a place in a decoder layer: the four 4-bit projections (``qkv``, ``o``, ``gate_up``,
``down``, through the ``w4a16`` workload), ``rmsnorm`` (with the fused residual add), ``rope``,
``silu_mul``, and the gathered LM head (``lm_head``, through ``gather_gemv``). :func:`plan` maps each
to its workload's problem dict for every M bucket; :func:`plan_from_misses` turns a dispatcher's
``misses.jsonl`` into the same items. The (op, fmt, N, K, M) of an item is
:func:`core.library.models.entry_key` of its validated problem, the key its entry will have.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from core.library.models import DTYPES, GROUP, ModelShape, entry_key

PARTS = ("qkv", "o", "gate_up", "down", "rmsnorm", "rope", "silu_mul", "lm_head")
DEFAULT_M = (1, 2, 4, 8, 16, 32, 64)
SMALL_DIVISOR = 64  # --small: every model size divided by this (the C backend's CI library)
_FROM_DTYPE = {short: long for long, short in DTYPES.items()}


class PlanError(ValueError):
    """A plan that cannot be made (unknown part, bad M list, unreadable misses log): one line."""


@dataclass(frozen=True)
class PlanItem:
    """One evolution: workload ``op`` on ``problem`` (validated, defaults filled) for ``part``."""

    part: str
    op: str
    problem: dict
    backend: str
    run_id: str

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        """(op, fmt, N, K, M): the library key of the entry this item builds (device aside)."""
        return (self.op, *entry_key(self.op, self.problem))


def parse_ms(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4), sorted and distinct; PlanError for anything but positive integers."""
    try:
        ms = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise PlanError(f"--m takes comma-separated positive integers (got {text!r})") from None
    if not ms or ms[0] < 1 or ms[-1] > 4096:
        raise PlanError(f"--m takes integers from 1 to 4096 (got {text!r})")
    return tuple(ms)


def parse_parts(text: str | None) -> tuple[str, ...]:
    """``--ops`` (comma-separated parts; empty or ``all``: every part); PlanError for an unknown one."""
    if not text or text.strip() == "all":
        return PARTS
    parts = [t.strip() for t in text.split(",") if t.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise PlanError(f"unknown op {bad[0]!r} for --ops (choose from: {', '.join(PARTS)})")
    return tuple(dict.fromkeys(parts))


def part_problem(part: str, model: ModelShape, m: int) -> tuple[str, dict]:
    """(workload, problem) of ``part`` of ``model`` at ``m`` tokens, before the workload's defaults."""
    projections = model.projections()
    if part in projections:
        n, k = projections[part]
        return "w4a16", {"m": m, "n": n, "k_groups": max(1, k // GROUP)}
    if part == "rmsnorm":
        return "rmsnorm", {"rows": m, "cols": model.hidden, "residual": True, "eps": 1e-5}
    if part == "rope":
        return "rope", {"tokens": m, "q_heads": model.heads, "kv_heads": model.kv_heads,
                        "half_dim": model.head_dim // 2}
    if part == "silu_mul":
        return "silu_mul", {"tokens": m, "hidden": model.intermediate}
    if part == "lm_head":
        return "gather_gemv", {"tokens": m, "vocab": model.vocab, "hidden": model.hidden}
    raise PlanError(f"unknown part {part!r}")


def run_id_for(*words: object) -> str:
    """A run id from ``words`` (``lib-...``): letters, digits, '-' and '_', at most 64 characters
    (a long one keeps its start and a hash of the whole)."""
    rid = re.sub(r"[^A-Za-z0-9_-]", "_", "-".join(["lib", *(str(w) for w in words)]))
    if len(rid) > 64:
        rid = rid[:51] + "-" + hashlib.sha256(rid.encode()).hexdigest()[:12]
    return rid


def _validated(op: str, problem: dict, backend: str) -> dict:
    from core.workloads import get_workload

    try:
        return get_workload(op).validate_problem(dict(problem), backend)
    except ValueError as exc:
        raise PlanError(f"{op} {json.dumps(problem, sort_keys=True)}: {exc}") from None


def plan(model: ModelShape, parts: tuple[str, ...], ms: tuple[int, ...], backend: str,
         divisor: int = 1) -> list[PlanItem]:
    """One item per (part, M) of ``model`` (divided by ``divisor`` first when > 1), parts in the
    order given and M ascending within each; PlanError when a workload refuses a problem."""
    shapes = model.scaled(divisor)
    tag = f"s{divisor}" if divisor > 1 else ""
    items = []
    for part in parts:
        for m in ms:
            op, problem = part_problem(part, shapes, m)
            items.append(PlanItem(part, op, _validated(op, problem, backend), backend,
                                  run_id_for(model.name, backend, part, f"m{m}", *([tag] if tag else []))))
    return items


def problem_from_key(op: str, fmt: str, n: int, k: int, m: int, head_dim: int = 128) -> dict:
    """The problem whose :func:`entry_key` is (fmt, n, k, m): the inverse used for misses
    (``head_dim`` splits a rope miss's N and K into heads); PlanError for an unknown op."""
    dt = fmt.split("-")[-1]
    problem: dict = {"dtype": _FROM_DTYPE[dt]} if dt in _FROM_DTYPE else {}
    if op in ("w4a16", "rmsnorm_w4a16"):
        return {**problem, "m": m, "n": n, "k_groups": max(1, k // GROUP), "zero_points": fmt.startswith(f"w4g{GROUP}z")}
    if op == "rmsnorm":
        return {**problem, "rows": m, "cols": n, "residual": fmt.endswith("-res") or fmt.split("-")[-1] == "res"}
    if op == "rope":
        return {**problem, "tokens": m, "q_heads": max(1, n // head_dim), "kv_heads": max(1, k // head_dim),
                "half_dim": head_dim // 2}
    if op == "silu_mul":
        return {**problem, "tokens": m, "hidden": n}
    if op == "gather_gemv":
        return {**problem, "tokens": m, "vocab": n, "hidden": k}
    if op == "gemm":
        return {**problem, "m": m, "n": n, "k": k}
    raise PlanError(f"misses: no library op {op!r}")


def read_misses(path: Path | str) -> list[dict]:
    """The miss records of a ``misses.jsonl`` (blank lines and a torn last line skipped); PlanError
    (one line) for an unreadable file or a line that is not a JSON object with op, fmt, N, K and M."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"--from-misses {path}: {getattr(exc, 'strerror', None) or exc}") from None
    lines = text.splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines) and not text.endswith("\n"):
                break  # a torn last append (the writer died mid-line): the lines before it stand
            raise PlanError(f"--from-misses {path}: line {number} is not JSON") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("op"), str) or not isinstance(rec.get("fmt"), str) or any(
                not isinstance(rec.get(x), int) or isinstance(rec.get(x), bool) or rec.get(x) < 1 for x in "NKM"):
            raise PlanError(f"--from-misses {path}: line {number} lacks op, fmt and positive integers N, K, M")
        out.append(rec)
    return out


def plan_from_misses(records: list[dict], backend: str, head_dim: int = 128) -> list[PlanItem]:
    """One item per distinct miss key (op, fmt, N, K, M), in the log's order; a record carrying its
    ``problem`` dict is planned from it as it is."""
    items: dict[tuple, PlanItem] = {}
    for rec in records:
        op = rec["op"]
        problem = rec.get("problem") if isinstance(rec.get("problem"), dict) else problem_from_key(
            op, rec["fmt"], rec["N"], rec["K"], rec["M"], head_dim)
        item = PlanItem(op, op, _validated(op, problem, backend), backend,
                        run_id_for("miss", op, rec["fmt"], f"n{rec['N']}", f"k{rec['K']}", f"m{rec['M']}", backend))
        items.setdefault(item.key, item)
    return list(items.values())
