"""Every lock made at module or class level in mjsched is a process lock (mjsched/forking.py).

Such a lock is shared by everything in the process and outlives any object's after-fork hook:
a thread of the parent may hold it at a fork, and in the child that thread does not exist, so
a plain lock would be held there for ever. The source is read, not a list: a lock added
tomorrow at module or class level fails here until it is a ``ProcessLock``."""
from __future__ import annotations

import ast
from pathlib import Path

import mjsched

PACKAGE = Path(mjsched.__file__).parent
THREADING_LOCKS = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore", "Event"}
COMPOUND = (ast.If, ast.Try, ast.With, ast.For, ast.While)


def _lock_names(tree: ast.Module) -> set[str]:
    """What a lock is called in this module: ``threading.Lock``, or ``Lock`` if imported so."""
    names = {f"threading.{kind}" for kind in THREADING_LOCKS} | {"_thread.allocate_lock", "_thread.LockType"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("threading", "_thread"):
            names |= {alias.asname or alias.name for alias in node.names
                      if alias.name in THREADING_LOCKS | {"allocate_lock"}}
    return names


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _makes_a_lock(value: ast.AST, names: set[str]) -> bool:
    """A lock made, or its maker handed on (``defaultdict(threading.Lock)``), anywhere in it."""
    return any(_dotted(node) in names for node in ast.walk(value) if isinstance(node, (ast.Name, ast.Attribute)))


def _shared_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements run at module or class level, inside if/try/with/for blocks too."""
    found = []
    for stmt in body:
        found.append(stmt)
        if isinstance(stmt, COMPOUND):
            for field in ("body", "orelse", "finalbody"):
                found += _shared_statements(getattr(stmt, field, []))
            for handler in getattr(stmt, "handlers", []):
                found += _shared_statements(handler.body)
    return found


def shared_locks_in(source: str) -> list[int]:
    """Lines that make a plain threading lock at module or class level, or into a global."""
    tree = ast.parse(source)
    names = _lock_names(tree)
    bodies = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    lines = [stmt.lineno for body in bodies for stmt in _shared_statements(body)
             if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None
             and _makes_a_lock(stmt.value, names)]
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            declared = {name for node in ast.walk(func) if isinstance(node, ast.Global) for name in node.names}
            lines += [node.lineno for node in ast.walk(func)
                      if isinstance(node, ast.Assign) and _makes_a_lock(node.value, names)
                      and any(isinstance(t, ast.Name) and t.id in declared for t in node.targets)]
    return sorted(lines)


def test_no_module_or_class_level_lock_is_a_plain_threading_lock() -> None:
    found = {str(path.relative_to(PACKAGE.parent)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := shared_locks_in(path.read_text()))}
    assert found == {}


def test_the_check_sees_a_plain_lock_where_it_would_be() -> None:
    source = "\n".join([
        "import threading, collections",                       # 1
        "from threading import RLock as R",                     # 2
        "A = threading.Lock()",                                 # 3: module level
        "class C:",                                             # 4
        "    b = R()",                                          # 5: class level, imported by name
        "    def f(self):",                                     # 6
        "        self.c = threading.Lock()",                    # 7: an object's own (its hooks remake it)
        "D: dict = {1: threading.Condition()}",                 # 8: inside a container
        "E = collections.defaultdict(threading.Lock)",          # 9: its maker handed on
        "try:",                                                 # 10
        "    F = threading.Semaphore()",                        # 11: inside a try
        "except ImportError:",                                  # 12
        "    pass",                                             # 13
        "def g():",                                             # 14
        "    global G",                                         # 15
        "    G = threading.Event()",                            # 16: made into a global
        "H = None",                                             # 17
    ])
    assert shared_locks_in(source) == [3, 5, 8, 9, 11, 16]
