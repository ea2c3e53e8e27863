"""The helpers the workload specs and the Triton templates share (core.workloads.spec, triton_common)."""
from __future__ import annotations

import sys
import types

from core.workloads.spec import Indices, compiled_once, verification_shapes
from core.workloads.triton_common import even_twin, in_order, indent, next_pow2, per_thread_violation


def test_verification_shapes_put_the_problem_first_and_drop_odd_shapes_equal_to_it():
    problem = {"tokens": 7, "hidden": 1031, "dtype": "float32"}
    assert verification_shapes(problem, ("tokens", "hidden"), {"tokens": 7, "hidden": 1031}, {"tokens": 83}) == [
        {"tokens": 7, "hidden": 1031}, {"tokens": 83, "hidden": 1031}]


def test_compiled_once_compiles_at_the_first_call_only(monkeypatch):
    compiles = []
    fake = types.SimpleNamespace(compile=lambda fn, dynamic: compiles.append(dynamic) or (lambda *a: ("compiled", fn(*a))))
    monkeypatch.setitem(sys.modules, "torch", fake)
    f = compiled_once(lambda x: x + 1)
    assert compiles == []
    assert f(1) == ("compiled", 2) and f(2) == ("compiled", 3)
    assert compiles == [False]


def test_indices_stay_a_row_below_the_dimension():
    class Arrays:
        def uniform(self, shape, dtype, gen, low, high):
            return (shape, dtype, low, high)

    assert Indices("vocab").draw(Arrays(), (2, 3), "int32", None, {"vocab": 10}) == ((2, 3), "int32", 0.0, 9.0)
    assert Indices("vocab").draw(Arrays(), (1,), "int32", None, {"vocab": 1})[3] == 1.0


def test_triton_code_helpers():
    assert indent(["a", "b"], 2) == ["        a", "        b"]
    assert in_order(("B", "A", "C"), {"A": ["a"], "B": ["b1", "b2"], "C": []}) == ["b1", "b2", "a"]
    assert even_twin(["x"], ["y"]) == ["if EVEN:", "    x", "else:", "    y"]
    assert [next_pow2(n) for n in (1, 2, 3, 33, 64)] == [1, 2, 4, 64, 64]
    assert per_thread_violation(65, 64) == "65 elements per thread (> 64)"
    assert per_thread_violation(0, 64) is None and per_thread_violation(0, 64, least=1) == "fewer elements than threads"
