"""Figures derived from a ``decode-bench`` record, defined once for the dashboard and the report.

A record measured ``layers`` of the model's ``model_layers``; when fewer, its whole-model figures are
*projected* (``(step - LM head) x L / N + LM head``, computed by decode-bench). The speculative
figures are projected in any case: there is no draft model, so tokens per verify step is an assumed
mean acceptance length, and the draft's own cost is left out.
"""
from __future__ import annotations

WAYS = ("a", "b")
GOALS = {"llama-3.1-70b": {"tokens_per_s": 85.0, "over_a": 1.75, "context": 1024},
         "llama-3.1-8b": {"tokens_per_s": 500.0, "context": 1024}}
VERIFY_GOAL = {"K": 4, "x_one_token_step": 1.15}  # issue 29: verifying 4 drafted tokens costs at most 1.15x


def is_projected(rec: dict) -> bool:
    """Whether the record measured fewer layers than its model has."""
    return int(rec["layers"]) < int(rec["model_layers"])


def model_tokens_per_s(rec: dict, way: str) -> float | None:
    """The whole model's one-token tokens/s of ``way``: measured, or projected (:func:`is_projected`)."""
    x = rec[way]
    return x.get("projected_full_model_tokens_per_s", x.get("tokens_per_s"))


def verify_ratio(rec: dict, k: int, way: str) -> float | None:
    """The verify step at K drafted tokens over a one-token step, for ``way`` (None if not measured)."""
    return next((v[way]["x_one_token_step"] for v in rec.get("verify") or [] if v["K"] == k), None)


def projection_rows(rec: dict) -> list[dict]:
    """Per (K, mean acceptance length 2-4, at most K + 1): tokens/s of the measured step per way, and
    of the whole model (its one-token tokens/s x acceptance length / the verify step's ratio)."""
    rows = []
    for p in (rec.get("verify_projection") or {}).get("rows", []):
        row = {"K": p["K"], "acceptance_length": p["acceptance_length"], **{f"{w}_tokens_per_s": p[f"{w}_tokens_per_s"]
                                                                          for w in WAYS}}
        for w in WAYS:
            one, ratio = model_tokens_per_s(rec, w), verify_ratio(rec, p["K"], w)
            row[f"model_{w}_tokens_per_s"] = round(one * p["acceptance_length"] / ratio, 2) if one and ratio else None
        rows.append(row)
    return rows


def goals(rec: dict) -> list[tuple[str, bool | None]]:
    """(the goal in words, met?) of issue 29's goals that this record measures (a goal model at the goal's
    context; its verify step at K = 4 at any context); met is None for the speed-up over an (a) that
    did not run under torch.compile (not the baseline the goal names)."""
    out = []
    g = GOALS.get(rec["model"])
    if g is None:
        return out
    if rec["context"] == g["context"]:
        b = model_tokens_per_s(rec, "b") or 0.0
        out.append((f"(b) >= {g['tokens_per_s']:g} tokens/s", b >= g["tokens_per_s"]))
        if "over_a" in g:  # against the baseline at its best only: torch.compile'd
            a = model_tokens_per_s(rec, "a") or float("inf")
            compiled = "torch.compile" in rec["a"].get("label", "") and "failed" not in rec["a"].get("label", "")
            out.append((f"(b) >= {g['over_a']}x (a)", b / a >= g["over_a"] if compiled else None))
    ratio = verify_ratio(rec, VERIFY_GOAL["K"], "b")
    if ratio is not None:
        out.append((f"(b) verify K={VERIFY_GOAL['K']} <= {VERIFY_GOAL['x_one_token_step']}x a one-token step",
                    ratio <= VERIFY_GOAL["x_one_token_step"]))
    return out
