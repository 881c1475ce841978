"""What the exclusion tests share: a job body that leaves its own trace, the overlap counter
read from that trace, and an outside session holding a lock on rows or a table.

The trace is the evidence, not mjsched's run table: a body that kept running after its
engine lost the lease is seen only in what the body itself wrote. ``spanned`` appends
``begin``, then a ``beat`` every ``BEAT`` seconds, then ``end`` to ``<dir>/<key>.spans``
(one ``os.write`` per line on an ``O_APPEND`` descriptor), with its run id and pid. It
ignores its cancel event: a process-isolated run is stopped only by killing it, so an
execution lives, in the trace, from its ``begin`` to its last line.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Iterable

import psycopg2
import psycopg2.errors

from tests.support.sockets import socket_inodes

BEAT = 0.05


def _line(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def spanned(dir: str, key: str, seconds: float, context: Any) -> dict[str, Any]:  # noqa: A002 - config key
    """A long body that ignores cancel and writes its life to ``<dir>/<key>.spans``."""
    path = os.path.join(dir, f"{key}.spans")
    who = f"{context.run.id} {os.getpid()} {context.run.executed_by_instance}"
    _line(path, f"begin {who} {time.time():.6f}\n")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(BEAT)
        _line(path, f"beat {who} {time.time():.6f}\n")
    _line(path, f"end {who} {time.time():.6f}\n")
    return {"slept": seconds}


@dataclass
class Span:
    """One execution as its own trace shows it: from ``begin`` to its last line."""

    key: str
    run_id: str
    pid: int
    instance: str
    start: float
    last: float
    finished: bool


def spans(directory: str, key: str) -> list[Span]:
    """The executions of ``key``, in order of start."""
    by_run: dict[tuple[str, int], Span] = {}
    try:
        with open(os.path.join(directory, f"{key}.spans")) as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) != 5:
            continue   # a line cut by a kill
        what, run_id, pid, instance, at = parts[0], parts[1], int(parts[2]), parts[3], float(parts[4])
        span = by_run.get((run_id, pid))
        if span is None:
            span = by_run[(run_id, pid)] = Span(key, run_id, pid, instance, at, at, False)
        span.last = max(span.last, at)
        span.finished = span.finished or what == "end"
    return sorted(by_run.values(), key=lambda s: s.start)


def overlaps(executions: Iterable[Span]) -> list[tuple[Span, Span]]:
    """Pairs of executions of one job alive at the same instant (a later one began before an
    earlier one's last sign of life), and any run executed twice."""
    ordered = sorted(executions, key=lambda s: s.start)
    found = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1:]:
            if b.start < a.last or b.run_id == a.run_id:
                found.append((a, b))
    return found


def late_ticks(starts: Iterable[float], since: float, until: float, limit: float) -> int:
    """Whole-second ticks in [since, until] of a per-second job with no execution starting
    within ``limit`` seconds after the tick."""
    ordered = sorted(starts)
    late = 0
    tick = float(int(since) + 1)
    while tick <= until:
        if not any(tick - 0.25 <= s <= tick + limit for s in ordered):
            late += 1
        tick += 1.0
    return late


# -- the outsider --------------------------------------------------------------------------

ROW_LOCKS = ("FOR UPDATE", "FOR NO KEY UPDATE", "FOR SHARE", "FOR KEY SHARE", "UPDATE", "DELETE")

# One table lock per class of what it blocks among the locks an engine's statements take
# (ACCESS SHARE for reads, ROW SHARE for SELECT ... FOR ..., ROW EXCLUSIVE for writes):
#   ACCESS SHARE, ROW SHARE, ROW EXCLUSIVE, SHARE UPDATE EXCLUSIVE (a reader, a row locker,
#   a writer -- the row cells --, a manual VACUUM or ANALYZE) block none of them;
#   SHARE (CREATE INDEX) and SHARE ROW EXCLUSIVE (CREATE TRIGGER, ADD FOREIGN KEY) block the
#   writes, identically: SHARE stands for both;
#   EXCLUSIVE (a write freeze for a consistent export) blocks writes and row locks;
#   ACCESS EXCLUSIVE (ALTER TABLE, VACUUM FULL, a migration) blocks every read as well.
TABLE_LOCKS = ("SHARE", "EXCLUSIVE", "ACCESS EXCLUSIVE")

