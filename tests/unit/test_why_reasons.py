"""mjsched.why without a database: facts in, reasons out (explain is a pure function).

The integration suite (tests/integration/test_why.py) produces every code against PostgreSQL;
here the walk's order, the verdict, the tick chosen for --at and the parsing of either
dialect's row are pinned down on hand-made facts.
"""
from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from mjsched import liveness
from mjsched.why import (REASON_CODES, RESERVED_CODES, EngineFact, RunFact, WhyFacts, explain, facts_from_row,
                         tick_at_or_before)

UTC = timezone.utc
NOW = datetime(2030, 1, 5, 3, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)


def engine(name: str = "e1", *, state: str = liveness.LIVE, cap: int | None = 5, running: int = 0,
           drivers: frozenset[str] | None = None) -> EngineFact:
    return EngineFact(instance=name, host="h", pid=1, version="v", last_seen_at=NOW - timedelta(seconds=1),
                      stopped_at=None, silent_seconds=1.0, heartbeat_seconds=2.0, max_concurrent_jobs=cap,
                      allowed_drivers=drivers, running=running, state=state)


def facts(**over: Any) -> WhyFacts:
    base: dict[str, Any] = dict(
        db_now=NOW, asked_at=None, tick=NOW.replace(minute=0), job_id="j", name="nightly", driver="shell",
        status="Active", cron_expression="0 * * * *", interval_seconds=None, run_at=None, timezone="UTC",
        start_at=None, end_at=None, next_run_at=NOW.replace(minute=0), last_run_at=None,
        created_at=NOW - timedelta(days=3), updated_at=NOW - timedelta(days=1), concurrency_mode="Skip",
        missed_run_policy="RunOnce", max_queued_runs=5, run_immediately_if_never_run=False, run_count=0,
        locked_by_instance=None, locked_at=None, expected_completion_at=None, engines=(engine(),))
    base.update(over)
    return WhyFacts(**base)


def run(status: str, scheduled_for: datetime | None, **over: Any) -> RunFact:
    base: dict[str, Any] = dict(id="r1", scheduled_for=scheduled_for, attempt=1, status=status, error=None,
                                missed=None, queued_at=None, started_at=scheduled_for, completed_at=None,
                                engine="e1", retry_at=None, lease=None)
    base.update(over)
    return RunFact(**base)


def test_a_due_job_with_a_live_engine_will_be_claimed_at_the_next_poll() -> None:
    report = explain(facts())
    assert report.codes == ["due"] and report.verdict == "due"
    assert "2030-01-05 03:00:00 UTC" in report.summary and "within 2 s" in report.summary


def test_reasons_come_in_the_claims_order_and_the_first_blocking_one_is_the_verdict() -> None:
    report = explain(facts(status="Paused", next_run_at=None, tick=None, engines=()))
    assert report.codes == ["paused", "no_engine"]
    assert report.verdict == "paused" and all(r.blocking for r in report.reasons)
    assert "No engine has ever registered" in report.reasons[1].sentence


def test_a_lock_blocks_and_no_due_verdict_follows_it() -> None:
    holder = run("Running", None, id="manual-1", lease=NOW + HOUR)
    report = explain(facts(locked_by_instance="e1", locked_at=NOW - HOUR, expected_completion_at=NOW + HOUR,
                           holder_run=holder))
    assert report.codes == ["locked"] and "manual-1" in report.summary and "a manual run" in report.summary


def test_a_lock_of_an_engine_not_alive_says_when_it_lapses() -> None:
    report = explain(facts(locked_by_instance="gone", locked_at=NOW - HOUR, expected_completion_at=NOW + HOUR,
                           engines=(engine(), engine("gone", state=liveness.STALE))))
    assert report.verdict == "locked_by_gone_engine" and "gone (stale)" in report.summary and "1 h" in report.summary


def test_the_engines_decide_only_when_the_job_itself_could_run() -> None:
    full = explain(facts(engines=(engine(cap=2, running=2),)))
    assert full.codes == ["engines_full"] and full.reasons[0].blocking
    later = explain(facts(next_run_at=NOW + HOUR, tick=NOW + HOUR, engines=(engine(cap=2, running=2),)))
    assert later.codes == ["scheduled", "engines_full"] and not later.reasons[1].blocking   # a note: not due yet
    assert later.verdict == "scheduled"


