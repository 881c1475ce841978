"""Cron parsing and DST-correct fire times, as pure functions.

croniter does the calendar matching, but only on *naive local wall time*; the
DST policy (Cronos/Hangfire semantics, SPEC §5) is applied here, on top:

* spring-forward: a wall time inside the gap fires once, at the first valid
  instant after the gap (the transition itself); several gap times collapse
  into that one instant.
* fall-back: a repeated wall time fires once (first, pre-shift occurrence) for
  fixed-time expressions, and in both offsets for interval expressions (a
  ``*``, range or step in the second, minute or hour field).

``H`` (Jenkins' hash) stands for a value chosen by a stable hash of the job's name
(``seed``): ``H``, ``H(0-29)``, ``H/15``, ``H(0-29)/10`` in any field. It is resolved when
the expression is parsed, so the rules above apply to the resolved expression
(``CronSchedule.resolved``), exactly as if it had been written out.

Every instant leaves this module as an aware UTC datetime, except
``next_run_times`` which shows them in the job's zone for humans.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import logging
import re
from dataclasses import dataclass, field as dc_field
from datetime import datetime, timedelta, timezone
from itertools import islice
from typing import Callable, Iterator, NoReturn
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError

from mjsched.errors import ConfigurationError, InvalidCronExpression, UnknownTimezone

logger = logging.getLogger(__name__)

__all__ = ["CronSchedule", "next_run_times", "resolve_timezone", "hash_value", "uses_hash"]

UTC = timezone.utc
MAX_EXPRESSION_LENGTH = 255
MAX_PREVIEW_COUNT = 10000

# User order (seconds first in the 6-field form): (name, low, high).
_FIELDS = (
    ("second", 0, 59), ("minute", 0, 59), ("hour", 0, 23),
    ("day-of-month", 1, 31), ("month", 1, 12), ("day-of-week", 0, 7),
)
_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_NAMES = {
    "month": {n: i + 1 for i, n in enumerate(
        "jan feb mar apr may jun jul aug sep oct nov dec".split())},
    "day-of-week": {n: i for i, n in enumerate("sun mon tue wed thu fri sat".split())},
}
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # Feb: leap years fire
# Resolvable by ZoneInfo but host-dependent or not a zone: a schedule shared by
# many hosts must not mean different instants on each.
_NOT_IANA = {"localtime", "posixrules"}
_ITEM_RE = re.compile(r"^(\*|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/([0-9]+))?$")
_NTH_RE = re.compile(r"^([a-z0-9]+)#([0-9]+)$")
_LAST_DOW_RE = re.compile(r"^(?:([a-z0-9]+)l|l([0-9]+))$")
_W_RE = re.compile(r"^([0-9]+)w$")
# H, H(a-b), H/n, H(a-b)/n (lower-cased); and "the expression holds an H item" (no month or
# day name starts with an h, so a lone 'h' token is always the hash).
_HASH_RE = re.compile(r"^h(?:\(([a-z0-9]+)-([a-z0-9]+)\))?(?:/([0-9]+))?$")
_USES_HASH_RE = re.compile(r"(?:^|[ \t,])[hH](?=[ \t,(/]|$)")
# The range a bare H draws from. Day-of-month stops at 28 (every month has it) and day-of-week
# at 6 (0 and 7 are both Sunday), as in Jenkins.
_HASH_RANGE = {"second": (0, 59), "minute": (0, 59), "hour": (0, 23), "day-of-month": (1, 28),
               "month": (1, 12), "day-of-week": (0, 6)}


def hash_value(seed: str, purpose: str, size: int) -> int:
    """A stable integer in [0, size): the first 8 bytes of SHA-256 over ``purpose:seed``
    (UTF-8), modulo ``size``. The same in every process, on every host and Python version (not
    Python's salted ``hash()``); ``purpose`` (a field name, ``"jitter"``) keeps the draws of one
    job independent of each other. Changing this function moves every hashed job: a unit test
    pins its values."""
    digest = hashlib.sha256(f"{purpose}:{seed}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % size


def uses_hash(expression: object) -> bool:
    """Whether a cron expression holds an ``H`` item (its times then depend on the job's name)."""
    return isinstance(expression, str) and ("h" in expression or "H" in expression) \
        and _USES_HASH_RE.search(expression) is not None   # (the test first: every claim and sweep asks)


def resolve_timezone(name: str, field: str = "timezone") -> ZoneInfo:
    """Load an IANA zone, turning every failure into UnknownTimezone.

    ZoneInfo raises three different exception types (and loads host-specific
    files such as ``localtime``); callers should only ever see one error.
    """
    if not isinstance(name, str) or not name or "\x00" in name or name in _NOT_IANA:
        raise UnknownTimezone(name, field=field)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError, TypeError):
        raise UnknownTimezone(name, field=field) from None


def _require_aware(value: object, field: str) -> datetime:
    """Naive datetimes are ambiguous across hosts, so refuse them loudly."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ConfigurationError(field, value, "must be a timezone-aware datetime")
    return value.astimezone(UTC)


@dataclass(frozen=True)
class _Field:
    """One field of an expression being checked: its kind, bounds and text, so each error names
    the exact field and value."""

    expr: str
    text: str
    field: str
    name: str
    low: int
    high: int

    def bad(self, reason: str) -> NoReturn:
        raise InvalidCronExpression(self.expr, f"{self.name} field {self.text!r}: {reason}", field=self.field)

    def value(self, token: str) -> int:
        """One number or name, range-checked."""
        names = _NAMES.get(self.name, {})
        if token in names:
            return names[token]
        if not token.isdigit():
            self.bad(f"{token!r} is not a number" + (" or a 3-letter name" if names else ""))
        number = int(token)
        if not self.low <= number <= self.high:
            self.bad(f"value {number} is out of range {self.low}-{self.high}")
        return number


def _normalize_field(expr: str, index: int, text: str, field: str,
                     seed: str | None = None) -> tuple[str, list[int] | None, bool]:
    """Validate one field; return croniter's spelling, plain values, interval flag.

    Ranges and steps are handed to croniter as explicit value lists, so its own
    wrap-around and day-of-week-7 rules never come into play. The plain values
    (None when the field holds ``*``, ``L``, ``W`` or ``#``) feed the static
    never-fires check.
    """
    f = _Field(expr, text, field, *_FIELDS[index])
    token = text.lower()
    if token == "?":
        if f.name not in ("day-of-month", "day-of-week"):
            f.bad("'?' is only allowed in day-of-month and day-of-week")
        return "*", None, False
    if token == "*":
        return "*", None, True
    items = token.split(",")
    out: list[str] = []
    values: list[int] | None = []
    special = 0
    interval = False
    for item in items:
        if not item:
            f.bad("empty list item")
        if f.name == "day-of-month" and (item == "l" or _W_RE.match(item)):
            out.append(_last_or_weekday(f, item, alone=len(items) == 1))
            values = None
        elif f.name == "day-of-week" and (_NTH_RE.match(item) or _LAST_DOW_RE.match(item)):
            out.append(_nth_or_last_day_of_week(f, item))
            special += 1
            values = None
        else:
            expanded, is_interval = _hashed(f, item, seed) if item.startswith("h") else _expand(f, item)
            interval = interval or is_interval
            out.extend(str(v) for v in expanded)
            if values is not None:
                values.extend(expanded)
    if special and special != len(items):
        f.bad("'#' and 'L' days cannot be mixed with plain days")
    return ",".join(dict.fromkeys(out)), values, interval


def _last_or_weekday(f: _Field, item: str, alone: bool) -> str:
    """Day-of-month ``L`` (the last day) or ``15W`` (the weekday nearest the 15th), which must
    stand alone; croniter reads both as written."""
    w_day = _W_RE.match(item)
    if w_day:
        f.value(w_day.group(1))
        if not alone:
            f.bad(f"'{item.upper()}' cannot be combined with other values")
    return item


def _nth_or_last_day_of_week(f: _Field, item: str) -> str:
    """Day-of-week ``FRI#3`` (the third Friday) or ``5L``/``L5`` (the last Friday), in croniter's
    spelling with the day as a number 0-6."""
    nth, last = _NTH_RE.match(item), _LAST_DOW_RE.match(item)
    raw = nth.group(1) if nth else (last.group(1) or last.group(2)) if last else ""
    day = f.value(raw) % 7
    if nth and not 1 <= int(nth.group(2)) <= 5:
        f.bad(f"occurrence '#{nth.group(2)}' is out of range 1-5")
    return f"{day}#{int(nth.group(2))}" if nth else f"l{day}"


def _expand(f: _Field, item: str) -> tuple[list[int] | range, bool]:
    """A value, range or step as the explicit values it stands for, and whether it is an interval
    (``*``, a range or a step rather than one value)."""
    match = _ITEM_RE.match(item)
    if not match:
        f.bad(f"{item!r} is not a value, range or step")
    base, step = match.group(1), match.group(2)
    # An open end ('*/2', '5/15') stops at Saturday (6), not at the Sunday alias 7.
    top = 6 if f.name == "day-of-week" else f.high
    if base == "*":
        first, end = f.low, top
    else:
        bounds = [f.value(p) for p in base.split("-")]
        first = bounds[0]
        end = bounds[1] if len(bounds) == 2 else (top if step else first)
        if first > end:
            f.bad(f"range {base!r} starts after it ends")
    if step is not None and not 1 <= int(step) <= f.high - f.low + 1:
        f.bad(f"step {step} is out of range 1-{f.high - f.low + 1}")
    interval = base == "*" or "-" in base or step is not None
    expanded: list[int] | range = range(first, end + 1, int(step or 1))
    if f.name == "day-of-week":
        expanded = sorted({v % 7 for v in expanded})
    return expanded, interval


def _hashed(f: _Field, item: str, seed: str | None) -> tuple[list[int] | range, bool]:
    """``H`` items as the values they resolve to for ``seed`` (the job's name), and whether
    the item is an interval (only a step is: ``H`` and ``H(a-b)`` are one value).

    ``H`` is one value of the field's range (_HASH_RANGE), ``H(a-b)`` one value of a..b,
    ``H/n`` and ``H(a-b)/n`` every n-th value from an offset in [0, n) (``H/15`` in the minute
    field: perhaps :07, :22, :37, :52). The value is ``hash_value(seed, <field name>, size)``:
    every H of one field draws the same number."""
    match = _HASH_RE.match(item)
    if not match:
        f.bad(f"{item!r} is not a hash: use H, H(a-b), H/n or H(a-b)/n (a and b numbers of the field)")
    low_text, high_text, step_text = match.groups()
    if low_text is None:
        low, high = _HASH_RANGE[f.name]
    else:
        low, high = f.value(low_text), f.value(high_text)
        if low > high:
            f.bad(f"range H({low_text}-{high_text}) starts after it ends")
    size = high - low + 1
    if seed is None:
        f.bad("H stands for a value hashed from the job's name, and there is no name here: "
              "give the job's name (name=...)")
    if step_text is None:
        values: list[int] | range = [low + hash_value(seed, f.name, size)]
    else:
        step = int(step_text)
        if not 1 <= step <= size:
            f.bad(f"step {step} of {item!r} is out of range 1-{size}")
        values = range(low + hash_value(seed, f.name, step), high + 1, step)
    if f.name == "day-of-week":
        values = sorted({v % 7 for v in values})
    return values, step_text is not None


def _resolved_text(parts: list[str], spelled: list[str], has_seconds: bool) -> str:
    """The expression as written, each field holding an H replaced by the values it resolved to
    (``H 2 * * *`` -> ``37 2 * * *``): what ``jobs preview`` shows."""
    shown = [spelled[i] if uses_hash(text) else text for i, text in enumerate(parts)]
    return " ".join(shown if has_seconds else shown[1:])


def _split_fields(expression: str, bad: Callable[[str], NoReturn]) -> list[str]:
    """The expression's 5 or 6 fields as written (a macro replaced by its fields), after the
    checks that need no field: type, NUL, length, emptiness, a known macro."""
    if not isinstance(expression, str):
        bad(f"must be a string, not {type(expression).__name__}")
    if "\x00" in expression:
        bad("contains a NUL byte")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        bad(f"longer than {MAX_EXPRESSION_LENGTH} characters ({len(expression)})")
    text = expression.strip()
    if not text:
        bad("is empty")
    if text.startswith("@"):
        macro = text.lower()
        if macro not in _MACROS:
            known = ", ".join(_MACROS)
            bad(f"macro {text!r} is not supported (known: {known})")
        text = _MACROS[macro]
    parts = re.split(r"[ \t]+", text)
    if len(parts) not in (5, 6):
        bad(f"has {len(parts)} fields; expected 5 (minute hour day-of-month month "
            "day-of-week) or 6 with seconds first")
    return parts


def _check_day_fields(parts: list[str], fields: list[tuple[str, list[int] | None, bool]],
                      bad: Callable[[str], NoReturn]) -> None:
    """Refuse day fields croniter would misread, and a day of month no listed month has."""
    spelled = [f[0] for f in fields]
    dom_special = any(c in spelled[3] for c in "lw")
    dow_special = any(c in spelled[5] for c in "#l")
    if spelled[3] != "*" and spelled[5] != "*" and (dom_special or dow_special):
        # croniter ORs plain day fields but ANDs (or drops) L/W/#: refuse the mix.
        bad(f"day-of-month field {parts[3]!r} and day-of-week field {parts[5]!r}: "
            "'L', 'W' and '#' need '*' or '?' in the other day field")
    dom, months = fields[3][1], fields[4][1]
    if dom and months and spelled[5] == "*":
        longest = max(_DAYS_IN_MONTH[m - 1] for m in months)
        if min(dom) > longest:
            bad(f"day-of-month field {parts[3]!r}: day {min(dom)} never "
                f"occurs in month field {parts[4]!r}, so this never fires")


def _check_fires(cron_expr: str, bad: Callable[[str], NoReturn]) -> None:
    """croniter itself must accept the expression and find a fire time."""
    try:
        croniter(cron_expr, datetime(2000, 1, 1), ret_type=datetime).get_next()
    except CroniterBadDateError:
        bad("day-of-month/month/day-of-week combination never fires")
    except (CroniterError, ValueError, TypeError, KeyError) as exc:
        bad(f"rejected by croniter: {exc}")


@dataclass(frozen=True)
class CronSchedule:
    """A validated cron expression bound to an IANA zone.

    Build it with ``CronSchedule.parse``; the constructor trusts its inputs.
    """

    expression: str
    timezone: str
    zone: ZoneInfo = dc_field(repr=False, compare=False)
    has_seconds: bool
    is_interval: bool
    _croniter_expr: str = dc_field(repr=False)
    resolved: str = ""           # the expression with its H items resolved (the expression without any)
    seed: str | None = None      # the job name its H items were hashed from (None without any)

    @classmethod
    def parse(cls, expression: str, timezone: str = "UTC", field: str = "cron",
              seed: str | None = None) -> CronSchedule:
        """Validate field by field so the error names the field and value. ``seed`` is the
        job's name, which ``H`` items are hashed from (an H without one is an error).

        Schedules are immutable, so parsed ones are cached: the engine asks for the
        same few expressions on every claim and completion (the seed is part of the key only
        for an expression that holds an H)."""
        if isinstance(expression, str) and isinstance(timezone, str) and isinstance(field, str) \
                and (seed is None or isinstance(seed, str)):
            hashed = ("h" in expression or "H" in expression) and uses_hash(expression)   # (asked per run)
            return _parse_cached(expression, timezone, field, seed if hashed else None)
        return cls._parse(expression, timezone, field, seed)

    @classmethod
    def _parse(cls, expression: str, timezone: str = "UTC", field: str = "cron",
               seed: str | None = None) -> CronSchedule:
        def bad(reason: str) -> NoReturn:
            raise InvalidCronExpression(expression, reason, field=field)

        parts = _split_fields(expression, bad)
        if seed is not None and not isinstance(seed, str):
            raise ConfigurationError("name", seed, "must be a string (the job name H is hashed from)")
        has_seconds = len(parts) == 6
        if not has_seconds:
            parts = ["0", *parts]
        fields = [_normalize_field(expression, i, p, field, seed) for i, p in enumerate(parts)]
        spelled = [f[0] for f in fields]
        zone = resolve_timezone(timezone)
        # Cronos: a '*', range or step in second/minute/hour makes it an interval.
        is_interval = any(f[2] for f in fields[:3])
        _check_day_fields(parts, fields, bad)
        # croniter order: minute hour dom month dow second.
        cron_expr = " ".join([*spelled[1:], spelled[0]])
        _check_fires(cron_expr, bad)
        hashed = uses_hash(expression)
        resolved = _resolved_text(parts, spelled, has_seconds) if hashed else expression
        return cls(expression, timezone, zone, has_seconds, is_interval, cron_expr, resolved,
                   seed if hashed else None)

    @functools.cached_property
    def _template(self) -> croniter:
        return croniter(self._croniter_expr, datetime(2000, 1, 1), ret_type=datetime)

    # -- DST-aware iteration ------------------------------------------------

    def _first_changed_offset(self, lo: datetime, hi: datetime) -> datetime:
        """Binary-search the transition in (lo, hi]: the first instant whose
        UTC offset differs from lo's. Transitions fall on whole seconds."""
        before = lo.astimezone(self.zone).utcoffset()
        lo_s, hi_s = int(lo.timestamp()), int(hi.timestamp())
        while hi_s - lo_s > 1:
            mid = (lo_s + hi_s) // 2
            if datetime.fromtimestamp(mid, self.zone).utcoffset() == before:
                lo_s = mid
            else:
                hi_s = mid
        return datetime.fromtimestamp(hi_s, UTC)

    def _folds(self, wall: datetime) -> tuple[datetime, datetime, bool]:
        """UTC of both readings of a naive wall time, and whether it exists."""
        first = wall.replace(tzinfo=self.zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=self.zone, fold=1).astimezone(UTC)
        exists = first.astimezone(self.zone).replace(tzinfo=None) == wall
        return first, second, exists

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Fire instants strictly after ``after``, in UTC, strictly increasing."""
        last = _require_aware(after, "after")
        try:
            local = last.astimezone(self.zone)
            wall = local.replace(tzinfo=None)
            if self.is_interval and local.fold == 0:
                # Inside the first pass of a repeated hour, earlier wall times still
                # fire again in the second pass: start the wall clock that far back.
                wall -= max(timedelta(0), (local.utcoffset() or timedelta(0))
                            - (local.replace(fold=1).utcoffset() or timedelta(0)))
            it = copy.copy(self._template)   # croniter's expansion of the expression, done once
            it.set_current(wall.replace(microsecond=0) - timedelta(seconds=1), force=True)
        except (OverflowError, ValueError):   # an instant at the edge of what datetime holds (year 1)
            raise ConfigurationError("after", after, f"is outside the range cron {self.expression!r} "
                                                     f"({self.timezone}) can be computed from") from None
        pending: datetime | None = None
        while True:
            try:
                current = pending or it.get_next()
                pending = None
                first, second, exists = self._folds(current)
                if first == second:
                    instants = [first]
                elif not exists:  # spring-forward gap
                    instants = [self._first_changed_offset(second, first)]
                    logger.debug("%s: %s does not exist in %s, firing at %s",
                                 self.expression, current, self.timezone, instants[0])
                elif not self.is_interval:  # repeated, fixed time: first pass only
                    instants = [first]
                else:  # repeated, interval: every match of the overlap, both passes
                    shift = self._first_changed_offset(first, second)
                    end = shift.replace(tzinfo=None) + (current - first.replace(tzinfo=None))
                    batch = [current]
                    while (nxt := it.get_next()) < end:
                        batch.append(nxt)
                    pending = nxt
                    folds = [self._folds(w) for w in batch]
                    instants = [f[0] for f in folds] + [f[1] for f in folds]
            except (CroniterBadDateError, OverflowError, ValueError):
                return  # ran past year 9999 or croniter's search horizon
            for instant in instants:
                if instant > last:
                    last = instant
                    yield instant

    def next_after(self, after: datetime) -> datetime:
        """The first fire instant strictly after ``after``, in UTC.

        Remembers its last answer: when r = next_after(b), every ``after`` in [b, r)
        has the same answer r. Many jobs share a schedule and ask about nearly the
        same instant, so most calls skip croniter entirely."""
        _require_aware(after, "after")
        memo = self.__dict__.get("_memo")
        if memo is not None and memo[0] <= after < memo[1]:
            return memo[1]  # type: ignore[no-any-return]
        for instant in self.iter_after(after):
            self.__dict__["_memo"] = (after, instant)   # one tuple store: atomic across threads
            return instant
        raise InvalidCronExpression(self.expression, f"no fire time after {after.isoformat()}")

    def min_interval(self, after: datetime | None = None, samples: int = 6) -> timedelta:
        """Smallest gap among the next ``samples`` fire times (high-frequency warning)."""
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
            raise ConfigurationError("samples", samples, "must be an int >= 2")
        times = list(islice(self.iter_after(after or datetime.now(UTC)), samples))
        if len(times) < 2:
            return timedelta.max
        return min(b - a for a, b in zip(times, times[1:]))

    def ticks_between(self, start_exclusive: datetime, end_inclusive: datetime,
                      limit: int) -> list[datetime]:
        """Fire times in (start, end], at most ``limit`` (missed-run catch-up)."""
        end = _require_aware(end_inclusive, "end_inclusive")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigurationError("limit", limit, "must be an int >= 0")
        ticks: list[datetime] = []
        if limit == 0 or self.next_after(start_exclusive) > end:
            return ticks     # the common case (nothing missed), answered from the memo
        for instant in self.iter_after(start_exclusive):
            if instant > end or len(ticks) >= limit:
                break
            ticks.append(instant)
        return ticks


def next_run_times(cron: str, timezone: str = "UTC", after: datetime | None = None,
                   count: int = 5, name: str | None = None) -> list[datetime]:
    """Preview exactly what the engine fires, shown in the job's own zone (``name``: the job
    name an ``H`` is hashed from)."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW_COUNT:
        raise ConfigurationError("count", count, f"must be an int in 1-{MAX_PREVIEW_COUNT}")
    schedule = CronSchedule.parse(cron, timezone, seed=name)
    start = datetime.now(UTC) if after is None else _require_aware(after, "after")
    return [t.astimezone(schedule.zone) for t in islice(schedule.iter_after(start), count)]


@functools.lru_cache(maxsize=4096)
def _parse_cached(expression: str, timezone: str, field: str, seed: str | None) -> CronSchedule:
    return CronSchedule._parse(expression, timezone, field, seed)
