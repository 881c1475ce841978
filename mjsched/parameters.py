"""Run parameters: what ``execute_job(parameters=...)`` merges over a job's configuration.

A backfill ("run the report for 2026-11-30") or a one-off variant of a job must not mean
editing the configuration every engine shares. Parameters apply to one manual run: they
are stored on its run row (``JobRun.parameters``) and merged over the job's configuration
for that run only, and the driver's ``validate_configuration`` checks the merged result
before anything is written.

A parameter's top-level key must be one the job's driver reads (its ``configuration_keys``):
a misspelt key (``comand``) would be merged, ignored, and the job's own command run, so it is
refused naming the nearest known key. A driver that declares no keys is not checked.

The merge is recursive for JSON objects and replaces everything else: ``{"kwargs":
{"day": "2026-11-30"}}`` over ``{"callable": "m:f", "kwargs": {"day": null, "region":
"eu"}}`` keeps ``region``; a list or a scalar is replaced whole; ``null`` sets a key to
null (the key stays).
"""
from __future__ import annotations

import difflib
import json
import math
from typing import TYPE_CHECKING, Any, Mapping

from .decoding import MAX_JSON_BYTES, MAX_JSON_DEPTH, nesting_reason, value_nesting_exceeds
from .errors import ConfigurationError, UnknownParameter

if TYPE_CHECKING:
    from .models import Job

MAX_PARAMETER_BYTES = MAX_JSON_BYTES   # and MAX_JSON_DEPTH levels, as a job's configuration (decoding.py)


def check_parameters(value: Any) -> dict[str, Any] | None:
    """``value`` as a plain JSON object (None stays None); ConfigurationError naming
    ``parameters`` (or ``parameters.<key>``) and the value otherwise."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigurationError("parameters", value, "must be a dict (a JSON object) of configuration keys")
    if value_nesting_exceeds(dict(value)):   # before the checks below, which recurse
        raise ConfigurationError("parameters", f"<JSON {nesting_reason()}>",
                                 f"is nested deeper than {MAX_JSON_DEPTH} levels of objects and arrays")
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise ConfigurationError("parameters", key, "every key must be a non-empty string")
        _check_json(f"parameters.{key}", item)
    text = json.dumps(dict(value), allow_nan=False)
    if len(text.encode("utf-8")) > MAX_PARAMETER_BYTES:
        raise ConfigurationError("parameters", f"<{len(text)} characters of JSON>",
                                 f"must be at most {MAX_PARAMETER_BYTES} bytes as JSON")
    result: dict[str, Any] = json.loads(text)   # a deep, plain copy: the caller's dict stays theirs
    return result


def _check_json(field: str, value: Any) -> None:
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigurationError(field, value, "must be a finite number (JSON has no NaN or infinity)")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigurationError(field, key, "object keys must be strings")
            _check_json(f"{field}.{key}", item)
        return
    if isinstance(value, (list, tuple)):
        for n, item in enumerate(value):
            _check_json(f"{field}[{n}]", item)
        return
    raise ConfigurationError(field, value, f"a {type(value).__name__} is not a JSON value")


def merge(configuration: Mapping[str, Any] | None, parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """``parameters`` over ``configuration``: objects merge key by key, recursively;
    anything else in ``parameters`` replaces what was there. Neither input is changed."""
    out: dict[str, Any] = json.loads(json.dumps(dict(configuration or {}), default=str))
    for key, value in (parameters or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = json.loads(json.dumps(value))
    return out


def merged_configuration(job: "Job", parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration a run of ``job`` with ``parameters`` gets, checked as a job's
    configuration and by the driver's ``validate_configuration``; an error names the field
    and says it is the merged configuration that was refused."""
    from . import validation
    from .drivers.registry import get_driver

    driver = get_driver(job.driver)()   # UnknownDriver as is: nothing to do with the parameters
    check_keys(job.driver, type(driver).configuration_keys, parameters)
    merged = merge(job.configuration if isinstance(job.configuration, Mapping) else {}, parameters)
    try:
        validation.configuration(merged)
        driver.validate_configuration(merged)
    except ConfigurationError as exc:
        raise ConfigurationError(exc.field, exc.value, f"{exc.reason} (in the job's configuration with the "
                                 f"parameters {', '.join(sorted(parameters))} merged over it)") from exc
    return merged


def check_keys(driver: str, known: frozenset[str] | None, parameters: Mapping[str, Any]) -> None:
    """UnknownParameter for the first key (in sorted order) that ``known`` lacks, naming the
    nearest known one (difflib); nothing when the driver declares no keys."""
    if known is None:
        return
    for key in sorted(parameters):
        if key not in known:
            nearest = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            raise UnknownParameter(key, parameters[key], driver, known, nearest[0] if nearest else None)


def parse_assignment(text: str) -> tuple[str, Any]:
    """``key=value`` of ``mjsched execute --param``: the value is parsed as JSON when it
    parses (``n=3``, ``dry_run=true``, ``kwargs={"day": "2026-11-30"}``), else kept as
    the string it is (``day=2026-11-30``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigurationError("--param", text, "must be key=value (the value is JSON when it parses, "
                                 "else a string)")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, float) and not math.isfinite(value):
        value = raw      # NaN / Infinity: JSON's parser accepts them, JSON does not
    return key, value
