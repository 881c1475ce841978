"""Enum values equal the SQL CHECK values, in every dialect that exists."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from mjsched.models import ConcurrencyMode, Isolation, JobStatus, MissedRunPolicy, RunStatus

ROOT = Path(__file__).resolve().parents[2]


def check_values(schema: str, constraint: str) -> set[str]:
    match = re.search(rf"CONSTRAINT {constraint}\b(.*?)\)\s*(?:,|\n\))", schema, re.S | re.I)
    assert match, f"constraint {constraint} not found"
    return set(re.findall(r"'([A-Za-z]+)'", match.group(1)))


@pytest.mark.parametrize("dialect", [d.name for d in (ROOT / "sql").iterdir()
                                     if (d / "001_schema.sql").exists()])
@pytest.mark.parametrize("constraint, enum", [
    ("ck_scheduled_job_status", JobStatus),
    ("ck_scheduled_job_concurrency_mode", ConcurrencyMode),
    ("ck_scheduled_job_missed_run_policy", MissedRunPolicy),
    ("ck_scheduled_job_run_status", RunStatus),
    ("ck_scheduled_job_type_isolation", Isolation),
])
def test_enum_values_are_the_check_values(dialect: str, constraint: str, enum: type) -> None:
    schema = (ROOT / "sql" / dialect / "001_schema.sql").read_text()
    assert check_values(schema, constraint) == {e.value for e in enum}
