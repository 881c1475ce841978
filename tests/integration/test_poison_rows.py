"""One poisoned job row must never stop the fleet (issue 12 items 1 and 2).

* The admin procedures (insert_job/update_job) refuse what the API refuses, called by a
  role that may only EXECUTE them, with an error naming the field and the value.
* The schema refuses it from plain SQL (001_schema.sql, "What a row may hold").
* An upgrade over rows an older release left sets them aside (Disabled, a Failed run
  naming field and value, one WARNING from install()) instead of failing.
* What the schema cannot judge (a cron, a zone, a driver, a configuration) is isolated by
  the engine: start_polling() starts, polls never fail, healthy jobs run on time.
* The poison table: for every column of the job row, the worst values plain SQL can
  write, each refused or isolated, with five healthy per-second jobs counted beside them.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any, Iterator

import psycopg2
import psycopg2.errors
import pytest

import mjsched
from mjsched import sqlfiles
from tests.support import roles
from tests.support.pg import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

# The rules 001_schema.sql adds to scheduled_job (named ck_scheduled_job_<column>).
RULES = ["max_runtime_seconds", "configuration", "name", "description", "cron_expression", "timezone", "start_at",
         "end_at", "next_run_at", "last_run_at", "last_success_at", "locked_at", "expected_completion_at", "created_at", "updated_at",
         "run_count", "success_count", "failure_count", "last_duration_ms", "total_duration_ms"]

BAD_NUMBERS = ["NaN", "Infinity", "-Infinity", 1e13, 0, -1]
BAD_INSTANTS = ["-infinity", "infinity", "0001-01-01T00:00:00+00:00", "9999-12-31T12:00:00+00:00"]


def per_second_job(engine: mjsched.SchedulingEngine, name: str, **fields: Any) -> str:
    return engine.create_job(name=name, driver="python", cron="* * * * * *",
                             configuration={"callable": "os:getpid"}, **fields)


@pytest.fixture
def executor_dsn(pg_dsn: str, sql: Any) -> Iterator[str]:
    """A login that may only EXECUTE the admin procedures (SECURITY DEFINER), nothing else."""
    name = f"mjsched_exec_{uuid.uuid4().hex[:10]}"
    sql.run(f'CREATE ROLE "{name}" LOGIN')
    sql.run(f'GRANT USAGE ON SCHEMA mjsched TO "{name}"')
    sql.run(f'GRANT EXECUTE ON FUNCTION mjsched.insert_job(jsonb), mjsched.update_job(uuid, jsonb) TO "{name}"')
    parsed = psycopg2.extensions.parse_dsn(pg_dsn)
    yield f"postgresql://{name}@{parsed.get('host', '127.0.0.1')}:{parsed.get('port', '5432')}/{parsed['dbname']}"
    sql.run(f'DROP OWNED BY "{name}"')
    sql.run(f'DROP ROLE IF EXISTS "{name}"')


def _bad_fields() -> list[tuple[str, Any]]:
    return [("max_runtime_seconds", v) for v in BAD_NUMBERS] + \
           [(f, v) for f in ("start_at", "end_at", "next_run_at") for v in BAD_INSTANTS]


@pytest.mark.parametrize("field,value", _bad_fields(), ids=lambda v: str(v))
def test_admin_procedures_refuse_what_the_api_refuses(field: str, value: Any, executor_dsn: str,
                                                      make_engine: Any, sql: Any) -> None:
    engine = make_engine()
    job_id = per_second_job(engine, "target")
    type_id = sql.one("SELECT job_type_id FROM mjsched.scheduled_job WHERE id = %s", (job_id,))
    before = sql.rows("SELECT * FROM mjsched.scheduled_job")
    conn = psycopg2.connect(executor_dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            assert sql.one("SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is True
            new = {"job_type_id": str(type_id), "name": "new", "cron_expression": "* * * * * *",
                   "status": "Active", "configuration": {"callable": "os:getpid"}, field: value}
            with pytest.raises(psycopg2.Error) as refused:
                cur.execute("SELECT * FROM mjsched.insert_job(%s::jsonb)", (json.dumps(new),))
            assert refused.value.pgcode == "22023", refused.value
            shown = {1e13: "10000000000000"}.get(value, str(value)).split("T")[0].lstrip("0")
            assert f"fields.{field}" in str(refused.value) and shown in str(refused.value), str(refused.value)
            with pytest.raises(psycopg2.Error) as refused:
                cur.execute("SELECT * FROM mjsched.update_job(%s::uuid, %s::jsonb)",
                            (job_id, json.dumps({field: value})))
            assert refused.value.pgcode == "22023" and f"fields.{field}" in str(refused.value), refused.value
    finally:
        conn.close()
    assert sql.rows("SELECT * FROM mjsched.scheduled_job") == before


def test_the_grants_admin_role_is_refused_too(pg_dsn: str, make_engine: Any, sql: Any) -> None:
    """The roles sql/postgres/grants.sql creates: its admin role (may define jobs) gets the
    same refusals through update_job. (Its engine role may not call insert_job/update_job.)"""
    job_id = per_second_job(make_engine(), "target")
    roles.apply_grants(pg_dsn)
    logins = roles.Logins(pg_dsn)
    try:
        conn = psycopg2.connect(logins.login(roles.admin_role(pg_dsn), "mjsched_adm"))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                for field, value in _bad_fields():
                    with pytest.raises(psycopg2.Error) as refused:
                        cur.execute("SELECT * FROM mjsched.update_job(%s::uuid, %s::jsonb)",
                                    (job_id, json.dumps({field: value})))
                    assert refused.value.pgcode == "22023" and f"fields.{field}" in str(refused.value), \
                        refused.value
        finally:
            conn.close()
    finally:
        logins.drop()
    assert sql.one("SELECT max_runtime_seconds FROM mjsched.scheduled_job WHERE id = %s", (job_id,)) is None


def test_admin_procedures_still_accept_good_values(executor_dsn: str, make_engine: Any, sql: Any) -> None:
    job_id = per_second_job(make_engine(), "target")
    conn = psycopg2.connect(executor_dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT * FROM mjsched.update_job(%s::uuid, %s::jsonb)",
                        (job_id, json.dumps({"max_runtime_seconds": 31536000, "start_at": "1900-01-01T00:00:00Z",
                                             "end_at": "9999-12-31T00:00:00Z"})))
            assert cur.fetchone() == (1,)
    finally:
        conn.close()
    assert sql.one("SELECT max_runtime_seconds FROM mjsched.scheduled_job WHERE id = %s", (job_id,)) == 31536000


# -- the poison table -----------------------------------------------------------------------------
# (column, SET clause, admitted): admitted False = the schema must refuse it (the error must
# name the column, or be a type error for a value that is not of the column's type);
# admitted True = the row is accepted and the engine must isolate it.
POISON: list[tuple[str, str, bool]] = [
    ("id", "id = NULL", False),
    ("job_type_id", "job_type_id = NULL", False),
    ("job_type_id", "job_type_id = gen_random_uuid()", False),
    ("job_type_id", "job_type_id = (SELECT id FROM mjsched.scheduled_job_type WHERE driver_class = 'no_such_driver')",
     True),
    ("name", "name = NULL", False),
    ("name", "name = ''", False),
    ("name", "name = '   '", False),
    ("name", "name = repeat('n', 201)", False),
    ("description", "description = repeat('d', 100001)", False),
    ("cron_expression", "cron_expression = NULL", False),
    ("cron_expression", "cron_expression = ''", False),
    ("cron_expression", "cron_expression = repeat('*', 256)", False),
    ("cron_expression", "cron_expression = 'not a cron'", True),
    ("cron_expression", "cron_expression = '0 0 31 2 *'", True),
    ("cron_expression", "cron_expression = 'not a cron either', next_run_at = now()", True),
    ("timezone", "timezone = NULL", False),
    ("timezone", "timezone = ''", False),
    ("timezone", "timezone = repeat('z', 65)", False),
    ("timezone", "timezone = 'Mars/Olympus_Mons'", True),
    ("timezone", "timezone = 'Mars/Tharsis', next_run_at = now()", True),
    ("timezone", "timezone = 'localtime', next_run_at = now()", True),
    *[("start_at", f"start_at = '{v}'", False) for v in BAD_INSTANTS],
    ("start_at", "start_at = '9999-06-01 00:00:00+00', cron_expression = '0 0 1 1 *'", True),
    ("start_at", "start_at = '9999-12-30 00:00:00+00'", True),
    *[("end_at", f"end_at = '{v}'", False) for v in BAD_INSTANTS],
    ("end_at", "start_at = now(), end_at = now() - interval '1 day'", False),
    ("status", "status = NULL", False),
    ("status", "status = 'Bogus'", False),
    ("configuration", "configuration = '[]'", False),
    ("configuration", "configuration = '\"text\"'", False),
    ("configuration", "configuration = 'null'", False),
    ("configuration", "configuration = '42'", False),
    ("configuration", "configuration = '{broken'", False),
    ("configuration", "configuration = jsonb_build_object('x', repeat('c', 1000001))", False),
    ("configuration", "configuration = '{}'", True),
    ("configuration", "configuration = NULL", True),
    ("configuration", "configuration = '{\"callable\": \"no_such_module_xyz:run\"}'", True),
    ("owner", "owner = repeat('o', 256)", False),
    ("concurrency_mode", "concurrency_mode = NULL", False),
    ("concurrency_mode", "concurrency_mode = 'Bogus'", False),
    ("missed_run_policy", "missed_run_policy = 'Bogus'", False),
    ("run_immediately_if_never_run", "run_immediately_if_never_run = NULL", False),
    *[("max_runtime_seconds", f"max_runtime_seconds = '{v}'", False) for v in BAD_NUMBERS],
    ("max_runtime_seconds", "max_runtime_seconds = 1e308", False),
    ("isolation", "isolation = 'Bogus'", False),
    ("max_queued_runs", "max_queued_runs = 0", False),
    ("max_queued_runs", "max_queued_runs = 2147483647", False),
    ("max_queued_runs", "max_queued_runs = NULL", False),
    ("notify_on_success", "notify_on_success = NULL", False),
    ("notify_on_failure", "notify_on_failure = NULL", False),
    ("notify_to", "notify_to = repeat('t', 1001)", False),
    *[("next_run_at", f"next_run_at = '{v}'", False) for v in BAD_INSTANTS],
    ("next_run_at", "next_run_at = '9999-12-30 00:00:00+00'", True),
    ("next_run_at", "next_run_at = '1900-01-01 00:00:00+00'", True),
    *[("last_run_at", f"last_run_at = '{v}'", False) for v in BAD_INSTANTS],
    *[("last_success_at", f"last_success_at = '{v}'", False) for v in BAD_INSTANTS],
    ("high_frequency_ok", "high_frequency_ok = NULL", False),
    ("frequency_warned", "frequency_warned = repeat('f', 323)", False),
    ("frequency_warned", "frequency_warned = 'not a schedule at all'", True),
    ("keep_runs_days", "keep_runs_days = -1", False),
    ("keep_runs_days", "keep_runs_days = 36501", False),
    ("keep_runs_days", "keep_runs_days = 0", True),
    ("keep_runs_count", "keep_runs_count = -1", False),
    ("keep_runs_count", "keep_runs_count = 0", True),
    *[(c, f"{c} = {v}", False) for c in ("run_count", "success_count", "failure_count")
      for v in (-1, 2147483647)],
    *[(c, f"{c} = {v}", False) for c in ("last_duration_ms", "total_duration_ms")
      for v in (-1, 9223372036854775807)],
    ("lock_token", "lock_token = gen_random_uuid()", False),
    ("expected_completion_at", "lock_token = gen_random_uuid(), expected_completion_at = '-infinity'", False),
    ("expected_completion_at", "lock_token = gen_random_uuid(), expected_completion_at = 'infinity'", False),
    ("expected_completion_at", "lock_token = gen_random_uuid(), expected_completion_at = '1900-01-01 00:00+00'",
     True),
    ("locked_at", "locked_at = '-infinity'", False),
    ("locked_by_instance", "locked_by_instance = repeat('i', 256)", False),
    ("created_at", "created_at = NULL", False),
    ("created_at", "created_at = '-infinity'", False),
    ("created_at", "created_at = '0001-01-01 00:00:00+00'", False),
    # the interval and one-off kinds (007_schedule_kinds.sql); last, so the names above keep their numbers
    ("interval_seconds", "interval_seconds = 60", False),
    *[("interval_seconds", f"cron_expression = NULL, interval_seconds = {v}", False) for v in (0, -90, 31622401)],
    ("interval_seconds", "cron_expression = NULL, interval_seconds = 1", True),
    ("run_at", "run_at = now()", False),
    *[("run_at", f"cron_expression = NULL, run_at = '{v}'", False) for v in BAD_INSTANTS],
    ("run_at", "cron_expression = NULL, run_at = now() - interval '1 hour'", True),
    # the retry policy (009_retries.sql): each value in its range, and all five or none
    *[("retry_max_attempts", f"retry_max_attempts = {v}", False) for v in (0, 101)],
    *[(c, f"{c} = {v}", False) for c in ("retry_initial_delay", "retry_max_delay")
      for v in ("-1", "'NaN'", "1e308")],
    *[("retry_factor", f"retry_factor = {v}", False) for v in ("0.5", "'NaN'", "101")],
    *[("retry_jitter", f"retry_jitter = {v}", False) for v in ("-0.1", "'NaN'", "1.5")],
    ("retry_policy", "retry_max_attempts = 3", False),
    ("retry_policy", "retry_max_attempts = 3, retry_initial_delay = 60, retry_factor = 2, retry_max_delay = 10, "
                     "retry_jitter = 0", False),
    ("notify_final_attempt_only", "notify_final_attempt_only = NULL", False),
    *[("retry_count", f"retry_count = {v}", False) for v in (-1, 2147483647)],
    # the jitter (012_jitter.sql): 1 s to one day, never with run_at; and an H no name can resolve
    *[("jitter_seconds", f"jitter_seconds = {v}", False) for v in (0, -1, 86401)],
    ("jitter_seconds", "cron_expression = NULL, run_at = now() + interval '1 day', jitter_seconds = 5", False),
    ("jitter_seconds", "jitter_seconds = 86400", True),
    ("cron_expression", "cron_expression = 'H(30-10) * * * * *'", True),
    ("version", "version = NULL", False),
    ("fence_seq", "fence_seq = NULL", False),
    ("fence_seq", "fence_seq = -1", True),
    ("fence_seq", "fence_seq = 9223372036854775807", True),     # the claims saturate, never overflow
    # the priority (015_priorities.sql): -100 to 100, never NULL; the bounds run like any job
    *[("priority", f"priority = {v}", False) for v in (101, -101, 2147483647, "NULL")],
    *[("priority", f"priority = {v}", True) for v in (100, -100)],
]
# Rules about two columns, named after what they relate.
CONSTRAINT_OF = {"end_at": "ck_scheduled_job_window", "lock_token": "ck_scheduled_job_lock",
                 "cron_expression": "ck_scheduled_job_schedule_kind",
                 "interval_seconds": "ck_scheduled_job_schedule_kind", "run_at": "ck_scheduled_job_schedule_kind"}
# Errors that name no column: a value that is not of the column's type at all.
TYPE_ERRORS = (psycopg2.errors.InvalidTextRepresentation, psycopg2.errors.NumericValueOutOfRange,
               psycopg2.errors.StringDataRightTruncation)


def test_every_column_of_the_job_row_is_covered(sql: Any) -> None:
    columns = {r["column_name"] for r in sql.rows("SELECT column_name FROM information_schema.columns "
                                                   "WHERE table_schema = 'mjsched' AND table_name = 'scheduled_job'")}
    # updated_at: the trigger sets it on every UPDATE (its rule is tested by the upgrade test)
    assert columns - {c for c, _, _ in POISON} == {"updated_at"}


def test_poison_table(make_engine: Any, sql: Any, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="mjsched")
    admin = make_engine()
    sql.run("INSERT INTO mjsched.scheduled_job_type (name, driver_class) VALUES ('no_such_driver', 'no_such_driver')")
    victim = per_second_job(admin, "refused-victim", status="Paused")
    before = sql.rows("SELECT * FROM mjsched.scheduled_job WHERE id = %s", (victim,))
    refused: list[str] = []
    admitted: dict[str, str] = {}
    admitted_how: dict[str, str] = {}
    for n, (column, assignment, admit) in enumerate(POISON):
        if not admit:
            with pytest.raises(psycopg2.Error) as error:
                sql.run(f"UPDATE mjsched.scheduled_job SET {assignment} WHERE id = %s", (victim,))
            text = str(error.value)
            named = column in text or CONSTRAINT_OF.get(column, "?") in text
            assert named or isinstance(error.value, TYPE_ERRORS), (assignment, text)
            refused.append(assignment)
            continue
        name = f"poison-{n}"
        job_id = per_second_job(admin, name)
        sql.run(f"UPDATE mjsched.scheduled_job SET {assignment} WHERE id = %s", (job_id,))
        admitted[name] = job_id
        admitted_how[name] = assignment
    assert sql.rows("SELECT * FROM mjsched.scheduled_job WHERE id = %s", (victim,)) == before
    healthy = {f"healthy-{i}": per_second_job(admin, f"healthy-{i}") for i in range(5)}

    failed_polls: list[int] = []

    class Watch:
        def on_poll_failed(self) -> None:
            failed_polls.append(1)

    engine = make_engine(lease_timeout=5.0, max_poll_interval=0.5, max_concurrent_jobs=20)
    engine.add_listener(Watch())
    engine.start_polling()   # must not raise
    try:
        start = sql.one("SELECT now()")
        window = 5

        def on_time() -> dict[str, int]:
            return {r["name"]: r["n"] for r in sql.rows(
                """SELECT j.name, count(r.id) AS n FROM mjsched.scheduled_job j
                     LEFT JOIN mjsched.scheduled_job_run r ON r.scheduled_job_id = j.id AND r.status = 'Completed'
                      AND r.scheduled_for >= %s AND r.scheduled_for < %s + make_interval(secs => %s)
                    WHERE j.name LIKE 'healthy-%%' GROUP BY j.name""", (start, start, window))}
        try:
            wait_for(lambda: all(n >= window for n in on_time().values()), timeout=window + 3, interval=0.2,
                     message="every healthy job to run each tick of the window")
        except AssertionError:
            pass
        counts = on_time()
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    assert len(counts) == 5 and all(n >= window - 1 for n in counts.values()), counts
    assert failed_polls == []
    # Each admitted poison row: nothing ran twice for it in a way that floods history, and
    # it is reported at most once per kind of problem.
    runs = {r["name"]: r for r in sql.rows(
        """SELECT j.name, count(r.id) FILTER (WHERE r.status = 'Failed') AS failed,
                  count(r.id) FILTER (WHERE r.status = 'Abandoned') AS abandoned
             FROM mjsched.scheduled_job j LEFT JOIN mjsched.scheduled_job_run r ON r.scheduled_job_id = j.id
            WHERE j.name LIKE 'poison-%%' GROUP BY j.name""")}
    # Failure notifications are the outcome of Failed runs (a callable this process cannot
    # import fails each run, as code that raises would): one per run by design, not a report.
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name != "mjsched.notify"
                and getattr(r, "action", "") not in ("high_frequency", "missed_runs")]
    for name in admitted:
        mentions = [r.getMessage() for r in problems if f"'{name}'" in r.getMessage()]   # 'poison-13', not -138
        assert len(mentions) <= 1, (name, mentions)
        assert runs[name]["abandoned"] == 0, (name, runs[name])
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and "poll" in r.getMessage().lower()
                and "failed" in r.getMessage().lower()]
    assert len(refused) + len(admitted) == len(POISON)
    outcome = {r["name"]: r for r in sql.rows(
        """SELECT j.name, j.next_run_at, array_agg(DISTINCT r.status) FILTER (WHERE r.id IS NOT NULL) AS statuses,
                  count(r.id) AS runs, min(r.error_message) AS message
             FROM mjsched.scheduled_job j LEFT JOIN mjsched.scheduled_job_run r ON r.scheduled_job_id = j.id
            WHERE j.name LIKE 'poison-%%' GROUP BY j.name, j.next_run_at""")}
    for name, assignment in admitted_how.items():
        got = outcome[name]
        if "next_run_at = now()" in assignment:   # claimed, its schedule unusable: set aside once
            assert (got["statuses"], got["runs"], got["next_run_at"]) == (["Skipped"], 1, None), (assignment, got)
            assert got["message"].startswith("set aside"), got
        elif "no_such_driver" in assignment or assignment in ("configuration = '{}'", "configuration = NULL"):
            assert got["statuses"] == ["Skipped"] and got["message"].startswith("not run"), (assignment, got)


# -- start-up -------------------------------------------------------------------------------------

def test_start_polling_starts_beside_unschedulable_jobs(make_engine: Any, sql: Any, caplog: Any) -> None:
    """Rows no rule of this release would let in (an older schema, a dialect without it):
    a year-1 or -infinity start (a window that opened long ago: they run), a +infinity
    start, an invalid cron, a schedule whose next tick is past year 9999 (reported once)."""
    caplog.set_level(logging.INFO, logger="mjsched")
    admin = make_engine()
    healthy = per_second_job(admin, "healthy")
    runs = {name: per_second_job(admin, name) for name in ("year-one", "minus-infinity")}
    bad = {name: per_second_job(admin, name) for name in ("plus-infinity", "bad-cron", "past-9999")}
    sql.run("ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT IF EXISTS ck_scheduled_job_start_at")
    for name, start in (("year-one", "0001-01-01"), ("minus-infinity", "-infinity")):
        sql.run("UPDATE mjsched.scheduled_job SET start_at = %s, next_run_at = NULL WHERE id = %s", (start, runs[name]))
    sql.run("UPDATE mjsched.scheduled_job SET start_at = 'infinity', next_run_at = NULL WHERE id = %s",
            (bad["plus-infinity"],))
    sql.run("UPDATE mjsched.scheduled_job SET cron_expression = 'every tuesday' WHERE id = %s", (bad["bad-cron"],))
    sql.run("UPDATE mjsched.scheduled_job SET start_at = '9999-12-30', cron_expression = '0 0 1 1 *' "
            "WHERE id = %s", (bad["past-9999"],))
    engine = make_engine(lease_timeout=5.0, max_poll_interval=0.5)
    engine.start_polling()
    try:
        for job in (healthy, *runs.values()):
            wait_for(lambda: len(engine.list_runs(job, status="Completed")) >= 2, timeout=10,
                     message="the healthy job and those with an ancient start to run twice")
        engine.dispatch_due_jobs()   # polls by hand too: none raises
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    for name in bad:
        mentions = [r for r in caplog.records if r.levelno >= logging.WARNING and name in r.getMessage()
                    and getattr(r, "action", "") != "high_frequency"]
        assert len(mentions) == 1, (name, [r.getMessage() for r in mentions])
        assert sql.one("SELECT next_run_at FROM mjsched.scheduled_job WHERE id = %s", (bad[name],)) is None


# -- upgrade --------------------------------------------------------------------------------------

def _reapply_schema(sql: Any) -> None:
    """What a new release does: 001_schema.sql changed, so install() applies it (and all after it) again."""
    sql.run("UPDATE mjsched.schema_version SET checksum = 'older release' WHERE name = '001_schema'")


def test_upgrade_sets_aside_rows_an_older_release_left(make_engine: Any, sql: Any, caplog: Any) -> None:
    engine = make_engine()
    healthy = per_second_job(engine, "healthy")
    rows = {name: per_second_job(engine, name) for name in ("nan", "huge", "minus-infinity", "year-one", "two")}
    for rule in RULES:
        sql.run(f"ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT IF EXISTS ck_scheduled_job_{rule}")
    sql.run("ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT IF EXISTS ck_scheduled_job_max_runtime")
    sql.run("ALTER TABLE mjsched.scheduled_job_type DROP CONSTRAINT IF EXISTS "
            "ck_scheduled_job_type_default_max_runtime_seconds")
    sql.run("UPDATE mjsched.scheduled_job SET max_runtime_seconds = 'NaN' WHERE id = %s", (rows["nan"],))
    sql.run("UPDATE mjsched.scheduled_job SET max_runtime_seconds = 1e13 WHERE id = %s", (rows["huge"],))
    sql.run("UPDATE mjsched.scheduled_job SET start_at = '-infinity' WHERE id = %s", (rows["minus-infinity"],))
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = '0001-01-01' WHERE id = %s", (rows["year-one"],))
    sql.run("UPDATE mjsched.scheduled_job SET end_at = 'infinity', run_count = -5 WHERE id = %s", (rows["two"],))
    next_run = sql.one("SELECT next_run_at FROM mjsched.scheduled_job WHERE id = %s", (healthy,))
    _reapply_schema(sql)
    caplog.set_level(logging.INFO, logger="mjsched")
    applied = make_engine().install()
    assert "001_schema" in applied

    jobs = {r["name"]: r for r in sql.rows("SELECT * FROM mjsched.scheduled_job")}
    assert jobs["healthy"]["status"] == "Active" and jobs["healthy"]["next_run_at"] == next_run
    for name in rows:
        assert jobs[name]["status"] == "Disabled", name
    assert jobs["nan"]["max_runtime_seconds"] is None and jobs["huge"]["max_runtime_seconds"] is None
    assert jobs["minus-infinity"]["start_at"] is None and jobs["year-one"]["next_run_at"] is None
    assert jobs["two"]["end_at"] is None and jobs["two"]["run_count"] == 0
    runs = sql.rows("""SELECT j.name, r.status, r.error_message FROM mjsched.scheduled_job_run r
                         JOIN mjsched.scheduled_job j ON j.id = r.scheduled_job_id ORDER BY j.name, r.error_message""")
    expected = {("nan", "max_runtime_seconds = NaN"), ("huge", "max_runtime_seconds = 10000000000000"),
                ("minus-infinity", "start_at = -infinity"), ("year-one", "next_run_at = 0001-01-01"),
                ("two", "end_at = infinity"), ("two", "run_count = -5")}
    assert len(runs) == len(expected) and all(r["status"] == "Failed" for r in runs), runs
    for name, fragment in expected:
        assert any(r["name"] == name and fragment in r["error_message"] for r in runs), (name, fragment, runs)
    warnings = [r.getMessage() for r in caplog.records if getattr(r, "action", "") == "job_set_aside"]
    assert len(warnings) == len(expected), warnings
    # every rule validated, but the run table's JSON limits (001_schema.sql: for runs written from now on)
    assert sql.rows("SELECT conname FROM pg_constraint WHERE NOT convalidated ORDER BY 1") == [
        {"conname": "ck_scheduled_job_run_details_limits"}, {"conname": "ck_scheduled_job_run_parameters_limits"}]
    assert {r["conname"] for r in sql.rows("SELECT conname FROM pg_constraint WHERE contype = 'c'")} >= \
        {f"ck_scheduled_job_{rule}" for rule in RULES}

    # Reported once: the next upgrade finds nothing more to set aside, and says nothing.
    caplog.clear()
    _reapply_schema(sql)
    assert "001_schema" in make_engine().install()
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run") == len(expected)
    assert [r for r in caplog.records if getattr(r, "action", "") == "job_set_aside"] == []


def test_upgrade_with_engines_polling_beside_it(make_engine: Any, sql: Any) -> None:
    """The set-aside runs under install()'s table locks while an engine polls healthy jobs."""
    admin = make_engine()
    healthy = per_second_job(admin, "healthy")
    bad = per_second_job(admin, "bad")
    sql.run("ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT ck_scheduled_job_max_runtime_seconds")
    sql.run("UPDATE mjsched.scheduled_job SET max_runtime_seconds = 'Infinity' WHERE id = %s", (bad,))
    engine = make_engine(lease_timeout=5.0, max_poll_interval=0.5)
    engine.start_polling()
    try:
        wait_for(lambda: engine.list_runs(healthy, status="Completed"), timeout=10, message="a healthy run")
        _reapply_schema(sql)
        assert "001_schema" in make_engine().install()
        done = len(engine.list_runs(healthy, status="Completed", limit=1000))
        wait_for(lambda: len(engine.list_runs(healthy, status="Completed", limit=1000)) >= done + 2, timeout=10,
                 message="the healthy job to go on running after the upgrade")
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    assert sql.one("SELECT status FROM mjsched.scheduled_job WHERE id = %s", (bad,)) == "Disabled"


