"""The Benchmark page's decode step: the tables of one ``decode-bench`` record (pure data, no Streamlit).

Records are found where ``python -m core decode-bench --save`` writes them
(:mod:`core.tools.decode_records`): the decode folder and each library's ``decode-bench/`` folder.
A figure for the whole model that comes from fewer measured layers is *projected*, and every table
says so in its own column; the speculative figures are projected too (there is no draft model).
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from core.tools import decode_figures as F
from core.tools import decode_records as R

WAYS = {"a": "(a) PyTorch baseline", "b": "(b) AbeBot library"}


def record_folders(runs: Path) -> list[Path]:
    """The decode folder, then every library's ``decode-bench/`` (libraries as the Library page finds them)."""
    from dashboard.library import find_libraries

    return list(dict.fromkeys([R.decode_dir(), *(lib / R.FOLDER for lib in find_libraries(runs))]))


def records(runs: Path) -> list[tuple[Path, dict]]:
    """(path, record) of every readable decode record, newest first; unreadable files are skipped."""
    out = []
    for path in R.find(record_folders(runs)):
        rec = R.load(path)
        if rec is not None:
            out.append((path, rec))
    return out


def title(rec: dict) -> str:
    """One line naming a record: model, layers, context, device, when."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rec["measured_at"])) if rec.get("measured_at") else "?"
    return (f"{rec['model']} · {rec['layers']}/{rec['model_layers']} layers · context {rec['context']} · "
            f"{rec['device']} · {when}")


def projected(rec: dict) -> bool:
    """Whether the record measured fewer layers than the model has (whole-model figures projected)."""
    return F.is_projected(rec)


def ways(rec: dict) -> pd.DataFrame:
    """One row per way, (a) and (b): what ran, ms and tokens/s of the measured step, the whole model's
    tokens/s (measured, or projected from the layers measured), speed-up over (a), logits agreement."""
    rows = []
    for w, name in WAYS.items():
        x = rec[w]
        lg = x.get("logits") or {}
        full = F.model_tokens_per_s(rec, w)
        rows.append({"way": name, "runs": x.get("label", ""), "ms_per_step": x.get("ms_per_step"),
                     "tokens_per_s": x.get("tokens_per_s"), "model_tokens_per_s": full,
                     "model_figure": "projected" if "projected_full_model_tokens_per_s" in x else "measured",
                     "vs_a": rec["a"]["ms_per_step"] / x["ms_per_step"] if x.get("ms_per_step") else None,
                     "argmax": f"{lg['argmax_agree']}/{lg['argmax_counted']}" if "argmax_agree" in lg else "",
                     "max_error_over_std": lg.get("max_error_over_std")})
    return pd.DataFrame(rows)


def verify(rec: dict) -> pd.DataFrame:
    """The speculative verify steps (M = K + 1 tokens): ms and cost relative to a one-token step, per way."""
    rows = [{"K": v["K"], "M": v["M"], **{f"{w}_ms": v[w]["ms"] for w in WAYS},
             **{f"{w}_x_one_token": v[w]["x_one_token_step"] for w in WAYS}} for v in rec.get("verify") or []]
    return pd.DataFrame(rows, columns=["K", "M", "a_ms", "a_x_one_token", "b_ms", "b_x_one_token"])


def projection(rec: dict) -> pd.DataFrame:
    """Projected tokens/s for mean acceptance lengths 2-4 (no draft model: every row is projected), of
    the measured step and of the whole model (:func:`core.tools.decode_figures.projection_rows`)."""
    rows = [{**r, "figure": "projected"} for r in F.projection_rows(rec)]
    return pd.DataFrame(rows, columns=["K", "acceptance_length", "a_tokens_per_s", "b_tokens_per_s",
                                       "model_a_tokens_per_s", "model_b_tokens_per_s", "figure"])


def breakdown(rec: dict, way: str) -> tuple[pd.DataFrame, str]:
    """(rows, how it was measured) of a way's per-op breakdown: the op replay (``ops``) where the
    record has one, else the profiler's op kinds (``breakdown``). Rows: op, kind, calls, ms, share,
    weights_from_memory (whether the replay read the op's weights from memory as the step does)."""
    x = rec[way]
    ops = x.get("ops")
    if ops and ops.get("rows"):
        df = pd.DataFrame(ops["rows"])
        note = (f"{ops.get('method', '')} Sum of the ops {ops.get('sum_ms')} ms against the whole step's "
                f"{ops.get('step_ms')} ms ({ops.get('sum_over_step')}x).")
        return df.reindex(columns=["op", "kind", "calls", "ms", "share", "weights_from_memory"]), note
    prof = x.get("breakdown") or {}
    rows = [{"op": k, "kind": k, "calls": None, "ms": v["us"] / 1000, "share": v["share"], "weights_from_memory": None}
            for k, v in (prof.get("by_kind") or {}).items()]
    failed = f"The op replay failed: {ops['error']}" if ops and ops.get("error") else "No op replay in this record."
    note = (f"{prof.get('source', 'no breakdown')}; kernels grouped into op kinds by their names (a heuristic). "
            + failed)
    return pd.DataFrame(rows, columns=["op", "kind", "calls", "ms", "share", "weights_from_memory"]), note