# The rows the engines use for one victim (a Skip job running on engine ``engine``); a table
# not named here (added tomorrow) has every one of its rows locked.
VICTIM_ROWS = {
    "engine_instance": "instance = %(engine)s",
    "scheduled_job": "id = %(job_id)s",
    "scheduled_job_run": "id = %(run_id)s",
    "scheduled_job_type": "id = (SELECT job_type_id FROM mjsched.scheduled_job WHERE id = %(job_id)s)",
    "job_tag": "scheduled_job_id = %(job_id)s",
    "job_alert_rule": "job_id = %(job_id)s",
    "tag_limit": "tag = (SELECT min(g.tag) FROM mjsched.job_tag g WHERE g.scheduled_job_id = %(job_id)s)",
}


def schema_tables(dsn: str, schema: str = "mjsched") -> list[str]:
    """Every ordinary table of ``schema``, from the catalog."""
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("""SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                            WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname""", (schema,))
            return [r[0] for r in cur.fetchall()]
    finally:
        conn.close()


def non_key_column(cur: Any, table: str, schema: str = "mjsched") -> str:
    """The column an outsider's UPDATE sets to itself: one in no unique index when the table has
    one, else its first column (a table made only of its key, like ``job_tag``). PostgreSQL
    compares the values, so setting a key column to itself takes FOR NO KEY UPDATE all the same."""
    cur.execute("""SELECT a.attname FROM pg_attribute a
                    WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
                      AND a.attgenerated = ''
                    ORDER BY EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = a.attrelid AND i.indisunique
                                        AND a.attnum = ANY (i.indkey)), a.attnum
                    LIMIT 1""", (f"{schema}.{table}",))
    row = cur.fetchone()
    if row is None:
        raise AssertionError(f"{schema}.{table} has no column to update")
    return str(row[0])


class OutsideLock:
    """An operator's open transaction on its own connection, holding ``lock`` on the victim's
    rows of ``table`` (a row lock of ROW_LOCKS) or on the whole table (TABLE_LOCKS) until
    ``release()`` rolls it back. Taking the lock waits at most ``acquire_timeout`` seconds
    (an engine's own row lock is held for milliseconds): a cell that cannot take it fails,
    naming itself, instead of hanging. ``refused`` says why a lock could not be held at all
    (a DELETE a foreign key forbids: the row cannot be held that way)."""

    def __init__(self, dsn: str, table: str, lock: str, victim: dict[str, str], *,
                 acquire_timeout: float = 10.0, schema: str = "mjsched") -> None:
        self.table, self.lock = table, lock
        self.rows = 0
        self.refused: str | None = None
        self.conn = psycopg2.connect(dsn, application_name="mjsched-test-outsider")
        self.conn.autocommit = False
        cell = f"{lock} on {schema}.{table}"
        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT set_config('lock_timeout', %s, true)", (f"{int(acquire_timeout * 1000)}ms",))
                if lock in TABLE_LOCKS:
                    cur.execute(f"LOCK TABLE {schema}.{table} IN {lock} MODE")
                    self.rows = -1
                else:
                    where = VICTIM_ROWS.get(table, "true")
                    if lock == "UPDATE":
                        column = non_key_column(cur, table, schema)
                        cur.execute(f'UPDATE {schema}.{table} SET "{column}" = "{column}" WHERE {where}', victim)
                    elif lock == "DELETE":
                        cur.execute(f"DELETE FROM {schema}.{table} WHERE {where}", victim)
                    else:
                        cur.execute(f"SELECT 1 FROM {schema}.{table} WHERE {where} {lock}", victim)
                    self.rows = cur.rowcount
                    if self.rows == 0:
                        cur.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {schema}.{table})")
                        if cur.fetchone()[0]:   # a table the scenario leaves empty (tags, alerts): no row
                            self.refused = "no row to hold (the table is empty in this scenario)"
        except psycopg2.errors.ForeignKeyViolation as exc:
            self.conn.rollback()
            self.refused = f"refused ({exc.diag.constraint_name})"
        except psycopg2.errors.LockNotAvailable:
            self.conn.close()
            raise AssertionError(f"cell {cell}: the outsider could not take its lock within {acquire_timeout}s")

    def release(self) -> None:
        try:
            self.conn.rollback()
        finally:
            self.conn.close()


def client_ports(pid: int) -> set[int]:
    """Local TCP ports of process ``pid``'s sockets (from /proc): ``pg_stat_activity.client_port``
    of its database connections, so a test can tell one engine's backends from another's."""
    inodes = {str(inode) for inode in socket_inodes(pid)}
    if not inodes:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as fh:
                next(fh)
                for line in fh:
                    fields = line.split()
                    if fields[9] in inodes:
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            continue
    return ports
