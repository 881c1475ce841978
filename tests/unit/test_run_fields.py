"""A run's changing fields are written only by its own transitions, under the registry's lock.

Before engine/run.py the run record was written from five threads and four modules (the
dispatcher, the lease keeper, the registry, the facade): a newcomer could not tell which
writes raced which. This walks every module of the package and fails on a write to one of
those fields anywhere but inside a ``Run`` method, and on one there outside a
``with self.services.registry.changed`` (or ``with registry.changed``) block.
"""
from __future__ import annotations

import ast
from pathlib import Path

import mjsched

PACKAGE = Path(mjsched.__file__).resolve().parent
CHANGING = {"state", "thread_alive", "completing_since", "renew", "last_enqueued", "cancel_request",
            "cancel_deadline", "retry_in", "lease_until"}


def _writes(tree: ast.AST) -> list[ast.Attribute]:
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        found += [t for t in targets if isinstance(t, ast.Attribute) and t.attr in CHANGING]
    return found


def _under_lock(func: ast.FunctionDef, write: ast.Attribute) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.With) and any(ast.unparse(item.context_expr).endswith("registry.changed")
                                              for item in node.items):
            if any(w is write for stmt in node.body for w in _writes(stmt)):
                return True
    return False


def test_only_run_methods_write_a_runs_changing_fields() -> None:
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "run.py" and path.parent.name == "engine":
            continue
        for write in _writes(ast.parse(path.read_text(encoding="utf-8"))):
            owner = ast.unparse(write.value)
            if owner not in {"self", "cls"}:   # other classes' own fields of the same name are theirs
                outside.append(f"{path.relative_to(PACKAGE)}:{write.lineno} {owner}.{write.attr}")
    assert outside == [], outside


def test_run_methods_write_them_under_the_registry_lock() -> None:
    tree = ast.parse((PACKAGE / "engine" / "run.py").read_text(encoding="utf-8"))
    run_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Run")
    unlocked = [f"{func.name}:{write.lineno} {write.attr}"
                for func in run_class.body if isinstance(func, ast.FunctionDef)
                for write in _writes(func)
                if func.name != "begin" and not _under_lock(func, write)]
    assert unlocked == [], unlocked
    # the check sees a write outside the lock
    bad = ast.parse("def f(self):\n    self.state = 1\n").body[0]
    assert isinstance(bad, ast.FunctionDef) and not _under_lock(bad, _writes(bad)[0])
