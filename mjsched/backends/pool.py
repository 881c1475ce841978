"""A small thread-safe connection pool, shared by both dialects.

Drivers' own pools hand out dead connections after a server restart; this one
drops any connection its dialect calls broken after an error and opens a fresh
one on demand, up to ``max_size``.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Generic, Iterator, TypeVar

from ..errors import DatabaseError

C = TypeVar("C")


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
    connection that raised must be dropped (it may also roll back and keep it)."""

    def __init__(self, connect: Callable[[], C], broken_after: Callable[[C, BaseException], bool],
                 max_size: int = 8, acquire_timeout: float = 30.0) -> None:
        self._connect = connect
        self._broken_after = broken_after
        self._max_size = max_size
        self._acquire_timeout = acquire_timeout
        self._idle: list[C] = []
        self._open = 0
        self._cond = threading.Condition()
        self._closed = False

    @contextlib.contextmanager
    def connection(self) -> Iterator[C]:
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
        try:
            return self._connect()
        except BaseException as exc:
            mark_connecting(exc)
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def _give_back(self, conn: C, broken: bool) -> None:
        with self._cond:
            if broken or self._closed:
                self._open -= 1
                with contextlib.suppress(Exception):
                    conn.close()  # type: ignore[attr-defined]
            else:
                self._idle.append(conn)
            self._cond.notify()

    def discard_idle(self) -> None:
        """Close idle connections (after an outage they are all suspect)."""
        with self._cond:
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        with self._cond:
            self._closed = True
        self.discard_idle()
