"""Finds the versioned SQL scripts of a dialect, in a checkout or an installed package."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .errors import SchemaNotInstalled


@dataclass(frozen=True)
class SqlScript:
    name: str          # e.g. "002_procedures"
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]


def sql_dir(dialect: str) -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "sql" / dialect, here.parent / "sql" / dialect):
        if candidate.is_dir():
            return candidate
    raise SchemaNotInstalled(f"SQL scripts for dialect {dialect!r} not found next to {here}")


def scripts(dialect: str) -> list[SqlScript]:
    """Versioned scripts (``NNN_name.sql``) in apply order; other files (grants) are not versions."""
    folder = sql_dir(dialect)
    found = sorted(p for p in folder.glob("[0-9][0-9][0-9]_*.sql"))
    return [SqlScript(p.stem, p.read_text(encoding="utf-8")) for p in found]


def script(dialect: str, name: str) -> str:
    return (sql_dir(dialect) / name).read_text(encoding="utf-8")
