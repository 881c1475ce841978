"""LazyEvent: a threading.Event whose Condition is made on first use."""
from __future__ import annotations

import threading

from mjsched.engine.lazy_event import LazyEvent


def test_is_set_needs_no_condition() -> None:
    event = LazyEvent()
    assert isinstance(event, threading.Event)
    assert not event.is_set()
    assert event._made is None


def test_set_wakes_a_waiter_on_another_thread() -> None:
    event = LazyEvent()
    waiting = threading.Event()
    woke: list[bool] = []

    def waiter() -> None:
        waiting.set()
        woke.append(event.wait(10.0))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(10.0)
    event.set()
    thread.join(10.0)
    assert woke == [True]
    assert event.is_set() and event.wait(0)
    event.clear()
    assert not event.is_set() and event.wait(0) is False


def test_first_users_at_once_share_one_condition() -> None:
    for _ in range(200):
        event = LazyEvent()
        start = threading.Barrier(8)
        seen: list[threading.Condition] = []

        def touch() -> None:
            start.wait(10.0)
            seen.append(event._cond)

        threads = [threading.Thread(target=touch) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10.0)
        assert len(seen) == 8 and all(c is seen[0] for c in seen)
