"""Finds the versioned SQL scripts of a dialect, in a checkout or an installed package."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import SchemaNotInstalled


# A line that splits a script in two: what follows it runs only once every call that began
# before the new procedures were committed has ended (install() on PostgreSQL). For DDL a
# body of the previous release cannot run against (an index its INSERT ... ON CONFLICT names);
# such a call, begun before the install and waiting for its locks, would otherwise run its
# old body against the new schema. See docs/guide/protocol.md, "Rolling upgrades".
AFTER_DRAIN = re.compile(r"^-- mjsched:after-drain\b[^\n]*$", re.MULTILINE)


@dataclass(frozen=True)
class SqlScript:
    name: str          # e.g. "002_procedures"
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]

    @property
    def first_part(self) -> str:
        """The script up to its ``-- mjsched:after-drain`` line (the whole script without one)."""
        return AFTER_DRAIN.split(self.text, maxsplit=1)[0]

    @property
    def after_drain(self) -> str:
        """The script after its ``-- mjsched:after-drain`` line; empty without one."""
        parts = AFTER_DRAIN.split(self.text, maxsplit=1)
        return parts[1] if len(parts) > 1 else ""


def sql_dir(dialect: str) -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "sql" / dialect, here.parent / "sql" / dialect):
        if candidate.is_dir():
            return candidate
    raise SchemaNotInstalled(f"SQL scripts for dialect {dialect!r} not found next to {here}")


def scripts(dialect: str) -> list[SqlScript]:
    """Versioned scripts in apply order; other files (grants, queries) are not versions."""
    return scripts_in(sql_dir(dialect))


def scripts_in(folder: Path) -> list[SqlScript]:
    """The versioned scripts of ``folder``, in apply order: each ``NNN_name.sql`` file, and each
    ``NNN_name/`` directory, whose ``*.sql`` parts (by concern, e.g. ``50_claims.sql``) make
    one script ``NNN_name``, concatenated in name order: it is applied, checksummed and
    recorded in ``schema_version`` as one, exactly as a single file holding that text."""
    found: list[SqlScript] = []
    for path in sorted(folder.glob("[0-9][0-9][0-9]_*")):
        if path.is_dir():
            found.append(SqlScript(path.name, "".join(part.read_text(encoding="utf-8") for part in parts_of(path))))
        elif path.suffix == ".sql":
            found.append(SqlScript(path.stem, path.read_text(encoding="utf-8")))
    return found


def parts_of(script_dir: Path) -> list[Path]:
    """The files of a script split by concern, in the order they are applied."""
    return sorted(script_dir.glob("*.sql"))


def versioned(dialect: str, name: str) -> SqlScript:
    """The versioned script ``name`` (e.g. ``"002_procedures"``) of ``dialect``, whole."""
    return next(s for s in scripts(dialect) if s.name == name)


def script(dialect: str, name: str) -> str:
    return (sql_dir(dialect) / name).read_text(encoding="utf-8")