def test_an_engine_that_reports_no_allow_list_allows_every_driver() -> None:
    assert explain(facts(engines=(engine(drivers=None),))).codes == ["due"]
    refused = explain(facts(engines=(engine(drivers=frozenset({"http"})),)))
    assert refused.codes == ["driver_not_allowed"] and "e1: http" in refused.summary
    partly = explain(facts(engines=(engine("a"), engine("b", drivers=frozenset({"http"})))))
    assert partly.codes == ["driver_partly_allowed", "due"] and partly.verdict == "due"


def test_a_recorded_outcome_settles_the_tick_and_the_job_state_is_not_walked() -> None:
    tick = NOW - 2 * HOUR
    done = run("Completed", tick, completed_at=tick + timedelta(seconds=2))
    report = explain(facts(tick=tick, tick_run=done, status="Paused", engines=()))
    assert report.codes == ["ran"] and report.verdict == "ran" and not report.reasons[0].blocking


@pytest.mark.parametrize("error, code", [
    ("missed-run policy Skip: 3 tick(s) passed", "skipped_missed"),
    ("not run: UnknownDriver: no driver named 'x'", "refused"),
    ("set aside: its schedule cannot be computed (x); fix the job's definition", "set_aside"),
    ("not started: RuntimeError: boom", "not_started"),
    ("the engine stopped before this run could start", "not_started"),
    ("retry not run: the job's window ended (end_at) before it was due", "retry_dropped"),
    ("something else", "ran"),
])
def test_a_skipped_run_is_told_apart_by_what_it_says(error: str, code: str) -> None:
    tick = NOW - HOUR
    report = explain(facts(tick=tick, tick_run=run("Skipped", tick, error=error, completed_at=tick)))
    assert report.codes == [code] and report.reasons[0].blocking


def test_a_past_tick_no_run_holds_is_explained_by_the_run_around_it() -> None:
    tick = NOW - 2 * HOUR
    during = run("Completed", tick - HOUR, id="long", started_at=tick - HOUR, completed_at=tick + HOUR)
    skip = explain(facts(tick=tick, next_run_at=NOW + HOUR, prior_run=during))
    assert skip.verdict == "skipped_overlap" and "long" in skip.summary
    queue = explain(facts(tick=tick, next_run_at=NOW + HOUR, prior_run=during, concurrency_mode="Queue"))
    assert queue.verdict == "queue_full"
    concurrent = explain(facts(tick=tick, next_run_at=NOW + HOUR, prior_run=during, concurrency_mode="Concurrent"))
    assert concurrent.verdict == "rescheduled"   # Concurrent runs beside it: the run is not why
    late = run("Completed", tick - HOUR, id="late", started_at=tick + timedelta(minutes=30),
               completed_at=tick + timedelta(minutes=31))
    assert explain(facts(tick=tick, next_run_at=NOW + HOUR, after_run=late)).verdict == "coalesced"
    skipped = dataclasses.replace(late, status="Skipped", missed=3)
    assert explain(facts(tick=tick, next_run_at=NOW + HOUR, after_run=skipped)).verdict == "skipped_missed"


def test_a_past_tick_also_gets_the_job_and_the_engines_as_they_are_now() -> None:
    tick = NOW - 2 * HOUR
    report = explain(facts(tick=tick, next_run_at=None, status="Paused", engines=()))
    assert report.codes == ["rescheduled", "paused", "no_engine"]


def test_a_due_tick_already_missed_under_policy_skip_will_be_skipped() -> None:
    report = explain(facts(missed_run_policy="Skip", next_run_at=NOW - 3 * HOUR, tick=NOW - 3 * HOUR))
    assert report.codes == ["will_skip_missed"] and "3 later tick" in report.summary
    assert explain(facts(missed_run_policy="RunOnce", next_run_at=NOW - 3 * HOUR,
                         tick=NOW - 3 * HOUR)).codes == ["due"]


