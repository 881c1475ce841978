"""A small thread-safe connection pool, shared by both dialects.

Drivers' own pools hand out dead connections after a server restart; this one
drops any connection its dialect calls broken after an error and opens a fresh
one on demand, up to ``max_size``. In a forked child it starts afresh: the connections
it inherited are the parent's sessions, abandoned there (never used, never closed:
mjsched/forking.py), and the child opens its own.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Generic, Iterator, TypeVar

from ..errors import DatabaseError
from ..forking import ProcessGuard, opening, track

C = TypeVar("C")

_kept: list[object] = []


def keep_for_ever(conn: object) -> None:
    """The default way to abandon an inherited connection: hold it, so it is never freed
    (a driver may close a connection it frees)."""
    _kept.append(conn)


_CONNECTING = "_mjsched_while_connecting"


def mark_connecting(exc: BaseException) -> None:
    """Note on ``exc`` that it was raised while opening a connection, not by a call on one
    (a gateway then says "cannot connect to host:port", not which routine needed it)."""
    with contextlib.suppress(AttributeError, TypeError):
        setattr(exc, _CONNECTING, True)


def while_connecting(exc: BaseException) -> bool:
    """Whether ``exc`` was raised while opening a connection (``mark_connecting``)."""
    return bool(getattr(exc, _CONNECTING, False))


class PoolTimeout(DatabaseError):
    """No connection became free in time."""


class ConnectionPool(Generic[C]):
    """``connect()`` opens a connection; ``broken_after(conn, exc)`` says whether a
    connection that raised must be dropped (it may also roll back and keep it);
    ``abandon(conn)`` makes a connection inherited across a fork harmless without
    closing it (default: keep_for_ever)."""

    def __init__(self, connect: Callable[[], C], broken_after: Callable[[C, BaseException], bool],
                 max_size: int = 8, acquire_timeout: float = 30.0,
                 abandon: Callable[[C], None] = keep_for_ever) -> None:
        self._connect = connect
        self._broken_after = broken_after
        self._abandon = abandon
        self._max_size = max_size
        self._acquire_timeout = acquire_timeout
        self._idle: list[C] = []
        self._mine: dict[int, C] = {}   # every connection open in this process, idle or lent (by id)
        self._open = 0
        self._cond = threading.Condition()
        self._closed = False
        self._process = ProcessGuard()
        track(self)

    def after_fork_in_child(self) -> None:
        """Abandon every inherited connection (the parent's sessions) and start afresh: no
        connection, a new lock (one a parent's thread held at the fork stays held here)."""
        inherited = list(self._mine.values())   # no lock: this process has one thread now
        self._idle, self._mine, self._open = [], {}, 0
        self._cond = threading.Condition()
        for conn in inherited:
            with contextlib.suppress(Exception):
                self._abandon(conn)
        self._process.adopt()   # last: another thread's check goes on once it sees this

    def _same_process(self) -> None:
        """A fork Python's at-fork hooks did not see (one made in C) is caught here."""
        self._process.settle(self.after_fork_in_child)

    @contextlib.contextmanager
    def connection(self) -> Iterator[C]:
        self._same_process()
        conn = self._take()
        broken = False
        try:
            yield conn
        except BaseException as exc:
            broken = self._broken_after(conn, exc)
            raise
        finally:
            self._give_back(conn, broken)

    def _take(self) -> C:
        deadline = time.monotonic() + self._acquire_timeout
        with self._cond:
            while True:
                if self._closed:
                    raise DatabaseError("connection pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._open < self._max_size:
                    self._open += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolTimeout(f"no database connection free within {self._acquire_timeout:.0f}s "
                                      f"(pool size {self._max_size})")
                self._cond.wait(left)
        with opening():   # a fork never falls between the connect and its record (forking.py)
            try:
                conn = self._connect()
            except BaseException as exc:
                mark_connecting(exc)
                with self._cond:
                    self._open -= 1
                    self._cond.notify()
                raise
            with self._cond:
                self._mine[id(conn)] = conn
        return conn

    def _give_back(self, conn: C, broken: bool) -> None:
        with self._cond:
            if self._mine.get(id(conn)) is not conn:   # lent before a fork: the parent's session
                self._abandon(conn)
                return
            if broken or self._closed:
                self._open -= 1
                del self._mine[id(conn)]
                with contextlib.suppress(Exception):
                    conn.close()  # type: ignore[attr-defined]
            else:
                self._idle.append(conn)
            self._cond.notify()

    def discard_idle(self) -> None:
        """Close idle connections (after an outage they are all suspect)."""
        self._same_process()
        with self._cond:
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            for conn in idle:
                del self._mine[id(conn)]
            self._cond.notify_all()
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        self._same_process()
        with self._cond:
            self._closed = True
        self.discard_idle()
