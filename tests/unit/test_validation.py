"""Every job field is checked before anything is written; errors name field and value."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from mjsched import validation
from mjsched.errors import (ConfigurationError, InvalidCronExpression, JobNotFound, UnknownDriver,
                            UnknownTimezone)

GOOD = {"name": "n", "driver": "shell", "cron": "* * * * *", "configuration": {"command": ["true"]}}


@pytest.mark.parametrize("change, error, field", [
    ({"name": ""}, ConfigurationError, "name"),
    ({"name": "x" * 201}, ConfigurationError, "name"),
    ({"name": "a\x00b"}, ConfigurationError, "name"),
    ({"cron": "61 * * * *"}, InvalidCronExpression, "minute"),
    ({"timezone": "Mars/Olympus"}, UnknownTimezone, "timezone"),
    ({"driver": "nope"}, UnknownDriver, "driver"),
    ({"configuration": "{not json"}, ConfigurationError, "configuration"),
    ({"configuration": [1, 2]}, ConfigurationError, "configuration"),
    ({"configuration": {}}, ConfigurationError, "configuration.command"),
    ({"concurrency_mode": "Parallel"}, ConfigurationError, "concurrency_mode"),
    ({"missed_run_policy": "Sometimes"}, ConfigurationError, "missed_run_policy"),
    ({"status": "Running"}, ConfigurationError, "status"),
    ({"max_runtime": 0}, ConfigurationError, "max_runtime"),
    ({"max_runtime": -5}, ConfigurationError, "max_runtime"),
    ({"max_runtime": float("nan")}, ConfigurationError, "max_runtime"),
    ({"start_at": datetime(2030, 1, 1)}, ConfigurationError, "start_at"),
    ({"start_at": datetime(2030, 1, 2, tzinfo=timezone.utc), "end_at": datetime(2030, 1, 1, tzinfo=timezone.utc)},
     ConfigurationError, "end_at"),
    ({"notify_on_success": "yes"}, ConfigurationError, "notify_on_success"),
    ({"max_queued_runs": 0}, ConfigurationError, "max_queued_runs"),
    ({"colour": "red"}, ConfigurationError, "colour"),
])
def test_bad_fields_are_rejected_naming_the_field(change: dict[str, Any], error: type, field: str) -> None:
    with pytest.raises(error) as info:
        validation.job_fields({**GOOD, **change}, creating=True)
    assert field in str(info.value)


def test_sql_metacharacters_are_just_text() -> None:
    out = validation.job_fields({**GOOD, "name": "x'; DROP TABLE mjsched.scheduled_job; --"}, creating=True)
    assert out["name"].startswith("x'; DROP")


@pytest.mark.parametrize("value", ["", "not-a-uuid", 12, None, "1234"])
def test_bad_job_ids_are_job_not_found(value: Any) -> None:
    with pytest.raises(JobNotFound):
        validation.job_id(value)
