"""What a misbehaving driver, notifier or database cannot do to the engine: hold a
slot forever, block other runs' completions, outlive stop_polling() or its bound,
or start a run after the engine stopped."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Callable

import pytest

import mjsched
from mjsched.backends.base import Completion
from mjsched.backends.postgres import PostgresBackend
from mjsched.engine.completions import CompletionWriter
from tests.support import drivers
from tests.support.pg import wait_for

pytestmark = pytest.mark.postgres
NEVER = "0 0 1 1 *"


@pytest.fixture(autouse=True)
def open_gates_afterwards() -> Any:
    yield
    for g in list(drivers.GATES.values()):
        g.set()


def due(engine: mjsched.SchedulingEngine, sql: Any, name: str, driver: str, **fields: Any) -> str:
    job = engine.create_job(name, driver, NEVER, configuration=fields.pop("configuration", {"gate": name}),
                            **fields)
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))
    return job


def runs(sql: Any, job: str) -> list[dict[str, Any]]:
    return sql.rows("SELECT status, error_message, details FROM mjsched.scheduled_job_run "
                    "WHERE scheduled_job_id = %s ORDER BY started_at", (job,))


@pytest.mark.parametrize("driver", ["test-raise-unprintable", "test-raise-interrupt"])
def test_a_driver_that_raises_anything_fails_its_run_and_frees_its_slot(make_engine: Callable[..., Any],
                                                                         sql: Any, driver: str) -> None:
    engine = make_engine(max_concurrent_jobs=1)
    job = due(engine, sql, f"raise-{driver}", driver, configuration={})
    assert engine.dispatch_due_jobs().dispatched == 1
    wait_for(lambda: [r["status"] for r in runs(sql, job)] == ["Failed"], message="the run to fail")
    wait_for(lambda: engine.inflight == 0, message="the slot to come back")
    assert sql.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = %s", (job,)) is None
    (run,) = runs(sql, job)
    assert run["details"]["exception_type"] in ("_Unprintable", "KeyboardInterrupt")


def test_nul_characters_in_a_result_are_stripped_and_the_completion_lands(make_engine: Callable[..., Any],
                                                                          sql: Any) -> None:
    engine = make_engine(max_concurrent_jobs=2)
    bad = due(engine, sql, "nul", "test-nul", configuration={})
    good = due(engine, sql, "ok-beside-nul", "test-ok", configuration={})
    assert engine.dispatch_due_jobs().dispatched == 2
    wait_for(lambda: [r["status"] for r in runs(sql, bad)] == ["Failed"]
             and [r["status"] for r in runs(sql, good)] == ["Completed"], timeout=5,
             message="both completions to land (not wait out a give-up time)")
    (run,) = runs(sql, bad)
    assert run["error_message"] == "badbyte" and run["details"] == {"out": "ab", "k": [""]}


def test_a_completion_the_database_refuses_never_holds_back_the_others(pg_dsn: str, sql: Any,
                                                                       make_engine: Callable[..., Any]) -> None:
    engine = make_engine(max_concurrent_jobs=2)
    jobs = [due(engine, sql, f"w{i}", "test-block") for i in range(2)]
    assert engine.dispatch_due_jobs().dispatched == 2
    (poisoned_run, poisoned_token), (healthy_run, healthy_token) = [
        (r["id"], r["lock_token"]) for j in jobs for r in sql.rows(
            "SELECT id::text, lock_token::text FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (j,))]
    backend = PostgresBackend(pg_dsn)
    writer = CompletionWriter(backend, batch_window=0.05, give_up_after=2.0)
    outcomes: dict[str, Any] = {}
    landed = threading.Event()
    failed_once = threading.Event()
    real = backend.complete_runs

    def watched(items: Any, now: Any = None) -> Any:
        try:
            return real(items, now)
        except mjsched.DatabaseError:
            failed_once.set()
            raise
    backend.complete_runs = watched        # type: ignore[method-assign]
    try:
        writer.submit(Completion(poisoned_run, poisoned_token, "Failed", None, {"x": "a\x00b"}),   # jsonb refuses
                      lambda ok: outcomes.__setitem__("poisoned", ok))
        assert failed_once.wait(5)             # the poisoned item is now being retried...
        writer.submit(Completion(healthy_run, healthy_token, "Completed"),     # ...and a new one comes in
                      lambda ok: (outcomes.__setitem__("healthy", ok), landed.set()))
        assert landed.wait(1.5), "the healthy completion waited for the poisoned one"
        assert outcomes["healthy"] is True
        assert writer.flush(5.0) and outcomes["poisoned"] is None      # given up, not retried forever
    finally:
        writer.stop(timeout=1.0)
        backend.close()
    assert sql.one("SELECT status FROM mjsched.scheduled_job_run WHERE id = %s", (healthy_run,)) == "Completed"


def test_nan_in_details_is_not_json_and_never_blocks_the_completion(make_engine: Callable[..., Any],
                                                                     sql: Any) -> None:
    engine = make_engine()
    job = engine.create_job("nan", "python", NEVER, configuration={"callable": "tests.support.jobs:nan_details"})
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job,))
    assert engine.dispatch_due_jobs().dispatched == 1
    wait_for(lambda: [r["status"] for r in runs(sql, job)] == ["Completed"], timeout=5,
             message="the completion to land")
    assert "unserialisable_details" in runs(sql, job)[0]["details"]


def test_restarted_polling_keeps_renewing_a_run_the_stop_left_running(make_engine: Callable[..., Any],
                                                                      sql: Any) -> None:
    engine = make_engine(lease_timeout=1.2)
    name = "outlives-a-restart"
    job = due(engine, sql, name, "test-block", configuration={"gate": name, "ignore_cancel": True})
    engine.start_polling()
    assert drivers.started(name).wait(5)
    engine.stop_polling(wait=True, max_wait=0.1)      # gives up on the run: its lease is left to lapse
    engine.start_polling()                            # ...but it is ours again
    first = engine.parts.keeper.renewals
    wait_for(lambda: engine.parts.keeper.renewals >= first + 9, timeout=8, message="three leases of renewals")
    assert [r["status"] for r in runs(sql, job)] == ["Running"], "the engine swept its own live run"
    assert sql.one("SELECT count(*) FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (job,)) == 1


def test_runs_dispatched_by_hand_have_their_leases_renewed(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine(lease_timeout=0.6)
    name = "by-hand"
    job = due(engine, sql, name, "test-block")
    assert engine.dispatch_due_jobs().dispatched == 1           # no start_polling()
    assert drivers.started(name).wait(5)
    first = engine.parts.keeper.renewals
    wait_for(lambda: engine.parts.keeper.renewals >= first + 6, timeout=5, message="renewals")   # > 2 leases' worth
    assert sql.one("SELECT expected_completion_at > now() FROM mjsched.scheduled_job WHERE id = %s", (job,))
    assert [r["status"] for r in runs(sql, job)] == ["Running"]


def test_stop_polling_leaves_a_manual_run_its_heartbeat_and_timeout(make_engine: Callable[..., Any],
                                                                    sql: Any) -> None:
    engine = make_engine(lease_timeout=30)
    name = "manual-across-stop"
    job = engine.create_job(name, "test-block", NEVER, configuration={"gate": name, "ignore_cancel": True},
                            max_runtime=1.0)
    engine.start_polling()
    result: dict[str, Any] = {}
    caller = threading.Thread(target=lambda: result.setdefault("run", engine.execute_job(job)))
    caller.start()
    assert drivers.started(name).wait(5)
    engine.stop_polling(wait=False)
    caller.join(10)
    assert not caller.is_alive(), "execute_job never returned: the manual run lost its keeper"
    assert result["run"].status is mjsched.RunStatus.TIMEOUT


def test_a_poll_stuck_in_the_database_hands_back_its_claims_after_stop(make_engine: Callable[..., Any],
                                                                       sql: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine()
    name = "claimed-while-stopping"
    job = due(engine, sql, name, "test-block")
    in_claim, release = threading.Event(), threading.Event()
    real_claim = engine.backend.claim_due_jobs

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        in_claim.set()
        release.wait(10)        # the database answers only after stop_polling() returned
        return real_claim(*args, **kwargs)
    monkeypatch.setattr(engine.backend, "claim_due_jobs", slow_claim)
    engine.start_polling()
    assert in_claim.wait(5)
    started = time.monotonic()
    engine.stop_polling(wait=True, max_wait=0.3)
    assert time.monotonic() - started < 1.5
    release.set()
    wait_for(lambda: [r["status"] for r in runs(sql, job)] == ["Skipped"], message="the claim to be handed back")
    assert not drivers.started(name).is_set(), "a run started after stop_polling() returned"
    counts = sql.rows("SELECT run_count, failure_count, last_run_at FROM mjsched.scheduled_job WHERE id = %s",
                      (job,))[0]
    assert counts == {"run_count": 0, "failure_count": 0, "last_run_at": None}   # a hand-back is no run
    wait_for(lambda: sql.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = %s", (job,)) is None,
             message="the lock to be released")


def test_a_poll_under_way_at_a_graceful_stop_finishes_and_its_runs_drain(make_engine: Callable[..., Any],
                                                                         sql: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine()
    job = due(engine, sql, "claimed-as-stop-begins", "test-ok", configuration={})
    in_claim, release = threading.Event(), threading.Event()
    real_claim = engine.backend.claim_due_jobs

    def slow_claim(*args: Any, **kwargs: Any) -> Any:
        in_claim.set()
        release.wait(10)
        return real_claim(*args, **kwargs)
    monkeypatch.setattr(engine.backend, "claim_due_jobs", slow_claim)
    engine.start_polling()
    assert in_claim.wait(5)
    threading.Timer(0.2, release.set).start()      # the database answers while the stop waits
    engine.stop_polling(wait=True, max_wait=5)
    assert [r["status"] for r in runs(sql, job)] == ["Completed"]


def test_stop_polling_is_bounded_even_when_the_database_is_slow(make_engine: Callable[..., Any], sql: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine()
    engine.start_polling()
    real_unregister = engine.backend.unregister_engine
    monkeypatch.setattr(engine.backend, "unregister_engine", lambda instance: (time.sleep(5),
                                                                              real_unregister(instance)))
    started = time.monotonic()
    engine.stop_polling(wait=True, max_wait=0.2)
    assert time.monotonic() - started < 1.5


def test_a_slow_notifier_never_delays_other_completions(make_engine: Callable[..., Any], sql: Any) -> None:
    notifier = drivers.BlockingNotifier()
    engine = make_engine(notifier=notifier, max_concurrent_jobs=2)
    noisy = due(engine, sql, "noisy", "test-ok", configuration={}, notify_on_success=True)
    assert engine.dispatch_due_jobs().dispatched == 1
    assert notifier.entered.wait(5)                  # its notification hangs from here on
    quiet = due(engine, sql, "quiet", "test-ok", configuration={})
    assert engine.dispatch_due_jobs().dispatched == 1
    wait_for(lambda: [r["status"] for r in runs(sql, quiet)] == ["Completed"], timeout=3,
             message="a completion while the notifier hangs")
    assert [r["status"] for r in runs(sql, noisy)] == ["Completed"]
    assert sql.one("SELECT duration_ms FROM mjsched.scheduled_job_run WHERE scheduled_job_id = %s", (quiet,)) < 1000
    notifier.release.set()


def test_a_run_that_outlives_close_does_not_restart_the_writer(make_engine: Callable[..., Any], sql: Any) -> None:
    engine = make_engine()
    name = "outlives-close"
    due(engine, sql, name, "test-block", configuration={"gate": name, "ignore_cancel": True})
    assert engine.dispatch_due_jobs().dispatched == 1
    assert drivers.started(name).wait(5)
    engine.close()
    drivers.gate(name).set()                           # the run returns after the engine closed
    wait_for(lambda: engine.parts.registry.snapshot() == [], message="the late completion to be given up")
    thread = engine.parts.writer._thread
    assert thread is None or not thread.is_alive(), "the completion writer was restarted after close()"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # the bug, on purpose
def test_a_writer_thread_ended_by_a_bug_is_started_again_by_the_next_completion(
        make_engine: Callable[..., Any], pg_dsn: str) -> None:
    make_engine()                                      # the schema
    backend = PostgresBackend(pg_dsn)
    writer = CompletionWriter(backend, batch_window=0.01)
    real = writer._take_batch
    calls = {"n": 0}

    def first_call_raises(timeout: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the writer's loop")
        return real(timeout)
    writer._take_batch = first_call_raises             # type: ignore[method-assign]
    answered: dict[str, Any] = {}
    try:
        writer.submit(Completion(str(uuid.uuid4()), str(uuid.uuid4()), "Completed"),
                      lambda ok: answered.__setitem__("first", ok))
        wait_for(lambda: not writer._running, timeout=5, message="the writer thread to end on the bug")
        assert "first" not in answered
        writer.submit(Completion(str(uuid.uuid4()), str(uuid.uuid4()), "Completed"),
                      lambda ok: answered.__setitem__("second", ok))
        assert writer.flush(5.0), "the completions were never answered: no writer thread"
        assert answered == {"first": False, "second": False}   # unknown runs: answered, fenced out
    finally:
        writer.stop(timeout=1.0)
        backend.close()


def test_a_schedule_edited_during_a_run_is_not_overwritten_when_it_ends(make_engine: Callable[..., Any],
                                                                       sql: Any) -> None:
    engine = make_engine()
    name = "edited-mid-run"
    job = due(engine, sql, name, "test-block")
    assert engine.dispatch_due_jobs().dispatched == 1
    assert drivers.started(name).wait(5)
    edited = engine.update_job(job, cron="0 12 * * *", timezone="UTC")    # while it runs
    drivers.gate(name).set()
    wait_for(lambda: [r["status"] for r in runs(sql, job)] == ["Completed"], message="the run to complete")
    wait_for(lambda: engine.parts.registry.snapshot() == [], message="the completion to be written")
    after = engine.get_job(job)
    assert after.next_run_at == edited.next_run_at and after.next_run_at.hour == 12
    assert after.lock_token is None and after.run_count == 1


def test_a_notifier_that_hangs_for_ever_never_keeps_the_process_alive(pg_dsn: str) -> None:
    script = f"""
import threading, mjsched
class Hangs(mjsched.Notifier):
    def notify(self, job, run, notification):
        threading.Event().wait()
engine = mjsched.SchedulingEngine({pg_dsn!r}, notifier=Hangs(), lease_timeout=30)
job = engine.create_job("hangs-on-notify", "python", "0 0 1 1 *", configuration={{"callable": "os:getpid"}},
                        notify_on_success=True)
assert engine.execute_job(job).status.value == "Completed"
engine.close()
print("closed", flush=True)
"""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "closed" in done.stdout
    assert time.monotonic() - started < 20, "the interpreter waited for the hung notifier at exit"
