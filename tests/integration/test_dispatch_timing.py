"""When the dispatcher polls, sweeps and wakes (issue 18: lateness at the driver's start).

A sweep due at a due instant waits for the next poll while due jobs wait for slots, so
the claims come first (bounded: at most one more sweep interval); the next wake-up is
counted from the end of the poll, not from the claim's database time.
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import pytest

import mjsched
from tests.support import drivers
from tests.support.db import Db

NEVER = "0 0 1 1 *"


@pytest.fixture(autouse=True)
def open_gates_afterwards() -> Iterator[None]:
    yield
    for g in list(drivers.GATES.values()):
        g.set()


def add_job(engine: mjsched.SchedulingEngine, db: Db, seconds_ago: float) -> str:
    name = f"timing-{uuid.uuid4().hex[:8]}"
    job_id = engine.create_job(name, "test-block", NEVER, configuration={"gate": name})
    db.make_due(job_id, seconds_ago)
    return job_id


def count_calls(engine: mjsched.SchedulingEngine, method: str) -> list[int]:
    """The backend's real ``method``, counted."""
    calls = [0]
    real = getattr(engine.backend, method)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)
    setattr(engine.backend, method, counted)
    return calls


def count_sweeps(engine: mjsched.SchedulingEngine) -> list[int]:
    return count_calls(engine, "sweep_expired_leases")


BOUND = 60.0   # seconds: a dispatch bound made longer than any poll of a slow machine


def backlog(make_engine: Callable[..., Any], db: Db, monkeypatch: pytest.MonkeyPatch, *, bound: str,
            cap: int, due: int) -> tuple[mjsched.SchedulingEngine, Any, list[int], list[str]]:
    """An engine with ``cap`` slots, ``due`` due jobs that block until their gate opens, the
    dispatch bound named ``bound`` made BOUND seconds and its claims counted: (engine,
    dispatcher, claim count, the jobs running after one poll)."""
    from mjsched.engine import dispatch

    monkeypatch.setattr(dispatch, bound, BOUND)
    engine = make_engine(max_concurrent_jobs=cap, lease_timeout=60.0)
    jobs = [add_job(engine, db, 1.0) for _ in range(due)]
    claims = count_calls(engine, "claim_due_jobs")
    result, _ = engine.parts.dispatcher.poll()
    assert (claims[0], result.dispatched, result.skipped_at_capacity) == (1, cap, due - cap)
    running = [j for j in jobs if db.one("SELECT lock_token FROM mjsched.scheduled_job WHERE id = ?", (j,))]
    return engine, engine.parts.dispatcher, claims, running


def test_a_due_sweep_waits_while_due_jobs_wait_for_slots(make_engine: Callable[..., Any], db: Db) -> None:
    """Before: the poll at a due instant swept first, and every claim of that instant waited for it."""
    engine = make_engine(max_concurrent_jobs=1, lease_timeout=60.0)
    for _ in range(2):
        add_job(engine, db, 1.0)
    sweeps = count_sweeps(engine)
    dispatcher = engine.parts.dispatcher
    result, _ = dispatcher.poll()            # never swept: sweeps, then claims one of the two
    assert (sweeps[0], result.dispatched, result.skipped_at_capacity) == (1, 1, 1)
    dispatcher._last_sweep = time.monotonic() - 1.5     # one sweep interval (1 s) passed
    dispatcher.poll()
    assert sweeps[0] == 1, "a due job waits for a slot: its claims come before the sweep"
    dispatcher._last_sweep = time.monotonic() - 2.5     # two intervals: the sweep waits no longer
    dispatcher.poll()
    assert sweeps[0] == 2


def test_a_sweep_runs_at_its_interval_when_nothing_is_due(make_engine: Callable[..., Any], db: Db) -> None:
    engine = make_engine(max_concurrent_jobs=1, lease_timeout=60.0)
    add_job(engine, db, -3600.0)             # due in an hour
    sweeps = count_sweeps(engine)
    dispatcher = engine.parts.dispatcher
    dispatcher.poll()
    dispatcher._last_sweep = time.monotonic() - 1.5
    dispatcher.poll()
    assert sweeps[0] == 2


