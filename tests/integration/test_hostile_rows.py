"""Generated hostile job rows: whatever plain SQL can write must never stop the fleet (issue 32).

Hypothesis writes arbitrary values, by plain SQL, into the columns of job rows: the column
list and each column's type are read from the catalog (information_schema.columns for
mjsched.scheduled_job), so a column added tomorrow is covered by the same test. Values are
what the server accepts for the type: JSON of any depth (to 3,000 levels) and size, numbers
of 5,000 digits inside JSON, text with control, bidirectional and non-BMP characters,
extreme numbers and instants (infinity, year 1, year 10000), unknown drivers, zones and
crons. The schema refuses some (its rules, 001_schema.sql); the engine must isolate the rest.

Beside the hostile rows, healthy per-second jobs run under one engine; after it stops:
every healthy job ran, no run is left Running (nobody would execute it), no job is locked,
no poll failed, and each hostile row was reported at most once per kind of report (a row
set aside is reported exactly once). The examples are few and derandomized, so CI is stable;
the cases that once failed are kept below as ``@example``s.
"""
from __future__ import annotations

import json
import logging
import os
import uuid
from datetime import datetime, timezone
from typing import Any

import psycopg2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import mjsched
from tests.support.pg import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

HEALTHY = 3
# A hunt for new cases: HOSTILE_EXAMPLES=200 runs that many examples from a random seed (a case
# found that way is kept below as an @example); unset, a few derandomized ones, for CI.
HUNT = int(os.environ.get("HOSTILE_EXAMPLES", "0"))
REPORTS = ("job_set_aside", "job_refused", "bad_schedule", "dispatch_failed", "claim_handed_back")
UNKNOWN_DRIVER = "no_such_driver_xyz"


# -- values per type, as the server accepts them (sent as text, cast by the server) ---------------

def deep_json(depth: int, array: bool) -> str:
    return "[" * depth + "]" * depth if array else '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


def json_texts() -> st.SearchStrategy[str]:
    leaf = (st.none() | st.booleans() | st.integers(-2**70, 2**70)
            | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
    plain = st.recursive(leaf, lambda inner: st.lists(inner, max_size=3)
                         | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=12)
    objects = st.dictionaries(st.text(max_size=8), plain, max_size=4).map(json.dumps)
    deep = st.builds(deep_json, st.integers(1, 3000), st.booleans())
    wrapped_deep = st.builds(lambda d, a: '{"callable": "os:getpid", "x": ' + deep_json(d, a) + "}",
                             st.integers(60, 1200), st.booleans())
    huge_number = st.integers(4000, 6000).map(lambda digits: '{"n": 1' + "0" * digits + "}")
    big = st.integers(900_000, 1_100_000).map(lambda n: json.dumps({"callable": "os:getpid", "pad": "x" * n}))
    return st.one_of(objects, plain.map(json.dumps), deep, wrapped_deep, huge_number, big,
                     st.just('{"callable": "no_such_module_xyz:run"}'), st.just("{}"))


ODD_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
ODD_WORDS = st.sampled_from([
    "", " ", "\t\n", "\u202eevil", "\ufeff", "ñ\u0301", "🙂" * 10, "'; DROP TABLE x; --", "\\", '"',
    "Mars/Olympus_Mons", "localtime", "posixrules", "UTC+3", "Etc/GMT+14", "Europe/Berlin",
    "* * * * * *", "*/0 * * * *", "0 0 31 2 *", "60 * * * *", "@reboot", "* * * * * * * *", "@hourly",
    "Active", "Paused", "Skip", "Queue", "Concurrent", "RunOnce", "RunAll", "thread", "process", "python",
    UNKNOWN_DRIVER])
INSTANTS = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                 timezones=st.just(timezone.utc)).map(lambda d: d.isoformat()),
    st.sampled_from(["infinity", "-infinity", "0001-01-01 00:00:00+00", "9999-12-31 23:59:59+00",
                     "10000-01-01 00:00:00+00", "0044-03-15 00:00:00+00 BC", "294276-12-31 00:00:00+00", "now",
                     "1900-01-01 00:00:00+00"]))
