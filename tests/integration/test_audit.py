"""The audit trail (issue 36 item 3): every change to a job's definition leaves rows in
mjsched.job_change -- when, who (database login, application user), what (field, old, new;
shown masked) and through which path -- whether it came through the API, ensure_job,
sync_jobs, the CLI, the dashboard or plain SQL; the engines' own bookkeeping leaves none.

The columns are taken from the catalog: every column of scheduled_job is either audited (in
the trigger's UPDATE OF list, and changed here through plain SQL one by one) or named
bookkeeping, and the T-SQL trigger audits the same list. A column added tomorrow fails here
until it is put on one side."""
from __future__ import annotations

import getpass
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import psycopg2
import pytest

import mjsched
from mjsched.web import create_app
from tests.support import drivers  # noqa: F401 - registers the test drivers
from tests.support.pg import Sql, wait_for
from tests.web.conftest import Browserless

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[2]
NEVER = "0 0 1 1 *"


def changes(sql: Sql, job: str) -> list[dict[str, Any]]:
    return sql.rows("SELECT version, action, field, old_value, new_value, db_login, app_user, via "
                    "FROM mjsched.job_change WHERE job_id = %s ORDER BY id", (job,))


def audited_columns(sql: Sql) -> list[str]:
    """The PostgreSQL trigger's UPDATE OF list, from the catalog."""
    return [r["attname"] for r in sql.rows(
        """SELECT a.attname FROM pg_trigger t
             JOIN pg_attribute a ON a.attrelid = t.tgrelid AND a.attnum = ANY (t.tgattr::int2[])
            WHERE t.tgname = 'trg_scheduled_job_audited' ORDER BY a.attnum""")]


def bookkeeping_columns(sql: Sql) -> list[str]:
    source = sql.one("SELECT prosrc FROM pg_proc WHERE proname = 'tg_scheduled_job_audited'")
    listed = re.search(r"v_bookkeeping CONSTANT text\[\] := ARRAY\[(.*?)\];", source, re.S)
    assert listed, "the trigger function names its bookkeeping columns in v_bookkeeping"
    return re.findall(r"'(\w+)'", listed.group(1))


# A new value for each audited column that the table's rules accept (a column added to the
# trigger's list without a value here fails test_every_audited_column_..., on purpose).
NEW_VALUES: dict[str, Any] = {
    "name": "renamed", "description": "d", "cron_expression": "*/7 * * * *", "interval_seconds": None,
    "run_at": None, "timezone": "Europe/Berlin", "start_at": "2026-01-01T00:00:00Z", "end_at": "2099-01-01T00:00:00Z",
    "status": "Paused", "configuration": '{"k": 1}', "owner": "ops", "concurrency_mode": "Queue",
    "missed_run_policy": "RunAll", "run_immediately_if_never_run": True, "max_runtime_seconds": 60.0,
    "isolation": "process", "max_queued_runs": 7, "notify_on_success": True, "notify_on_failure": False,
    "notify_to": "ops@example.org", "high_frequency_ok": True, "keep_runs_days": 3, "keep_runs_count": 9,
    "retry_max_attempts": None, "retry_initial_delay": None, "retry_factor": None, "retry_max_delay": None,
    "retry_jitter": None, "notify_final_attempt_only": False, "job_type_id": None, "jitter_seconds": 90, "priority": 7,
}


