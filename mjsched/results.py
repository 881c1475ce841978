"""What a driver returned, made safe to store: a JobResult whose details are JSON, whose
texts are scrubbed of control characters and secrets, and whose error message is bounded.
Used in the engine's process and in an isolated run's child process alike."""
from __future__ import annotations

import json
from typing import Any

from .decoding import bounded_json
from .drivers.base import JobResult
from .redaction import mask_values, redact, redact_text, secret_values

MAX_ERROR_CHARS = 8000


def scrub(value: Any) -> Any:
    """``value`` without NUL characters, which neither dialect stores in text or JSON
    (a completion carrying one would be refused on every retry)."""
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def safe_text(value: Any) -> str:
    """``str(value)``, even for an object whose ``__str__`` raises."""
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a driver's exception may be broken in any way
        try:
            return object.__repr__(value)
        except Exception:  # noqa: BLE001
            return "<unprintable>"


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - RecursionError of a value nested too deeply, or a broken __repr__
        return f"<{type(value).__name__}>"


def normalise(raw: Any) -> JobResult:
    if raw is None:
        return JobResult(success=True)
    if isinstance(raw, JobResult):
        result = raw
    elif isinstance(raw, dict):
        result = JobResult(success=True, details=raw)
    else:
        return JobResult(success=False,
                         error_message=f"driver returned {type(raw).__name__}, expected a JobResult, dict or None")
    if result.details is not None:
        # Details past the limits of a stored JSON value (mjsched/decoding.py: nesting, size) are
        # replaced by a note saying so: the run's outcome is recorded all the same.
        details, _dropped = bounded_json(result.details, "details")
        try:
            details = json.loads(json.dumps(details, default=str, allow_nan=False))   # no JSON has NaN
        except (TypeError, ValueError, RecursionError) as exc:
            details = {"unserialisable_details": _repr(result.details)[:2000], "error": str(exc)}
        if not isinstance(details, dict):
            details = {"value": details}
        result = JobResult(result.success, result.error_message, redact(scrub(details)))
    if result.error_message is not None:
        message = redact_text(scrub(safe_text(result.error_message)))
        if len(message) > MAX_ERROR_CHARS:
            message = message[:MAX_ERROR_CHARS] + "..."
        result = JobResult(result.success, message, result.details)
    return result


def mask_job_secrets(result: JobResult, *values: Any) -> JobResult:
    """``result`` with the secrets of ``values`` (the job's configuration, run parameters
    merged) masked wherever they reappear: a shell job that echoes its ``env`` password, a
    callable that prints its token. What is stored and notified never shows them."""
    known = secret_values(*values)
    if not known:
        return result
    return JobResult(result.success, mask_values(result.error_message, known), mask_values(result.details, known))
