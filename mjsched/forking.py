"""What a forked process does with the engines, backends and pools it inherited.

A fork copies the parent's objects but not its threads, and it shares the parent's open
sockets: an inherited database connection is the parent's session. A query from the
child interleaves with the parent's on the wire ("server closed the connection
unexpectedly"), and even ``close()`` kills the parent's session (libpq sends Terminate on
the shared socket). So in the child:

- every inherited connection is *abandoned*: never used, never closed (each dialect says
  how: ``abandon`` of its pool);
- a pool or a backend starts afresh (new connections of the child's own, new locks: a lock
  a parent's thread held at the fork would be held for ever in the child);
- an engine refuses every call (``EngineForked``, naming the fix): its threads, runs,
  leases and registered name belong to the parent.

Objects that care call ``track(self)``: ``os.register_at_fork`` marks them in the child
right after ``os.fork()`` (and multiprocessing's "fork" start method, which uses it). A
fork made in C without Python's hooks (uWSGI's master, unless ``py-call-osafterfork``)
is caught at the next call instead: each such object remembers its process id
(``ProcessGuard``) and compares it on entry, before it takes any lock of its own, and so do
this module's lock and gate. (Such a fork is only as safe as CPython: a child forked in C
from a process with running threads can hang in the interpreter itself, whose GIL is made
anew only by ``os.fork``; see tests/support/forks.py.)
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from typing import Any, Callable, Iterator, Protocol

log = logging.getLogger(__name__)


class ForkAware(Protocol):
    def after_fork_in_child(self) -> None:
        """Called once in a forked child, before anything else of it runs there; takes no lock
        a parent's thread may have held, and never touches an inherited connection."""


class ProcessLock:
    """A lock that is this process's own: in a forked child, seen by a hook or not, the first
    use makes a new lock there, never the one a parent's thread may have held at the fork
    (that thread does not exist in the child, so its lock would be held for ever). For locks
    no object's after-fork hook remakes: those at module or class level
    (tests/unit/test_process_locks.py), and those a forked process may still take (the
    metrics collectors'). Two threads first in a child get one lock (``dict.setdefault`` is
    atomic). Not for a with-block that forks: the child would release its own, unheld lock.
    Keyed by process id, so a descendant that gets a dead ancestor's id back (a double fork
    and a wrapped pid counter) would share that ancestor's lock."""

    __slots__ = ("_pid", "_lock", "_make", "_children")

    def __init__(self, make: Callable[[], Any] = threading.Lock) -> None:
        self._make = make
        self._pid = os.getpid()
        self._lock = make()
        self._children: dict[int, Any] = {}

    def _current(self) -> Any:
        pid = os.getpid()
        if pid == self._pid:
            return self._lock
        lock = self._children.get(pid)
        return lock if lock is not None else self._children.setdefault(pid, self._make())

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return bool(self._current().acquire(blocking, timeout))

    def release(self) -> None:
        self._current().release()

    def locked(self) -> bool:
        return bool(self._current().locked())

    def __enter__(self) -> bool:   # the common case inline: one method call fewer
        return bool((self._lock if os.getpid() == self._pid else self._current()).acquire())

    def __exit__(self, *exc: object) -> None:
        (self._lock if os.getpid() == self._pid else self._current()).release()


_tracked: "weakref.WeakSet[Any]" = weakref.WeakSet()
_tracked_lock = ProcessLock()


def track(obj: ForkAware) -> None:
    """Call ``obj.after_fork_in_child()`` in every process forked from this one (weakly held)."""
    with _tracked_lock:
        _tracked.add(obj)


class ProcessGuard:
    """The process an object was made in, and whether this is a fork of it.

    ``moved()`` is True in a forked child: at once when Python's at-fork hooks ran (the
    owner's ``after_fork_in_child`` calls ``mark()``), else from the first check that sees
    another process id. ``adopt()`` makes the current process the owner again."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.forked = False
        self._settling = ProcessLock()

    def mark(self) -> None:
        self.forked = True

    def moved(self) -> bool:
        return self.forked or os.getpid() != self.pid

    def adopt(self) -> None:
        self.pid = os.getpid()
        self.forked = False

    def settle(self, make_anew: Callable[[], None]) -> None:
        """In a process this object moved into (marked by a hook, or a fork no hook saw), run
        ``make_anew`` once: the first thread to come does, any other waits for it on a lock of
        this process's own, then finds the object made anew. ``make_anew`` must ``adopt()`` as its last step: a thread
        that checks meanwhile goes on without the lock once it sees the object adopted."""
        if self.moved():
            with self._settling:
                if self.moved():
                    make_anew()


# How long a fork waits for the connections being opened to be recorded by their owners.
FORK_WAIT_SECONDS = 2.0


class _OpeningGate:
    """The database connections being opened in this process, and whether a fork is under way.

    A connection is opened by one call (``psycopg2.connect``) and recorded by its owner (a
    pool, the LISTEN feed) just after: a fork in between hands the child a socket no owner
    has recorded, so no after-fork hook abandons it, and the child holds the parent's session
    (found by tests/integration/test_gunicorn.py: gunicorn forks its workers while a preloaded
    engine's threads are opening their connections). So an owner opens and records inside
    ``opening()``, a fork first waits for those in progress (at most FORK_WAIT_SECONDS: a
    connect to an unreachable server is not waited for longer), and no new one starts until
    the fork is done."""

    def __init__(self) -> None:
        self._guard = ProcessGuard()
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._opening = 0
        self._forking = False
        self._guard.adopt()

    @contextlib.contextmanager
    def opening(self) -> Iterator[None]:
        self._guard.settle(self._reset)   # a fork no hook saw: the parent's lock and counts are not ours
        with self._cond:
            while self._forking:
                self._cond.wait()
            self._opening += 1
        try:
            yield
        finally:
            with self._cond:
                self._opening -= 1
                self._cond.notify_all()

    def before_fork(self) -> None:
        with self._cond:
            self._forking = True
            if not self._cond.wait_for(lambda: self._opening == 0, timeout=FORK_WAIT_SECONDS):
                log.debug("forking while %d database connection(s) are being opened", self._opening)

    def after_fork_in_parent(self) -> None:
        with self._cond:
            self._forking = False
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        self._reset()   # the parent's threads, and the opens they were making, are not here


_gate = _OpeningGate()
opening = _gate.opening


def _after_fork_in_child() -> None:
    _gate.after_fork_in_child()
    for obj in list(_tracked):
        try:
            obj.after_fork_in_child()
        except Exception as exc:  # noqa: BLE001 - the child must start whatever an object says
            log.debug("after-fork hook of %r failed: %s", obj, exc)


def _before_fork() -> None:
    _gate.before_fork()


def _after_fork_in_parent() -> None:
    _gate.after_fork_in_parent()


# The hooks are looked up by name at each fork, so tests/support/forks.py can stand in a fork
# that none of them sees (as a fork made in C) with os.fork itself.
if hasattr(os, "register_at_fork"):   # POSIX; Windows has no fork
    os.register_at_fork(before=lambda: _before_fork(), after_in_parent=lambda: _after_fork_in_parent(),
                        after_in_child=lambda: _after_fork_in_child())
