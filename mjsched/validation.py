"""Checks every job field at the API boundary, before anything is written.

Each check raises a typed error naming the field and the value; each returns
the normalised value to store.
"""
from __future__ import annotations

import json
import math
import uuid
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from . import retention, tags as tag_rules
from .cron import CronSchedule, resolve_timezone
from .decoding import MAX_JSON_BYTES, MAX_JSON_DEPTH, nesting_reason, text_nesting_exceeds, value_nesting_exceeds
from .schedules import LATEST_RUN_AT, parse_duration, parse_jitter
from .drivers.registry import get_driver
from .errors import ConfigurationError, InvalidCronExpression, JobNotFound
from .models import ConcurrencyMode, Isolation, JobStatus, MissedRunPolicy
from .retry import COLUMNS as RETRY_COLUMNS
from .retry import policy as retry_policy

MAX_NAME = 200
MAX_TEXT = 100_000
MAX_CONFIGURATION_BYTES = MAX_JSON_BYTES     # and MAX_JSON_DEPTH levels of nesting (mjsched/decoding.py)
MAX_NOTIFY_TO = 1000
MAX_OWNER = 255


def text(field: str, value: Any, *, required: bool = False, limit: int = MAX_TEXT) -> str | None:
    if value is None:
        if required:
            raise ConfigurationError(field, value, "is required")
        return None
    if not isinstance(value, str):
        raise ConfigurationError(field, value, "must be a string")
    if "\x00" in value:
        raise ConfigurationError(field, value, "must not contain NUL characters")
    _require_encodable(field, value)
    if required and not value.strip():
        raise ConfigurationError(field, value, "must not be empty")
    if len(value) > limit:
        raise ConfigurationError(field, value, f"is {len(value)} characters long; at most {limit} allowed")
    return value


def enum_value(field: str, value: Any, enum: Any) -> Any:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(repr(e.value) for e in enum)
        raise ConfigurationError(field, value, f"must be one of {allowed}") from None


