"""Stored JSON and column values, decoded one value at a time by code that never raises.

A row is read by many (the claim, ``jobs list``, the dashboard) and written by anyone with
plain SQL. A value the engine cannot decode (JSON nested a thousand levels deep, a number
of 5,000 digits, a timestamp past year 9999) must fail its own row, never the batch it came
in: the claim that returned it has already committed. So nothing here raises: a value that
cannot be decoded becomes an :class:`Undecodable` in its place, which says why, and the row
model built from it (``Job.from_row``) names the field (``Job.undecodable``); the engine sets
such a row aside (engine/dispatch.py) and the CLI and dashboard show the marker.

The limits (the same in the API, the admin procedures and both schemas): JSON objects and
arrays nest at most ``MAX_JSON_DEPTH`` levels (``{}`` is one level, ``{"a": []}`` two), and
a JSON value is at most ``MAX_JSON_BYTES`` bytes as UTF-8 text.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable

MAX_JSON_DEPTH = 64
MAX_JSON_BYTES = 1_000_000

# A JSON string (with its escapes) or one bracket: what a depth scan of JSON text must see.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_decode = json.JSONDecoder().decode


class Undecodable(str):
    """A stored value that could not be decoded, standing in its place.

    It is a ``str`` (``"<undecodable: nesting deeper than 64 levels>"``), so whatever prints,
    serialises or redacts a row handles it as text; ``field`` and ``reason`` say what and why,
    and ``value`` is the marker itself (a row's enum fields are read as ``.value``)."""

    field: str
    reason: str

    def __new__(cls, field: str, reason: str) -> "Undecodable":
        marker = super().__new__(cls, f"<undecodable: {reason}>")
        marker.field = field
        marker.reason = reason
        return marker

    @property
    def value(self) -> str:
        return str(self)

    def __reduce__(self) -> Any:   # pickled into an isolated run's child process like any str
        return (Undecodable, (self.field, self.reason))


def text_nesting_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON ``text`` nests objects and arrays deeper than ``limit``. Text with no
    more than ``limit`` opening brackets in all cannot (two C-speed counts: the common case);
    otherwise a scan that steps over strings decides. Malformed text is left to the parser."""
    if text.count("{") + text.count("[") <= limit:
        return False
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "{[":
            depth += 1
            if depth > limit:
                return True
        elif token in "}]":
            depth -= 1
    return False


def value_nesting_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the Python value (dicts, lists and tuples as JSON objects and arrays) nests
    deeper than ``limit``; iterative, so a value nested past the interpreter's recursion limit
    (or one that contains itself) is answered too."""
    if not isinstance(value, (dict, list, tuple)):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, depth + 1))
    return False


def nesting_reason(limit: int = MAX_JSON_DEPTH) -> str:
    return f"nesting deeper than {limit} levels"


def decode_json(raw: Any, field: str) -> Any:
    """A stored JSON column as Python data: text is parsed, a value already decoded is
    checked; None stays None. Never raises: what cannot be decoded (not JSON, nested deeper
    than MAX_JSON_DEPTH, a number Python will not convert, too deep for this thread's stack)
    is an :class:`Undecodable` naming ``field``."""
    if type(raw) is str:   # the common case, on every claimed job: as few steps as json.loads
        try:
            if raw.count("{") + raw.count("[") > MAX_JSON_DEPTH and text_nesting_exceeds(raw):
                return Undecodable(field, nesting_reason())
            return _decode(raw)
        except RecursionError:
            return Undecodable(field, "nested too deeply to decode")
        except (ValueError, TypeError, OverflowError, MemoryError) as exc:
            return Undecodable(field, f"not decodable as JSON: {_short(exc)}")
    if raw is None or isinstance(raw, Undecodable):
        return raw
    if isinstance(raw, (str, bytes, bytearray, memoryview)):
        try:
            text = str(raw) if isinstance(raw, str) else bytes(raw).decode("utf-8")
        except ValueError as exc:
            return Undecodable(field, f"not decodable as JSON: {_short(exc)}")
        return decode_json(text, field)
    if value_nesting_exceeds(raw):
        return Undecodable(field, nesting_reason())
    return raw


def safe_caster(cast: Callable[..., Any], name: str) -> Callable[..., Any]:
    """A database driver's value caster (psycopg2's take the value and the cursor, pyodbc's
    the value) that returns an :class:`Undecodable` (naming the type) instead of raising: one
    value the driver cannot convert (a timestamp past year 9999) must not fail the fetch of
    every row beside it."""
    def cast_or_mark(value: Any, *cursor: Any) -> Any:
        if value is None:   # SQL NULL, which every caster reads as None: most columns of a claimed row
            return None
        try:
            return cast(value, *cursor)
        except Exception as exc:  # noqa: BLE001 - any value a caster refuses: marked, never raised
            return Undecodable(name, f"{name} {_short(value)!s} cannot be read: {_short(exc)}")
    return cast_or_mark


def bounded_json(value: Any, field: str) -> tuple[Any, str | None]:
    """``value`` (JSON-ready Python data) if it keeps the limits, else a small object saying
    what was dropped, and why (None when nothing was). For what the engine writes itself
    (a run's details), where refusing would lose the run's outcome."""
    if value is None:
        return value, None
    if value_nesting_exceeds(value):
        why = nesting_reason()
    else:
        try:
            size = len(json.dumps(value, default=str, ensure_ascii=False).encode("utf-8"))
        except (TypeError, ValueError, RecursionError) as exc:
            size, why = 0, f"not serialisable as JSON: {_short(exc)}"
        else:
            if size <= MAX_JSON_BYTES:
                return value, None
            why = f"{size} bytes as JSON; at most {MAX_JSON_BYTES} allowed"
    return {f"{field}_dropped": why}, why


def _short(value: Any, limit: int = 200) -> str:
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."
