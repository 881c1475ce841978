"""Helpers for tests that talk to a real PostgreSQL server (no fakes)."""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import psycopg2.extras

LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def find_server() -> tuple[str | None, str]:
    candidates = [os.environ["MJSCHED_TEST_POSTGRES_DSN"]] if os.environ.get("MJSCHED_TEST_POSTGRES_DSN") \
        else [LOCAL_DSN]
    reason = "not tried"
    for dsn in candidates:
        try:
            conn = psycopg2.connect(dsn, connect_timeout=3)
            conn.close()
            return dsn, "ok"
        except psycopg2.Error as exc:
            reason = f"{dsn.split('@')[-1]}: {str(exc).strip().splitlines()[0]}"
    return None, reason


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _admin(dsn: str, statement: str) -> None:
    conn = psycopg2.connect(dsn, connect_timeout=5)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


def create_database(server: str, name: str, template: str | None = None) -> None:
    suffix = f' TEMPLATE "{template}"' if template else ""
    for attempt in range(20):  # a template is briefly busy while another test clones it
        try:
            _admin(server, f'CREATE DATABASE "{name}"{suffix}')
            return
        except psycopg2.errors.ObjectInUse:
            time.sleep(0.05 * (attempt + 1))
    _admin(server, f'CREATE DATABASE "{name}"{suffix}')


def drop_database(server: str, name: str) -> None:
    _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Sql:
    """A plain autocommit connection for arranging and asserting rows."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn = psycopg2.connect(dsn, options="-c TimeZone=UTC")
        self.conn.autocommit = True
        self._lock = threading.Lock()

    def rows(self, query: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        with self._lock, self.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
            cur.execute(query, params)
            return [dict(r) for r in cur.fetchall()] if cur.description else []

    def one(self, query: str, params: Sequence[Any] | dict[str, Any] = ()) -> Any:
        rows = self.rows(query, params)
        return next(iter(rows[0].values())) if rows else None

    def run(self, query: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        with self._lock, self.conn.cursor() as cur:
            cur.execute(query, params)
            return cur.rowcount

    def close(self) -> None:
        self.conn.close()


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
             message: str = "condition") -> Any:
    """Poll ``predicate`` until truthy; fail after ``timeout`` seconds (never hang)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