def test_scripts_name_each_rule_after_its_column() -> None:
    """The set-aside derives the column from the rule's name (T-SQL) or key (PostgreSQL)."""
    for dialect in ("postgres", "mssql"):
        text = sqlfiles.script(dialect, "001_schema.sql")
        for rule in RULES:
            assert f"ck_scheduled_job_{rule}" in text, (dialect, rule)


# -- rows no engine can decode (issue 32) ---------------------------------------------------------
# JSON nested ~1,000 levels deep (2 KB) made psycopg2's jsonb caster raise RecursionError for the
# whole claimed batch after the claim committed: every job claimed with it was left Running with
# nobody executing it, `jobs list` crashed, the dashboard's job page answered 500. Each value is
# now decoded per row (mjsched/decoding.py); a row that cannot be is set aside, naming the field.

def deep_json(depth: int) -> str:
    """A JSON object whose objects nest ``depth`` levels ({} is one level)."""
    return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


def write_past_the_schema(sql: Any, job_id: str, column: str, value: str) -> None:
    """What an older schema (or a rule dropped by hand) lets plain SQL write."""
    sql.run("ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT IF EXISTS ck_scheduled_job_configuration")
    sql.run(f"UPDATE mjsched.scheduled_job SET {column} = %s::jsonb WHERE id = %s", (value, job_id))