def test_the_next_wake_up_counts_from_the_end_of_the_poll(make_engine: Callable[..., Any], db: Db) -> None:
    """Before: the delay was next_due_at - the claim's db_now, so work after the claim (here
    a slow housekeeping step, 0.4 s) made the next wake-up that much late."""
    engine = make_engine(max_concurrent_jobs=1, lease_timeout=60.0, max_poll_interval=10.0)
    job_id = add_job(engine, db, -2.0)       # due in 2 s
    purge = engine.parts.housekeeping.purge_if_due

    def slow_purge() -> None:
        time.sleep(0.4)                       # stands for work after the claim, not a synchronisation
        purge()
    engine.parts.housekeeping.purge_if_due = slow_purge   # type: ignore[method-assign]
    _, delay = engine.parts.dispatcher.dispatch(sweep=False)
    left = (db.one("SELECT next_run_at FROM mjsched.scheduled_job WHERE id = ?", (job_id,))
            - db.one(f"SELECT {db.now}")).total_seconds()
    assert delay == pytest.approx(left, abs=0.15), (delay, left)


def test_a_full_engine_claims_again_when_a_slot_frees_not_at_every_wake(
        make_engine: Callable[..., Any], db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: every poll claimed, also with no slot free (a wake while the claim was in the
    database): a claim for nothing, on the path of the one that follows (bench.latency_trace:
    two a second, 1.3 ms each, between the batches). It still claims once a second when full
    (the heartbeat, the counters), and a poll by hand always claims."""
    engine, dispatcher, claims, running = backlog(make_engine, db, monkeypatch, bound="FULL_CLAIM_SECONDS",
                                                  cap=1, due=2)
    result, delay = dispatcher.poll()                  # the one slot is taken: no claim
    assert (claims[0], result.dispatched) == (1, 0)
    assert 0 < delay <= dispatcher._options.max_poll_interval
    dispatcher._claimed_at = time.monotonic() - (BOUND - 0.5)   # 0.5 s left until the next claim is due
    result, delay = dispatcher.poll()
    assert (claims[0], result.dispatched) == (1, 0)
    assert 0 < delay <= 0.5 < dispatcher._options.max_poll_interval, "it wakes for that claim"
    assert engine.dispatch_due_jobs().skipped_at_capacity == 1   # by hand: claims, and says why
    assert claims[0] == 2
    dispatcher._claimed_at = time.monotonic() - BOUND   # that long without a claim
    dispatcher.poll()
    assert claims[0] == 3

    drivers.gate(engine.get_job(running[0]).name).set()   # the running one returns: its slot frees
    assert engine.parts.registry.wait_free_slot(1, 5.0)
    result, _ = dispatcher.poll()
    assert (claims[0], result.dispatched) == (4, 1)


def worker_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.name.startswith("mjsched-worker") and t.ident}


def test_the_first_runs_after_start_up_start_no_thread(make_engine: Callable[..., Any], db: Db) -> None:
    """start_polling starts the cap's worker threads. Before, the first runs each started one
    (``Thread.start()`` waits for the new thread to get the GIL): the first due instants
    after start-up ran 40-90 ms late in bench.latency."""
    engine = make_engine(max_concurrent_jobs=3, lease_timeout=60.0)
    engine.start_polling()
    ready = worker_threads()
    assert len(ready) >= 3
    names = [engine.get_job(add_job(engine, db, 1.0)).configuration["gate"] for _ in range(3)]
    engine.on_job_changed()
    for name in names:
        assert drivers.started(name).wait(10), f"run of {name} did not start"
    assert engine.inflight == 3
    assert worker_threads() <= ready, "a run started a worker thread"


STARTS_POLLING = """
import sys
import mjsched
engine = mjsched.SchedulingEngine(sys.argv[1], max_concurrent_jobs=1)
before = "mjsched.drivers.builtin" in sys.modules
engine.start_polling()
after = "mjsched.drivers.builtin" in sys.modules
engine.stop_polling(wait=False)
engine.close()
print(before, after)
"""


def test_start_polling_loads_the_built_in_drivers(pg_dsn: str) -> None:
    """Before, the first claim imported them (10 ms without bytecode caches, in bench.latency's
    first second): a lookup's first cost belongs to the start, not to a due instant."""
    out = subprocess.run([sys.executable, "-c", STARTS_POLLING, pg_dsn], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_a_backlog_is_claimed_in_batches_not_slot_by_slot(
        make_engine: Callable[..., Any], db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: with due jobs waiting for slots, every freed slot woke a claim of its own
    (bench.throughput: a quarter of the claims took 0-9 rows, each paying the claim's fixed
    cost and its due_left count). Now the background poll waits, at most
    CLAIM_GATHER_SECONDS after its last claim, until half the slots are free or as many as
    the due jobs left; a poll by hand always claims."""
    engine, dispatcher, claims, running = backlog(make_engine, db, monkeypatch, bound="CLAIM_GATHER_SECONDS",
                                                  cap=4, due=7)

    drivers.gate(engine.get_job(running[0]).name).set()   # one slot frees: 1 < min(2 = half, 3 left)
    assert engine.parts.registry.wait_free_slot(4, 5.0)
    result, delay = dispatcher.poll()
    assert (claims[0], result.dispatched) == (1, 0), "one free slot of four waits for more"
    assert 0 < delay <= BOUND

    drivers.gate(engine.get_job(running[1]).name).set()   # two free: half the cap
    assert engine.parts.registry.wait_free_slot(3, 5.0)
    result, _ = dispatcher.poll()
    assert (claims[0], result.dispatched) == (2, 2)       # two at once; one due job left

    drivers.gate(engine.get_job(running[2]).name).set()   # one free: as many as the jobs left
    assert engine.parts.registry.wait_free_slot(4, 5.0)
    result, _ = dispatcher.poll()
    assert (claims[0], result.dispatched) == (3, 1)


def test_a_backlog_waits_for_more_slots_only_within_the_gather_window(
        make_engine: Callable[..., Any], db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gathering never delays a claim asked for by hand, a replay, nor one past the
    window, and the poller wakes when the window ends: a backlog's oldest job waits at most
    CLAIM_GATHER_SECONDS more for company."""
    from mjsched.engine.dispatch import PendingClaim

    engine, dispatcher, claims, running = backlog(make_engine, db, monkeypatch, bound="CLAIM_GATHER_SECONDS",
                                                  cap=4, due=9)
    drivers.gate(engine.get_job(running[0]).name).set()
    assert engine.parts.registry.wait_free_slot(4, 5.0)
    dispatcher._claimed_at = time.monotonic() - (BOUND - 0.5)   # 0.5 s of the window left
    result, delay = dispatcher.poll()
    assert (claims[0], result.dispatched) == (1, 0)
    assert 0 < delay <= 0.5 < dispatcher._options.max_poll_interval, "it wakes when the window ends"
    dispatcher._claimed_at = time.monotonic() - BOUND     # the window has passed
    result, _ = dispatcher.poll()
    assert (claims[0], result.dispatched) == (2, 1)

    drivers.gate(engine.get_job(running[1]).name).set()
    assert engine.parts.registry.wait_free_slot(4, 5.0)
    assert engine.dispatch_due_jobs().dispatched == 1     # by hand: claims at once
    assert claims[0] == 3

    drivers.gate(engine.get_job(running[2]).name).set()
    assert engine.parts.registry.wait_free_slot(4, 5.0)
    dispatcher._pending = PendingClaim()   # 1 free < min(2, 3 left), but a claim that raised: replayed at once
    dispatcher.poll()
    assert (claims[0], dispatcher._pending) == (4, None)
