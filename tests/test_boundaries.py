"""Module boundaries: only ``core/backends/`` knows backends by name.

Everything else asks a backend's capabilities (``backend_class(name).title``, ``.language``,
``.source_suffix``, ``.device_kind``...), so adding a backend touches ``core/backends/`` and the
workloads' template lists, nothing else. (The store's own boundary -- it imports nothing from
``core`` -- is checked in tests/test_store.py.)
"""
from __future__ import annotations

import ast
from pathlib import Path

from core.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
NAMES = frozenset(BACKENDS)
SCANNED = ("core", "dashboard", "pages", "store")
EXCLUDED = ("core/backends",)
TESTS_OPS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)


def backend_name_tests(tree: ast.AST, source: str = "") -> list[tuple[int, str]]:
    """(line, code) of every place that tests a value against a backend name.

    Flagged: a comparison (``==``, ``!=``, ``is``, ``in``...) with a backend name as an operand or
    inside a tuple/list/set/dict operand; a ``case "cuda":``; a dict literal with two or more keys
    that are backend names (a lone ``"c"`` key is GEMM's output matrix C, not a backend). Not
    flagged: assignments such as a template's ``backend = "cuda"``, and a class-level
    ``templates = {...}`` (a workload declares which templates it has).
    """
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else (
                    [stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
                if any(isinstance(t, ast.Name) and t.id == "templates" for t in targets) and stmt.value is not None:
                    skipped.add(id(stmt.value))

    def named(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in NAMES

    def mentions(node: ast.AST) -> bool:
        if named(node):
            return True
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(named(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return any(k is not None and named(k) for k in node.keys)
        return False

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            bad = any(isinstance(op, TESTS_OPS) for op in node.ops) and any(
                mentions(x) for x in (node.left, *node.comparators))
        elif isinstance(node, ast.MatchValue):
            bad = named(node.value)
        elif isinstance(node, ast.Dict):
            bad = id(node) not in skipped and len({k.value for k in node.keys if k is not None and named(k)}) >= 2
        else:
            continue
        if bad:
            found.append((node.lineno, (ast.get_source_segment(source, node) or "").splitlines()[0][:100]))
    return sorted(found)


def scanned_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for top in SCANNED:
        files += sorted((ROOT / top).rglob("*.py"))
    return [p for p in files if p.exists() and not any(p.relative_to(ROOT).as_posix().startswith(e + "/")
                                                       for e in EXCLUDED)]


def test_no_module_outside_backends_compares_a_backend_name():
    offences = []
    for path in scanned_files():
        source = path.read_text()
        offences += [f"{path.relative_to(ROOT)}:{line}: {code}"
                     for line, code in backend_name_tests(ast.parse(source, str(path)), source)]
    assert not offences, ("ask the backend's capabilities (core.backends.backend_class(name)) instead of "
                          "testing its name:\n" + "\n".join(offences))


def test_the_scan_flags_name_tests_and_spares_declarations():
    def scan(code: str) -> list[int]:
        return [line for line, _ in backend_name_tests(ast.parse(code), code)]

    assert scan('if b == "c":\n    pass') == [1]
    assert scan('x = "python" if "triton" != b else "c"') == [1]
    assert scan('ok = backend in ("cuda", "triton")') == [1]
    assert scan('match b:\n    case "cuda":\n        pass') == [2]
    assert scan('TITLES = {"c": "CPU", "cuda": "CUDA C"}') == [1]
    assert scan('class T:\n    backend = "cuda"\n    templates = {"c": "m.c", "cuda": "m.cu"}') == []
    assert scan('out = {"c": (m, n)}\ny = d["c"]\nt = torch.empty(4, device="cuda")') == []
    assert scan('if name == "a":\n    pass') == []
