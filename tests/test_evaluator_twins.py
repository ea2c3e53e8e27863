"""The evaluator's twin memory (issue 10): compact entries, a complete answer, a bounded table.

No compiler or sandbox: ``_remember`` and ``_twin`` are called directly with hand-made artifacts,
the way ``evaluate_sources``'s ``measure`` calls them. The end-to-end twin case (two sources, one
machine code) is in ``tests/test_evaluate.py``.
"""
from __future__ import annotations

import dataclasses
import gc
import types

import pytest

from core.backends.base import Artifact, KernelSource
from core.config import RunConfig, validate
from core.evaluation import evaluator as evaluator_module
from core.evaluation.evaluator import Evaluator
from core.evaluation.twins import Twin as _Twin
from core.evaluation.record import Evaluation

SOURCE = "void k(float *x) { /* the measured source */ }\n" + "// padding\n" * 200
LOG = "compiler said this\n" * 50


@pytest.fixture
def evaluator(tmp_path):
    cfg = validate(RunConfig(workload="rmsnorm", backend="c", population=4, generations=2, elites=1, seed=7))
    return Evaluator(cfg, tmp_path)


def _kernel(source: str = SOURCE) -> KernelSource:
    return KernelSource(backend="c", source=source, entry="k", flags=("-O3",), launch={"block": 4},
                        resources={"threads": 1})


def _artifact(key: str, code: str = "code-1") -> Artifact:
    return Artifact(backend="c", source_hash=key, entry="k", path=f"/cache/{key}.so", launch={"block": 4},
                    resources={"text_bytes": 123}, log=LOG, code_hash=code)


def _measured(key: str, kernel: KernelSource) -> tuple[Evaluation, dict]:
    """An evaluation as ``Evaluator._measure`` builds it, and the sandbox reply it came from."""
    reply = {"status": "ok", "time_us": 12.5, "time_spread_us": 0.25, "memory_bytes": 4096, "extra_bytes": 0,
             "onchip_bytes": 64, "stability": 0.9, "determinism": 1.0, "steadiness": 0.8, "error_margin": 0.9,
             "max_abs_err": 1e-6, "rel_err": 1e-7, "repack_us": None,
             "shape_errors": [{"shape": {"rows": 4, "cols": 32}, "max_abs_err": 1e-6, "rel_err": 1e-7,
                               "margin_used": 0.1}]}
    ev = Evaluation(genome_hash=key, status="ok", source_hash=key, compile_s=0.5, resources={"threads": 1, "text_bytes": 123},
                    source=kernel.source, entry=kernel.entry, flags=list(kernel.flags), launch=dict(kernel.launch),
                    compile_log=LOG, eval_s=0.75, device="c:0", device_time_us=12.5,
                    phases={"compile": 0.5, "timing": 0.3})
    for name in evaluator_module.MEASURES:
        if reply.get(name) is not None:
            setattr(ev, name, reply[name])
    ev.shape_errors = list(reply["shape_errors"])  # as _measure does: the reply's dicts
    return ev, reply


def _reachable(root) -> list:
    """Every object reachable from ``root`` (not through classes, modules or functions)."""
    seen, todo, out = set(), [root], []
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        out.append(obj)
        todo.extend(gc.get_referents(obj))
    return out


def test_a_twin_entry_keeps_no_source_log_or_reply(evaluator):
    kernel = _kernel()
    ev, reply = _measured("a" * 24, kernel)
    evaluator._remember(_artifact("a" * 24), "a" * 24, ev)
    held = _reachable(evaluator._twins)
    strings = [o for o in held if isinstance(o, str)]
    assert not any("measured source" in s or "compiler said" in s for s in strings), "the source or log is kept"
    ids = {id(o) for o in held}
    forbidden = [reply, reply["shape_errors"], *reply["shape_errors"], reply["shape_errors"][0]["shape"],
                 ev, ev.resources, ev.flags, ev.launch, ev.phases, ev.shape_errors]
    assert not any(id(o) in ids for o in forbidden), "the reply or the measured Evaluation is kept"
    assert not any(isinstance(o, (Evaluation, dict)) for o in held if o is not evaluator._twins)
    assert sum(len(s) for s in strings) < 200


def test_a_twin_is_answered_completely_with_its_own_source(evaluator):
    measured_kernel = _kernel()
    ev, reply = _measured("a" * 24, measured_kernel)
    evaluator._remember(_artifact("a" * 24), "a" * 24, ev)
    twin_kernel = dataclasses.replace(measured_kernel, source=SOURCE + "/* another source */\n", flags=("-O2",))
    twin_artifact = dataclasses.replace(_artifact("b" * 24), log="the twin's log")
    held = evaluator._twin(twin_artifact, "b" * 24)
    assert isinstance(held, _Twin)
    answer = held.answer("b" * 24, twin_kernel, twin_artifact, 0.125)
    for name in _Twin.FIELDS[:-1]:  # every measured value, as measured
        assert getattr(answer, name) == getattr(ev, name), name
    assert answer.shape_errors == reply["shape_errors"] and answer.shape_errors[0] is not reply["shape_errors"][0]
    assert (answer.genome_hash, answer.source_hash, answer.same_code_as) == ("b" * 24, "b" * 24, "a" * 24)
    assert (answer.source, answer.entry, answer.flags, answer.launch) == (twin_kernel.source, "k", ["-O2"], {"block": 4})
    assert answer.resources == {"threads": 1, "text_bytes": 123} and answer.compile_log == "the twin's log"
    assert answer.compile_s == 0.125 and answer.phases == {"compile": 0.125}
    assert evaluator._twin(twin_artifact, "b" * 24) is None, "a source answered before is measured again"
    assert evaluator._twin(_artifact("a" * 24), "a" * 24) is None
    assert evaluator._twin(_artifact("c" * 24, code="code-2"), "c" * 24) is None
    assert evaluator._twin(dataclasses.replace(_artifact("d" * 24), code_hash=""), "d" * 24) is None


def test_a_crash_is_not_remembered_and_a_remeasurement_keeps_the_users(evaluator):
    kernel = _kernel()
    ev, _ = _measured("a" * 24, kernel)
    evaluator._remember(_artifact("a" * 24), "a" * 24, dataclasses.replace(ev, status="crashed"))
    assert not evaluator._twins
    evaluator._remember(_artifact("a" * 24), "a" * 24, ev)
    assert evaluator._twin(_artifact("b" * 24), "b" * 24) is not None
    evaluator._remember(_artifact("a" * 24), "a" * 24, dataclasses.replace(ev, time_us=20.0))  # re-timed
    assert sorted(evaluator._twins["code-1"].users) == ["a" * 24, "b" * 24]
    assert evaluator._twin(_artifact("e" * 24), "e" * 24).answer("e" * 24, kernel, _artifact("e" * 24), 0.0).time_us == 20.0


def test_the_twin_table_keeps_the_latest_codes_only(evaluator, monkeypatch):
    monkeypatch.setattr(evaluator_module, "TWINS_KEPT", 5)
    kernel = _kernel()
    for i in range(12):
        key = f"{i:024d}"
        evaluator._remember(_artifact(key, code=f"code-{i}"), key, _measured(key, kernel)[0])
    assert list(evaluator._twins) == [f"code-{i}" for i in range(7, 12)]
