"""The gateways' read queries, by name, from ``sql/<dialect>/queries.sql``.

The lock and lease rules are procedures; what the gateways read besides them (job and run
lists, the status summary, the column privileges) lives beside them as named blocks, so
the two dialects' reads sit side by side and tests/unit/test_sql_parity.py checks that
both files name the same queries and that every name a gateway asks for exists. A block
starts with ``-- name: <name>``; the comment lines right after it say why it reads what it
reads. ``{job_columns}`` and ``{run_columns}`` are the only placeholders: the columns this
role may read (a gateway fills them; grants.sql keeps lock_token from the roles). Values
are always bound parameters, never placed in the text.
"""
from __future__ import annotations

import functools
import re

from .. import sqlfiles

FILE = "queries.sql"
_NAME = re.compile(r"^-- name: (\w+)[ \t]*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{(job_columns|run_columns)\}")


@functools.lru_cache(maxsize=None)
def named(dialect: str) -> dict[str, str]:
    """Every query of ``dialect``'s queries.sql, by name (read once per process)."""
    text = sqlfiles.script(dialect, FILE)
    marks = list(_NAME.finditer(text))
    out: dict[str, str] = {}
    for mark, following in zip(marks, marks[1:] + [None]):
        lines = text[mark.end():following.start() if following else len(text)].strip().splitlines()
        while lines and lines[0].lstrip().startswith("--"):
            lines.pop(0)     # the block's comment says why; the server gets the statement alone
        body = "\n".join(lines).strip()
        if mark.group(1) in out:
            raise ValueError(f"sql/{dialect}/{FILE}: query {mark.group(1)!r} is defined twice")
        out[mark.group(1)] = body
    return out


def placeholders(dialect: str, name: str) -> set[str]:
    """The column placeholders query ``name`` has (none: it needs no privilege lookup)."""
    return set(_PLACEHOLDER.findall(named(dialect).get(name, "")))


def query(dialect: str, name: str, **columns: str) -> str:
    """The text of query ``name``, with its column placeholders filled from ``columns``."""
    try:
        text = named(dialect)[name]
    except KeyError:
        raise KeyError(f"no query {name!r} in sql/{dialect}/{FILE}") from None

    def fill(match: re.Match[str]) -> str:
        try:
            return columns[match.group(1)]
        except KeyError:
            raise KeyError(f"query {name!r} of sql/{dialect}/{FILE} needs {match.group(1)}=") from None
    return _PLACEHOLDER.sub(fill, text)
