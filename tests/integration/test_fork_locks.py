"""A forked child never waits on a lock a thread of the parent held at the fork.

That thread does not exist in the child, so whatever it held stays held there for ever: a
child that takes such a lock hangs. Which locks a parent's thread holds at the fork is down to
timing, so the test holds all of them: every lock reachable from a polling engine and every
lock at module level in mjsched (found by walking the objects, so a lock added tomorrow is
held too) is taken by a parent's thread across the fork. The child's copy must still refuse
every call, shut down at once and read through its backend, and the parent goes on.

With ``os.fork`` the after-fork hooks make every lock anew; with a fork none of them sees
(one made in C), each object's process-id check must do it before its first lock."""
from __future__ import annotations

import collections
import sys
import threading
from typing import Any, Callable

import pytest

from mjsched import forking
from tests.support.forks import FORKS, in_child
from tests.support.pg import Sql

from .test_fork import check_the_copy, check_the_parent_goes_on, polling_with_a_run, sessions, use_the_copy

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

LOCKS = (type(threading.Lock()), type(threading.RLock()))
SCALARS = (str, bytes, int, float, bool, type(None))
# Objects of these modules are walked into; of threading's only the lock inside (a Condition's
# waiters are locks its waiting threads hold by design, and a Thread's are the interpreter's).
WALKED = ("mjsched", "concurrent.futures", "queue")
INSIDE_THREADING = {threading.Condition: ("_lock",), threading.Event: ("_cond",),
                    threading.Semaphore: ("_cond",), threading.BoundedSemaphore: ("_cond",)}


def reachable_locks(*roots: Any) -> list[Any]:
    """Every threading lock reachable from ``roots`` through mjsched's objects and containers."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, SCALARS):
            continue
        seen.add(id(obj))
        if isinstance(obj, LOCKS):
            found.append(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(obj)
        elif type(obj) in INSIDE_THREADING:
            stack.extend(getattr(obj, name) for name in INSIDE_THREADING[type(obj)])
        elif isinstance(obj, type) or isinstance(obj, threading.Thread):
            continue
        elif getattr(type(obj), "__module__", "").startswith(WALKED):
            stack.extend(getattr(obj, "__dict__", {}).values())
            for cls in type(obj).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if hasattr(obj, slot):
                        stack.append(getattr(obj, slot))
        elif hasattr(obj, "__self__") and getattr(type(obj.__self__), "__module__", "").startswith("mjsched"):
            stack.append(obj.__self__)    # a bound method kept as a callback
    return found


def every_lock(engine: Any) -> list[Any]:
    modules = [vars(m) for name, m in list(sys.modules.items()) if name.startswith("mjsched") and m is not None]
    return reachable_locks(engine, *modules)


class Holder(threading.Thread):
    """Takes every lock it can get within a moment each, holds them until told the fork is
    done (or 20 s), then gives them back. A lock it cannot get is held by another of the
    parent's threads: at the fork, the same to the child."""

    def __init__(self, locks: list[Any]) -> None:
        super().__init__(name="lock-holder", daemon=True)
        self.locks, self.held = locks, []
        self.ready, self.forked = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            for lock in self.locks:
                if lock.acquire(timeout=0.2):
                    self.held.append(lock)
            self.ready.set()
            self.forked.wait(timeout=20)
        finally:
            for lock in reversed(self.held):
                lock.release()


@pytest.mark.parametrize("fork", list(FORKS), ids=list(FORKS))
def test_no_lock_a_parents_thread_held_at_the_fork_is_waited_for_in_the_child(
        make_engine: Any, pg_dsn: str, fork: str) -> None:
    sql = Sql(pg_dsn)
    try:
        engine, job_id = polling_with_a_run(make_engine, sql)
        before = sessions(sql)
        locks = every_lock(engine)
        if fork == "os.fork":   # its before-fork hook takes the gate's lock: the fork would wait for it
            locks = [lock for lock in locks if lock is not forking._gate._cond._lock]
        holder = Holder(locks)
        holder.start()
        assert holder.ready.wait(timeout=60), "the holder took no locks in time"
        assert len(holder.held) >= 20, f"only {len(holder.held)} of {len(locks)} locks held"

        def forking_while_held(fork_now: Callable[[], int] = FORKS[fork]) -> int:
            pid = fork_now()
            if pid:
                holder.forked.set()
            return pid

        try:
            result = in_child(forking_while_held, lambda: use_the_copy(engine))
        finally:
            holder.forked.set()
            holder.join(timeout=10)
        check_the_copy(result)
        check_the_parent_goes_on(engine, sql, job_id, before)
    finally:
        sql.close()
