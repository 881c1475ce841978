"""The procedures engines and admin tools call are listed once, with their signatures, in
docs/guide/protocol.md ("Procedure names and versions"), and the SQL is held to that list: a
procedure whose parameters or result columns change must get a new name (``<name>_v2`` beside
``<name>``), so a rolling upgrade shows in the names (issue 38 item 5, procrastinate's ``_vN``)."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

from mjsched.privileges import ADMIN_ROUTINES, ENGINE_ROUTINES
from tests.support import sqlparity

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "guide" / "protocol.md"
PG = sqlparity.load(ROOT / "sql" / "postgres", "postgres")
VERSIONED = re.compile(r"^(?P<base>\w+?)_v(?P<n>[0-9]+)$")
POLICY = ("a changed signature is a new procedure: create <name>_v2 beside <name> (which stays, unchanged, "
          "for the previous release's engines), call it from the engine, and list it in docs/guide/protocol.md, "
          "'Procedure names and versions'")


def signature(name: str) -> str:
    """One procedure as the list writes it: ``name(p_a type, p_b type = ...) -> col, col``."""
    routine = PG.routines[name]
    params = ", ".join(f"{p.name} {p.type}" + (" = ..." if p.has_default else "") for p in routine.params)
    result = ", ".join(routine.result_sets[0]) if routine.result_sets else "(no result columns)"
    return f"{name}({params}) -> {result}"


def render(entry: str) -> str:
    """An entry wrapped as the list holds it: continuation lines indented."""
    return "\n".join(textwrap.wrap(entry, width=100, subsequent_indent="    ", break_on_hyphens=False)) + "\n"


def listed() -> dict[str, str]:
    """The list in protocol.md, by name; an entry's continuation lines joined to it."""
    text = PROTOCOL.read_text(encoding="utf-8")
    block = re.search(r"<!-- procedures -->\n```text\n(.*?)```\n<!-- /procedures -->", text, re.S)
    assert block, "no <!-- procedures --> list in docs/guide/protocol.md"
    entries: list[str] = []
    for line in block.group(1).splitlines():
        if line.startswith(" ") and entries:
            entries[-1] += " " + line.strip()
        elif line.strip():
            entries.append(line.strip())
    return {e.split("(", 1)[0]: e for e in entries}


def public_routines() -> set[str]:
    """Every routine an engine or an admin tool may call (grants.sql's two lists)."""
    return set(ENGINE_ROUTINES | ADMIN_ROUTINES)


def test_every_called_procedure_is_listed_once() -> None:
    names = listed()
    missing = sorted(public_routines() - set(names))
    assert not missing, "list these in docs/guide/protocol.md:\n" + "".join(render(signature(n)) for n in missing)
    assert sorted(set(names) - public_routines()) == [], "listed, but no engine or admin tool may call them"


def test_no_listed_signature_changed() -> None:
    changed = [f"{entry}\n  is now\n{signature(name)}" for name, entry in listed().items()
               if name in PG.routines and " ".join(entry.split()) != signature(name)]
    assert not changed, POLICY + ":\n" + "\n".join(changed)


def test_a_versioned_name_keeps_its_predecessor_beside_it() -> None:
    """``claim_due_jobs_v2`` needs ``claim_due_jobs`` (v1) installed for the previous release;
    ``_v3`` needs ``_v2``. The retired ones are dropped a release later, with their predecessor."""
    for name in listed():
        found = VERSIONED.match(name)
        if found:
            n = int(found.group("n"))
            before = found.group("base") if n == 2 else f"{found.group('base')}_v{n - 1}"
            assert n >= 2 and before in PG.routines, f"{name} without {before} beside it"


def test_the_check_can_fail() -> None:
    """A signature edited in place is caught (the list is compared, not regenerated)."""
    entry = listed()["release_job_lock"]
    assert " ".join(entry.split()) == signature("release_job_lock")
    assert " ".join(entry.replace("p_token uuid", "p_token varchar").split()) != signature("release_job_lock")
