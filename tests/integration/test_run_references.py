"""A finished run is freed by reference counting, not left to the cycle collector (issue 18).

Each run used to leave a reference cycle: the run held its driver's context, whose
``heartbeat`` was a bound method of the run. So every run (about eight objects with its
context, job snapshot and events) became garbage only the cycle collector could free; at
200 runs a second the collector's full passes took 12-23 ms, and since collections follow
allocations, they fell inside the bursts of due jobs, on the tail of the lateness.
"""
from __future__ import annotations

import gc
import json
import uuid
import weakref
from typing import Any, Callable, Iterator

import pytest

import mjsched
from tests.support import drivers
from tests.support.db import Db
from tests.support.pg import wait_for

NEVER = "0 0 1 1 *"


@pytest.fixture
def collector_off() -> Iterator[None]:
    """Only reference counting frees objects during the test."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def watch_runs(engine: mjsched.SchedulingEngine) -> list[weakref.ReferenceType[Any]]:
    """Weak references to every run the engine registers."""
    refs: list[weakref.ReferenceType[Any]] = []
    register = engine.parts.registry.add

    def add(run: Any) -> None:
        refs.append(weakref.ref(run))
        register(run)
    engine.parts.registry.add = add   # type: ignore[method-assign]
    return refs


def test_a_finished_run_is_freed_without_the_cycle_collector(make_engine: Callable[..., Any], db: Db,
                                                             collector_off: None) -> None:
    """Before: the two runs were still alive (run -> context -> run.heartbeat -> run)."""
    engine = make_engine(max_concurrent_jobs=2)
    for _ in range(2):
        job_id = engine.create_job(f"refs-{uuid.uuid4().hex[:8]}", "test-ok", NEVER)
        db.make_due(job_id, 1.0)
    refs = watch_runs(engine)
    assert engine.dispatch_due_jobs().dispatched == 2
    wait_for(lambda: not engine.parts.registry.snapshot(), timeout=10.0)
    assert len(refs) == 2
    wait_for(lambda: all(r() is None for r in refs), timeout=5.0,
             message="finished runs still referenced: a reference cycle, or a thread keeping the last one")


def test_a_drivers_heartbeat_after_its_run_was_freed_says_the_lease_is_gone(
        make_engine: Callable[..., Any], db: Db, collector_off: None) -> None:
    """The context holds its run weakly: a driver that kept its context past the run (a
    leaked thread) is told False, as for any run that is no longer running."""
    engine = make_engine(max_concurrent_jobs=1)
    job_id = engine.create_job(f"refs-{uuid.uuid4().hex[:8]}", "test-keeps-context", NEVER)
    db.make_due(job_id, 1.0)
    refs = watch_runs(engine)
    drivers.KEPT_CONTEXTS.clear()
    assert engine.dispatch_due_jobs().dispatched == 1
    wait_for(lambda: not engine.parts.registry.snapshot(), timeout=10.0)
    wait_for(lambda: all(r() is None for r in refs), timeout=5.0)
    details = db.one("SELECT details FROM mjsched.scheduled_job_run WHERE scheduled_job_id = ?", (job_id,))
    details = details if isinstance(details, dict) else json.loads(details)
    assert details == {"heartbeat": True}           # while it ran, its heartbeat renewed the lease
    assert drivers.KEPT_CONTEXTS[0].heartbeat() is False
