"""What a tag is, checked at the API boundary (the procedures check the same: tag_problem in
sql/*/010_tags.sql).

A tag names a group of jobs (a team, a product, "nightly"): 1 to 64 characters of ``a-z``,
``0-9``, ``.``, ``_`` and ``-``, starting with a letter or a digit. Lower case only, so the two
dialects compare tags alike whatever the server's collation; no comma, so a read can join a
job's tags into one column. A job has at most MAX_TAGS.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .errors import ConfigurationError

MAX_TAG = 64
MAX_TAGS = 32
MAX_LIMIT = 100_000     # a tag's max_running (ck_tag_limit_max_running)
_TAG = re.compile(r"[a-z0-9][a-z0-9._-]*")
RULE = 'may hold only a-z, 0-9, ".", "_" and "-", and starts with a letter or a digit'


def problem(value: Any) -> str | None:
    """Why ``value`` is not a tag, or None when it is one."""
    if not isinstance(value, str):
        return "must be a string"
    if value == "":
        return "must not be empty"
    if len(value) > MAX_TAG:
        return f"{len(value)} characters long; at most {MAX_TAG} allowed"
    if not _TAG.fullmatch(value):
        return RULE
    return None


def tag(value: Any, field: str = "tag") -> str:
    """``value`` as a tag, or ConfigurationError naming ``field`` and the value."""
    why = problem(value)
    if why is not None:
        raise ConfigurationError(field, value, why)
    return str(value)


def tag_set(value: Any, field: str = "tags") -> tuple[str, ...]:
    """A job's tags (an iterable of tags, or one comma-separated string) as a sorted tuple
    without duplicates; ConfigurationError naming ``field`` and the bad value otherwise."""
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[Any] = [t.strip() for t in value.split(",")] if value.strip() else []
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    else:
        raise ConfigurationError(field, value, "must be a set or list of tags (or one comma-separated string)")
    found = sorted({tag(item, field) for item in items})
    if len(found) > MAX_TAGS:
        raise ConfigurationError(field, value, f"{len(found)} tags; at most {MAX_TAGS} allowed")
    return tuple(found)


@dataclass(frozen=True)
class TagInfo:
    """One tag as ``engine.tags()`` and ``mjsched tags list`` show it: how many jobs carry it,
    its cluster-wide limit (None: none) and who set it, its Running runs, and the due jobs the
    limit holds back now (names)."""

    tag: str
    jobs: int
    max_running: int | None
    running: int
    waiting: tuple[str, ...] = ()
    set_at: datetime | None = None
    set_by: str | None = None
    set_by_user: str | None = None


@dataclass(frozen=True)
class TagWait:
    """A due job a tag's limit holds back: ``running`` of ``max_running`` slots are taken."""

    job_id: str
    name: str
    tag: str
    max_running: int
    running: int


def max_running(value: Any) -> int | None:
    """A tag's limit: a whole number in [0, MAX_LIMIT], or None (no limit)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        raise ConfigurationError("max_running", value, f"must be a whole number from 0 to {MAX_LIMIT} "
                                                       "(None lifts the limit)")
    return value
