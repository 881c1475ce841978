"""The high-frequency warning notes each job once per schedule ever, is logged once per schedule
(short, pointing to the docs), and a job may opt out.

An engine records the schedule it warned about in scheduled_job.frequency_warned (through
note_frequency_warned, an engine routine), so a second engine start says nothing; a new cron
or timezone warns once more; high_frequency_ok=True silences the job (issue 15, Status).
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Any

import psycopg2
import psycopg2.errors
import pytest

import mjsched
from mjsched.errors import ConfigurationError
from tests.support.pg import Sql, wait_for
from tests.support.roles import Logins, apply_grants, engine_role as engine_group

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

EVERY_MINUTE = "* * * * *"
EVERY_SECOND = "* * * * * *"


def warnings_about(caplog: pytest.LogCaptureFixture, name: str | None = None) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == "high_frequency"
            and (name is None or repr(name) in r.getMessage())]


def create(engine: mjsched.SchedulingEngine, name: str, cron: str = EVERY_MINUTE, **fields: Any) -> str:
    return engine.create_job(name=name, driver="python", cron=cron, configuration={"callable": "os:getpid"},
                             **fields)


def start_and_stop(engine: mjsched.SchedulingEngine) -> None:
    engine.start_polling()
    engine.stop_polling(wait=True, max_wait=5)


def test_two_engine_starts_warn_once_in_total(make_engine: Any, sql: Sql,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    job = create(make_engine(), "every-minute")
    start_and_stop(make_engine())
    start_and_stop(make_engine())
    (record,) = warnings_about(caplog)
    assert "'every-minute'" in record.getMessage() and "docs/guide/time.md#high-frequency" in record.getMessage()
    assert sql.one("SELECT frequency_warned FROM mjsched.scheduled_job WHERE id = %s", (job,)) == \
        f"{EVERY_MINUTE} | UTC"


def test_jobs_sharing_a_schedule_are_one_short_line_whenever_they_come(make_engine: Any, sql: Sql,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Issue 35 item 10: every `* * * * *` job logged its own ~330-character warning."""
    caplog.set_level(logging.WARNING, logger="mjsched")
    admin = make_engine()
    jobs = [create(admin, "secondly-0", cron=EVERY_SECOND)]
    engine = make_engine()
    engine.start_polling()
    try:
        for i in (1, 2):     # created while it polls: each reaches the claim path's check on its own
            jobs.append(create(admin, f"secondly-{i}", cron=EVERY_SECOND))
            wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job WHERE frequency_warned IS NOT NULL")
                     == len(jobs), timeout=10, message="the new job noted")
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    start_and_stop(make_engine())
    (record,) = warnings_about(caplog)
    message = record.getMessage()
    assert len(message) <= 120, message
    assert message == ("job 'secondly-0' fires every 1s ('* * * * * *', UTC), under 5 min: "
                       "see docs/guide/time.md#high-frequency")


def test_a_new_frequent_schedule_warns_once_more(make_engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    admin = make_engine()
    job = create(admin, "edited")
    start_and_stop(make_engine())
    assert len(warnings_about(caplog, "edited")) == 1
    admin.update_job(job, cron="*/2 * * * *")
    start_and_stop(make_engine())
    start_and_stop(make_engine())
    second = warnings_about(caplog, "edited")
    assert len(second) == 2 and "*/2 * * * *" in second[1].getMessage()
    admin.update_job(job, timezone="Europe/Paris")          # a new timezone is a new schedule too
    start_and_stop(make_engine())
    assert len(warnings_about(caplog, "edited")) == 3


def test_a_job_that_opted_out_never_warns(make_engine: Any, sql: Sql, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    admin = make_engine()
    quiet = create(admin, "every-second-by-choice", cron="* * * * * *", high_frequency_ok=True)
    assert admin.get_job(quiet).high_frequency_ok is True
    engine = make_engine()
    engine.start_polling()
    try:
        # the start-up check and the claim path (it runs every second) both pass it over
        wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s",
                                 (quiet,)) >= 2, timeout=10, message="two runs of the job")
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    start_and_stop(make_engine())
    assert warnings_about(caplog) == []
    # Opting back in warns (once).
    assert admin.update_job(quiet, high_frequency_ok=False).high_frequency_ok is False
    start_and_stop(make_engine())
    start_and_stop(make_engine())
    assert len(warnings_about(caplog, "every-second-by-choice")) == 1


