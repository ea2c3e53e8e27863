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


# -- the layers: no import runs back up ------------------------------------------------------------
LAYERS = (
    ("store",),                                 # leaf: one folder per run, DuckDB, Parquet mirrors
    ("core.genes", "core.genome", "core.objectives"),  # ground: the gene-space language, objectives as data
    ("core.backends",),                         # c, cuda, triton, their runtimes and arrays
    ("core.workloads",),                        # problems, references, templates and kernels
    ("core.library",),                          # the runtime a model imports: manifest, dispatcher, ops, patch
    ("core.config",),                           # run settings, validated against the registries
    ("core.evaluation",),                       # render -> compile -> verify -> time, in the sandbox
    ("core.search",),                           # the GA: operators, selection, fitness, re-timing
    ("core.run",),                              # one run's process: worker, warm start, locks, bounds
    ("core.tools",),                            # check, contract, bench, export
    ("core.cli", "core.__main__", "dashboard", "pages", "app"),
)
PROJECT = ("core", "store", "dashboard", "pages", "app")


def layer(module: str) -> int | None:
    """The index in LAYERS of ``module`` (the longest matching prefix wins), None outside them."""
    best: tuple[int, int] | None = None
    for index, group in enumerate(LAYERS):
        for prefix in group:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def upward_imports(path: Path) -> list[str]:
    """Every import in ``path``, at module level or inside a function, of a higher layer."""
    own = layer(module_name(path))
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            target = layer(name)
            if name.split(".")[0] in PROJECT and None not in (own, target) and target > own:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {name} ({LAYERS[target][0]} layer)")
    return found


def test_no_import_runs_back_up_a_layer():
    offences = [line for path in scanned_files() + sorted((ROOT / "core" / "backends").rglob("*.py"))
                for line in upward_imports(path)]
    assert not offences, "a lower layer imports a higher one:\n" + "\n".join(offences)


LIBRARY_MAY_IMPORT = ("core.library", "core.backends", "core.workloads")


def test_the_library_runtime_imports_only_backends_and_workloads():
    """A model imports core.library without the GA, the store or the dashboard (issue 28)."""
    offences = []
    for path in sorted((ROOT / "core" / "library").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            offences += [f"{path.relative_to(ROOT)}:{node.lineno}: imports {name}" for name in names
                         if name.split(".")[0] in PROJECT and name != "core"
                         and not any(name == p or name.startswith(p + ".") for p in LIBRARY_MAY_IMPORT)]
    assert not offences, "core.library may import only " + ", ".join(LIBRARY_MAY_IMPORT) + ":\n" + "\n".join(offences)


def test_the_layer_scan_sees_imports_inside_functions(tmp_path, monkeypatch):
    fake = ROOT / "core" / "backends" / "_layer_probe.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: "def f():\n    from core.search.ga import step\n"
                        if self == fake else Path.read_bytes(self).decode())
    assert upward_imports(fake) == ["core/backends/_layer_probe.py:2: imports core.search.ga.step (core.search layer)"]


def test_core_root_holds_only_the_ground_and_the_entry_points():
    modules = sorted(p.name for p in (ROOT / "core").glob("*.py"))
    assert len(modules) <= 8, modules


def test_no_module_is_over_400_lines():
    long = [f"{p.relative_to(ROOT)}: {n} lines" for top in ("core", "store", "dashboard", "pages")
            for p in sorted((ROOT / top).rglob("*.py")) if (n := len(p.read_text().splitlines())) > 400]
    assert not long, "split these by concept:\n" + "\n".join(long)
