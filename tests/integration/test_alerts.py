"""Deadline alerts (sql/postgres/014_alerts.sql): each kind opens once across three engines,
still opens when the engine that should have run the job was killed, never twice, and
resolves once; a failing streak pauses its job through the audited path (via 'alert')."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

import mjsched
from mjsched.errors import ConfigurationError
from mjsched.metrics import EngineMetrics
from tests.support import drivers  # noqa: F401 - registers the test drivers
from tests.support.drivers import RecordingNotifier
from tests.support.pg import wait_for

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[2]
NEVER = "0 0 1 1 *"
SHELL = {"command": "true"}


def fleet(make_engine: Callable[..., Any], count: int = 3) -> list[tuple[Any, RecordingNotifier]]:
    """Engines that do not poll (their evaluations are called by the test), each with its notifier."""
    out = []
    for _ in range(count):
        notifier = RecordingNotifier()
        out.append((make_engine(notifier=notifier, alert_interval=None), notifier))
    return out


def evaluate_all(engines: list[tuple[Any, RecordingNotifier]]) -> list[Any]:
    """Every engine evaluates at once (threads released together): the alerts they got."""
    got: list[Any] = []
    barrier = threading.Barrier(len(engines))

    def one(engine: Any) -> None:
        barrier.wait(10)
        got.extend(engine.parts.alerts.run_pass())
    threads = [threading.Thread(target=one, args=(e,)) for e, _ in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return got


def alert_notes(engines: list[tuple[Any, RecordingNotifier]]) -> list[tuple[str, str]]:
    return [(n.metadata["alert_kind"], n.metadata["event"]) for _, notifier in engines
            for _, _, n in notifier.sent if n.metadata.get("kind") == "alert"]


def run_evaluations(engines: list[tuple[Any, RecordingNotifier]], rounds: int = 3) -> list[tuple[str, str]]:
    events = []
    for _ in range(rounds):
        events += [(a.kind, a.event) for a in evaluate_all(engines)]
    return events


def test_each_kind_opens_once_across_three_engines_and_resolves_once(make_engine: Callable[..., Any],
                                                                      sql: Any) -> None:
    engines = fleet(make_engine)
    admin = engines[0][0]
    late = admin.create_job("late", "test-ok", NEVER, alert_late_start="1m")
    silent = admin.create_job("silent", "test-ok", NEVER, alert_silent_after="26h")
    long = admin.create_job("long", "test-ok", NEVER, alert_too_long=60)
    streak = admin.create_job("streak", "test-raise", NEVER, alert_failing_streak=2)
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Active', next_run_at = now() - interval '5 minutes' "
            "WHERE id = %s", (late,))
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Active', created_at = now() - interval '27 hours' "
            "WHERE id = %s", (silent,))
    long_run = sql.one("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, lock_token, "
                       "lease_expires_at) VALUES (%s, 'Running', now() - interval '2 minutes', gen_random_uuid(), "
                       "now() + interval '1 hour') RETURNING id", (long,))
    for minutes in (3, 2):
        sql.run("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, completed_at) "
                "VALUES (%s, 'Failed', now() - %s * interval '1 minute', now() - %s * interval '1 minute')",
                (streak, minutes, minutes))

    opened = run_evaluations(engines)
    assert sorted(opened) == [("failing_streak", "opened"), ("late_start", "opened"), ("silent", "opened"),
                              ("too_long", "opened")]
    assert sorted(alert_notes(engines)) == sorted(opened)          # each notified once, across the fleet
    assert sql.one("SELECT count(*) FROM mjsched.job_alert") == 4
    assert {a.kind for a in admin.open_alerts()} == {"late_start", "silent", "too_long", "failing_streak"}
    assert admin.backend.open_alert_counts() == {"late_start": 1, "silent": 1, "too_long": 1, "failing_streak": 1}
    metrics = EngineMetrics(engines[2][0], job_metrics=False).render().decode()   # read from the table: any engine
    for kind in ("late_start", "silent", "too_long", "failing_streak"):
        assert f'mjsched_alerts_open{{kind="{kind}"}} 1.0' in metrics

    # The conditions end: the tick runs, a success, the run ends, the streak broken.
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() + interval '1 day' WHERE id = %s", (late,))
    sql.run("UPDATE mjsched.scheduled_job SET last_success_at = now() WHERE id IN (%s, %s)", (silent, streak))
    sql.run("UPDATE mjsched.scheduled_job_run SET status = 'Completed', completed_at = now(), lock_token = NULL, "
            "lease_expires_at = NULL WHERE id = %s",
            (long_run,))
    resolved = run_evaluations(engines)
    assert sorted(resolved) == [("failing_streak", "resolved"), ("late_start", "resolved"),
                                ("silent", "resolved"), ("too_long", "resolved")]
    assert len(alert_notes(engines)) == 8
    assert sql.one("SELECT count(*) FROM mjsched.job_alert WHERE resolved_at IS NULL") == 0
    assert run_evaluations(engines) == []                            # never twice


def test_a_failing_streak_pauses_its_job_through_the_audited_path(make_engine: Callable[..., Any], sql: Any) -> None:
    engines = fleet(make_engine)
    job = engines[0][0].create_job("fragile", "test-raise", NEVER, alert_failing_streak=1,
                                   pause_after_failing_streak=True)
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Active' WHERE id = %s", (job,))
    sql.run("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, completed_at) "
            "VALUES (%s, 'Timeout', now(), now())", (job,))
    assert run_evaluations(engines) == [("failing_streak", "opened")]
    assert engines[1][0].get_job(job).status.value == "Paused"
    assert sql.rows("SELECT old_value, new_value, via FROM mjsched.job_change WHERE job_id = %s AND field = 'status' "
                    "ORDER BY id DESC LIMIT 1", (job,)) == [{"old_value": "Active", "new_value": "Paused",
                                                             "via": "alert"}]
    (note,) = [n for _, notifier in engines for _, _, n in notifier.sent]
    assert "PAUSED" in note.body and note.priority == "High"


def test_alerts_fire_when_the_engine_that_should_run_the_job_was_killed(make_engine: Callable[..., Any],
                                                                        sql: Any, pg_dsn: str) -> None:
    """A subprocess engine, the only one that runs shell jobs (and one that evaluates no alerts),
    holds 'backup' (a long run), runs 'ticker' every 3 s and 'flaky' (which fails) every 2 s,
    and is killed -9. What it left behind is in the tables only, and the three engines left
    (which do not run shell jobs) open each kind once: the held run runs too long, the ticker's
    next tick starts late and it goes silent, and flaky's two failures are a failing streak."""
    engines = [(make_engine(notifier=n, alert_interval=None, allowed_drivers=["test-ok"]), n)
               for n in (RecordingNotifier(), RecordingNotifier(), RecordingNotifier())]
    admin = engines[0][0]
    backup = admin.create_job("backup", "shell", every="1h", configuration={"command": "sleep 120"},
                              alert_too_long=2, status="Active", run_immediately_if_never_run=True)
    ticker = admin.create_job("ticker", "shell", every="3s", configuration={"command": "true"},
                              alert_late_start=2, alert_silent_after=6, status="Active", high_frequency_ok=True)
    flaky = admin.create_job("flaky", "shell", every="2s", configuration={"command": "false"},
                             alert_failing_streak=2, status="Active", high_frequency_ok=True)

    def count(job: str, status: str) -> int:
        return sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s AND status = %s",
                       (job, status))

    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "integration" / "engine_process.py"), pg_dsn,
                             "120", "doomed", "no-alerts"], env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: count(backup, "Running") == 1 and count(ticker, "Completed") >= 1
                 and count(flaky, "Failed") >= 2, timeout=60, message="the subprocess engine to run the three jobs")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert sql.one("SELECT count(*) FROM mjsched.job_alert") == 0      # nobody evaluated before the kill
    kinds = {"too_long", "late_start", "silent", "failing_streak"}
    events: list[tuple[str, str]] = []
    wait_for(lambda: events.extend(run_evaluations(engines, rounds=1)) or {k for k, _ in events} >= kinds,
             timeout=60, message="every kind of alert from the surviving engines")
    events.extend(run_evaluations(engines))
    assert sorted(events) == sorted((kind, "opened") for kind in kinds)      # once each
    assert sorted(alert_notes(engines)) == sorted(events)
    assert sql.rows("SELECT kind, job_id::text AS job FROM mjsched.job_alert ORDER BY kind") == \
        [{"kind": "failing_streak", "job": flaky}, {"kind": "late_start", "job": ticker},
         {"kind": "silent", "job": ticker}, {"kind": "too_long", "job": backup}]