def drop_run_json_limits(sql: Any) -> None:
    """A run written before the run table had its JSON rules (or by a client past them)."""
    for rule in ("details", "parameters"):
        sql.run(f"ALTER TABLE mjsched.scheduled_job_run DROP CONSTRAINT IF EXISTS ck_scheduled_job_run_{rule}_limits")


def nothing_left_held(sql: Any) -> None:
    assert sql.rows("SELECT id, scheduled_job_id FROM mjsched.scheduled_job_run WHERE status = 'Running'") == []
    assert sql.rows("SELECT name FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL") == []


@pytest.mark.parametrize("depth", [1000, 3000, 65])
def test_a_deep_json_job_is_set_aside_once_beside_healthy_per_second_jobs(depth: int, make_engine: Any, sql: Any,
                                                                        caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="mjsched")
    admin = make_engine()
    healthy = [per_second_job(admin, f"healthy-{i}") for i in range(4)]
    poison = per_second_job(admin, "deep")
    write_past_the_schema(sql, poison, "configuration", deep_json(depth))
    engine = make_engine(lease_timeout=5.0, max_poll_interval=0.5, max_concurrent_jobs=10)
    engine.start_polling()
    try:
        for job in healthy:
            wait_for(lambda: len(engine.list_runs(job, status="Completed")) >= 3, timeout=15,
                     message="each healthy job to run beside the deep one")
        engine.dispatch_due_jobs()   # a poll by hand: raises nothing either
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    nothing_left_held(sql)
    runs = sql.rows("SELECT status, error_message FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s",
                    (poison,))
    assert [r["status"] for r in runs] == ["Failed"], runs
    assert "configuration: nesting deeper than 64 levels" in runs[0]["error_message"], runs
    reports = [r.getMessage() for r in caplog.records if getattr(r, "action", "") == "job_set_aside"]
    assert len(reports) == 1 and "deep" in reports[0] and "configuration" in reports[0], reports
    assert not [r for r in caplog.records if "RecursionError" in r.getMessage() or r.exc_info]
    job = engine.get_job(poison)
    assert job.undecodable == ("configuration",)
    assert job.configuration == "<undecodable: nesting deeper than 64 levels>"
    assert {j.name for j in engine.list_jobs()} >= {"deep", "healthy-0"}


