"""The house stays readable: rooms of a size a newcomer reads in one sitting, and imports that point
one way (docs/reference.md's layout). A module that grows past the limit is split by what it holds,
not trimmed."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.toy import REPO

MODULE_LINES = 500
FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(REPO).with_suffix("").parts): p for p in sorted((REPO / "scout").rglob("*.py"))}


def test_no_module_over_500_lines_and_no_function_over_80():
    big = {name: n for name, p in _modules().items() if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    long = {}
    for name, p in _modules().items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = n
    assert not big and not long, (big, long)


def _imports(name: str, path: Path) -> set[str]:
    """The package's modules a module imports, at its top or in a function (``from scout import x``
    counts as ``scout.x`` where that is a module)."""
    modules = _modules()
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("scout"):
            out |= {node.module} & modules.keys()
            out |= {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
    return out - {name}


def test_no_import_circle():
    """Depth-first over the import graph: a back edge is a circle, named with its path."""
    graph = {name: _imports(name, p) for name, p in _modules().items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt):] + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


def _top_level_names(path: Path) -> set[str]:
    """What a module defines at its top: functions, classes, assignments and what it imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If | ast.Try):  # guarded definitions and imports
            names |= {n.name for n in ast.walk(node) if isinstance(n, ast.FunctionDef | ast.ClassDef)}
            names |= {(a.asname or a.name) for n in ast.walk(node) if isinstance(n, ast.ImportFrom) for a in n.names}
    return names


def test_every_import_from_the_package_names_something_it_has():
    """A name moved to another module and still imported from the old one fails here, read from the
    source (nothing is imported): in a Ray worker such an import fails only when the code runs."""
    modules = _modules()
    files = [p for d in ("scout", "tests", "benchmarks") for p in sorted((REPO / d).rglob("*.py"))]
    missing = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules):
                continue
            have = _top_level_names(modules[node.module])
            missing += [f"{f.relative_to(REPO)}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                        if a.name not in have and f"{node.module}.{a.name}" not in modules]  # fmt: skip
    assert not missing, missing


def test_tests_are_grouped_by_stage_and_share_only_support():
    """Test files live in their stage's folder; what several of them use is in tests/support/, never
    imported from another test file."""
    tests = REPO / "tests"
    stages = {"config", "prepare", "train", "evaluate", "report", "workflow", "verl"}
    top = {p.name for p in tests.glob("test_*.py")}
    assert top == {"test_docs.py", "test_install.py", "test_layout.py"}, f"test files outside a stage folder: {sorted(top)}"
    assert {p.parent.name for p in tests.glob("*/test_*.py")} == stages
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.relative_to(REPO)}: {n}" for n in names if n.startswith("tests.") and ".test_" in n]
    assert found == [], "test files imported as helpers (move what they share to tests/support/):\n" + "\n".join(found)
