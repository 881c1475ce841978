"""engine.stats (mjsched/engine/stats.py): increments from many threads are never lost, and
readers still see a plain dict.

On CPython 3.11 a bare ``stats[name] += 1`` happens not to be interrupted between its read and
its write (the interpreter only switches threads at calls and loop jumps), so a stress test of
ints alone passes with or without a lock. The test therefore adds an amount whose addition runs
Python code that gives up the GIL (as a free-threaded build, or a thread switch inside the add,
would): the read-modify-write is then interrupted on every call. The plain-dict control shows
the test can see a lost update; EngineStats must lose none.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from typing import Callable, Iterator, MutableMapping

import pytest

from mjsched.engine.stats import EngineStats

THREADS = 8
BUMPS = 300


class YieldingOne(int):
    """The number 1, whose addition lets another thread run between the read and the write."""

    def __new__(cls) -> YieldingOne:
        return super().__new__(cls, 1)

    def __radd__(self, other: int) -> int:
        time.sleep(0)               # releases the GIL: a thread switch mid-increment, every time
        return int(other) + 1


def old_bump(stats: MutableMapping[str, int], name: str, n: int = 1) -> None:
    """How the engine counted before EngineStats."""
    stats[name] += n


@pytest.fixture(autouse=True)
def tiny_switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def hammer(bump: Callable[[], None]) -> None:
    """THREADS threads, started together, each calling ``bump`` BUMPS times."""
    start = threading.Barrier(THREADS)

    def work() -> None:
        start.wait(timeout=10)
        for _ in range(BUMPS):
            bump()

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)


def test_a_plain_dict_loses_increments_under_this_test() -> None:
    plain = {"dispatched": 0}
    hammer(lambda: old_bump(plain, "dispatched", YieldingOne()))
    assert plain["dispatched"] < THREADS * BUMPS        # the control: the test can see a lost update


def test_engine_stats_loses_no_increment() -> None:
    stats = EngineStats({"dispatched": 0})
    hammer(lambda: stats.bump("dispatched", YieldingOne()))
    hammer(lambda: stats.bump("timeouts"))               # a counter first named by bump starts at 0
    assert stats["dispatched"] == THREADS * BUMPS
    assert stats["timeouts"] == THREADS * BUMPS


def test_readers_see_a_plain_dict() -> None:
    stats = EngineStats({"dispatched": 0, "timeouts": 0})
    stats.bump("dispatched", 3)
    stats.setdefault("runs_purged", 0)
    assert stats["dispatched"] == 3 and stats.get("leases_lost", 0) == 0
    assert dict(stats) == stats.snapshot() == {"dispatched": 3, "timeouts": 0, "runs_purged": 0}
    assert isinstance(stats, dict) and json.loads(json.dumps(stats)) == dict(stats)
    assert type(stats.snapshot()) is dict
