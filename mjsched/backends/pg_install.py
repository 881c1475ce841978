"""PostgreSQL's install(): the versioned scripts applied over a schema that engines are using.

Three rules keep an upgrade free of errors for the engines polling meanwhile, those of the
previous release included (docs/guide/protocol.md, "Rolling upgrades"; issue 32):

* One installer at a time, for the whole install: an advisory lock held by the session.
* Every table of the schema is taken at once or not at all: each try waits at most
  LOCK_TRY_MS, below the server's deadlock_timeout, and gives back what it took before the
  next. Taken one by one, the install held one table while an engine's call held another
  and wanted the first: "deadlock detected" in that call.
* What a script holds after its ``-- mjsched:after-drain`` line (sqlfiles.AFTER_DRAIN) runs in
  a second transaction, once every transaction that was open when the first one committed
  has ended: a call of the previous release that began before the new procedures committed
  runs its old body to the end, even after waiting for the install's locks, and must not
  meet DDL that body cannot run against.

The cursor is a psycopg2 cursor of postgres.py (rows as dicts); this module does not import
the driver itself.
"""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Iterator, Sequence

from ..sqlfiles import SqlScript

log = logging.getLogger(__name__)

INSTALL_LOCK_KEY = 0x6D6A7363   # "mjsc": the advisory lock key serialising install()
LOCK_TRY_MS = 200               # one try to take every table; below deadlock_timeout (1 s by default)
LOCK_NOT_AVAILABLE = "55P03"


