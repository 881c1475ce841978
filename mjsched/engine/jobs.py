"""The values a job row gets when it is created or changed: validated fields, the job type
of its driver, and its first due instant when it is (or becomes) Active. The facade inserts
or updates the row with them."""
from __future__ import annotations

import dataclasses
from typing import Any

from .. import scheduling, validation
from ..backends import Backend
from ..cron import CronSchedule
from ..drivers.registry import get_driver
from ..models import Job, JobStatus

RESCHEDULING_FIELDS = ("cron_expression", "timezone", "start_at")   # a change to one recomputes next_run_at


def new_job_values(backend: Backend, fields: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(row values, driver name) of a job to create; raises before anything is written."""
    values = validation.job_fields(fields, creating=True)
    driver_name = values.pop("driver")
    values["job_type_id"] = _job_type(backend, driver_name)
    if values["status"] == JobStatus.ACTIVE.value:
        schedule = CronSchedule.parse(values["cron_expression"], values["timezone"])
        values["next_run_at"] = scheduling.first_due(
            schedule, backend.db_now(), start_at=values.get("start_at"),
            run_immediately=values.get("run_immediately_if_never_run", False), never_ran=True)
    return values, driver_name


def changed_job_values(backend: Backend, current: Job, fields: dict[str, Any]) -> dict[str, Any]:
    """Row values of a change to ``current``; a new schedule takes effect from its next tick."""
    values = validation.job_fields(fields, creating=False, current=dataclasses.asdict(current))
    if "driver" in values:
        values["job_type_id"] = _job_type(backend, values.pop("driver"))
    status = values.get("status", current.status.value)
    reschedule = any(k in values for k in RESCHEDULING_FIELDS) or (
        status == JobStatus.ACTIVE.value and current.status is not JobStatus.ACTIVE)
    if reschedule and status == JobStatus.ACTIVE.value:
        schedule = CronSchedule.parse(values.get("cron_expression", current.cron_expression),
                                      values.get("timezone", current.timezone))
        values["next_run_at"] = scheduling.first_due(
            schedule, backend.db_now(), start_at=values.get("start_at", current.start_at),
            run_immediately=values.get("run_immediately_if_never_run", current.run_immediately_if_never_run),
            never_ran=current.last_run_at is None and current.run_count == 0)
    return values


def _job_type(backend: Backend, driver_name: str) -> str:
    driver_cls = get_driver(driver_name)
    return backend.ensure_job_type(driver_name, driver_cls.isolation, driver_cls.default_max_runtime)