FLOATS = st.one_of(st.floats(), st.sampled_from(["NaN", "Infinity", "-Infinity", "1e308", "-0", "5e-324"]))


def values_for(column: dict[str, Any], type_ids: list[str]) -> st.SearchStrategy[Any]:
    """What to write into ``column`` (a row of information_schema.columns), by its type."""
    kind = column["data_type"]
    if kind == "jsonb" or kind == "json":
        text: st.SearchStrategy[Any] = json_texts()
    elif kind == "uuid":
        text = st.one_of(st.builds(lambda: str(uuid.uuid4())), st.sampled_from(type_ids))
    elif kind in ("character varying", "text", "character"):
        limit = column["character_maximum_length"] or 200
        text = st.one_of(ODD_TEXT, ODD_WORDS, st.integers(limit - 1, limit + 1).map(lambda n: "x" * n))
    elif kind.startswith("timestamp") or kind == "date":
        text = INSTANTS
    elif kind in ("integer", "bigint", "smallint"):
        bits = {"smallint": 15, "integer": 31, "bigint": 63}[kind]
        text = st.one_of(st.integers(-2**bits, 2**bits - 1), st.sampled_from([0, -1, 1, 2**bits - 1]))
    elif kind in ("double precision", "real", "numeric"):
        text = FLOATS
    elif kind == "boolean":
        text = st.booleans()
    else:   # a type this test does not know yet: its text form, whatever the server makes of it
        text = st.one_of(ODD_TEXT, ODD_WORDS)
    return st.one_of(st.none(), text) if column["is_nullable"] == "YES" else text


# -- the catalog, read once per test database ------------------------------------------------------

def job_columns(sql: Any) -> list[dict[str, Any]]:
    return sql.rows("""SELECT column_name, data_type, udt_name, character_maximum_length, is_nullable
                         FROM information_schema.columns
                        WHERE table_schema = 'mjsched' AND table_name = 'scheduled_job'
                        ORDER BY ordinal_position""")


@st.composite
def hostile_rows(draw: Any, columns: list[dict[str, Any]], type_ids: list[str]) -> list[list[tuple[str, Any]]]:
    """A few rows, each a list of (column, value) written one UPDATE at a time (so one refused
    value leaves the others)."""
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        chosen = draw(st.lists(st.sampled_from(columns), min_size=1, max_size=3, unique_by=lambda c: c["column_name"]))
        rows.append([(c["column_name"], draw(values_for(c, type_ids))) for c in chosen])
    return rows


def assignment(column: str, udt: str, value: Any) -> tuple[str, Any]:
    """``column = <value>`` sent as text and cast by the server to the column's type."""
    if value is None:
        return f"{column} = NULL", ()
    if isinstance(value, bool):
        return f"{column} = %s", (value,)
    text = value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    return f"{column} = %s::{udt}", (text,)


# -- the property ------------------------------------------------------------------------------------

class PollWatch:
    def __init__(self) -> None:
        self.failed = 0

    def on_poll_failed(self) -> None:
        self.failed += 1


def per_second_job(engine: mjsched.SchedulingEngine, name: str, **fields: Any) -> str:
    return engine.create_job(name=name, driver="python", cron="* * * * * *",
                             configuration={"callable": "os:getpid"}, **fields)