def test_an_unusable_schedule_is_set_aside_and_a_usable_one_waits_for_an_engine() -> None:
    aside = explain(facts(next_run_at=None, tick=None, cron_expression="61 * * * *"))
    assert aside.verdict == "set_aside" and "61" in aside.summary
    waiting = explain(facts(next_run_at=None, tick=None))
    assert waiting.codes == ["unscheduled"] and not waiting.reasons[0].blocking
    alone = explain(facts(next_run_at=None, tick=None, engines=()))
    assert alone.codes == ["unscheduled", "no_engine"] and alone.reasons[0].blocking


def test_tick_at_or_before_for_each_kind_of_schedule() -> None:
    cron = facts()
    assert tick_at_or_before(cron, NOW) == NOW.replace(minute=0)
    assert tick_at_or_before(cron, NOW.replace(minute=0)) == NOW.replace(minute=0)   # a tick is its own
    weekly = facts(cron_expression="0 3 * * 1")                                       # Mondays 03:00
    assert tick_at_or_before(weekly, NOW) == datetime(2029, 12, 31, 3, tzinfo=UTC)
    every = facts(cron_expression=None, interval_seconds=7 * 60, start_at=NOW - HOUR)
    assert tick_at_or_before(every, NOW) == NOW - HOUR + timedelta(minutes=56)
    once = facts(cron_expression=None, run_at=NOW + HOUR)
    assert tick_at_or_before(once, NOW) == NOW + HOUR
    assert tick_at_or_before(facts(cron_expression="nonsense"), NOW) is None


def test_facts_from_either_dialects_row() -> None:
    row: dict[str, Any] = {
        "db_now": "2030-01-05T03:30:00.1234567+00:00", "id": "ABC", "name": "n", "driver": "shell",
        "status": "Active", "cron_expression": "0 * * * *", "timezone": "UTC", "next_run_at": NOW, "tick": NOW,
        "concurrency_mode": "Skip", "missed_run_policy": "RunOnce", "max_queued_runs": 5, "run_count": 3,
        "tick_id": "R1", "tick_scheduled_for": NOW, "tick_status": "Skipped", "tick_missed": "4",
        "tick_attempt": 1,
        "engines": json.dumps([{"instance": "e1", "host": "h", "pid": 1, "last_seen_at": "2030-01-05T03:29:59.1234567+00:00",
                                "silent_seconds": 1.2, "heartbeat_seconds": 1, "max_concurrent_jobs": 4,
                                "allowed_drivers": "http,shell", "running": 2, "stopped_at": None}]),
    }
    f = facts_from_row(row, engine_state=lambda e: liveness.LIVE if e["silent_for"] < 5 else liveness.STALE)
    assert f.db_now == datetime(2030, 1, 5, 3, 30, 0, 123456, tzinfo=UTC) and f.job_id == "abc"
    assert f.tick_run is not None and f.tick_run.missed == 4 and f.tick_run.id == "r1"
    (e,) = f.engines
    assert e.allowed_drivers == frozenset({"http", "shell"}) and e.free == 2 and e.live and e.allows("shell")
    assert facts_from_row({**row, "engines": None}).engines == ()


def test_every_code_is_documented_and_the_reserved_ones_are_never_produced() -> None:
    assert "tag_limit" in REASON_CODES and not set(RESERVED_CODES) & set(REASON_CODES)
    report = explain(facts())
    json.dumps(report.as_dict())
    assert all(code in REASON_CODES for code in report.codes)


def test_a_running_tick_whose_engine_is_gone_says_the_run_is_probably_lost() -> None:
    tick = NOW.replace(minute=0)
    live = explain(facts(tick_run=run("Running", tick, lease=NOW + HOUR)))
    assert live.codes == ["running"] and live.verdict == "running"
    lost = explain(facts(tick_run=run("Running", tick, engine="gone", lease=NOW + HOUR),
                         engines=(engine(), engine("gone", state=liveness.DEAD))))
    assert lost.codes == ["running", "locked_by_gone_engine"] and lost.verdict == "locked_by_gone_engine"
    assert "gone, which runs it, is dead" in lost.summary
