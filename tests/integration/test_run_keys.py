"""Run keys are ordered by the time they were made (UUID version 7 layout), so new runs land
on the right edge of the primary key's index however large the history (bench.history)."""
from __future__ import annotations

import uuid

import pytest

from tests.support.pg import Sql

pytestmark = pytest.mark.postgres


def test_the_run_table_draws_time_ordered_version_7_keys(sql: Sql) -> None:
    expression = sql.one("SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d "
                         "JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
                         "WHERE d.adrelid = 'mjsched.scheduled_job_run'::regclass AND a.attname = 'id'")
    keys = []
    for _ in range(3):   # one statement each: clock_timestamp() moves between them
        keys.append(uuid.UUID(str(sql.one(f"SELECT {expression} FROM pg_sleep(0.002)"))))
    assert [k.version for k in keys] == [7, 7, 7]
    assert keys == sorted(keys) and len(set(keys)) == 3