def check_fleet(make_engine: Any, sql: Any, caplog: Any, rows: list[list[tuple[str, Any]]]) -> None:
    """Write ``rows`` beside healthy per-second jobs, run one engine, check what it left."""
    sql.run("DELETE FROM mjsched.scheduled_job_run")
    sql.run("DELETE FROM mjsched.scheduled_job")
    admin = make_engine()
    udt = {c["column_name"]: c["udt_name"] for c in job_columns(sql)}
    healthy = [per_second_job(admin, f"healthy-{i}") for i in range(HEALTHY)]
    hostile: dict[str, str] = {}
    for n, row in enumerate(rows):
        job_id = per_second_job(admin, f"hostile-{n}")
        for column, value in row:
            if column == "name" and isinstance(value, str):
                value = f"hostile-{n}-{value}"     # still told apart in the log
            clause, params = assignment(column, udt[column], value)
            try:   # the row's id may be the column written: follow it
                job_id = str(sql.one(f"UPDATE mjsched.scheduled_job SET {clause} WHERE id = %s RETURNING id",
                                     (*params, job_id)))
            except (psycopg2.Error, ValueError):
                continue                            # refused by the schema: nothing was written
        hostile[job_id] = n
    caplog.clear()
    watch = PollWatch()
    engine = make_engine(lease_timeout=5.0, max_poll_interval=0.5, max_concurrent_jobs=20)
    engine.add_listener(watch)
    engine.start_polling()
    try:
        wait_for(lambda: all(len(engine.list_runs(j, status="Completed")) >= 2 for j in healthy), timeout=20,
                 interval=0.2, message="every healthy job to run twice beside the hostile rows")
        engine.dispatch_due_jobs()
    finally:
        engine.stop_polling(wait=True, max_wait=10)
        engine.close()
        admin.close()
    assert watch.failed == 0
    assert sql.rows("SELECT id, scheduled_job_id, executed_by_instance FROM mjsched.scheduled_job_run "
                    "WHERE status = 'Running'") == []
    assert sql.rows("SELECT id, locked_by_instance FROM mjsched.scheduled_job "
                    "WHERE locked_by_instance = %s", (engine.instance_name,)) == []
    reports = [r for r in caplog.records if getattr(r, "action", "") in REPORTS]
    for job_id, n in hostile.items():
        mine = [r for r in reports if getattr(r, "job_id", None) == job_id or job_id in r.getMessage()
                or f"'hostile-{n}" in r.getMessage()]
        for action in REPORTS:
            said = [r.getMessage() for r in mine if r.action == action]   # type: ignore[attr-defined]
            assert len(said) <= 1, (job_id, action, said)
        set_aside = sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s "
                            "AND error_message LIKE 'set aside%%'", (job_id,))
        assert set_aside <= 1, (job_id, set_aside)
        if set_aside:
            assert [r for r in mine if r.action == "job_set_aside"], (job_id, [r.getMessage() for r in mine])  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith("mjsched")]


@pytest.fixture
def catalog(sql: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The job row's columns (all of them, as the catalog lists them) and the job types a row may
    name: a known driver's and an unknown one's."""
    sql.run("INSERT INTO mjsched.scheduled_job_type (name, driver_class) VALUES (%s, %s)",
            (UNKNOWN_DRIVER, UNKNOWN_DRIVER))
    type_ids = [str(r["id"]) for r in sql.rows("SELECT id FROM mjsched.scheduled_job_type ORDER BY name")]
    return job_columns(sql), type_ids


def test_the_catalog_is_read_whole(catalog: tuple[list[dict[str, Any]], list[str]]) -> None:
    columns, _ = catalog
    names = {c["column_name"] for c in columns}
    assert {"configuration", "cron_expression", "timezone", "next_run_at", "run_count"} <= names
    assert len(names) >= 45


def test_hostile_rows_beside_healthy_jobs(make_engine: Any, sql: Any, caplog: Any,
                                          catalog: tuple[list[dict[str, Any]], list[str]]) -> None:
    caplog.set_level(logging.INFO, logger="mjsched")
    columns, type_ids = catalog

    @settings(max_examples=HUNT or 8, deadline=60_000, derandomize=not HUNT, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture, HealthCheck.large_base_example])
    @given(rows=hostile_rows(columns, type_ids))
    @example(rows=[[("configuration", deep_json(1000, False))]])
    @example(rows=[[("configuration", '{"n": 1' + "0" * 5000 + "}")]])
    @example(rows=[[("configuration", deep_json(3000, True))], [("timezone", "Mars/Olympus_Mons")],
                   [("job_type_id", type_ids[-1])]])
    def fleet(rows: list[list[tuple[str, Any]]]) -> None:
        check_fleet(make_engine, sql, caplog, rows)

    fleet()
