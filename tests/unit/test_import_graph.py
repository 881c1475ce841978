"""The package's import graph (issue 13): no cycles at any level, and the core never
imports the operator tooling.

Every module under mjsched/ is parsed with ast, so imports inside functions count too
(a lazy import still ties two modules together; it only hides the circle from Python).
An import of ``pkg.mod`` is an edge to ``pkg.mod`` (and, as Python runs it, to ``pkg``'s
``__init__``, which is not counted as an edge: a package's ``__init__`` re-exporting its
own modules is not a circle worth failing on).
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "mjsched"

# Operator tooling: the library never imports these (mjsched/__main__.py is the command's entry).
TOOLING = ("mjsched.cli", "mjsched.web")
# Old module paths kept so code written against them goes on working; each only re-exports
# from its new home, so they may point into the tooling.
COMPAT_SHIMS = {"mjsched.__main__", "mjsched.embedded", "mjsched.demo"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its file."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
        for target in targets:
            while target and target not in known:    # `from pkg import name`: name may be no module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    found = modules(root)
    known = set(found)
    graph = {name: imports_of(name, path, known) for name, path in found.items()}
    # A module importing its own parent package (``from . import x`` inside pkg/) is how Python
    # reaches siblings, not a dependency on what the parent re-exports: drop those edges.
    return {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_import_graph_has_no_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_core_never_imports_the_operator_tooling() -> None:
    graph = import_graph()
    core = [m for m in graph if not m.startswith(TOOLING) and m not in COMPAT_SHIMS]
    offenders = {m: sorted(t for t in graph[m] if t.startswith(TOOLING)) for m in core}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_the_graph_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    pkg = tmp_path / "mjsched"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from .. import a\n")
    assert cycles(import_graph(pkg)) == [["mjsched.a", "mjsched.sub.b"]]
