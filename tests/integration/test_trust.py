"""Who may do what (issue 12 item 5), against the real PostgreSQL.

* Two installations on one server: a login of database A cannot connect to B, call B's
  procedures or change B's jobs (grants.sql names its roles per database).
* Tokens are private: an engine login reads no lock_token, so it cannot complete or release
  another engine's run (a token is a bearer right: shown with one read by the owner).
* The legacy fixed-name role loses its rights when grants.sql runs (unless kept).
* allowed_drivers: a refused driver's job ends Failed with the reason, its code never runs,
  and the poller goes on.
"""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Iterator

import psycopg2
import psycopg2.errors
import pytest

import mjsched
from mjsched.privileges import ENGINE_ROUTINES
from tests.support import pg
from tests.support.pg import wait_for
from tests.support.roles import Logins, admin_role, apply_grants, engine_role, run

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


def job_fields(name: str, cron: str = "0 0 1 1 *", driver: str = "python",
               configuration: dict[str, Any] | None = None) -> dict[str, Any]:
    return dict(name=name, driver=driver, cron=cron, configuration=configuration or {"callable": "os:getpid"},
                status="Active")


def connect(dsn: str) -> Any:
    conn = psycopg2.connect(dsn, connect_timeout=5)
    conn.autocommit = True
    return conn


@pytest.fixture
def second_db(pg_server: str, pg_template: str) -> Iterator[str]:
    """Database B on the same server, with the schema installed."""
    name = f"mjsched_b_{uuid.uuid4().hex[:12]}"
    pg.create_database(pg_server, name, template=pg_template)
    yield pg.with_database(pg_server, name)
    pg.drop_database(pg_server, name)


@pytest.fixture
def logins(pg_dsn: str, second_db: str) -> Iterator[Logins]:
    made = Logins(pg_dsn)
    yield made
    made.drop(pg_dsn, second_db)


def test_a_login_of_one_installation_cannot_reach_another(pg_dsn: str, second_db: str, logins: Logins,
                                                          make_engine: Any) -> None:
    apply_grants(pg_dsn)
    apply_grants(second_db)
    assert engine_role(pg_dsn) != engine_role(second_db)
    b_job = make_engine(dsn=second_db).create_job(**job_fields("b-job"))
    a_engine = logins.login(engine_role(pg_dsn), "a_engine")
    a_admin = logins.login(admin_role(pg_dsn), "a_admin")
    into_b = {dsn: dsn.rsplit("/", 1)[0] + "/" + second_db.rsplit("/", 1)[1] for dsn in (a_engine, a_admin)}
    for login in (a_engine, a_admin):
        connect(login).close()                                            # its own database: fine
        with pytest.raises(psycopg2.OperationalError, match="permission denied for database"):
            connect(into_b[login])
    # Even where PUBLIC keeps CONNECT, nothing of B's is reachable: no USAGE, no EXECUTE, no SELECT.
    apply_grants(second_db, keep_public_connect="on")
    conn = connect(into_b[a_admin])
    try:
        for statement in ("SELECT * FROM mjsched.insert_job('{}'::jsonb)",
                          f"SELECT * FROM mjsched.update_job('{b_job}', '{{\"status\": \"Paused\"}}'::jsonb)",
                          "SELECT * FROM mjsched.claim_due_jobs('x', 1, 30)",
                          "SELECT name FROM mjsched.scheduled_job"):
            with conn.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.execute(statement)
    finally:
        conn.close()
    with pytest.raises(mjsched.DatabaseError, match="permission denied"):
        mjsched.SchedulingEngine(into_b[a_admin], pool_size=1, retry_attempts=1).create_job(
            **job_fields("intruder", cron="* * * * * *", driver="shell", configuration={"command": "id"}))
    assert [j.name for j in make_engine(dsn=second_db).list_jobs()] == ["b-job"]


def test_role_names_come_from_settings_and_a_shared_name_is_reported(pg_dsn: str, second_db: str,
                                                                     logins: Logins) -> None:
    suffix = uuid.uuid4().hex[:8]
    names = {"engine_role": f"shared_eng_{suffix}", "admin_role": f"shared_adm_{suffix}"}
    logins.groups |= set(names.values())
    assert not any("may also connect" in n for n in apply_grants(pg_dsn, **names))
    notices = apply_grants(second_db, **names)            # an operator's mistake: one name, two databases
    assert any("may also connect to database(s)" in n and pg_dsn.rsplit("/", 1)[1] in n for n in notices), notices
    with pytest.raises(psycopg2.Error, match="must differ"):
        apply_grants(pg_dsn, engine_role="same", admin_role="same")


