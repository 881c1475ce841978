"""Jobs declared in code, idempotently (issue 14 item 1), against the real database.

Names are unique (sql/*/005_job_names.sql): a taken name is a typed error; an upgrade of a
database that holds duplicates renames all but the oldest and says so. ensure_job creates or
updates to match, recomputing the schedule only when it changed; sync_jobs does it for a set,
and two engines syncing the same set at once end with one job per name. Every method that
takes a job takes its id or its name.
"""
from __future__ import annotations

import logging
import threading
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

import pytest

import mjsched
from mjsched import ConfigurationError, InvalidCronExpression, JobNameTaken, JobNotFound, JobStatus
from tests.support import drivers  # noqa: F401 - registers the test drivers
from tests.support import mssql

SHELL = {"command": ["true"]}
FAR = datetime(2099, 1, 1, tzinfo=timezone.utc)


def job_count(db: Any) -> int:
    return int(db.one("SELECT count(*) FROM mjsched.scheduled_job"))


def run_count(db: Any) -> int:
    return int(db.one("SELECT count(*) FROM mjsched.scheduled_job_run"))


# -- unique names ---------------------------------------------------------------------------------------
def test_a_taken_name_is_a_typed_error_naming_it(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    first = engine.create_job("report", "shell", "0 2 * * *", configuration=SHELL)
    other = engine.create_job("cleanup", "shell", "0 3 * * *", configuration=SHELL)
    before = job_count(db)
    with pytest.raises(JobNameTaken) as info:
        engine.create_job("report", "shell", "0 4 * * *", configuration=SHELL)
    assert isinstance(info.value, ConfigurationError) and isinstance(info.value, mjsched.SchedulerError)
    assert (info.value.field, info.value.value, info.value.name, info.value.existing_id) == \
        ("name", "report", "report", first)
    assert "'report'" in str(info.value) and first in str(info.value)
    assert job_count(db) == before
    with pytest.raises(JobNameTaken) as info:
        engine.update_job(other, name="report")          # a rename onto a taken name
    assert info.value.name == "report"
    assert engine.get_job(other).name == "cleanup"
    # the database refuses it too, whoever writes: an operator's plain SQL
    type_id = engine.get_job(first).job_type_id
    with pytest.raises(Exception) as raw:
        db.insert_job(type_id, "report", "0 5 * * *")
    assert "uq_scheduled_job_name" in str(raw.value)


def test_a_name_that_parses_as_a_uuid_is_refused(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    for name in (str(uuid.uuid4()), uuid.uuid4().hex, str(uuid.uuid4()).upper()):
        with pytest.raises(ConfigurationError) as info:
            engine.create_job(name, "shell", "0 2 * * *", configuration=SHELL)
        assert info.value.field == "name" and "UUID" in str(info.value)
    assert job_count(db) == 0


# -- the upgrade of a database that holds duplicates ----------------------------------------------------
def _as_before_005(db: Any) -> None:
    """The state an earlier release's install leaves: no unique name, no 005 in schema_version."""
    db.run("ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT uq_scheduled_job_name")
    db.run("DELETE FROM mjsched.schema_version WHERE name = '005_job_names'")


def test_an_upgrade_keeps_the_oldest_name_and_renames_the_copies(db: Any, make_engine: Callable[..., Any],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine()
    _as_before_005(db)
    type_id = engine.backend.ensure_job_type("shell", "thread", None)
    # three "report" jobs; the one inserted last is the oldest by created_at and keeps the name
    copy_a = db.insert_job(type_id, "report", "0 2 * * *", due=True)
    copy_b = db.insert_job(type_id, "report", "0 2 * * *")
    oldest = db.insert_job(type_id, "report", "0 2 * * *")
    db.run(f"UPDATE mjsched.scheduled_job SET created_at = {db.ago(3600)} WHERE id = ?", (oldest,))
    db.run(f"UPDATE mjsched.scheduled_job SET created_at = {db.ago(60)} WHERE id = ?", (copy_a,))
    db.run(f"UPDATE mjsched.scheduled_job SET created_at = {db.ago(30)} WHERE id = ?", (copy_b,))
    # copy_b's short name is taken already: it gets its whole id
    taken = db.insert_job(type_id, f"report (duplicate {copy_b[:8]})", "0 2 * * *")
    # a 200-character name: the renamed copy still fits
    long_name = "L" * 200
    long_kept = db.insert_job(type_id, long_name, "0 2 * * *")
    db.run(f"UPDATE mjsched.scheduled_job SET created_at = {db.ago(3600)} WHERE id = ?", (long_kept,))
    long_copy = db.insert_job(type_id, long_name, "0 2 * * *")
    unique = db.insert_job(type_id, "unique", "0 2 * * *")
    # two copies whose ids share their first 8 digits would get one name: both get their whole id
    twin_kept = db.insert_job(type_id, "twin", "0 2 * * *")
    db.run(f"UPDATE mjsched.scheduled_job SET created_at = {db.ago(3600)} WHERE id = ?", (twin_kept,))
    twins = ["aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002"]
    for twin in twins:
        db.run("INSERT INTO mjsched.scheduled_job (id, job_type_id, name, cron_expression, status) "
               "VALUES (?, ?, 'twin', '0 2 * * *', 'Paused')", (twin, type_id))
    # history and statistics of a copy, which the upgrade must keep
    db.run("UPDATE mjsched.scheduled_job SET run_count = 7, success_count = 6, failure_count = 1, "
           "status = 'Paused' WHERE id = ?", (copy_a,))
    db.run("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, success, started_at, completed_at, "
           f"duration_ms) VALUES (?, 'Completed', ?, {db.now}, {db.now}, 5)", (copy_a, True))
    before = {j.id: j for j in engine.list_jobs()}

    with caplog.at_level(logging.WARNING, logger="mjsched"):
        applied = engine.install()
    assert applied[0] == "005_job_names"

    names = {j.id: j.name for j in engine.list_jobs()}
    assert names == {
        oldest: "report", copy_a: f"report (duplicate {copy_a[:8]})", copy_b: f"report (duplicate {copy_b})",
        taken: f"report (duplicate {copy_b[:8]})", long_kept: long_name,
        long_copy: "L" * 179 + f" (duplicate {long_copy[:8]})", unique: "unique", twin_kept: "twin",
        twins[0]: f"twin (duplicate {twins[0]})", twins[1]: f"twin (duplicate {twins[1]})"}
    assert len(names[long_copy]) == 200
    # nothing else of a job changed: status, schedule, statistics, history
    for job in engine.list_jobs():
        old = before[job.id]
        assert (job.status, job.next_run_at, job.run_count, job.success_count, job.failure_count, job.cron_expression) \
            == (old.status, old.next_run_at, old.run_count, old.success_count, old.failure_count, old.cron_expression)
    renamed = {copy_a, copy_b, long_copy, *twins}
    notes = [r for r in engine.list_runs(status="Skipped") if r.executed_by_instance == "mjsched install"]
    assert sorted(r.scheduled_job_id for r in notes) == sorted(renamed)
    note = next(r for r in notes if r.scheduled_job_id == copy_a)
    assert "3 jobs were named 'report'" in note.error_message and oldest in note.error_message
    assert f"'report (duplicate {copy_a[:8]})'" in note.error_message
    assert [r.status for r in engine.list_runs(copy_a)].count(mjsched.RunStatus.COMPLETED) == 1
    # said once, at the install that did it, one WARNING per renamed job
    said = [r for r in caplog.records if getattr(r, "action", None) == "job_renamed_duplicate"]
    assert sorted(getattr(r, "job_id") for r in said) == sorted(renamed)
    # the name now holds, the kept job answers to it, and a re-applied 005 has nothing to do
    assert engine.get_job("report").id == oldest
    with pytest.raises(JobNameTaken):
        engine.create_job("report", "shell", "0 2 * * *", configuration=SHELL)
    runs = run_count(db)
    db.run("DELETE FROM mjsched.schema_version WHERE name = '005_job_names'")
    assert engine.install()[0] == "005_job_names"
    assert {j.id: j.name for j in engine.list_jobs()} == names and run_count(db) == runs
    assert engine.install() == []


# -- ensure_job ------------------------------------------------------------------------------------------
def test_ensure_job_creates_then_leaves_an_equal_job_alone(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    job = engine.ensure_job("report", "shell", "0 2 * * *", timezone="Europe/Berlin", configuration=SHELL,
                            description="nightly")
    assert (job.name, job.cron_expression, job.timezone, job.status) == \
        ("report", "0 2 * * *", "Europe/Berlin", JobStatus.ACTIVE)
    assert job.next_run_at is not None
    again = engine.ensure_job("report", "shell", "0 2 * * *", timezone="Europe/Berlin", configuration=SHELL,
                              description="nightly")
    assert again == job                      # not even updated_at moved: nothing was written
    assert job_count(db) == 1


def test_ensure_job_recomputes_the_schedule_only_when_it_changed(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    job = engine.ensure_job("report", "shell", "0 2 * * *", configuration=SHELL)
    run = engine.execute_job(job.id)
    assert run.status is mjsched.RunStatus.COMPLETED
    # a sentinel schedule: only a recomputation can move it
    db.run("UPDATE mjsched.scheduled_job SET next_run_at = ? WHERE id = ?", (FAR, job.id))
    changed = engine.ensure_job("report", "shell", "0 2 * * *", configuration={"command": ["true", "x"]},
                                description="now described", max_runtime=60.0)
    assert changed.id == job.id and changed.next_run_at == FAR
    assert (changed.configuration, changed.description, changed.max_runtime_seconds) == \
        ({"command": ["true", "x"]}, "now described", 60.0)
    assert (changed.run_count, changed.success_count) == (1, 1)          # statistics kept
    assert [r.id for r in engine.list_runs("report")] == [run.id]        # history kept
    rescheduled = engine.ensure_job("report", "shell", "30 2 * * *", configuration={"command": ["true", "x"]},
                                    description="now described", max_runtime=60.0)
    assert rescheduled.next_run_at != FAR and rescheduled.next_run_at.minute == 30
    assert rescheduled.id == job.id and rescheduled.run_count == 1


def test_ensure_job_resets_what_it_omits_but_keeps_the_status(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    engine.ensure_job("report", "shell", "0 2 * * *", configuration=SHELL, description="x", owner="ops",
                      concurrency_mode="Queue", notify_on_success=True)
    engine.pause_job("report")
    job = engine.ensure_job("report", "shell", "0 2 * * *", configuration=SHELL)
    assert (job.description, job.owner, job.concurrency_mode.value, job.notify_on_success) == \
        (None, None, "Skip", False)
    assert job.status is JobStatus.PAUSED            # an operator's pause survives a restart of the app
    job = engine.ensure_job("report", "shell", "0 2 * * *", configuration=SHELL, status="Active")
    assert job.status is JobStatus.ACTIVE and job.next_run_at is not None


def test_ensure_job_changes_the_driver_with_its_configuration(db: Any, make_engine: Callable[..., Any]) -> None:
    """update_job resets the configuration when the driver changes and none is given; a
    declaration's configuration goes with its new driver even when it did not change."""
    engine = make_engine()
    first = engine.ensure_job("report", "shell", "0 2 * * *", configuration=SHELL)
    job = engine.ensure_job("report", "test-ok", "0 2 * * *", configuration=SHELL)
    assert (job.id, job.driver, job.configuration) == (first.id, "test-ok", SHELL)
    assert job.job_type_id != first.job_type_id


def test_ensure_job_refuses_bad_input_before_writing(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    engine.ensure_job("report", "shell", "0 2 * * *", configuration=SHELL)
    stored = engine.get_job("report")
    with pytest.raises(InvalidCronExpression):
        engine.ensure_job("report", "shell", "0 25 * * *", configuration=SHELL)
    with pytest.raises(ConfigurationError) as info:
        engine.ensure_job("report", "shell", "0 2 * * *", configuration={"command": []})
    assert info.value.field.startswith("configuration")
    with pytest.raises(ConfigurationError) as info:
        engine.ensure_job("report", "shell", configuration=SHELL)
    assert info.value.field == "cron"
    with pytest.raises(ConfigurationError):      # two schedule kinds at once
        engine.ensure_job("report", "shell", "0 2 * * *", every=90, configuration=SHELL)
    with pytest.raises(ConfigurationError) as info:
        engine.ensure_job("other", "shell", "0 2 * * *", configuration=SHELL, colour="red")
    assert info.value.field == "colour"
    assert engine.get_job("report") == stored and job_count(db) == 1


def test_ensure_job_declares_every_kind_retries_and_retention_and_is_idempotent(
        db: Any, make_engine: Callable[..., Any]) -> None:
    """Every definition field of the other issue-14 features takes part: a second identical
    declaration writes nothing; a changed one updates only what changed; switching the schedule
    kind replaces the old kind."""
    import mjsched
    engine = make_engine(dsn=db.dsn)
    policy = mjsched.RetryPolicy(max_attempts=3, initial_delay=10.0, factor=2.0, max_delay=60.0, jitter=0.0)
    spec = dict(configuration=SHELL, every="90s", retry=policy, keep_runs_days=7, keep_runs_count=50)
    engine.ensure_job("interval", "shell", **spec)
    job = engine.get_job("interval")
    assert (job.interval_seconds, job.cron_expression, job.retry, job.keep_runs_days) == (90, None, policy, 7)
    result = engine.sync_jobs([{"name": "interval", "driver": "shell", **spec}])
    assert result.unchanged == ["interval"] and not result.changes
    changed = engine.sync_jobs([{"name": "interval", "driver": "shell", **{**spec, "retry": None}}])
    assert changed.updated == ["interval"] and set(changed.changes["interval"]) == {"retry"}
    assert engine.get_job("interval").retry is None
    engine.ensure_job("interval", "shell", "*/5 * * * *", **{k: v for k, v in spec.items() if k != "every"})
    switched = engine.get_job("interval")
    assert (switched.cron_expression, switched.interval_seconds, switched.id) == ("*/5 * * * *", None, job.id)
    once = engine.ensure_job("one-off", "shell", run_at=FAR, configuration=SHELL)
    assert once.run_at == FAR and once.cron_expression is None
    assert engine.sync_jobs([{"name": "one-off", "driver": "shell", "run_at": FAR,
                              "configuration": SHELL}]).unchanged == ["one-off"]


# -- sync_jobs --------------------------------------------------------------------------------------------
def declared(*names: str, cron: str = "0 2 * * *") -> list[dict[str, Any]]:
    return [{"name": n, "driver": "shell", "cron": cron, "configuration": SHELL} for n in names]


def test_sync_jobs_creates_updates_and_removes_as_told(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    first = engine.sync_jobs(declared("a", "b", "c"))
    assert (first.created, first.updated, first.unchanged, first.removed) == (["a", "b", "c"], [], [], [])
    ids = {j.name: j.id for j in engine.list_jobs()}
    jobs = declared("a", "b") + declared("d")
    jobs[1]["cron"] = "0 3 * * *"
    keep = engine.sync_jobs(jobs)                                # "keep": c stays as it is
    assert (keep.created, keep.updated, keep.unchanged, keep.removed) == (["d"], ["b"], ["a"], [])
    assert keep.changes == {"b": {"cron": mjsched.FieldChange("0 2 * * *", "0 3 * * *")}}
    assert engine.get_job("c").status is JobStatus.ACTIVE and engine.get_job("b").id == ids["b"]
    paused = engine.sync_jobs(jobs, remove_missing="pause")
    assert (paused.created, paused.updated, paused.removed) == ([], [], ["c"])
    assert paused.unchanged == ["a", "b", "d"]
    assert engine.get_job("c").status is JobStatus.PAUSED and engine.get_job("c").id == ids["c"]
    assert engine.sync_jobs(jobs, remove_missing="pause").removed == []       # already paused
    deleted = engine.sync_jobs(jobs, remove_missing="delete")
    assert deleted.removed == ["c"]
    assert sorted(j.name for j in engine.list_jobs()) == ["a", "b", "d"]


def test_sync_jobs_dry_run_writes_nothing_and_says_what_would_change(db: Any,
                                                                     make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    engine.sync_jobs(declared("a", "b"))
    rows = db.rows("SELECT * FROM mjsched.scheduled_job ORDER BY name")
    jobs = declared("a", cron="0 4 * * *") + declared("new")
    plan = engine.sync_jobs(jobs, remove_missing="delete", dry_run=True)
    assert plan.dry_run and (plan.created, plan.updated, plan.unchanged, plan.removed) == \
        (["new"], ["a"], [], ["b"])
    assert plan.changes["a"] == {"cron": mjsched.FieldChange("0 2 * * *", "0 4 * * *")}
    assert db.rows("SELECT * FROM mjsched.scheduled_job ORDER BY name") == rows
    done = engine.sync_jobs(jobs, remove_missing="delete")
    assert (done.created, done.updated, done.unchanged, done.removed) == \
        (plan.created, plan.updated, plan.unchanged, plan.removed)


def test_sync_jobs_checks_every_declaration_before_writing_any(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    engine.sync_jobs(declared("a"))
    before = db.rows("SELECT * FROM mjsched.scheduled_job")
    bad = declared("b") + [{"name": "c", "driver": "shell", "cron": "61 * * * *", "configuration": SHELL}]
    with pytest.raises(InvalidCronExpression) as info:
        engine.sync_jobs(bad, remove_missing="delete")
    assert "'c'" in str(info.value) and info.value.field == "cron"
    with pytest.raises(ConfigurationError) as info:
        engine.sync_jobs(declared("b", "b"))
    assert info.value.field == "name" and "declared twice" in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        engine.sync_jobs(declared("b"), remove_missing="purge")
    assert info.value.field == "remove_missing"
    for not_a_list in ({"name": "b"}, "b", None):
        with pytest.raises(ConfigurationError):
            engine.sync_jobs(not_a_list)  # type: ignore[arg-type]
    assert db.rows("SELECT * FROM mjsched.scheduled_job") == before


def _race(engines: list[Any], work: Callable[[Any], Any], timeout: float = 60.0) -> list[Any]:
    """``work(engine)`` in one thread per engine, released together by a barrier; bounded."""
    barrier = threading.Barrier(len(engines), timeout=timeout)
    results: list[Any] = [None] * len(engines)
    errors: list[BaseException] = []

    def go(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(engines[i])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(len(engines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a sync_jobs call did not return in time"
    assert not errors, errors
    return results


def _one_job_per_name(sql: Any, names: list[str]) -> None:
    rows = sql.rows("SELECT name, count(*) AS n FROM mjsched.scheduled_job WHERE name = ANY(%s) GROUP BY name",
                    (names,))
    assert {r["name"]: r["n"] for r in rows} == {n: 1 for n in names}


def test_two_engines_syncing_at_start_up_end_with_one_job_per_name(make_engine: Callable[..., Any],
                                                                   sql: Any) -> None:
    """Free race, several rounds: two engines (each its own connections) start sync_jobs on the
    same 20 declarations at the same instant."""
    engines = [make_engine(instance_name=f"sync-{i}") for i in range(2)]
    for round_ in range(4):
        names = [f"r{round_}-job-{i:02d}" for i in range(20)]
        results = _race(engines, lambda e: e.sync_jobs(declared(*names)))
        _one_job_per_name(sql, names)
        assert sorted(results[0].created + results[1].created) == names      # each created exactly once
        for r in results:
            assert sorted(r.created + r.unchanged + r.updated) == names


def test_when_both_engines_miss_the_name_one_insert_wins_and_the_other_adopts_it(
        make_engine: Callable[..., Any], sql: Any) -> None:
    """Forced interleaving: each engine's lookup of a name returns (empty) before either inserts
    it, so both insert every name; the unique name lets one win, and the loser's JobNameTaken
    turns into "the job exists: make it match" (unchanged here)."""
    engines = [make_engine(instance_name=f"sync-{i}") for i in range(2)]
    meet = threading.Barrier(2, timeout=20)
    for engine in engines:
        original, first = engine.backend.jobs_named, set()

        def jobs_named(name: str, original: Any = original, first: set[str] = first) -> list[Any]:
            found = original(name)
            if name not in first:          # the first lookup of each name: wait for the other engine's
                first.add(name)
                meet.wait()
            return found
        engine.backend.jobs_named = jobs_named
    names = [f"job-{i:02d}" for i in range(10)]
    results = _race(engines, lambda e: e.sync_jobs(declared(*names)))
    _one_job_per_name(sql, names)
    assert sorted(results[0].created + results[1].created) == names
    assert sorted(results[0].unchanged + results[1].unchanged) == names
    assert not set(results[0].created) & set(results[1].created)


def _sync_in_a_process(dsn: str, names: list[str], barrier: Any, out: Any) -> None:
    """One application process starting up: its engine, the barrier, then its declared set."""
    engine = mjsched.SchedulingEngine(dsn, lease_timeout=30)
    try:
        barrier.wait(60)
        result = engine.sync_jobs(declared(*names))
        out.put((result.created, result.unchanged, result.updated))
    except BaseException as exc:  # noqa: BLE001 - the parent reports it
        out.put(repr(exc))
    finally:
        engine.close()


def test_three_processes_starting_at_once_end_with_one_job_per_name(pg_dsn: str, sql: Any) -> None:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(3), ctx.Queue()
    names = [f"proc-job-{i:02d}" for i in range(30)]
    procs = [ctx.Process(target=_sync_in_a_process, args=(pg_dsn, names, barrier, out)) for _ in range(3)]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    assert not [r for r in results if isinstance(r, str)], results
    assert [p.exitcode for p in procs] == [0, 0, 0]
    _one_job_per_name(sql, names)
    created = [name for r in results for name in r[0]]
    assert sorted(created) == names                                     # each created by exactly one
    for r in results:
        assert sorted(r[0] + r[1] + r[2]) == names


# -- a name wherever a job is taken ------------------------------------------------------------------------
def test_every_job_method_takes_a_name_as_well_as_an_id(db: Any, make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    job_id = engine.create_job("report", "shell", "0 2 * * *", configuration=SHELL)
    assert engine.get_job("report").id == job_id
    assert engine.get_job(job_id.upper()).id == job_id                 # a UUID in any form is an id
    assert engine.get_job(uuid.UUID(job_id)).id == job_id
    assert engine.pause_job("report").status is JobStatus.PAUSED
    assert engine.resume_job("report").status is JobStatus.ACTIVE
    assert engine.update_job("report", description="d").description == "d"
    run = engine.execute_job("report")
    assert run.scheduled_job_id == job_id
    assert [r.id for r in engine.list_runs("report")] == [run.id]
    assert engine.unlock_job("report") is False
    engine.delete_job("report")
    assert job_count(db) == 0


@pytest.mark.parametrize("call", ["get_job", "pause_job", "resume_job", "execute_job", "unlock_job", "delete_job",
                                  "list_runs", "update_job"])
def test_an_unknown_name_is_job_not_found_naming_it(db: Any, make_engine: Callable[..., Any], call: str) -> None:
    engine = make_engine()
    engine.create_job("report", "shell", "0 2 * * *", configuration=SHELL)
    method = getattr(engine, call)
    with pytest.raises(JobNotFound) as info:
        method("reprot", description="x") if call == "update_job" else method("reprot")
    assert info.value.job_id == "reprot" and info.value.by == "name"
    assert "'reprot'" in str(info.value) and "name" in str(info.value)
    missing = str(uuid.uuid4())
    if call != "list_runs":          # an unknown id lists no runs, as before names
        with pytest.raises(JobNotFound) as info:
            method(missing, description="x") if call == "update_job" else method(missing)
        assert info.value.by == "id"


def test_sql_servers_unique_violation_is_job_name_taken_naming_the_name() -> None:
    """The T-SQL half without a server: error 2627 (or 2601) on uq_scheduled_job_name, as the
    ODBC drivers print it, becomes JobNameTaken naming the name written; another unique
    violation stays a DatabaseError."""
    pyodbc = mssql.require_pyodbc()
    from mjsched.backends.base import naming
    from mjsched.backends.mssql import MssqlBackend

    backend = MssqlBackend("mssql://sa:x@db.example:1433/jobs?driver=FreeTDS")
    taken = pyodbc.IntegrityError("23000", "[23000] [FreeTDS][SQL Server]Violation of UNIQUE KEY constraint "
                                           "'uq_scheduled_job_name'. Cannot insert duplicate key in object "
                                           "'mjsched.scheduled_job'. The duplicate key value is (report). "
                                           "(2627) (SQLExecDirectW)")
    with pytest.raises(JobNameTaken) as info:
        with naming({"name": "report"}), backend._translate("insert_job"):
            raise taken
    assert info.value.name == "report" and info.value.__cause__ is taken
    other = pyodbc.IntegrityError("23000", "[23000] [FreeTDS][SQL Server]Cannot insert duplicate key row in "
                                           "object 'mjsched.x' with unique index 'uq_other'. (2601) (SQLExecDirectW)")
    with pytest.raises(mjsched.DatabaseError):
        with naming({"name": "report"}), backend._translate("insert_job"):
            raise other
