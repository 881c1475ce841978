"""A run's changing fields are written only by its own transitions, under the registry's lock.

Before engine/run.py the run record was written from five threads and four modules (the
dispatcher, the lease keeper, the registry, the facade): a newcomer could not tell which
writes raced which. This walks every module of the package and fails on a write to one of
those fields anywhere but inside a ``Run`` method, and on one there outside a
``with self.services.registry.changed`` (or ``with registry.changed``) block. The parts below
a run ask it to change (``Cancellation`` calls ``Run.request_cancel``); they never set its
cancel event or its context's cancel grace themselves.
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


# Which Run method writes each changing field: one owner per transition.
WRITERS = {
    "state": {"_move"},
    "completing_since": {"_move"},
    "thread_alive": {"_thread_done"},
    "renew": {"cancel", "keep_lease"},
    "last_enqueued": {"note_enqueued"},
    "cancel_request": {"request_cancel"},
    "cancel_deadline": {"request_cancel"},
    "retry_in": {"completion"},
    "lease_until": {"extend_lease"},
}


def test_each_changing_field_is_written_by_the_transitions_that_own_it() -> None:
    tree = ast.parse((PACKAGE / "engine" / "run.py").read_text(encoding="utf-8"))
    run_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Run")
    found: dict[str, set[str]] = {}
    for func in run_class.body:
        if isinstance(func, ast.FunctionDef) and func.name != "begin":
            for write in _writes(func):
                found.setdefault(write.attr, set()).add(func.name)
    assert set(WRITERS) == CHANGING
    assert found == WRITERS


def _asks_a_run_to_stop(tree: ast.AST) -> list[ast.AST]:
    """``<run>.cancel_event.set()`` and ``<run>.context.cancel_grace = ...`` on another object."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "set" \
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "cancel_event" \
                and ast.unparse(node.func.value.value) != "self":
            found.append(node)
        if isinstance(node, ast.Assign):
            found += [t for t in node.targets if isinstance(t, ast.Attribute) and t.attr == "cancel_grace"
                      and isinstance(t.value, ast.Attribute) and t.value.attr == "context"
                      and ast.unparse(t.value.value) != "self"]
    return found


def test_only_the_run_sets_its_cancel_event_and_grace() -> None:
    outside = [f"{path.relative_to(PACKAGE)}:{node.lineno}"
               for path in sorted(PACKAGE.rglob("*.py"))
               if not (path.name == "run.py" and path.parent.name == "engine")
               for node in _asks_a_run_to_stop(ast.parse(path.read_text(encoding="utf-8")))]
    assert outside == [], outside
    # the check sees what Cancellation.deliver used to do
    old = ast.parse("def deliver(self, run):\n    run.context.cancel_grace = self.grace\n    run.cancel_event.set()\n")
    assert len(_asks_a_run_to_stop(old)) == 2
    # and Run.request_cancel does both itself, after noting the request under the lock
    tree = ast.parse((PACKAGE / "engine" / "run.py").read_text(encoding="utf-8"))
    run_class = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Run")
    request_cancel = next(f for f in run_class.body if isinstance(f, ast.FunctionDef) and f.name == "request_cancel")
    text = ast.unparse(request_cancel)
    assert "self.context.cancel_grace = grace" in text and "self.cancel_event.set()" in text
    assert text.index("self.cancel_request = request") < text.index("self.cancel_event.set()")
