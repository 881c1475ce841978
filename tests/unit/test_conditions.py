"""WaitedCondition: notifications skip the stdlib's work while nobody waits, and never miss a waiter."""
from __future__ import annotations

import threading
from typing import Any

import pytest

from mjsched.engine.conditions import WaitedCondition


def test_a_notification_with_nobody_waiting_does_not_reach_the_stdlib(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Any, *args: Any) -> None:
        raise AssertionError("Condition.notify reached with no waiter")
    monkeypatch.setattr(threading.Condition, "notify", refuse)
    monkeypatch.setattr(threading.Condition, "notify_all", refuse)
    cond = WaitedCondition(threading.Lock())
    with cond:
        cond.notify_all()
        cond.notify()


def test_wait_for_is_woken_by_notify_all_from_another_thread() -> None:
    cond = WaitedCondition(threading.Lock())
    state = {"ready": False}
    woke: list[bool] = []
    waiting = threading.Event()

    def waiter() -> None:
        with cond:
            waiting.set()
            woke.append(cond.wait_for(lambda: state["ready"], timeout=10.0))

    thread = threading.Thread(target=waiter)
    thread.start()
    assert waiting.wait(10.0)
    with cond:                       # the waiter is in wait() once it released the lock
        state["ready"] = True
        assert cond._waiting == 1
        cond.notify_all()
    thread.join(10.0)
    assert woke == [True]
    assert cond._waiting == 0


def test_the_count_drops_back_after_a_timed_out_wait() -> None:
    cond = WaitedCondition()
    with cond:
        assert cond.wait(0.01) is False
        assert cond._waiting == 0


def test_no_waiter_is_missed_when_many_wait_and_notify_at_once() -> None:
    """Eight threads each wait for their turn; every hand-over is one notify_all. A missed
    waiter stalls the chain, and the bounded waits fail the test instead of hanging it."""
    cond = WaitedCondition(threading.Lock())
    turn = {"n": 0}
    rounds, threads = 200, 8
    failures: list[int] = []

    def player(me: int) -> None:
        for r in range(rounds):
            with cond:
                if not cond.wait_for(lambda: turn["n"] % threads == me, timeout=10.0):
                    failures.append(me)
                    return
                turn["n"] += 1
                cond.notify_all()

    workers = [threading.Thread(target=player, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30.0)
    assert not failures and turn["n"] == rounds * threads
