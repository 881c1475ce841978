"""The values a job row gets when it is created or changed: validated fields, the job type
of its driver, and its first due instant when it is (or becomes) Active. The facade inserts
or updates the row with them (``create_job`` does all of a creation)."""
from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta
from typing import Any

from .. import cron, schedules, scheduling, validation
from ..backends import Backend
from ..drivers.registry import get_driver
from ..models import Job, JobStatus

log = logging.getLogger(__name__)

# A change to one recomputes next_run_at (the schema's trigger clears it for other writers).
RESCHEDULING_FIELDS = ("cron_expression", "interval_seconds", "run_at", "timezone", "start_at", "jitter_seconds")


def new_job_values(backend: Backend, fields: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(row values, driver name) of a job to create; raises before anything is written.

    An interval without start_at is anchored at the row's created_at, which the insert sets:
    its first due instant is set just after (``schedule_created``), not here."""
    values = validation.job_fields(fields, creating=True)
    driver_name = values.pop("driver")
    values["job_type_id"] = _job_type(backend, driver_name)
    anchored_later = values["interval_seconds"] is not None and values.get("start_at") is None
    if values["status"] == JobStatus.ACTIVE.value and not anchored_later:
        schedule = schedules.build(values["cron_expression"], values["interval_seconds"], values["run_at"],
                                   values["timezone"], anchor=values.get("start_at"), name=values["name"],
                                   jitter_seconds=values.get("jitter_seconds"))
        values["next_run_at"] = scheduling.first_due(
            schedule, backend.db_now(), start_at=values.get("start_at"),
            run_immediately=values.get("run_immediately_if_never_run", False), never_ran=True)
    return values, driver_name


def create_job(backend: Backend, fields: dict[str, Any]) -> str:
    """Validate everything, insert the job, give it its first due instant; returns its id."""
    values, driver_name = new_job_values(backend, fields)
    job_id = backend.insert_job(values)
    if "next_run_at" not in values:
        schedule_created(backend, job_id)
    log.info("created job %r (%s), driver %s, schedule %r %s", values["name"], job_id, driver_name,
             schedules.schedule_text(values["cron_expression"], values["interval_seconds"], values["run_at"]),
             values["timezone"], extra={"action": "job_created"})
    return job_id


def schedule_created(backend: Backend, job_id: str) -> None:
    """Set the first due instant of a just-created Active job that has none (an interval
    anchored at its created_at), as an engine would (compare-and-set: an engine that got
    there first wins, with the same instant)."""
    job = backend.get_job(job_id)
    if job is None or job.status is not JobStatus.ACTIVE or job.next_run_at is not None:
        return
    backend.initialize_next_runs([(job.id, scheduling.initial_next_run(job, backend.db_now()))])


def changed_job_values(backend: Backend, current: Job, fields: dict[str, Any]) -> dict[str, Any]:
    """Row values of a change to ``current``; a new schedule takes effect from its next tick."""
    values = validation.job_fields(fields, creating=False, current=dataclasses.asdict(current))
    if "driver" in values:
        values["job_type_id"] = _job_type(backend, values.pop("driver"))
    status = values.get("status", current.status.value)
    reschedule = any(k in values for k in RESCHEDULING_FIELDS) or (
        status == JobStatus.ACTIVE.value and current.status is not JobStatus.ACTIVE) or (
        values.get("name", current.name) != current.name and _named_schedule(current, values))
    if reschedule and status == JobStatus.ACTIVE.value:
        start_at = values.get("start_at", current.start_at)
        schedule = schedules.build(*(values.get(k, getattr(current, k))
                                     for k in ("cron_expression", "interval_seconds", "run_at", "timezone")),
                                   anchor=start_at or current.created_at, name=values.get("name", current.name),
                                   jitter_seconds=values.get("jitter_seconds", current.jitter_seconds))
        values["next_run_at"] = scheduling.first_due(
            schedule, backend.db_now(), start_at=values.get("start_at", current.start_at),
            run_immediately=values.get("run_immediately_if_never_run", current.run_immediately_if_never_run),
            never_ran=current.last_run_at is None and current.run_count == 0)
    return values


def _named_schedule(current: Job, values: dict[str, Any]) -> bool:
    """Whether the job's times depend on its name (a cron with H, or a jitter): renaming such a
    job moves them, from its next tick."""
    return bool(values.get("jitter_seconds", current.jitter_seconds)) or cron.uses_hash(
        values.get("cron_expression", current.cron_expression))


def _job_type(backend: Backend, driver_name: str) -> str:
    driver_cls = get_driver(driver_name)
    return backend.ensure_job_type(driver_name, driver_cls.isolation, driver_cls.default_max_runtime)


def pause_until(backend: Backend, until: Any) -> datetime | None:
    """When a tag's pause ends: an aware datetime as given, or a duration ('2h', a timedelta,
    seconds) from the database's now; None for never. ConfigurationError naming ``until``."""
    if until is None or isinstance(until, datetime):
        return validation.aware("until", until)
    seconds = schedules.parse_duration(until, "until")
    return backend.db_now() + timedelta(seconds=seconds)
