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


def _makes_a_threading_lock(node: ast.AST) -> bool:
    """``threading.Lock()`` and its kin anywhere in an expression (a dict of them included)."""
    return any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
               and isinstance(call.func.value, ast.Name) and call.func.value.id == "threading"
               and call.func.attr in THREADING_LOCKS
               for call in ast.walk(node))


def shared_threading_locks() -> list[str]:
    """file:line of each assignment at module or class level that makes a threading lock."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        bodies = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
        for body in bodies:
            for stmt in body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None \
                        and _makes_a_threading_lock(stmt.value):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{stmt.lineno}")
    return found


def test_no_module_or_class_level_lock_is_a_plain_threading_lock() -> None:
    assert shared_threading_locks() == []


def test_the_check_sees_a_plain_lock_where_it_would_be() -> None:
    """The reader finds what it looks for: one at module level, one in a class, one in a dict."""
    source = ("import threading\nA = threading.Lock()\nclass C:\n    b = threading.RLock()\n"
              "    def f(self):\n        self.c = threading.Lock()\nD: dict = {1: threading.Condition()}\n")
    tree = ast.parse(source)
    bodies = [tree.body] + [node.body for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    flagged = [stmt.lineno for body in bodies for stmt in body
               if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None
               and _makes_a_threading_lock(stmt.value)]
    assert flagged == [2, 7, 4]    # the instance lock in f() is an object's own (its hooks remake it)
