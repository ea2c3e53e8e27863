"""Edit minimisation (GEVO's lesson): the smallest edit list that keeps a champion's speed.

GEVO's champions carried 1,394 edits of which 12 mattered, and they interact. :func:`minimise`
drops the edits of a ``machine_code`` list one at a time, keeps each drop that leaves the time
within ``tolerance`` of the whole list's, and goes round again until a round drops nothing, so an
edit that only mattered beside one already dropped goes too. Every trial list is measured by the
caller's ``measure`` (the evaluator, in practice), which returns the time (lower is better) or None
for a lethal kernel; the reference is always the full list's time, so drops cannot creep.
"""
from __future__ import annotations

from typing import Callable, Sequence


def minimise(edits: Sequence[str], measure: Callable[[tuple[str, ...]], float | None], tolerance: float = 0.01,
             max_rounds: int = 4) -> tuple[tuple[str, ...], list[dict]]:
    """(the smallest list found, one record per trial: the edit dropped, the time, whether it stayed out)."""
    kept = tuple(edits)
    reference = measure(kept)
    if reference is None:
        raise ValueError("the full edit list is lethal: there is no speed to keep")
    trials: list[dict] = []
    for _ in range(max_rounds):
        dropped_any = False
        for edit in list(kept):
            trial = tuple(e for e in kept if e != edit)
            time = measure(trial)
            out = time is not None and time <= reference * (1 + tolerance)
            trials.append({"dropped": edit, "time": time, "stayed_out": out, "reference": reference})
            if out:
                kept, dropped_any = trial, True
        if not dropped_any:
            break
    return kept, trials
