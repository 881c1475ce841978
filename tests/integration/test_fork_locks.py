"""A forked child never waits on a lock a thread of the parent held at the fork.

That thread does not exist in the child, so whatever it held stays held there for ever: a
child that takes such a lock hangs. Which locks a parent's thread holds at the fork is down to
timing, so the test holds all of them: every lock reachable from a polling engine and every
lock of mjsched's modules and classes (found by walking the objects, so a lock added tomorrow
is held too) is taken by a parent's thread across the fork. In the child, the inherited copy
must still refuse every call, shut down at once and read through its backend, and a new
engine made there (the fix the refusal names) must run a process-isolated job by hand; the
parent goes on.

With ``os.fork`` the objects' after-fork hooks make their locks anew; with a fork
mjsched.forking does not see (one made in C), their process-id checks must, before their
first lock; locks at module or class level are process locks either way
(tests/unit/test_process_locks.py checks that statically)."""
from __future__ import annotations

import collections
import contextlib
import importlib
import pkgutil
import sys
import threading
from typing import Any, Callable

import pytest

import mjsched
from mjsched import forking
from mjsched.metrics import EngineMetrics
from tests.support.forks import FORKS, in_child
from tests.support.pg import Sql

from .test_fork import check_the_copy, check_the_parent_goes_on, polling_with_a_run, sessions, use_the_copy

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

LOCKS = (type(threading.Lock()), type(threading.RLock()))
SCALARS = (str, bytes, int, float, bool, type(None))
# Objects of these modules are walked into; of threading's only the lock inside (a Condition's
# waiters are locks its waiting threads hold by design, and a Thread's are the interpreter's).
WALKED = ("mjsched", "concurrent.futures", "queue", "prometheus_client")
INSIDE_THREADING = ((threading.Condition, "_lock"), (threading.Event, "_cond"), (threading.Semaphore, "_cond"))


def reachable_locks(*roots: Any) -> list[Any]:
    """Every threading lock reachable from ``roots`` through mjsched's objects, classes and containers."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, SCALARS):
            continue
        seen.add(id(obj))
        inside = next((name for kind, name in INSIDE_THREADING if isinstance(obj, kind)), None)
        if isinstance(obj, LOCKS):
            found.append(obj)
            continue
        if inside is not None:
            stack.append(getattr(obj, inside, None))
            continue
        if isinstance(obj, type):
            if obj.__module__.startswith("mjsched"):
                stack.extend(vars(obj).values())   # class attributes
            continue
        if isinstance(obj, threading.Thread):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
            stack.extend(obj)
        if getattr(type(obj), "__module__", "").startswith(WALKED):   # a dict of ours has attributes too
            stack.extend(getattr(obj, "__dict__", {}).values())
            for cls in type(obj).__mro__:
                for slot in getattr(cls, "__slots__", ()):
                    if hasattr(obj, slot):
                        stack.append(getattr(obj, slot))
        elif hasattr(obj, "__self__") and getattr(type(obj.__self__), "__module__", "").startswith("mjsched"):
            stack.append(obj.__self__)    # a bound method kept as a callback
    return found


def every_lock(engine: Any) -> list[Any]:
    """The engine's locks and those of every module of mjsched, each imported first (a module
    the child would import anew has fresh locks there, and would prove nothing)."""
    for module in pkgutil.walk_packages(mjsched.__path__, "mjsched."):
        if not module.name.endswith("__main__"):
            with contextlib.suppress(ImportError):   # an extra that is not installed
                importlib.import_module(module.name)
    modules = [vars(m) for name, m in list(sys.modules.items()) if name.startswith("mjsched") and m is not None]
    return reachable_locks(engine, *modules)


def inner(lock: Any) -> Any:
    """The raw lock a Condition or a process lock is made of, as the walk finds it."""
    lock = getattr(lock, "_lock", lock)
    return getattr(lock, "_lock", lock)


class Holder(threading.Thread):
    """Takes every lock it can get within a moment each (the ``must`` ones within 10 s), holds
    them until told the fork is done (or 20 s), then gives them back. A lock it cannot get is
    held by another of the parent's threads: at the fork, the same to the child."""

    def __init__(self, locks: list[Any], must: list[Any]) -> None:
        super().__init__(name="lock-holder", daemon=True)
        self.locks, self.must, self.held = locks, must, []
        self.ready, self.forked = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            for lock in self.locks:
                if lock.acquire(timeout=10 if any(lock is m for m in self.must) else 0.2):
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
        by_hand = engine.create_job("by-hand", "python", every="1h", isolation="process",
                                    configuration={"callable": "os:getpid"})
        engine.pause_job(by_hand)    # the parent never runs it; the child's new engine does
        metrics = EngineMetrics(engine)         # an exporter made before the fork, scraped once
        scrape = metrics.wsgi_app()
        assert b"mjsched_polls_total" in metrics.render()
        before = sessions(sql)
        locks = every_lock(engine) + reachable_locks(metrics)
        backend = engine.backend
        must = [inner(backend._pool._cond), inner(backend._watchdog._cond), inner(forking._tracked_lock),
                engine.stats._lock]
        if fork == "os.fork":   # its before-fork hook takes the gate's lock: the fork would wait for it
            locks = [lock for lock in locks if lock is not inner(forking._gate._cond)]
        else:
            must.append(inner(forking._gate._cond))
        assert all(any(m is lock for lock in locks) for m in must), "the walk missed a lock the child takes"
        holder = Holder(locks, must)
        holder.start()
        assert holder.ready.wait(timeout=90), "the holder took no locks in time"
        assert all(any(m is lock for lock in holder.held) for m in must), "a lock the child takes was not held"
        assert len(holder.held) >= 20, f"only {len(holder.held)} of {len(locks)} locks held"

        def forking_while_held(fork_now: Callable[[], int] = FORKS[fork]) -> int:
            pid = fork_now()
            if pid:
                holder.forked.set()
            return pid

        def child() -> dict[str, Any]:
            out = use_the_copy(engine)
            try:
                metrics.render()
                out["render"] = "answered"
            except mjsched.EngineForked as exc:
                out["render"] = exc.method
            replies: list[str] = []
            body = b"".join(scrape({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": ""},
                                   lambda status, headers: replies.append(status)))
            out["scrape"] = [replies, "post_fork" in body.decode()]
            fresh = mjsched.SchedulingEngine(pg_dsn, lease_timeout=30.0)
            try:
                out["by_hand"] = fresh.execute_job(by_hand, force=True).status.value
            finally:
                fresh.close()
            return out

        try:
            result = in_child(forking_while_held, child, timeout=60)   # a new engine and a child interpreter
        finally:
            holder.forked.set()
            holder.join(timeout=10)
        check_the_copy(result, jobs=("by-hand", "tick"))
        assert result["by_hand"] == "Completed"
        # the copy's metrics are refused, not answered with the parent's numbers as of the fork
        assert result["render"] == "metrics.render"
        assert result["scrape"] == [["503 Service Unavailable"], True]
        assert b"mjsched_polls_total" in metrics.render()    # the parent's still answer
        check_the_parent_goes_on(engine, sql, job_id, before, jobs=("by-hand", "tick"))
    finally:
        sql.close()