def test_the_claim_path_warns_once_across_engines(make_engine: Any, sql: Sql,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    first, second = make_engine(), make_engine()
    first.start_polling()
    second.start_polling()
    try:
        job = create(first, "late-and-fast", cron="* * * * * *")    # created while both engines poll
        wait_for(lambda: sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s",
                                 (job,)) >= 4, timeout=15, message="four runs of the job")
        wait_for(lambda: sql.one("SELECT frequency_warned FROM mjsched.scheduled_job WHERE id = %s", (job,)),
                 timeout=5, message="the warning to be recorded")
    finally:
        first.stop_polling(wait=True, max_wait=5)
        second.stop_polling(wait=True, max_wait=5)
    start_and_stop(make_engine())
    assert len(warnings_about(caplog, "late-and-fast")) == 1


@pytest.fixture
def engine_login(pg_dsn: str) -> Any:
    logins = Logins(pg_dsn)
    apply_grants(pg_dsn)
    yield logins.login(engine_group(pg_dsn), "mjsched_hf")
    logins.drop()


def test_the_engine_role_records_the_warning(make_engine: Any, sql: Sql, engine_login: str,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    job = create(make_engine(), "watched")
    start_and_stop(make_engine(dsn=engine_login))
    start_and_stop(make_engine(dsn=engine_login))
    assert len(warnings_about(caplog, "watched")) == 1
    assert sql.one("SELECT frequency_warned FROM mjsched.scheduled_job WHERE id = %s", (job,)) == \
        f"{EVERY_MINUTE} | UTC"
    # The procedure leaves a job alone when the schedule it was told about is no longer the job's.
    conn = psycopg2.connect(engine_login)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT noted FROM mjsched.note_frequency_warned(%s::jsonb)",
                        (json.dumps([{"job_id": job, "schedule": "*/3 * * * * | UTC"}]),))
            assert cur.fetchone() == (0,)
            with pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.execute("UPDATE mjsched.scheduled_job SET frequency_warned = NULL")
    finally:
        conn.close()
    assert sql.one("SELECT frequency_warned FROM mjsched.scheduled_job WHERE id = %s", (job,)) == \
        f"{EVERY_MINUTE} | UTC"


def test_recording_never_waits_on_a_row_another_session_holds(make_engine: Any, sql: Sql, pg_dsn: str) -> None:
    """Several sessions record at once; a row locked elsewhere is skipped at once, not waited for."""
    jobs = [create(make_engine(), f"raced-{i}") for i in range(6)]
    items = json.dumps([{"job_id": j, "schedule": f"{EVERY_MINUTE} | UTC"} for j in jobs])
    holder = psycopg2.connect(pg_dsn)
    try:
        with holder.cursor() as cur:   # an operator's open transaction holds the first job's row
            cur.execute("SELECT 1 FROM mjsched.scheduled_job WHERE id = %s FOR UPDATE", (jobs[0],))
        noted: list[int] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def record() -> None:
            try:
                conn = psycopg2.connect(pg_dsn)
                try:
                    conn.autocommit = True
                    with conn.cursor() as cur:
                        cur.execute("SET statement_timeout = '5s'")
                        barrier.wait(timeout=10)
                        cur.execute("SELECT noted FROM mjsched.note_frequency_warned(%s::jsonb)", (items,))
                        noted.append(cur.fetchone()[0])
                finally:
                    conn.close()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=record) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        assert not errors and len(noted) == 4
        assert sum(noted) == 5           # each of the 5 free rows marked once; the held row skipped
    finally:
        holder.rollback()
        holder.close()
    warned = sql.rows("SELECT id::text AS id, frequency_warned FROM mjsched.scheduled_job ORDER BY name")
    assert {r["id"]: r["frequency_warned"] for r in warned} == \
        {j: (None if j == jobs[0] else f"{EVERY_MINUTE} | UTC") for j in jobs}


def test_high_frequency_ok_must_be_a_boolean(make_engine: Any, sql: Sql) -> None:
    engine = make_engine()
    with pytest.raises(ConfigurationError) as raised:
        create(engine, "bad", high_frequency_ok="yes")
    assert raised.value.field == "high_frequency_ok" and "'yes'" in str(raised.value)
    job = create(engine, "good")
    with pytest.raises(ConfigurationError) as raised:
        engine.update_job(job, high_frequency_ok="yes")
    assert raised.value.field == "high_frequency_ok"
    assert engine.get_job(job).high_frequency_ok is False
    # The procedures refuse what is not a boolean too, naming the field, before anything is
    # written (as for notify_on_success, PostgreSQL reads 'yes' as true; 'maybe' is no boolean).
    with pytest.raises(psycopg2.errors.InvalidParameterValue, match="fields.high_frequency_ok"):
        sql.run("SELECT mjsched.update_job(%s::uuid, %s::jsonb)", (job, json.dumps({"high_frequency_ok": "maybe"})))
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job") == 1