def test_a_deep_job_fixed_by_its_owner_runs_again(make_engine: Any, sql: Any) -> None:
    """The set-aside job is passed over by the reschedule sweep only while it cannot be decoded."""
    admin = make_engine()
    poison = per_second_job(admin, "deep")
    write_past_the_schema(sql, poison, "configuration", deep_json(1000))
    engine = make_engine(lease_timeout=5.0, max_poll_interval=0.5)
    engine.start_polling()
    try:
        wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s",
                                 (poison,)) == 1, timeout=10, message="the deep job to be set aside")
        time.sleep(2.5)   # ticks pass: it is not claimed (nor set aside) again
        assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (poison,)) == 1
        admin.update_job(poison, configuration={"callable": "os:getpid"})
        wait_for(lambda: engine.list_runs(poison, status="Completed"), timeout=15, message="the fixed job to run")
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    nothing_left_held(sql)


def test_a_run_whose_details_cannot_be_decoded_is_listed(make_engine: Any, sql: Any) -> None:
    engine = make_engine()
    job_id = per_second_job(engine, "target", status="Paused")
    run = engine.execute_job(job_id, force=True)
    drop_run_json_limits(sql)
    sql.run("UPDATE mjsched.scheduled_job_run SET details = %s::jsonb, parameters = %s::jsonb WHERE id = %s",
            (deep_json(2000), '{"n": 1' + "0" * 5000 + "}", run.id))
    runs = engine.list_runs(job_id)
    assert [r.undecodable for r in runs] == [("details", "parameters")]
    assert runs[0].details == "<undecodable: nesting deeper than 64 levels>"
    assert runs[0].parameters.startswith("<undecodable: not decodable as JSON")
    assert engine.backend.get_run(run.id).undecodable == ("details", "parameters")


