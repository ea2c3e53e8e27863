"""The text forms of a ``decode-bench`` record: the short report and the command behind its figures."""
from __future__ import annotations

import shlex


def command_line(args) -> str:
    """The ``python -m core decode-bench ...`` command that ``args`` stand for (every option that
    differs from its default), stored in the record as the command behind its figures."""
    parser = getattr(args, "decode_parser", None)
    words = ["python", "-m", "core", "decode-bench"]
    for action in getattr(parser, "_actions", []):
        if not action.option_strings or action.dest in ("help", "save", "json"):
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        words += [action.option_strings[0]] if value is True else [action.option_strings[0], shlex.quote(str(value))]
    return " ".join(words)


def format_record(r: dict) -> str:
    """The record as a short text report."""
    lines = [f"{r['model']}: {r['layers']}/{r['model_layers']} layers (x{r['copies']} copies), context {r['context']}, "
             f"batch 1, {r['dtype']} on {r['device']}; LM head {r['lm_head_ms']} ms"]
    for w in ("a", "b"):
        x = r[w]
        line = f"({w}) {x['label']}: {x['ms_per_step']} ms/step, {x['tokens_per_s']} tokens/s"
        if "projected_full_model_tokens_per_s" in x:
            line += f"; projected full model {x['projected_full_model_tokens_per_s']} tokens/s ({x['projection']})"
        lg = x["logits"]
        line += (f"\n    logits vs fp32 over {lg['steps']} steps: max error {lg['max_abs_error']:.4g} "
                 f"({lg['max_error_over_std']:.3g} of the logits' std), argmax {lg['argmax_agree']}/{lg['argmax_counted']}"
                 f"; {lg['close_steps']} steps with top-2 closer than {lg['tolerance']} ({lg['close_steps_agree']} agree)")
        kinds = ", ".join(f"{k} {v['share']:.0%}" for k, v in x["breakdown"]["by_kind"].items())
        lines += [line, f"    profiler ({x['breakdown']['source']}): {kinds}"]
        if x.get("ops"):
            o = x["ops"]
            lines.append(f"    op replay (sum {o['sum_ms']} ms = {o['sum_over_step']}x the step): " + ", ".join(
                f"{row['op']} {row['share']:.0%}" for row in sorted(o["rows"], key=lambda row: -row["ms"])))
    lines.append(f"(b)/(a) speed-up: {r['b_over_a_speedup']}x")
    for v in r["verify"]:
        lines.append(f"verify K={v['K']} (M={v['M']}): (a) {v['a']['x_one_token_step']}x, "
                     f"(b) {v['b']['x_one_token_step']}x a one-token step")
    for p in r.get("verify_projection", {}).get("rows", []):
        lines.append(f"  projected K={p['K']}, acceptance {p['acceptance_length']}: (a) {p['a_tokens_per_s']}, "
                     f"(b) {p['b_tokens_per_s']} tokens/s (no draft model: projected)")
    lines.append("dispatch: " + "; ".join(f"{op} {calls}" for op, calls in r["dispatch_by_op"].items()))
    if r["refused"]:
        lines.append(f"refused entries: {r['refused']}")
    return "\n".join(lines)
