"""Commit-boundary fault injection (Quartz's FlakyJdbcSchedulerTest, for psycopg2).

``FaultPlan(...).connection_factory()`` is a ``psycopg2.extensions.connection``
subclass to pass as ``PostgresBackend(connection_factory=...)`` (the engine
forwards it). The gateway runs in autocommit, so each statement is its own
transaction and the commit boundary is the statement:

* ``connect``: opening a connection fails (Quartz's "create" fault);
* ``before``: the statement never reaches the server (nothing committed) and the
  connection is dropped;
* ``after``: the statement runs and commits, then the connection is dropped
  before the reply is read, as if the reply were lost.

Both raise ``psycopg2.OperationalError``, which the gateway treats as transient
and retries; an ``after`` fault therefore re-runs a statement that already
committed, which is exactly what the procedures must tolerate.
"""
from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from typing import Any

import psycopg2
import psycopg2.extensions

_PROC = re.compile(r"mjsched\.([a-z_]+)\s*\(")


def statement_name(query: Any) -> str:
    text = query.decode() if isinstance(query, bytes) else str(query)
    match = _PROC.search(text)
    return match.group(1) if match else (text.strip().split(None, 1) or ["?"])[0].upper()


class FaultPlan:
    def __init__(self, *, before: float = 0.0, after: float = 0.0, connect: float = 0.0,
                 seed: int | None = None, force_after: dict[str, int] | None = None) -> None:
        """Probabilities per statement (``before``, ``after``) and per connection
        (``connect``); ``force_after`` = {statement name: n} loses the reply of the
        first n executions of that statement for sure (deterministic tests)."""
        self.before, self.after, self.connect = before, after, connect
        self._forced = dict(force_after or {})
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        # Jobs whose lock a fault may have left held until its lease lapses, with no run row
        # to show it: claims whose reply was lost, and faults on the calls that release a lock.
        self.holds: list[dict[str, Any]] = []

    def _roll(self, probability: float) -> bool:
        with self._lock:
            return probability > 0 and self._random.random() < probability

    def _forced_after(self, name: str) -> bool:
        with self._lock:
            if self._forced.get(name, 0) > 0:
                self._forced[name] -= 1
                return True
            return False

    def _count(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def _hold(self, job_id: Any, at: float, why: str) -> None:
        with self._lock:
            self.holds.append({"job_id": str(job_id), "at": at, "why": why})

    def _note_holds(self, name: str, cur: Any, vars: Any, executed: bool) -> None:  # noqa: A002
        now = time.time()
        if name == "claim_due_jobs" and executed and cur.description:
            for row in cur.fetchall():
                job_id = row["job_id"] if isinstance(row, dict) else row[0]
                if job_id is not None:
                    self._hold(job_id, now, "claim reply lost")
        elif name in ("advance_job", "release_job_lock", "acquire_job_lock") and vars:
            self._hold(vars[0], now, f"{name} failed")

    def connection_factory(self) -> type[psycopg2.extensions.connection]:
        plan = self
        cursor_classes: dict[type, type] = {}

        def flaky(base: type) -> type:
            if base not in cursor_classes:
                def execute(cur: Any, query: Any, vars: Any = None) -> Any:  # noqa: A002 - psycopg2's name
                    name = statement_name(query)
                    plan._count(f"statements:{name}")
                    if plan._roll(plan.before):
                        plan._count(f"before:{name}")
                        plan._note_holds(name, cur, vars, executed=False)
                        cur.connection.close()
                        raise psycopg2.OperationalError(f"injected fault: connection lost before {name} ran")
                    result = base.execute(cur, query, vars)
                    if plan._forced_after(name) or plan._roll(plan.after):
                        plan._count(f"after:{name}")
                        plan._note_holds(name, cur, vars, executed=True)
                        cur.connection.close()
                        raise psycopg2.OperationalError(f"injected fault: reply of {name} lost after commit")
                    return result
                cursor_classes[base] = type(f"Flaky{base.__name__}", (base,), {"execute": execute})
            return cursor_classes[base]

        class FlakyConnection(psycopg2.extensions.connection):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                if plan._roll(plan.connect):
                    plan._count("connect")
                    raise psycopg2.OperationalError("injected fault: could not connect")
                super().__init__(*args, **kwargs)

            def cursor(self, *args: Any, **kwargs: Any) -> Any:
                base = kwargs.get("cursor_factory") or self.cursor_factory or psycopg2.extensions.cursor
                kwargs["cursor_factory"] = flaky(base)
                return super().cursor(*args, **kwargs)

        return FlakyConnection