def test_jobs_list_show_and_the_dashboard_show_an_undecodable_row(make_engine: Any, sql: Any, pg_dsn: str,
                                                                   tmp_path: Any) -> None:
    from tests.cli.conftest import Cli

    admin = make_engine()
    healthy = per_second_job(admin, "healthy", status="Paused")
    poison = per_second_job(admin, "deep", status="Paused")
    write_past_the_schema(sql, poison, "configuration", deep_json(1000))
    with pytest.raises(mjsched.ConfigurationError) as refused:   # before anything is written
        admin.execute_job(poison, force=True)
    assert refused.value.field == "configuration" and "nesting deeper than 64" in str(refused.value)
    run = admin.execute_job(healthy, force=True)
    drop_run_json_limits(sql)
    sql.run("UPDATE mjsched.scheduled_job_run SET details = %s::jsonb WHERE id = %s", (deep_json(1000), run.id))
    cli = Cli(tmp_path)
    listed = cli("jobs", "list", "--dsn", pg_dsn, expect=0).stdout
    assert "deep" in listed and "healthy" in listed
    shown = cli("jobs", "show", "deep", "--dsn", pg_dsn, expect=0).stdout
    assert "<undecodable: nesting deeper than 64 levels>" in shown and "Traceback" not in shown
    as_json = cli.json("jobs", "list", "--dsn", pg_dsn)
    assert {j["name"]: j["configuration"] for j in as_json}["deep"] == "<undecodable: nesting deeper than 64 levels>"
    cli("runs", "--dsn", pg_dsn, expect=0)

    pytest.importorskip("werkzeug", reason="the 'web' extra is not installed")
    from tests.web.conftest import Browserless
    from mjsched.web import create_app

    app = create_app(admin)
    try:
        client = Browserless(app)
        assert "deep" in client.html("/jobs")
        page = client.html(f"/jobs/{poison}")
        assert "&lt;undecodable: nesting deeper than 64 levels&gt;" in page
        client.html("/runs")
    finally:
        app.close()


