"""Edit minimisation keeps the edits that matter, interactions included, and nothing else."""
from __future__ import annotations

import pytest

from core.search.minimise import minimise


def timing(edits: tuple[str, ...]) -> float:
    """10 us, less 1 for "a", less 2 for "b" and "c" together (neither alone helps); "d" is lethal alone."""
    if edits == ("d",):
        return None
    t = 10.0 - ("a" in edits) - 2.0 * ("b" in edits and "c" in edits)
    return t + 0.001 * len(edits)  # noise-sized cost per edit


def test_minimisation_keeps_what_matters_and_the_pair_that_only_works_together():
    kept, trials = minimise(("a", "b", "c", "d", "e", "f"), timing, tolerance=0.01)
    assert kept == ("a", "b", "c")
    assert all(t["reference"] == trials[0]["reference"] for t in trials)


def test_a_lethal_full_list_is_refused():
    with pytest.raises(ValueError, match="lethal"):
        minimise(("d",), timing)
