"""The poll loop: a wake() during a poll (a slot freed, a completion landed) is never lost,
however many come, and the loop sleeps its delay otherwise."""
from __future__ import annotations

import threading
import time

from mjsched.engine.poller import Poller


def test_wakes_during_a_poll_bring_exactly_the_next_poll_at_once() -> None:
    polls: list[float] = []
    second = threading.Event()
    poller: Poller

    def poll() -> float:
        polls.append(time.monotonic())
        if len(polls) == 1:
            for _ in range(3):        # several runs end while this poll is under way
                poller.wake()
        elif len(polls) == 2:
            second.set()
        return 30.0                   # nothing due for a long time

    poller = Poller(poll, min_interval=0.0, max_interval=60.0)
    poller.start()
    try:
        assert second.wait(5.0), "the wake during the first poll was lost: the loop slept its 30 s"
        time.sleep(0.2)               # a third poll would come at once if a wake were counted twice
        assert len(polls) == 2
    finally:
        poller.stop(timeout=5.0)
    assert not poller.alive


def test_a_wake_between_polls_ends_the_sleep() -> None:
    polls = threading.Semaphore(0)
    poller = Poller(lambda: (polls.release(), 30.0)[1], min_interval=0.0, max_interval=60.0)
    poller.start()
    try:
        assert polls.acquire(timeout=5.0)
        poller.wake()
        assert polls.acquire(timeout=5.0), "wake() did not end the 30 s sleep"
    finally:
        poller.stop(timeout=5.0)
