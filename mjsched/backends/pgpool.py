"""A small thread-safe psycopg2 connection pool.

psycopg2's own ThreadedConnectionPool hands out dead connections after a
server restart; this one drops any connection that saw a connection-level error
and opens a fresh one on demand, up to ``max_size``.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

import psycopg2
import psycopg2.extensions

from ..errors import DatabaseError


class PoolTimeout(DatabaseError):
    """No connection became free in time."""


class ConnectionPool:
    def __init__(self, connect_kwargs: dict[str, Any], max_size: int = 8, acquire_timeout: float = 30.0) -> None:
        self._connect_kwargs = connect_kwargs
        self._max_size = max_size
        self._acquire_timeout = acquire_timeout
        self._idle: list[psycopg2.extensions.connection] = []
        self._open = 0
        self._cond = threading.Condition()
        self._closed = False

    def _new(self) -> psycopg2.extensions.connection:
        conn = psycopg2.connect(**self._connect_kwargs)
        conn.autocommit = True
        return conn

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg2.extensions.connection]:
        conn = self._take()
        broken = False
        try:
            yield conn
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            broken = True
            raise
        except BaseException:
            broken = conn.closed != 0 or conn.get_transaction_status() not in (
                psycopg2.extensions.TRANSACTION_STATUS_IDLE,)
            if broken is False and not conn.autocommit:
                conn.rollback()
            raise
        finally:
            self._give_back(conn, broken or conn.closed != 0)

    def _take(self) -> psycopg2.extensions.connection:
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
            return self._new()
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def _give_back(self, conn: psycopg2.extensions.connection, broken: bool) -> None:
        with self._cond:
            if broken or self._closed:
                self._open -= 1
                with contextlib.suppress(Exception):
                    conn.close()
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
                conn.close()

    def close(self) -> None:
        with self._cond:
            self._closed = True
        self.discard_idle()