class PgInstaller:
    """One install() on one connection; ``statement_timeout`` (seconds) bounds each wait."""

    def __init__(self, statement_timeout: float) -> None:
        self._timeout = statement_timeout

    def install(self, cur: Any, scripts: Sequence[SqlScript]) -> list[str]:
        """Apply the stale scripts; returns their names (each once, per attempt)."""
        with self._transaction(cur):
            self._set_timeout(cur)
            cur.execute("SELECT pg_advisory_lock(%s)", (INSTALL_LOCK_KEY,))   # the session's, till the end
        try:
            applied, deferred, upgrade = self._apply_first_parts(cur, scripts)
            if deferred:
                if upgrade:
                    self._drain_older_transactions(cur)
                self._apply_after_drain(cur, deferred)
            return applied
        finally:
            with contextlib.suppress(Exception):    # a lost connection gave it back already
                cur.execute("SELECT pg_advisory_unlock(%s)", (INSTALL_LOCK_KEY,))

    # -- the two transactions --------------------------------------------------------------
    def _apply_first_parts(self, cur: Any, scripts: Sequence[SqlScript]) -> tuple[list[str], list[SqlScript], bool]:
        """Every stale script up to its after-drain line. Returns the scripts applied, those
        with a part left for after the drain (their version is recorded with that part), and
        whether this is an upgrade (a schema was installed before)."""
        applied: list[str] = []
        deferred: list[SqlScript] = []
        with self._transaction(cur):
            self._set_timeout(cur)
            cur.execute("CREATE SCHEMA IF NOT EXISTS mjsched")
            cur.execute("""CREATE TABLE IF NOT EXISTS mjsched.schema_version (
                               name varchar(100) PRIMARY KEY, checksum varchar(64) NOT NULL,
                               applied_at timestamptz NOT NULL DEFAULT now())""")
            cur.execute("SELECT name, checksum FROM mjsched.schema_version")
            have = {r["name"]: r["checksum"] for r in cur.fetchall()}
            stale = False
            for script in scripts:
                # Once one script is (re)applied every later one runs again too: they are
                # idempotent, and CREATE OR REPLACE FUNCTION resets what 003_security set.
                if not stale and have.get(script.name) != script.checksum:
                    stale = True
                    self._lock_all_tables(cur)
                if not stale:
                    continue
                cur.execute(script.first_part)
                if script.after_drain.strip():
                    deferred.append(script)
                else:
                    _record_version(cur, script)
                applied.append(script.name)
        return applied, deferred, bool(have)

    def _apply_after_drain(self, cur: Any, deferred: Sequence[SqlScript]) -> None:
        """The after-drain parts, in script order, and the versions of their scripts."""
        with self._transaction(cur):
            self._set_timeout(cur)
            self._lock_all_tables(cur)
            for script in deferred:
                cur.execute(script.after_drain)
                _record_version(cur, script)

    # -- the waits -------------------------------------------------------------------------
    def _drain_older_transactions(self, cur: Any) -> None:
        """Wait until every client transaction of this database that was open when the new
        procedures committed has ended (each holds its virtual transaction id's lock until
        then), at most the statement timeout: an engine's call never outlives it, so one that
        does is not a call of an old body. PostgreSQL offers no SQL wait on another session's
        transaction, hence the short polls. Installers waiting for the install lock are not
        waited for (they wait for this one)."""
        began = time.monotonic()
        deadline = began + self._timeout
        older = _open_transactions(cur, None)
        delay = 0.005
        while older and time.monotonic() < deadline:
            time.sleep(delay)
            delay = min(2 * delay, 0.1)
            older = _open_transactions(cur, older)
        if older:
            log.warning("install: %d transaction(s) open since before the new procedures are still running "
                        "after %.0fs; applying the rest of the upgrade anyway (a call of the previous release "
                        "among them may fail once and be retried)", len(older), time.monotonic() - began,
                        extra={"action": "install_drain_timeout"})
        else:
            log.debug("install: older transactions drained in %.3fs", time.monotonic() - began)

    def _lock_all_tables(self, cur: Any) -> None:
        """Take every table of the schema, at once or not at all (module docstring)."""
        cur.execute("""SELECT string_agg(c.oid::regclass::text, ', ' ORDER BY c.relname) AS tables
                         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = 'mjsched' AND c.relkind IN ('r', 'p')""")
        tables = cur.fetchone()["tables"]
        if not tables:
            return
        cur.execute("SELECT current_setting('lock_timeout') AS setting")
        setting = cur.fetchone()["setting"]
        deadline = time.monotonic() + self._timeout
        delay = 0.01
        while True:
            cur.execute("SAVEPOINT mjsched_lock_tables")
            try:
                cur.execute("SELECT set_config('lock_timeout', %s, true)", (f"{LOCK_TRY_MS}ms",))
                cur.execute(f"LOCK TABLE {tables} IN ACCESS EXCLUSIVE MODE")
            except Exception as exc:
                if getattr(exc, "pgcode", None) != LOCK_NOT_AVAILABLE:
                    raise
                cur.execute("ROLLBACK TO SAVEPOINT mjsched_lock_tables")   # gives back what the try took
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)       # a back-off between tries, not a wait for an event
                delay = min(2 * delay, 0.2)
                continue
            cur.execute("RELEASE SAVEPOINT mjsched_lock_tables")
            cur.execute("SELECT set_config('lock_timeout', %s, true)", (setting,))
            return

    # -- plumbing --------------------------------------------------------------------------
    def _set_timeout(self, cur: Any) -> None:
        """The install's own bounds: the statement timeout, and no lock timeout of its own (an
        engine's backend sets a short one for the session: watchdog.lock_timeout_for_lease),
        so the install lock and the engines' millisecond row locks are waited for, bounded by it."""
        cur.execute("SELECT set_config('statement_timeout', %s, true)", (str(int(self._timeout * 1000)),))
        cur.execute("SELECT set_config('lock_timeout', '0', true)")

    @staticmethod
    @contextlib.contextmanager
    def _transaction(cur: Any) -> Iterator[None]:
        """One transaction on the (autocommit) connection, committed or rolled back whole."""
        conn = cur.connection
        conn.autocommit = False
        try:
            yield
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.autocommit = True


def _record_version(cur: Any, script: SqlScript) -> None:
    cur.execute("""INSERT INTO mjsched.schema_version (name, checksum) VALUES (%s, %s)
                   ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()""",
                (script.name, script.checksum))


def _open_transactions(cur: Any, among: Sequence[str] | None) -> list[str]:
    """Virtual transaction ids of the client transactions now open in this database (other
    than this session's and installers waiting for the install lock), limited to ``among``
    when given. pg_locks and these columns of pg_stat_activity are readable by every role."""
    cur.execute("""SELECT l.virtualxid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                    WHERE l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock' AND l.granted
                      AND a.datid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND a.backend_type = 'client backend' AND l.pid <> pg_backend_pid()
                      AND NOT EXISTS (SELECT 1 FROM pg_locks w
                                       WHERE w.pid = l.pid AND w.locktype = 'advisory' AND NOT w.granted
                                         AND w.classid = 0 AND w.objid = %s AND w.objsubid = 1)
                      AND (%s::text[] IS NULL OR l.virtualxid = ANY (%s::text[]))""",
                (INSTALL_LOCK_KEY, *(list(among) if among is not None else None,) * 2))
    return [str(r["virtualxid"]) for r in cur.fetchall()]
