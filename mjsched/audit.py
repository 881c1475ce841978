"""Who is changing jobs, and through which path: what the audit trail records beside the
database login (sql/<dialect>/013_audit.sql writes the rows, in triggers).

The application says who (``changes_by(user="alice")``); mjsched's own entry points say
through which path (``via``): 'api' for a call of the engine's API with nothing else said,
'ensure_job' and 'sync_jobs', 'cli', 'dashboard'. Nested paths join with '/', so
``mjsched jobs apply`` records 'cli/sync_jobs'. The backend hands both to the database in
the same transaction as each change (a context variable: per thread and per task).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
from dataclasses import dataclass
from typing import Iterator

from .decoding import Undecodable, nesting_reason, text_nesting_exceeds
from .errors import ConfigurationError
from .models import JobChange
from .redaction import redact, redact_text

MAX_USER = 255
MAX_VIA = 40


@dataclass(frozen=True)
class Changer:
    via: str | None = None
    user: str | None = None


_current: contextvars.ContextVar[Changer] = contextvars.ContextVar("mjsched_changer", default=Changer())


@contextlib.contextmanager
def changes_by(user: str | None = None, *, via: str | None = None) -> Iterator[None]:
    """Job changes made inside the block are recorded as made by ``user`` (the application's
    user; the database login is recorded anyway) through ``via`` (appended to the path already
    set). ``user=None`` keeps the user already set."""
    if user is not None and (not isinstance(user, str) or not user.strip() or len(user) > MAX_USER):
        raise ConfigurationError("user", user, f"must be a non-empty string of at most {MAX_USER} characters")
    if via is not None and (not isinstance(via, str) or not via.strip() or len(via) > MAX_VIA):
        raise ConfigurationError("via", via, f"must be a non-empty string of at most {MAX_VIA} characters")
    outer = _current.get()
    path = outer.via if via is None else (f"{outer.via}/{via}" if outer.via else via)
    token = _current.set(Changer(via=(path or None) and path[-MAX_VIA:], user=user if user is not None else outer.user))
    try:
        yield
    finally:
        _current.reset(token)


def current() -> tuple[str, str | None]:
    """(via, user) for the change being written now: via 'api' when nothing was said."""
    changer = _current.get()
    return changer.via or "api", changer.user


def masked(change: JobChange) -> JobChange:
    """``change`` as every surface shows it: credentials in its values masked by the same
    rules as a job's configuration (a 'configuration.<key>' value is masked under its key,
    a whole definition like a job)."""
    key = change.field.partition(".")[2] if change.field.startswith("configuration.") else change.field
    return dataclasses.replace(change, old_value=_masked_text(key, change.old_value),
                               new_value=_masked_text(key, change.new_value))


def _masked_text(key: str, text: str | None) -> str | None:
    if text is None:
        return None
    if text_nesting_exceeds(text):      # written past the schema's limits (plain SQL): never decoded
        return str(Undecodable(key, nesting_reason()))
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = text
    if key == "*":
        return json.dumps(redact(value), sort_keys=True) if isinstance(value, dict) else redact_text(text)
    shown = redact({key: value})[key]
    if shown == value:
        return redact_text(text)     # nothing masked under its key: still mask what the text itself shows
    return shown if isinstance(shown, str) else json.dumps(shown, sort_keys=True)