def test_the_legacy_role_loses_its_rights_unless_kept(pg_dsn: str, sql: Any, logins: Logins) -> None:
    """Earlier releases granted the fixed-name mjsched_engine in every database (so its members
    reached all of them). Running the new grants.sql takes its rights here away."""
    run(pg_dsn, "DO $$ BEGIN CREATE ROLE mjsched_engine NOLOGIN; "
                "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$")
    dbname = pg_dsn.rsplit("/", 1)[1]
    run(pg_dsn, f'GRANT CONNECT ON DATABASE "{dbname}" TO mjsched_engine; GRANT USAGE ON SCHEMA mjsched TO '
                "mjsched_engine; GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA mjsched TO mjsched_engine; "
                "GRANT SELECT ON ALL TABLES IN SCHEMA mjsched TO mjsched_engine")
    check = """SELECT has_database_privilege('mjsched_engine', current_database(), 'CONNECT') AS conn,
                      has_function_privilege('mjsched_engine', 'mjsched.insert_job(jsonb)', 'EXECUTE') AS ins,
                      has_table_privilege('mjsched_engine', 'mjsched.scheduled_job', 'SELECT') AS sel"""
    try:
        apply_grants(pg_dsn, keep_legacy_role="on")       # a migration window
        assert sql.rows(check) == [{"conn": True, "ins": True, "sel": True}]
        apply_grants(pg_dsn)
        assert sql.rows(check) == [{"conn": False, "ins": False, "sel": False}]
    finally:
        run(pg_dsn, "DROP OWNED BY mjsched_engine")


def test_lock_tokens_are_private_to_the_engine_that_holds_them(pg_dsn: str, logins: Logins, make_engine: Any,
                                                               sql: Any) -> None:
    apply_grants(pg_dsn)
    owner = make_engine()
    job_id = owner.create_job(**job_fields("held"))
    token = str(uuid.uuid4())
    assert owner.backend.acquire_job_lock(job_id, token, "other-engine", 60.0)
    run_id = owner.backend.begin_job_run(job_id, token, "other-engine")
    thief = logins.login(engine_role(pg_dsn), "thief")
    conn = connect(thief)
    try:
        for statement in ("SELECT lock_token FROM mjsched.scheduled_job",
                          "SELECT * FROM mjsched.scheduled_job",
                          "SELECT lock_token FROM mjsched.scheduled_job_run",
                          "SELECT * FROM mjsched.scheduled_job_run",
                          "SELECT id FROM mjsched.scheduled_job_run WHERE lock_token IS NOT NULL"):
            with conn.cursor() as cur, pytest.raises(psycopg2.errors.InsufficientPrivilege):
                cur.execute(statement)
    finally:
        conn.close()
    engine = make_engine(dsn=thief)
    job, runs = engine.get_job(job_id), engine.list_runs(job_id)
    assert (job.lock_token, job.locked_by_instance, job.name) == (None, "other-engine", "held")
    assert [(r.id, r.status, r.lock_token) for r in runs] == [(run_id, mjsched.RunStatus.RUNNING, None)]
    assert engine.backend.get_run(run_id).lock_token is None
    assert owner.get_job(job_id).lock_token == token                       # the owner still reads it
    # Why it matters: whoever holds the token may end the run; with the old grants, any engine
    # login could read it (SELECT on the whole table) and do this.
    assert engine.backend.complete_job_run(run_id, token, "Completed", None, None, None) is True
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (run_id,)) == "Completed"