def test_bad_alert_rules_are_refused_naming_the_field_before_anything_is_written(
        make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    for field, value in (("alert_late_start", "soon"), ("alert_failing_streak", 0),
                         ("pause_after_failing_streak", "yes"), ("alert_too_long", -5)):
        with pytest.raises(ConfigurationError, match=field):
            engine.create_job("bad", "test-ok", NEVER, **{field: value})
    with pytest.raises(ConfigurationError, match="pause_after_failing_streak"):
        engine.create_job("bad", "test-ok", NEVER, pause_after_failing_streak=True)
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job") == 0
    job = engine.create_job("ok", "test-ok", NEVER, alert_silent_after="26h")
    assert engine.job_alerts(job)["alert_silent_after"] == 26 * 3600
    engine.update_job(job, alert_silent_after=None, alert_too_long="1h")
    assert engine.job_alerts(job) == {"alert_late_start": None, "alert_silent_after": None,
                                      "alert_too_long": 3600, "alert_failing_streak": None,
                                      "pause_after_failing_streak": None}
    fields = {r["field"] for r in sql.rows("SELECT field FROM mjsched.job_change WHERE job_id = %s", (job,))}
    assert {"alerts.silent_after_seconds", "alerts.too_long_seconds"} <= fields
    engine.ensure_job("ok", "test-ok", NEVER)          # a declaration without alerts: none
    assert engine.backend.job_alert_rules(job) is None


def test_a_lost_reply_of_evaluate_alerts_is_replayed_with_its_alerts(make_engine: Callable[..., Any],
                                                                     sql: Any) -> None:
    engine = make_engine(alert_interval=None)
    job = engine.create_job("late", "test-ok", NEVER, alert_late_start=60)
    sql.run("UPDATE mjsched.scheduled_job SET status = 'Active', next_run_at = now() - interval '5 minutes' "
            "WHERE id = %s", (job,))
    call = "00000000-0000-4000-8000-000000000001"
    first = engine.backend.evaluate_alerts(call)
    again = engine.backend.evaluate_alerts(call)          # the same call: its rows, nothing more
    assert [r["kind"] for r in first] == [r["kind"] for r in again] == ["late_start"]
    assert engine.backend.evaluate_alerts("00000000-0000-4000-8000-000000000002") == []


def test_declared_jobs_carry_their_alert_rules(make_engine: Callable[..., Any], sql: Any, tmp_path: Path) -> None:
    """ensure_job and a TOML file (jobs apply) set the rules; a declaration that drops them turns them off."""
    engine = make_engine()
    engine.ensure_job("nightly", "shell", NEVER, configuration=SHELL, alert_silent_after="26h", alert_failing_streak=3,
                      pause_after_failing_streak=True)
    job = engine.get_job("nightly").id
    assert engine.job_alerts(job)["alert_silent_after"] == 26 * 3600
    result = engine.sync_jobs([{"name": "nightly", "driver": "shell", "configuration": SHELL, "cron": NEVER, "alert_silent_after": "1d"}])
    assert result.updated == ["nightly"] and "alerts" in result.changes["nightly"]
    assert engine.job_alerts(job) == {"alert_late_start": None, "alert_silent_after": 86400, "alert_too_long": None,
                                      "alert_failing_streak": None, "pause_after_failing_streak": None}
    assert engine.sync_jobs([{"name": "nightly", "driver": "shell", "configuration": SHELL, "cron": NEVER,
                              "alert_silent_after": 86400}]).unchanged == ["nightly"]
    toml = tmp_path / "jobs.toml"
    toml.write_text('[jobs.nightly]\ndriver = "shell"\nconfiguration = { command = "true" }\ncron = "0 0 1 1 *"\nalert_late_start = "10m"\n',
                    encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mjsched", "--dsn", sql.dsn, "jobs", "apply", str(toml)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert engine.job_alerts(job)["alert_late_start"] == 600 and engine.job_alerts(job)["alert_silent_after"] is None