# -- the limits on JSON: the API, the admin procedures, the schema (issue 32) ---------------------

def nested(depth: int) -> dict[str, Any]:
    """A dict whose dicts nest ``depth`` levels, built without recursion (past Python's limit too)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def deep_details() -> dict[str, Any]:
    """A python job's result: details nested past the limit (the run must still be recorded)."""
    return {"result": nested(200)}


@pytest.mark.parametrize("depth", [65, 900, 3000])
def test_the_api_refuses_json_nested_deeper_than_64_levels(depth: int, make_engine: Any, sql: Any) -> None:
    engine = make_engine()
    config = {"callable": "os:getpid", "kwargs": nested(depth - 1)}
    with pytest.raises(mjsched.ConfigurationError) as refused:
        engine.create_job("deep", "python", "* * * * *", configuration=config)
    assert refused.value.field == "configuration" and "64 levels" in str(refused.value)
    job_id = per_second_job(engine, "target", status="Paused")
    with pytest.raises(mjsched.ConfigurationError) as refused:
        engine.update_job(job_id, configuration=config)
    assert refused.value.field == "configuration"
    with pytest.raises(mjsched.ConfigurationError) as refused:
        engine.execute_job(job_id, parameters={"kwargs": nested(depth)}, force=True)
    assert refused.value.field == "parameters" and "64 levels" in str(refused.value)
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run") == 0
    # 64 levels are allowed
    engine.update_job(job_id, configuration={"callable": "os:getpid", "x": nested(63)})