def test_every_column_is_audited_or_bookkeeping_and_tsql_audits_the_same(sql: Sql) -> None:
    columns = [r["attname"] for r in sql.rows(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'mjsched.scheduled_job'::regclass "
        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum")]
    audited, bookkeeping = audited_columns(sql), bookkeeping_columns(sql)
    assert not set(audited) & set(bookkeeping)
    assert sorted(audited + bookkeeping) == sorted(columns), \
        f"neither audited nor bookkeeping: {sorted(set(columns) - set(audited) - set(bookkeeping))}"
    tsql = (ROOT / "sql" / "mssql" / "013_audit.sql").read_text(encoding="utf-8")
    assert sorted(re.findall(r"\bUPDATE\((\w+)\)", tsql)) == sorted(audited)
    compared = re.findall(r"\(N'(\w+)', ", tsql.split("CROSS APPLY (VALUES", 1)[1].split(") AS c (", 1)[0])
    assert sorted(compared + ["configuration"]) == sorted(audited)


def test_every_audited_column_changed_by_plain_sql_is_a_row_naming_the_field(make_engine: Callable[..., Any],
                                                                              sql: Sql) -> None:
    engine = make_engine()
    other_type = engine.backend.ensure_job_type("test-raise")
    for column in audited_columns(sql):
        assert column in NEW_VALUES, f"give audited column {column} a value in NEW_VALUES"
        job = engine.create_job(f"col-{column}", "test-ok", "0 3 * * *", configuration={"k": 0})
        if column in ("interval_seconds", "run_at"):   # a schedule kind: the cron goes with it (one kind a job)
            value = 90 if column == "interval_seconds" else "2099-06-01T00:00:00Z"
            sql.run(f"UPDATE mjsched.scheduled_job SET cron_expression = NULL, {column} = %s WHERE id = %s",
                    (value, job))
        elif column.startswith("retry_"):               # a policy is all five or none
            sql.run("UPDATE mjsched.scheduled_job SET retry_max_attempts = 3, retry_initial_delay = 1, "
                    "retry_factor = 2, retry_max_delay = 10, retry_jitter = 0 WHERE id = %s", (job,))
        else:
            value = other_type if column == "job_type_id" else NEW_VALUES[column]
            sql.run(f"UPDATE mjsched.scheduled_job SET {column} = %s WHERE id = %s", (value, job))
        rows = [r for r in changes(sql, job) if r["action"] == "updated"]
        fields = {r["field"] for r in rows}
        expected = "configuration.k" if column == "configuration" else column
        assert expected in fields, (column, rows)
        assert {r["via"] for r in rows} == {"sql"} and {r["version"] for r in rows} == {2}
        assert {r["db_login"] for r in rows} == {sql.one("SELECT session_user")}


def test_each_path_is_recorded_with_who_and_how(make_engine: Callable[..., Any], sql: Sql, pg_dsn: str,
                                                tmp_path: Path) -> None:
    engine = make_engine()
    job = engine.create_job("paths", "shell", NEVER, configuration={"command": ["true"]})
    engine.update_job(job, description="by the api")
    with mjsched.changes_by("alice"):
        engine.ensure_job("paths", "shell", NEVER, configuration={"command": ["true"]}, description="declared")
    engine.sync_jobs([{"name": "paths", "driver": "shell", "cron": NEVER, "configuration": {"command": ["true"]},
                       "description": "synced"}])
    cli = subprocess.run([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, "jobs", "pause", "paths"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert cli.returncode == 0, cli.stderr
    toml = tmp_path / "jobs.toml"
    toml.write_text('[jobs.paths]\ndriver = "shell"\ncron = "0 0 1 1 *"\nstatus = "Active"\n'
                    'description = "applied"\nconfiguration = { command = ["true"] }\n', encoding="utf-8")
    applied = subprocess.run([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, "jobs", "apply", str(toml)],
                             capture_output=True, text=True, timeout=120, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert applied.returncode == 0, applied.stderr + applied.stdout
    dashboard = create_app(engine, authorize=lambda request: "bob")
    try:
        web = Browserless(dashboard)
        web.html("/jobs")
        assert web.post(f"/jobs/{job}/edit", {"cron": "0 0 1 1 *", "timezone": "UTC", "status": "Active",
                                              "max_runtime": "45"}).status_code == 303
    finally:
        dashboard.close()
    sql.run("UPDATE mjsched.scheduled_job SET owner = 'dba' WHERE id = %s", (job,))
    engine.delete_job(job)

    rows = changes(sql, job)
    by_via = [(r["via"], r["field"], r["new_value"], r["app_user"]) for r in rows]
    os_user = getpass.getuser()
    assert by_via == [
        ("api", "*", by_via[0][2], None),
        ("api", "description", "by the api", None),
        ("ensure_job", "description", "declared", "alice"),
        ("sync_jobs", "description", "synced", None),
        ("cli", "status", "Paused", os_user),
        ("cli/sync_jobs", "description", "applied", os_user),
        ("cli/sync_jobs", "status", "Active", os_user),
        ("dashboard", "max_runtime_seconds", "45", "bob"),
        ("sql", "owner", "dba", None),
        ("api", "*", None, None),
    ], by_via
    assert [r["action"] for r in rows][0] == "created" and rows[-1]["action"] == "deleted"
    assert [r["version"] for r in rows] == [1, 2, 3, 4, 5, 6, 6, 7, 8, 8]
    history = engine.job_history("paths")          # a deleted job, by its name
    assert [c.field for c in history][:2] == ["*", "owner"] and history[0].action == "deleted"


def test_engine_bookkeeping_is_no_change_and_never_fires_the_trigger(make_engine: Callable[..., Any],
                                                                     sql: Sql) -> None:
    sql.run("DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET track_functions = ''pl''', current_database()); "
            "END $$")
    engine = make_engine()          # its sessions count their function calls from the start
    jobs = [engine.create_job(f"busy-{i}", "test-ok", NEVER) for i in range(5)]
    before = sql.one("SELECT count(*) FROM mjsched.job_change")
    for _ in range(3):
        sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = ANY(%s::uuid[])",
                (jobs,))
        assert len(engine.run_due_jobs(timeout=30)) == 5      # claims, renewals, completions
    assert sql.one("SELECT count(*) FROM mjsched.job_change") == before
    assert {r["version"] for r in sql.rows("SELECT version FROM mjsched.scheduled_job WHERE id = ANY(%s::uuid[])",
                                           (jobs,))} == {1}
    engine.close()                  # its sessions report their statistics as they end
    other = Sql(sql.dsn)            # a session that starts after the setting: it counts calls
    try:
        other.run("UPDATE mjsched.scheduled_job SET description = 'counted' WHERE id = %s", (jobs[0],))
    finally:
        other.close()
    # 5 inserts and the one update above: 15 claims and completions never ran it (they would add 15+)
    wait_for(lambda: _trigger_calls(sql) >= 6, timeout=10, message="the statistics to count the trigger's calls")
    assert _trigger_calls(sql) == 6


def _trigger_calls(sql: Sql) -> int:
    """How often tg_scheduled_job_audited ran, in every session (PostgreSQL's statistics)."""
    sql.run("SELECT pg_stat_clear_snapshot()")
    return int(sql.one("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                       "WHERE funcname = 'tg_scheduled_job_audited'") or 0)


def test_values_are_shown_masked_on_every_surface(make_engine: Callable[..., Any], sql: Sql, pg_dsn: str) -> None:
    engine = make_engine()
    job = engine.create_job("secretive", "http", NEVER,
                            configuration={"url": "https://ops:hunter2@example.org/x",
                                           "headers": {"Authorization": "Bearer tok-123456"}})
    engine.update_job(job, configuration={"url": "https://ops:swordfish@example.org/x"})
    stored = " ".join(str(r["old_value"]) + str(r["new_value"]) for r in changes(sql, job))
    assert "hunter2" in stored and "swordfish" in stored        # stored as the job table holds them
    shown = json.dumps([c.__dict__ for c in engine.job_history(job)], default=str)
    cli = subprocess.run([sys.executable, "-m", "mjsched", "--dsn", pg_dsn, "jobs", "history", "secretive", "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert cli.returncode == 0, cli.stderr
    dashboard = create_app(engine)
    try:
        page = Browserless(dashboard).html(f"/jobs/{job}")
    finally:
        dashboard.close()
    assert 'id="changes"' in page and "configuration.url" in page
    for surface in (shown, cli.stdout, page):
        for secret in ("hunter2", "swordfish", "tok-123456"):
            assert secret not in surface


def test_retention_purges_old_rows_by_the_jobs_rule_then_the_default(make_engine: Callable[..., Any],
                                                                     sql: Sql) -> None:
    engine = make_engine()
    own = engine.create_job("own-rule", "test-ok", NEVER, keep_runs_days=2)
    default = engine.create_job("default-rule", "test-ok", NEVER)
    gone = engine.create_job("deleted", "test-ok", NEVER)
    engine.delete_job(gone)
    sql.run("UPDATE mjsched.job_change SET changed_at = now() - interval '5 days'")
    assert engine.backend.purge_job_changes(None) == 1                  # only own-rule's row is past a rule
    assert sql.one("SELECT count(*) FROM mjsched.job_change WHERE job_id = %s", (own,)) == 0
    assert engine.backend.purge_job_changes(7 * 86400.0) == 0            # 5 days < the default's 7
    assert engine.backend.purge_job_changes(3 * 86400.0, batch_size=1) == 1
    assert engine.backend.purge_job_changes(3 * 86400.0) == 2
    assert sql.one("SELECT count(*) FROM mjsched.job_change WHERE job_id IN (%s, %s)", (default, gone)) == 0
    with pytest.raises(mjsched.SchedulerError, match="batch_size=0"):
        engine.backend.purge_job_changes(None, batch_size=0)


def test_changes_by_refuses_what_it_cannot_record() -> None:
    for bad in ("", " ", "x" * 256, 7):
        with pytest.raises(mjsched.ConfigurationError, match="user"):
            with mjsched.changes_by(bad):   # type: ignore[arg-type]
                pass


def test_a_login_without_mjsched_rights_is_the_recorded_login(make_engine: Callable[..., Any], sql: Sql,
                                                              pg_dsn: str) -> None:
    engine = make_engine()
    job = engine.create_job("by-a-role", "test-ok", NEVER)
    role = f"audit_{os.getpid()}"
    sql.run(f"DROP ROLE IF EXISTS {role}")
    sql.run(f"CREATE ROLE {role} LOGIN")
    try:
        sql.run(f"GRANT USAGE ON SCHEMA mjsched TO {role}")
        sql.run(f"GRANT SELECT, UPDATE ON mjsched.scheduled_job TO {role}")
        sql.run(f"GRANT INSERT ON mjsched.job_change TO {role}")
        conn = psycopg2.connect(pg_dsn, user=role)
        try:
            conn.autocommit = True
            conn.cursor().execute("UPDATE mjsched.scheduled_job SET description = 'x' WHERE id = %s", (job,))
        finally:
            conn.close()
        (row,) = [r for r in changes(sql, job) if r["field"] == "description"]
        assert row["db_login"] == role and row["via"] == "sql"
    finally:
        sql.run(f"DROP OWNED BY {role}")
        sql.run(f"DROP ROLE {role}")


def test_tag_changes_are_audited_one_row_a_change_and_move_the_version(make_engine: Callable[..., Any],
                                                                        sql: Sql) -> None:
    """Tags are part of the definition (job_tag's triggers): one 'tags' row a change, the sets as
    sorted comma lists; a job created with tags, or fields and tags changed in one call, is one
    version; update_job's DELETE and INSERT of a set make one row; plain SQL is recorded too."""
    engine = make_engine()
    job = engine.create_job("tagged", "test-ok", NEVER, tags=["b", "a"])
    engine.update_job(job, tags=["b", "c"])
    engine.update_job(job, description="x", tags=["c"])
    with mjsched.changes_by("carol"):
        engine.update_job(job, tags=[])
    engine.update_job(job, tags=[])                       # no change, no row
    sql.run("INSERT INTO mjsched.job_tag (scheduled_job_id, tag) VALUES (%s, 'z')", (job,))
    rows = [(r["version"], r["action"], r["field"], r["old_value"], r["new_value"], r["app_user"], r["via"])
            for r in changes(sql, job)]
    assert rows[1:] == [
        (1, "updated", "tags", None, "a,b", None, "api"),
        (2, "updated", "tags", "a,b", "b,c", None, "api"),
        (3, "updated", "description", None, "x", None, "api"),
        (3, "updated", "tags", "b,c", "c", None, "api"),
        (4, "updated", "tags", "c", None, "carol", "api"),
        (5, "updated", "tags", None, "z", None, "sql"),
    ], rows
    assert rows[0][:3] == (1, "created", "*")
    assert sql.one("SELECT version FROM mjsched.scheduled_job WHERE id = %s", (job,)) == 5
    assert [c.field for c in engine.job_history(job)][:1] == ["tags"]
    engine.delete_job(job)                                # its tags go with it: the 'deleted' row says so
    assert [(r["action"], r["field"]) for r in changes(sql, job)][-1] == ("deleted", "*")
    assert len(changes(sql, job)) == len(rows) + 1


def test_pause_and_resume_by_tag_record_the_status_with_via_and_user(make_engine: Callable[..., Any],
                                                                     sql: Sql) -> None:
    engine = make_engine()
    jobs = [engine.create_job(f"nightly-{i}", "test-ok", NEVER, tags=["nightly"]) for i in range(2)]
    assert engine.pause_jobs(tag="nightly", reason="maintenance", user="dave") == 2
    with mjsched.changes_by("erin"):
        assert engine.resume_jobs(tag="nightly") == 2
    for job in jobs:
        rows = [(r["field"], r["old_value"], r["new_value"], r["app_user"], r["via"], r["version"])
                for r in changes(sql, job) if r["action"] == "updated" and r["field"] == "status"]
        assert rows == [("status", "Active", "Paused", "dave", "api", 2),
                        ("status", "Paused", "Active", "erin", "api", 3)], rows