def test_the_engine_role_runs_jobs_and_the_probe_names_it(pg_dsn: str, logins: Logins, make_engine: Any,
                                                          caplog: Any) -> None:
    apply_grants(pg_dsn)
    job_id = make_engine().create_job(**job_fields("polled", cron="* * * * * *"))
    caplog.set_level(logging.INFO, logger="mjsched")
    engine = make_engine(dsn=logins.login(engine_role(pg_dsn), "eng"), lease_timeout=5.0, max_poll_interval=0.5)
    engine.start_polling()
    try:
        wait_for(lambda: engine.list_runs(job_id, status="Completed"), timeout=10, message="a completed run")
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    probe = [r for r in caplog.records if getattr(r, "action", None) == "probe_role"]
    assert [getattr(r, "role", None) for r in probe] == ["engine"], [r.getMessage() for r in probe]
    assert "insert_job" in probe[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
    assert engine.get_job(job_id).locked_by_instance is None


def test_a_role_that_cannot_run_jobs_is_reported_loudly_not_fatally(pg_dsn: str, logins: Logins,
                                                                    make_engine: Any, caplog: Any) -> None:
    """A half-granted engine role (an operator revoked one routine) starts, and the probe says
    which engine routine is missing at ERROR level."""
    apply_grants(pg_dsn)
    run(pg_dsn, f'REVOKE EXECUTE ON FUNCTION mjsched.enqueue_job_run FROM "{engine_role(pg_dsn)}"')
    caplog.set_level(logging.INFO, logger="mjsched")
    engine = make_engine(dsn=logins.login(engine_role(pg_dsn), "half"))
    engine.start_polling()
    engine.stop_polling(wait=True, max_wait=5)
    errors = [r.getMessage() for r in caplog.records if getattr(r, "action", None) == "probe_missing_execute"]
    assert len(errors) == 1 and "enqueue_job_run" in errors[0] and "insert_job" not in errors[0], errors
    assert "enqueue_job_run" in ENGINE_ROUTINES


# -- allowed_drivers -------------------------------------------------------------------------------------
def test_a_host_that_must_never_run_shell_refuses_it_and_keeps_polling(make_engine: Any, caplog: Any,
                                                                       tmp_path: Path) -> None:
    marker = tmp_path / "shell-ran"
    owner = make_engine()
    shell = owner.create_job(**job_fields("sh", cron="* * * * * *", driver="shell",
                                          configuration={"command": ["touch", str(marker)]}))
    healthy = owner.create_job(**job_fields("py", cron="* * * * * *"))
    caplog.set_level(logging.WARNING, logger="mjsched")
    engine = make_engine(allowed_drivers=["python"], lease_timeout=5.0, max_poll_interval=0.5)
    engine.start_polling()
    try:
        wait_for(lambda: len(engine.list_runs(shell, status="Failed")) >= 3 and
                 len(engine.list_runs(healthy, status="Completed")) >= 3, timeout=15,
                 message="three refused shell ticks and three python runs")
        manual = engine.execute_job(shell)
    finally:
        engine.stop_polling(wait=True, max_wait=5)
    expected = "driver 'shell' is not allowed on this engine (allowed_drivers=python)"
    failed = engine.list_runs(shell, status="Failed")
    assert {r.error_message for r in failed} == {expected}
    assert len({r.scheduled_for for r in failed if r.scheduled_for}) >= 3        # a new tick each time
    assert manual.status is mjsched.RunStatus.FAILED and manual.error_message == expected
    assert not marker.exists()
    assert engine.get_job(shell).failure_count >= 4 and engine.get_job(shell).status is mjsched.JobStatus.ACTIVE
    refusals = [r for r in caplog.records if getattr(r, "action", None) == "driver_not_allowed"]
    assert refusals and all(r.levelno == logging.WARNING and "'sh'" in r.getMessage() for r in refusals)
    make_engine().execute_job(shell)              # an engine that allows shell runs it
    assert marker.exists()


@pytest.mark.parametrize("value, needle", [(["python", "shel"], "'shel'"), ([], "at least one"),
                                           ("python,,http", "''"), ([None], "None"), (5, "list")])
def test_allowed_drivers_are_checked_before_anything_runs(value: Any, needle: str) -> None:
    with pytest.raises(mjsched.ConfigurationError) as info:
        mjsched.SchedulingEngine("postgresql://nobody@127.0.0.1:1/none", allowed_drivers=value)
    assert "allowed_drivers" in str(info.value) and needle in str(info.value)


def test_allowed_drivers_accepts_names_and_a_comma_separated_string() -> None:
    for value in (["shell", "http"], ("http", "shell"), "shell, http", {"shell", "http"}):
        engine = mjsched.SchedulingEngine("postgresql://nobody@127.0.0.1:1/none", allowed_drivers=value)
        try:
            assert engine.allowed_drivers == frozenset({"shell", "http"})
        finally:
            engine.close()
    assert mjsched.SchedulingEngine("postgresql://nobody@127.0.0.1:1/none").allowed_drivers is None


def test_the_dashboard_reads_jobs_as_the_admin_role(pg_dsn: str, logins: Logins, make_engine: Any) -> None:
    """The dashboard's job page asked `lock_token IS NOT NULL` (a token column the roles may not
    read): it now asks the lease column, which the schema ties to the token."""
    pytest.importorskip("werkzeug", reason="the 'web' extra is not installed")
    from werkzeug.test import Client

    from mjsched.web import create_app
    from tests.web.conftest import local_peer

    apply_grants(pg_dsn)
    job_id = make_engine().create_job(**job_fields("shown"))
    admin = make_engine(dsn=logins.login(admin_role(pg_dsn), "web"))
    app = create_app(admin, read_only=True)
    try:
        for url in ("/jobs", f"/jobs/{job_id}"):
            response = Client(local_peer(app)).get(url)
            assert response.status_code == 200, (url, response.get_data(as_text=True)[:1000])
            assert "shown" in response.get_data(as_text=True)
    finally:
        close = getattr(app, "close", None)
        if callable(close):
            close()
