"""What the evaluator keeps between generations is bounded (issue 36, item 8)."""
from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

from core.config import RunConfig
from core.evaluation.evaluator import Evaluator


class _Pool:
    def submit(self, fn, *args):
        f: Future = Future()
        f.set_result((None, 0.0, "not compiled in this test"))
        return f


def test_kernels_compiled_ahead_but_never_evaluated_are_not_kept_for_ever(tmp_path):
    """With a timing cache, genomes it answers are compiled ahead and never evaluated: each one's
    rendered kernel and compile stayed in the evaluator for the rest of the run."""
    ev = Evaluator(RunConfig(workload="gemm", backend="c"), tmp_path / ".cache")
    ev.sandbox = object()  # started, as far as compile_ahead is concerned
    ev.template = SimpleNamespace(render=lambda g: SimpleNamespace(source=g.hash), resource_violation=lambda k: None)
    ev.backend = SimpleNamespace(cache_key=lambda k: f"key-{k.source}")
    ev._compile_pool = _Pool()
    for gen in range(50):
        ev.compile_ahead([SimpleNamespace(hash=f"g{gen}-{i}") for i in range(8)])  # none evaluated
    assert len(ev._rendered) <= 8 and len(ev._ahead) <= 8
