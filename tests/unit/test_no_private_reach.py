"""Tests and tools reach the engine through its public names and its parts (``engine.parts``),
never through its private attributes (issue 38).

A private attribute is the engine's own business: renaming it must not break a test, the
CLI, the web console or a benchmark. Every file under tests/, bench/, mjsched/cli and
mjsched/web is parsed with ast; an access ``X._name`` fails the test when

- ``_name`` is a private attribute of ``SchedulingEngine`` (read from facade.py: the
  ``self._name`` it assigns and the ``_name`` methods it defines), or one of the names the
  engine's parts had before they moved to ``engine.parts`` (so they do not come back), and
  ``X`` is not ``self``/``cls`` nor a backend (a backend's own ``_pool`` is another matter);
- or ``X`` is a part reached through the parts record (``engine.parts.dispatcher._lock``).

What is left is listed in ALLOWED with the reason; keep it short.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FACADE = ROOT / "mjsched" / "engine" / "facade.py"
SCANNED = [ROOT / "tests", ROOT / "bench", ROOT / "mjsched" / "cli", ROOT / "mjsched" / "web"]

# The engine's parts were private attributes of the facade until issue 38 moved them to engine.parts.
RETIRED = frozenset({"_listeners", "_clock", "_registry", "_pool", "_side_work", "_writer", "_runs", "_cancels",
                     "_keeper", "_purger", "_alerts", "_housekeeping", "_dispatcher", "_due_pass", "_poller",
                     "_changes"})

# (file relative to the repository, the access as written): why it may stay.
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/integration/test_lost_replies.py", "engine.parts.dispatcher._lock"):
        "fault injection: a lock that holds the poll at the instant it takes the dispatcher's lock; "
        "no public seam can stop a poll there",
    ("tests/integration/test_engine_robustness.py", "engine.parts.writer._thread"):
        "white-box check that close() leaves the completion writer's thread stopped (not restarted by a "
        "late completion); the writer exposes no thread of its own",
}


def engine_private_names(facade: Path = FACADE) -> frozenset[str]:
    """The private attributes and methods of ``SchedulingEngine``, as facade.py defines them."""
    tree = ast.parse(facade.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SchedulingEngine")
    names: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.FunctionDef) and _private(node.name):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id == "self" and _private(node.attr):
            names.add(node.attr)
    return frozenset(names)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_backend(receiver: ast.expr) -> bool:
    last = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
    return "backend" in last.lower()


def private_reaches(source: str, engine_names: frozenset[str]) -> list[tuple[int, str]]:
    """The accesses of ``source`` that reach a private attribute of an engine or of its parts."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        receiver = node.value
        through_parts = isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Attribute) \
            and receiver.value.attr == "parts"
        is_self = isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
        on_engine = node.attr in engine_names | RETIRED and not is_self and not _is_backend(receiver)
        if through_parts or on_engine or (isinstance(receiver, ast.Attribute) and receiver.attr == "parts"):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def scanned_files() -> list[Path]:
    return sorted(p for root in SCANNED for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_scan_sees_the_engines_private_names() -> None:
    names = engine_private_names()
    assert {"_control", "_manual"} <= names      # what the facade keeps to itself today
    source = "engine._control.start()\nengine.parts.keeper._registry\nself._registry\nengine.backend._pool\n"
    assert [text for _, text in private_reaches(source, names)] \
        == ["engine._control", "engine.parts.keeper._registry"]


def test_tests_and_tools_reach_no_private_engine_attribute() -> None:
    names = engine_private_names()
    seen: set[tuple[str, str]] = set()
    offending: list[str] = []
    for path in scanned_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, text in private_reaches(path.read_text(encoding="utf-8"), names):
            seen.add((rel, text))
            if (rel, text) not in ALLOWED:
                offending.append(f"{rel}:{line}: {text}")
    assert not offending, "use engine.parts.<part> or a public name instead:\n" + "\n".join(offending)
    assert set(ALLOWED) <= seen, f"allowed but no longer there (remove them): {sorted(set(ALLOWED) - seen)}"
