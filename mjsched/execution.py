"""Runs one driver for one run and turns whatever happens into a JobResult.

A driver that cannot be found or constructed, raises, or returns something
odd yields a failed result; nothing escapes to the caller.
"""
from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from typing import Any

from .drivers.base import BaseScheduledJob, ExecutionContext, JobResult
from .drivers.celery_trust import CeleryAllowList, refusal_for
from .drivers.registry import get_driver, refusal
from .frozen import quick_init
from .models import Isolation, Job
from .redaction import redact, redact_text
from .results import MAX_ERROR_CHARS, mask_job_secrets, normalise, safe_text, scrub  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)



def effective_isolation(job: Job, driver_cls: type[BaseScheduledJob] | None) -> Isolation:
    if job.isolation is not None:
        return job.isolation
    default = getattr(driver_cls, "isolation", "thread") if driver_cls else "thread"
    return Isolation(default)


ENGINE_DEFAULT = "default_max_runtime"   # RuntimeBound.source of the engine's bound


@quick_init
@dataclass(frozen=True)
class RuntimeBound:
    """How long a run may execute, and whose setting says so: ``source`` is "max_runtime" (the
    job's), "<driver> driver's default_max_runtime" (its driver class's) or ENGINE_DEFAULT (the
    engine's bound for runs that have neither), so a timeout names the setting to change."""

    seconds: float
    source: str

    @property
    def engine_default(self) -> bool:
        return self.source == ENGINE_DEFAULT


def runtime_bound(job: Job, driver_cls: type[BaseScheduledJob] | None,
                  engine_default: float | None = None) -> RuntimeBound | None:
    """The job's max_runtime, else its driver's default_max_runtime, else ``engine_default``
    (None: unbounded)."""
    if job.max_runtime_seconds is not None:
        return RuntimeBound(job.max_runtime_seconds, "max_runtime")
    driver_default = getattr(driver_cls, "default_max_runtime", None) if driver_cls else None
    if driver_default is not None:
        return RuntimeBound(driver_default, f"{job.driver} driver's default_max_runtime")
    return RuntimeBound(engine_default, ENGINE_DEFAULT) if engine_default is not None else None


def run_driver(context: ExecutionContext, allowed_drivers: frozenset[str] | None = None,
               celery_allow: CeleryAllowList | None = None) -> tuple[JobResult, BaseScheduledJob | None]:
    """Execute the job's driver in this thread (or in a child process when isolated).

    A driver outside ``allowed_drivers`` (None: all), or a celery job naming an app or a
    broker outside ``celery_allow``, is not run: the run fails with the reason, whatever
    the database says, and a WARNING names the job. The job's own secrets
    (``mjsched.redaction.secret_values`` of its configuration) are masked in the result."""
    driver: BaseScheduledJob | None = None
    if allowed_drivers is not None and context.job.driver not in allowed_drivers:
        message = refusal(context.job.driver, allowed_drivers)
        log.warning("job %r (run %s): %s; recorded Failed", context.job.name, context.run.id, message,
                    extra={"action": "driver_not_allowed", "driver": context.job.driver})
        return JobResult(success=False, error_message=message,
                         details={"driver": context.job.driver, "allowed_drivers": sorted(allowed_drivers)}), None
    refused = refusal_for(celery_allow, context.job.driver, context.job.configuration)
    if refused is not None:
        log.warning("job %r (run %s): %s; recorded Failed", context.job.name, context.run.id, refused,
                    extra={"action": "celery_not_allowed", "driver": context.job.driver})
        return JobResult(success=False, error_message=refused, details={"driver": context.job.driver}), None
    try:
        driver_cls = get_driver(context.job.driver)
        driver = driver_cls()
        if effective_isolation(context.job, driver_cls) is Isolation.PROCESS:
            from .isolation import run_in_process  # optional seam, see mjsched/isolation.py

            raw: Any = run_in_process(driver_cls, context)
        else:
            raw = driver.execute(context)
        return mask_job_secrets(normalise(raw), context.job.configuration), driver
    except BaseException as exc:  # noqa: BLE001 - a driver may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        return mask_job_secrets(failure(exc), context.job.configuration), driver


def failure(exc: BaseException) -> JobResult:
    """A failed result describing ``exc``; never raises, whatever ``exc`` is."""
    try:
        tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-2000:]
    except Exception:  # noqa: BLE001 - e.g. an exception whose __str__ raises
        tail = "<traceback unavailable>"
    name = type(exc).__name__
    return JobResult(success=False, error_message=redact_text(scrub(f"{name}: {safe_text(exc)}"))[:MAX_ERROR_CHARS],
                     details=redact(scrub({"exception_type": name, "traceback_tail": tail})))