def flag(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(field, value, "must be True or False")
    return value


def positive_number(field: str, value: Any, *, optional: bool = True, maximum: float = 31_536_000) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        raise ConfigurationError(field, value, "must be a finite number of seconds")
    if value <= 0:
        raise ConfigurationError(field, value, "must be greater than zero")
    if value > maximum:
        raise ConfigurationError(field, value, f"must be at most {maximum:g}")
    return float(value)


def positive_int(field: str, value: Any, *, maximum: int = 10_000) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(field, value, "must be an integer")
    if value <= 0 or value > maximum:
        raise ConfigurationError(field, value, f"must be between 1 and {maximum}")
    return value


# The instants a job row may hold, in both dialects' schemas too (001_schema.sql): no
# infinities, no year 1, room for a zone's offset before datetime's year-9999 limit.
EARLIEST = datetime(1900, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 12, 31, tzinfo=timezone.utc)


# A job's priority (015_priorities.sql): higher is claimed first when slots are short.
PRIORITY_MIN, PRIORITY_MAX = -100, 100


def priority(field: str, value: Any) -> int:
    """A priority to store: an integer in [-100, 100] (None: the default, 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(field, value, "must be an integer")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise ConfigurationError(field, value, f"must be between {PRIORITY_MIN} and {PRIORITY_MAX} (higher runs first)")
    return value


def aware(field: str, value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ConfigurationError(field, value, "must be a datetime")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigurationError(field, value, "must be timezone-aware (naive datetimes are ambiguous)")
    try:
        inside = EARLIEST <= value <= LATEST
    except OverflowError:   # an offset that takes it past what datetime can hold
        inside = False
    if not inside:
        raise ConfigurationError(field, value, "must lie between 1900-01-01 00:00 and 9999-12-31 00:00 UTC")
    return value


def configuration(value: Any, field: str = "configuration") -> dict[str, Any]:
    """A JSON object, returned as plain JSON data. Error values are redacted: a
    configuration may hold a DSN with a password (the sql driver's)."""
    if value is None:
        return {}
    if isinstance(value, str) and text_nesting_exceeds(value) or value_nesting_exceeds(value):
        raise ConfigurationError(field, f"<JSON {nesting_reason()}>",
                                 f"is nested deeper than {MAX_JSON_DEPTH} levels of objects and arrays")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigurationError(field, _redacted(value), f"is not valid JSON: {exc}") from None
    if not isinstance(value, Mapping):
        raise ConfigurationError(field, _redacted(value), "must be a JSON object (a dict)")
    try:
        encoded = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(field, _redacted(value), f"is not JSON-serialisable: {exc}") from None
    _require_encodable(field, encoded, shown=lambda: _redacted(value))
    if len(encoded.encode("utf-8")) > MAX_CONFIGURATION_BYTES:
        raise ConfigurationError(field, f"<{len(encoded)} bytes>", f"is larger than {MAX_CONFIGURATION_BYTES} bytes")
    data = json.loads(encoded)
    path = _nul_path(data, field)
    if path is not None:
        raise ConfigurationError(path, "<redacted>", "must not contain NUL characters")
    return data  # type: ignore[no-any-return]


def _nul_path(data: Any, path: str) -> str | None:
    """The key path of the first string (key or value) holding a NUL character."""
    if isinstance(data, str):
        return path if "\x00" in data else None
    if isinstance(data, dict):
        for key, item in data.items():
            if "\x00" in key:
                return f"{path}.<key>"
            found = _nul_path(item, f"{path}.{key}")
            if found:
                return found
    if isinstance(data, list):
        for i, item in enumerate(data):
            found = _nul_path(item, f"{path}[{i}]")
            if found:
                return found
    return None


def _require_encodable(field: str, text: str, shown: Callable[[], Any] | None = None) -> None:
    """``shown`` gives the value the error names: called only on failure, since redacting
    costs more than the check itself and the check runs at every dispatch."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(field, text if shown is None else shown(),
                                 "must be valid Unicode text (no unpaired surrogates)") from None


def _redacted(value: Any) -> str:
    from .redaction import redact_dsn as redact

    return redact(repr(value))


def canonical_uuid(value: Any) -> str | None:
    """``value`` as a canonical UUID string (any form uuid.UUID reads), or None when it is none."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            return None
    return None


def job_id(value: Any) -> str:
    """A canonical UUID string; anything else cannot name a job."""
    found = canonical_uuid(value)
    if found is None:
        raise JobNotFound(value)
    return found


def job_name(value: Any) -> str:
    """A job's name: text of 1..200 characters that does not parse as a UUID, since a value
    that does is read as a job id wherever a job is named (mjsched/engine/refs.py)."""
    name = str(text("name", value, required=True, limit=MAX_NAME))
    try:
        uuid.UUID(name)
    except ValueError:
        return name
    raise ConfigurationError("name", value, "parses as a UUID, which is read as a job id wherever a job is named; "
                                            "give the job a name that is not one")


def _validate_with(name: str, driver_cls: type, conf: dict[str, Any]) -> None:
    try:
        driver = driver_cls()
    except Exception as exc:  # a broken plugin is a configuration problem of this job
        raise ConfigurationError("driver", name, f"driver could not be constructed: {type(exc).__name__}: {exc}") \
            from exc
    driver.validate_configuration(conf)


# (driver class, configuration as JSON text) pairs that passed check_runnable. Drivers check
# the form only (Driver.validate_configuration), so a pair that passed once passes again;
# the engine checks every claimed run, and jobs share a few configurations. Failures are not
# kept: they are rare and each one is reported anew.
_RUNNABLE: dict[tuple[Any, ...], None] = {}
_RUNNABLE_MAX = 1024
# json.dumps builds a new encoder per call whenever an option differs from its defaults
_KEY_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False)


def _runnable_key(driver_cls: type, conf: Any) -> tuple[Any, ...] | None:
    """What check_runnable's outcome depends on, or None when it cannot be told cheaply."""
    if conf is None:
        return (driver_cls, None)
    if isinstance(conf, str):
        return (driver_cls, "text", conf)
    if type(conf) is dict:
        if not conf:
            return (driver_cls, "json", "{}")
        try:
            return (driver_cls, "json", _KEY_ENCODER.encode(conf))
        except (TypeError, ValueError):
            return None   # refused by configuration(), which names why
    return None


def check_runnable(driver_name: str, conf: Any) -> None:
    """What the API checks about a job's driver and configuration, for a row already stored
    (plain SQL can write what job_fields would refuse): raises naming the field and value.
    A driver that cannot even be constructed is left to its run, which fails saying so."""
    driver_cls = get_driver(driver_name)   # raises UnknownDriver
    key = _runnable_key(driver_cls, conf)
    if key is not None and key in _RUNNABLE:
        return
    data = configuration(conf)
    try:
        driver = driver_cls()
    except Exception:  # noqa: BLE001 - a driver that cannot be built fails its run, not this check
        return
    driver.validate_configuration(data)
    if key is not None:
        if len(_RUNNABLE) >= _RUNNABLE_MAX:
            _RUNNABLE.clear()
        _RUNNABLE[key] = None


JOB_FIELDS = frozenset({
    "name", "driver", "cron", "every", "run_at", "timezone", "configuration", "description", "owner",
    "concurrency_mode", "missed_run_policy", "run_immediately_if_never_run", "max_runtime", "isolation",
    "max_queued_runs", "start_at", "end_at", "notify_on_success", "notify_on_failure", "notify_to", "status",
    "high_frequency_ok", "keep_runs_days", "keep_runs_count", "retry", "notify_final_attempt_only", "tags", "jitter",
    "priority"})
FLAG_FIELDS = ("run_immediately_if_never_run", "notify_on_success", "notify_on_failure", "high_frequency_ok",
               "notify_final_attempt_only")


def job_fields(fields: Mapping[str, Any], *, creating: bool,
               current: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate create/update keyword arguments; returns column -> value to store.

    ``current`` holds the stored values an update is checked against (cron with a
    new timezone, a new start with the old end). The checks run in a fixed order, so
    of several bad fields the same one is always reported.
    """
    _reject_unknown(fields)
    cur = dict(current or {})
    out = _texts(fields, creating=creating)
    out.update(_timezone(fields, creating=creating, current=cur))
    zone = out.get("timezone", cur.get("timezone")) or "UTC"
    name = out.get("name", cur.get("name"))
    out.update(_schedule(fields, creating=creating, current=cur, zone=zone, name=name))
    out.update(_jitter(fields, current=cur, new=out))
    out.update(_driver(fields, creating=creating, current=cur))
    out.update(_run_policies(fields, creating=creating))
    out.update(_retry(fields))
    out.update({key: flag(key, fields[key]) for key in FLAG_FIELDS if key in fields})
    out.update(_retention(fields))
    if "tags" in fields:
        out["tags"] = tag_rules.tag_set(fields["tags"])
    out.update(_window(fields, current=cur))
    _check_one_run(fields, current=cur, new=out)
    return out


def _reject_unknown(fields: Mapping[str, Any]) -> None:
    for key in fields:
        if key not in JOB_FIELDS:
            raise ConfigurationError(key, fields[key], f"unknown job field; known: {', '.join(sorted(JOB_FIELDS))}")


def _texts(fields: Mapping[str, Any], *, creating: bool) -> dict[str, Any]:
    """The free-text columns; only a new job must have a name."""
    out: dict[str, Any] = {}
    if creating or "name" in fields:
        out["name"] = job_name(fields.get("name"))
    if "description" in fields:
        out["description"] = text("description", fields["description"])
    if "owner" in fields:
        out["owner"] = text("owner", fields["owner"], limit=MAX_OWNER)
    if "notify_to" in fields:
        out["notify_to"] = text("notify_to", fields["notify_to"], limit=MAX_NOTIFY_TO)
    return out


def _timezone(fields: Mapping[str, Any], *, creating: bool, current: Mapping[str, Any]) -> dict[str, Any]:
    """The zone a cron is read in: given, else (new job) the stored one or UTC."""
    if not (creating or "timezone" in fields):
        return {}
    tz = fields.get("timezone", current.get("timezone", "UTC"))
    resolve_timezone(tz)  # raises UnknownTimezone for non-strings too
    return {"timezone": tz}


def _driver(fields: Mapping[str, Any], *, creating: bool, current: Mapping[str, Any]) -> dict[str, Any]:
    """Driver and configuration: a configuration is checked by the driver it will run under."""
    if creating or "driver" in fields:
        driver_name = str(text("driver", fields.get("driver"), required=True, limit=255))
        driver_cls = get_driver(driver_name)  # raises UnknownDriver
        conf = configuration(prepared(driver_name, driver_cls, fields.get("configuration")))
        _validate_with(driver_name, driver_cls, conf)
        return {"driver": driver_name, "configuration": conf}
    if "configuration" in fields:
        driver_cls = get_driver(current["driver"])
        conf = configuration(prepared(current["driver"], driver_cls, fields["configuration"]))
        _validate_with(current["driver"], driver_cls, conf)
        return {"configuration": conf}
    return {}


def prepared(name: str, driver_cls: type, value: Any, field: str = "configuration") -> Any:
    """``value`` with the Python objects its driver takes in place of JSON replaced by their JSON
    form (``BaseScheduledJob.prepare_configuration``: the python driver's function by its path)."""
    if not isinstance(value, Mapping):
        return value
    try:
        driver = driver_cls()
    except Exception as exc:  # a broken plugin is a configuration problem of this job
        raise ConfigurationError("driver", name, f"driver could not be constructed: {type(exc).__name__}: {exc}") \
            from exc
    prepare = getattr(driver, "prepare_configuration", None)
    return prepare(value, field) if prepare is not None else value


def _run_policies(fields: Mapping[str, Any], *, creating: bool) -> dict[str, Any]:
    """How runs are started and bounded; a new job gets the enums' defaults."""
    out: dict[str, Any] = {}
    if creating or "concurrency_mode" in fields:
        out["concurrency_mode"] = enum_value("concurrency_mode", fields.get("concurrency_mode", "Skip"),
                                             ConcurrencyMode).value
    if creating or "missed_run_policy" in fields:
        out["missed_run_policy"] = enum_value("missed_run_policy", fields.get("missed_run_policy", "RunOnce"),
                                              MissedRunPolicy).value
    if creating or "status" in fields:
        out["status"] = enum_value("status", fields.get("status", "Active"), JobStatus).value
    if "isolation" in fields:
        iso = fields["isolation"]
        out["isolation"] = None if iso is None else enum_value("isolation", iso, Isolation).value
    if "max_runtime" in fields:
        out["max_runtime_seconds"] = positive_number("max_runtime", fields["max_runtime"])
    if "max_queued_runs" in fields:
        out["max_queued_runs"] = positive_int("max_queued_runs", fields["max_queued_runs"], maximum=1000)
    if creating or "priority" in fields:
        out["priority"] = priority("priority", fields.get("priority"))
    return out


def _retry(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The retry columns; None removes the job's own policy (its driver's default applies)."""
    if "retry" not in fields:
        return {}
    found = retry_policy(fields["retry"])
    return found.to_fields() if found is not None else dict.fromkeys(RETRY_COLUMNS)


def _retention(fields: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "keep_runs_days" in fields:
        out["keep_runs_days"] = retention.keep_days("keep_runs_days", fields["keep_runs_days"])
    if "keep_runs_count" in fields:
        out["keep_runs_count"] = retention.keep_count("keep_runs_count", fields["keep_runs_count"])
    return out


def _window(fields: Mapping[str, Any], *, current: Mapping[str, Any]) -> dict[str, Any]:
    """start_at and end_at to store; with the stored bound a new one leaves, the window must not be empty."""
    start = aware("start_at", fields["start_at"]) if "start_at" in fields else current.get("start_at")
    end = aware("end_at", fields["end_at"]) if "end_at" in fields else current.get("end_at")
    if start is not None and end is not None and start >= end:
        raise ConfigurationError("end_at", end, f"must be after start_at ({start.isoformat()})")
    return {key: value for key, value in (("start_at", start), ("end_at", end)) if key in fields}


def _check_one_run(fields: Mapping[str, Any], *, current: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """A run_at job's one run must fall inside its window (else it never comes), and it cannot
    also run immediately."""
    run_at, start, end = (new[key] if key in new else current.get(key) for key in ("run_at", "start_at", "end_at"))
    if run_at is not None and ("run_at" in new or "start_at" in fields or "end_at" in fields):
        if (start is not None and run_at < start) or (end is not None and run_at >= end):
            window = f"[{start.isoformat() if start else '-'}, {end.isoformat() if end else '-'})"
            raise ConfigurationError("run_at", run_at, f"must lie inside the job's window {window}: "
                                                       "outside it the one run never comes")
    immediately = fields.get("run_immediately_if_never_run", current.get("run_immediately_if_never_run"))
    if run_at is not None and immediately:
        raise ConfigurationError("run_immediately_if_never_run", True,
                                 "has no meaning for a run_at job (its one run is at run_at)")


SCHEDULE_KINDS = ("cron", "every", "run_at")


def _jitter(fields: Mapping[str, Any], *, current: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """jitter_seconds to store: a bound of 1 s to one day (None or 0: none), for a cron or
    interval job only (a run_at job's one run is at run_at)."""
    out: dict[str, Any] = {}
    if "jitter" in fields:
        out["jitter_seconds"] = parse_jitter(fields["jitter"], "jitter")
    jitter = out.get("jitter_seconds", current.get("jitter_seconds"))
    run_at = new["run_at"] if "run_at" in new else current.get("run_at")
    if jitter and run_at is not None:
        raise ConfigurationError("jitter", fields.get("jitter", jitter),
                                 "has no meaning for a run_at job (its one run is at run_at): give jitter=None")
    return out


def _schedule(fields: Mapping[str, Any], *, creating: bool, current: Mapping[str, Any],
              zone: str, name: str | None = None) -> dict[str, Any]:
    """The schedule columns to store: exactly one of cron, every and run_at (a new one replaces
    the job's schedule, whatever its kind); a new timezone re-checks the stored cron. A cron's
    ``H`` items are hashed from ``name`` (the job's new name, else its present one)."""
    given = {k: fields[k] for k in SCHEDULE_KINDS if fields.get(k) is not None}
    if len(given) > 1:
        first, *others = given
        raise ConfigurationError(others[0], given[others[0]],
                                 f"give exactly one of cron, every, run_at (also given: {first})")
    if not given and (creating or any(k in fields for k in SCHEDULE_KINDS)):
        nulls = [k for k in SCHEDULE_KINDS if k in fields]
        if not nulls or nulls[0] == "cron":   # as before the other kinds: a missing cron is an invalid cron
            raise InvalidCronExpression(None, "a job needs a schedule: give one of cron, every or run_at")
        raise ConfigurationError(nulls[0], None, "a job needs a schedule: give one of cron, every or run_at")
    if not given:
        if "timezone" in fields and current.get("cron_expression") is not None:
            CronSchedule.parse(current["cron_expression"], zone, seed=name)   # the stored cron in its new zone
        return {}
    kind, value = next(iter(given.items()))
    out: dict[str, Any] = {"cron_expression": None, "interval_seconds": None, "run_at": None}
    if kind == "cron":
        CronSchedule.parse(value, zone, seed=name)  # raises InvalidCronExpression naming the field
        out["cron_expression"] = value
    elif kind == "every":
        out["interval_seconds"] = parse_duration(value, "every")
    else:
        if isinstance(value, datetime) and (value.tzinfo is None or value.utcoffset() is None):
            raise ConfigurationError("run_at", value, "must be timezone-aware (naive datetimes are ambiguous): "
                                                      "add tzinfo, e.g. ZoneInfo('Europe/Berlin')")
        instant = aware("run_at", value)
        if instant is not None and instant > LATEST_RUN_AT:
            raise ConfigurationError("run_at", value, "must lie before 9999-12-30 00:00 UTC")
        out["run_at"] = instant
    return out
