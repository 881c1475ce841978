"""The engine's typed parts (issue 13): EngineOptions validated once and frozen, the
listener protocol that refuses a misspelled hook, the dispatcher's PendingClaim."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone
from typing import Any, Callable

import pytest

from mjsched.engine import EngineOptions
from mjsched.engine.dispatch import PendingClaim
from mjsched.errors import ConfigurationError
from mjsched.models import Claim, DispatchResult
from tests.support import drivers  # noqa: F401 - registers test-ok
from tests.support.pg import wait_for


def test_a_misspelled_listener_hook_is_refused_at_add_listener(make_engine: Callable[..., Any]) -> None:
    """Before: getattr(listener, event) found no ``on_pol`` and the hook was silently never called."""
    engine = make_engine()

    class Typo:
        def on_pol(self, result: DispatchResult) -> None: ...

    with pytest.raises(ConfigurationError, match="on_pol"):
        engine.add_listener(Typo())
    with pytest.raises(ConfigurationError, match="none of"):
        engine.add_listener(object())


def test_a_listener_hears_each_poll(make_engine: Callable[..., Any]) -> None:
    engine = make_engine()
    heard: list[DispatchResult] = []

    class Polls:
        def on_poll(self, result: DispatchResult) -> None:
            heard.append(result)

    engine.add_listener(Polls())
    result = engine.dispatch_due_jobs()
    assert heard == [result]


def test_engine_options_are_validated_once_and_frozen(make_engine: Callable[..., Any]) -> None:
    with pytest.raises(ConfigurationError, match="heartbeat_interval"):
        EngineOptions(lease_timeout=30, heartbeat_interval=11)
    with pytest.raises(ConfigurationError, match="min_poll_interval"):
        EngineOptions(min_poll_interval=2, max_poll_interval=1)
    options = EngineOptions(max_concurrent_jobs=3, lease_timeout=30, instance_name="parts-1",
                            allowed_drivers="python")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.lease_timeout = 1      # type: ignore[misc]
    engine = make_engine(options=options)
    assert (engine.max_concurrent_jobs, engine.lease_timeout, engine.instance_name) == (3, 30.0, "parts-1")
    assert engine.allowed_drivers == frozenset({"python"})


def test_a_pending_claim_starts_each_run_once() -> None:
    from datetime import datetime, timezone
    now = datetime.now(timezone.utc)
    pending = PendingClaim()
    run, tick = Claim("job-1", "run-1", "t", now, now), Claim("job-2", None, "t", now, now)
    assert [pending.first_time(c) for c in (run, tick, run, tick)] == [True, True, False, False]
    assert pending.handled == {"run-1", "job-2"}


def test_a_poll_reads_its_jobs_from_the_claim(make_engine: Callable[..., Any], sql: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """One claim round trip per poll: the claimed jobs' rows come with the claim, not from get_jobs."""
    engine = make_engine()
    job_id = engine.create_job(name="due", driver="python", cron="0 0 1 1 *", configuration={"callable": "os:getpid"})
    sql.run("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' WHERE id = %s", (job_id,))

    def no_get_jobs(job_ids: Any) -> Any:
        raise AssertionError(f"get_jobs({sorted(job_ids)}) during a poll")
    monkeypatch.setattr(engine.backend, "get_jobs", no_get_jobs)
    result = engine.dispatch_due_jobs()
    assert result.dispatched == 1, result


def test_the_engines_parts_are_one_frozen_record_wired_to_each_other(make_engine: Callable[..., Any]) -> None:
    """Issue 38: built once in dependency order; each part holds the others, not the facade."""
    engine = make_engine()
    parts = engine.parts
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.keeper = None   # type: ignore[misc]
    assert parts.poller.wakeup is parts.wakeup
    assert parts.run_services.keeper is parts.keeper and parts.run_services.registry is parts.registry
    assert parts.options is engine.options and parts.backend is engine.backend and parts.stats is engine.stats
    assert not parts.wakeup.pending
    engine.on_job_changed()                    # not polling: nothing clears the flag the poll loop would see
    assert parts.wakeup.pending


def test_the_counters_and_the_listeners_are_one_channel(make_engine: Callable[..., Any]) -> None:
    """Every move of a counter of ``engine.stats`` is heard as ``on_count``: after a run, what a
    listener heard adds up to the counters, name by name (no second store to drift apart)."""
    engine = make_engine()
    heard: dict[str, int] = {}

    class Counts:
        def on_count(self, name: str, n: int) -> None:
            heard[name] = heard.get(name, 0) + n

    engine.add_listener(Counts())
    engine.create_job("counted", "test-ok", run_at=datetime.now(timezone.utc))
    wait_for(lambda: engine.dispatch_due_jobs().dispatched == 1, timeout=20)
    wait_for(lambda: engine.inflight == 0, timeout=20)
    assert heard.get("dispatched") == 1
    assert heard == {name: n for name, n in engine.stats.items() if n}