def test_admin_procedures_refuse_json_nested_deeper_than_64_levels(executor_dsn: str, make_engine: Any,
                                                                    sql: Any) -> None:
    job_id = per_second_job(make_engine(), "target")
    type_id = sql.one("SELECT job_type_id FROM mjsched.scheduled_job WHERE id = %s", (job_id,))
    conn = psycopg2.connect(executor_dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            for depth in (65, 3000):
                config = deep_json(depth)
                new = json.dumps({"job_type_id": str(type_id), "name": "new", "cron_expression": "* * * * * *",
                                  "status": "Active"})[:-1] + f', "configuration": {config}}}'
                with pytest.raises(psycopg2.Error) as refused:
                    cur.execute("SELECT * FROM mjsched.insert_job(%s::jsonb)", (new,))
                assert refused.value.pgcode == "22023" and "fields.configuration" in str(refused.value)
                assert "64 levels" in str(refused.value)
                with pytest.raises(psycopg2.Error) as refused:
                    cur.execute("SELECT * FROM mjsched.update_job(%s::uuid, %s::jsonb)",
                                (job_id, f'{{"configuration": {config}}}'))
                assert refused.value.pgcode == "22023" and "fields.configuration" in str(refused.value)
            cur.execute("SELECT * FROM mjsched.update_job(%s::uuid, %s::jsonb)",
                        (job_id, f'{{"configuration": {deep_json(64)}}}'))
    finally:
        conn.close()


def test_the_schema_refuses_json_nested_deeper_than_64_levels(make_engine: Any, sql: Any) -> None:
    engine = make_engine()
    job_id = per_second_job(engine, "target", status="Paused")
    run = engine.execute_job(job_id, force=True)
    for table, column, row, rule in (
            ("scheduled_job", "configuration", job_id, "ck_scheduled_job_configuration"),
            ("scheduled_job_run", "details", run.id, "ck_scheduled_job_run_details_limits"),
            ("scheduled_job_run", "parameters", run.id, "ck_scheduled_job_run_parameters_limits")):
        with pytest.raises(psycopg2.errors.CheckViolation) as refused:
            sql.run(f"UPDATE mjsched.{table} SET {column} = %s::jsonb WHERE id = %s", (deep_json(65), row))
        assert rule in str(refused.value), refused.value
        sql.run(f"UPDATE mjsched.{table} SET {column} = %s::jsonb WHERE id = %s", (deep_json(64), row))
        with pytest.raises(psycopg2.errors.CheckViolation):
            sql.run(f"UPDATE mjsched.{table} SET {column} = jsonb_build_object('x', repeat('c', 1000001)) "
                    "WHERE id = %s", (row,))


def test_the_upgrade_sets_aside_a_job_whose_configuration_is_too_deep(make_engine: Any, sql: Any) -> None:
    engine = make_engine()
    healthy = per_second_job(engine, "healthy")
    deep = per_second_job(engine, "deep")
    write_past_the_schema(sql, deep, "configuration", deep_json(1000))
    _reapply_schema(sql)
    assert "001_schema" in make_engine().install()
    jobs = {r["name"]: r for r in sql.rows("SELECT name, status, configuration FROM mjsched.scheduled_job")}
    assert jobs["deep"]["status"] == "Disabled" and jobs["deep"]["configuration"] is None
    assert jobs["healthy"]["status"] == "Active"
    message = sql.one("SELECT error_message FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (deep,))
    assert "configuration" in message and "ck_scheduled_job_configuration" in message
    assert healthy


def test_details_past_the_limits_do_not_fail_the_completion(make_engine: Any, sql: Any) -> None:
    engine = make_engine()
    job_id = engine.create_job("deep-result", "python", "0 0 1 1 *",
                               configuration={"callable": "tests.integration.test_poison_rows:deep_details"})
    run = engine.execute_job(job_id)
    assert run.status.value == "Completed", run
    assert run.details == {"details_dropped": "nesting deeper than 64 levels"}
    # a completion written by another client (an engine of the previous release) with such details
    # is recorded too, the details replaced by a note, and the rest of its batch with it
    other = engine.execute_job(per_second_job(engine, "other", status="Paused"), force=True)
    sql.run("UPDATE mjsched.scheduled_job_run SET status = 'Running', lock_token = gen_random_uuid(), "
            "lease_expires_at = now() + interval '1 minute', completed_at = NULL WHERE id IN (%s, %s)",
            (run.id, other.id))
    tokens = {r["id"]: str(r["lock_token"]) for r in sql.rows(
        "SELECT id::text, lock_token FROM mjsched.scheduled_job_run WHERE id IN (%s, %s)", (run.id, other.id))}
    items = [{"run_id": run.id, "token": tokens[run.id], "status": "Completed", "details": "DEEP"},
             {"run_id": other.id, "token": tokens[other.id], "status": "Completed",
              "details": {"big": "x" * 1000001}}]
    payload = json.dumps(items).replace('"DEEP"', deep_json(3000))
    done = sql.rows("SELECT run_id::text, completed FROM mjsched.complete_runs(%s::jsonb)", (payload,))
    assert {r["run_id"]: r["completed"] for r in done} == {run.id: 1, other.id: 1}
    details = {r["id"]: r["details"] for r in sql.rows(
        "SELECT id::text, details FROM mjsched.scheduled_job_run WHERE id IN (%s, %s)", (run.id, other.id))}
    assert details[run.id] == {"details_dropped": "nesting deeper than 64 levels"}
    assert details[other.id]["details_dropped"].endswith("bytes as JSON; at most 1000000 allowed")


def test_a_claim_that_fails_before_its_start_is_handed_back(make_engine: Any, sql: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever fails between a committed claim and its driver's start hands the claim back at
    once (its run Skipped, its lock released), not left Running until its lease lapses; the
    other claims of the batch start."""
    engine = make_engine(max_concurrent_jobs=5, lease_timeout=30)
    failing, running = per_second_job(engine, "fails"), per_second_job(engine, "runs")
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second'")
    original = engine.parts.dispatcher.start_claim

    def fail_one(job: Any, *args: Any) -> int:
        if job.id == failing:
            raise RuntimeError("boom before the run")
        return original(job, *args)
    monkeypatch.setattr(engine.parts.dispatcher, "start_claim", fail_one)
    assert engine.dispatch_due_jobs().dispatched == 1
    wait_for(lambda: engine.list_runs(running, status="Completed"), message="the other claim's run")
    wait_for(lambda: engine.list_runs(failing, status="Skipped"), message="the failed claim handed back")
    [handed] = engine.list_runs(failing)
    assert handed.error_message == "not started: RuntimeError: boom before the run"
    wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE lock_token IS NOT NULL") == 0,
             timeout=5, message="the locks to be released, not left to lapse (lease 30 s)")
    nothing_left_held(sql)
