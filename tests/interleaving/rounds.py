"""Rounds: install a state, play calls from separate connections, check the invariants.

An ``Arena`` is one database (one per test module) with its own connections: an admin
connection (the schema owner, for states and checks), one worker connection per call
of a round, and a controller connection for forced pauses. Every connection is
autocommit, with bounded statement and lock timeouts so a bug fails a round instead of
hanging the suite, and a short deadlock_timeout so a deadlock costs milliseconds, not
the server's default second.

Two ways to play a round:
- ``barrier_round``: every call on its own thread, released together by a Barrier
  (one side delayed by a random few hundred microseconds, to vary the overlap).
- ``pause_round``: the first call is parked at a named statement boundary inside its
  procedure (mjsched.test_pause, the owner-only hook) while the second runs to its end
  or until it blocks on a row lock; then the first is let go.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import psycopg2
import psycopg2.extras

from tests.interleaving import invariants
from tests.interleaving.catalogue import Call, replay_of
from tests.interleaving.invariants import Outcome, Violation
from tests.interleaving.states import (JOB_COLUMNS, RETRY_COLUMNS, RUN_COLUMNS, State, generate, job_rows,
                                       run_rows)

log = logging.getLogger("mjsched.tests.interleaving")

DEADLOCK, SERIALIZATION = "40P01", "40001"
JOIN_SECONDS = 20.0          # a call still running after this is a hang (reported, then cancelled)
BLOCK_WAIT_SECONDS = 5.0     # how long a pause round waits for a call to park, block or finish
SESSION = ("SET statement_timeout = '15s'; SET lock_timeout = '12s'; SET deadlock_timeout = '20ms'; "
           "SET idle_in_transaction_session_timeout = '30s'")


class Worker:
    """One real connection of the arena (psycopg2, autocommit)."""

    def __init__(self, dsn: str, name: str) -> None:
        self.name = name
        self.conn = psycopg2.connect(dsn, options="-c TimeZone=UTC", application_name=f"interleaving-{name}")
        self.conn.autocommit = True
        with self.conn.cursor() as cur:
            cur.execute(SESSION)
            cur.execute("SELECT pg_backend_pid()")
            self.pid = int(cur.fetchone()[0])

    def call(self, sql: str, params: Sequence[Any]) -> Outcome:
        started = time.monotonic()
        try:
            with self.conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                cur.execute(sql, list(params))
                rows = [dict(r) for r in cur.fetchall()] if cur.description else []
            return Outcome(rows, seconds=time.monotonic() - started)
        except psycopg2.Error as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return Outcome([], exc.pgcode or "?", message, time.monotonic() - started)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sql, list(params))

    def close(self) -> None:
        self.conn.close()


@dataclass
class RoundResult:
    outcomes: list[Outcome]
    violations: list[Violation]
    checks: int
    note: str = ""                  # pause rounds: "not reached", "blocked", ...


@dataclass
class Stats:
    """Counts of one test (or of everything): what the summary prints."""
    rounds: int = 0
    checks: int = 0
    violations: dict[str, int] = field(default_factory=dict)
    deadlocks: int = 0
    serialization: int = 0
    errors: dict[str, int] = field(default_factory=dict)    # other SQLSTATEs, "hang" for a timed-out join
    notes: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def add(self, result: RoundResult, label: str, context: Callable[[], str]) -> None:
        self.rounds += 1
        self.checks += result.checks
        if result.note:
            self.notes[result.note] = self.notes.get(result.note, 0) + 1
        for v in result.violations:
            self.violations[v.inv] = self.violations.get(v.inv, 0) + 1
        for o in result.outcomes:
            if o.sqlstate == DEADLOCK:
                self.deadlocks += 1
            elif o.sqlstate == SERIALIZATION:
                self.serialization += 1
            elif o.sqlstate or o.timed_out:
                key = "hang" if o.timed_out else f"{o.sqlstate} {o.error}"[:90]
                self.errors[key] = self.errors.get(key, 0) + 1
        bad = result.violations or any(o.sqlstate or o.timed_out for o in result.outcomes)
        if bad and len(self.examples) < 6:
            what = [f"{v.inv}: {v.detail}" for v in result.violations[:3]]
            what += [f"{o.sqlstate}: {o.error}" for o in result.outcomes if o.sqlstate][:2]
            self.examples.append(f"{label}: {'; '.join(what)}\n      {context()}")

    def merge(self, other: "Stats") -> None:
        self.rounds += other.rounds
        self.checks += other.checks
        self.deadlocks += other.deadlocks
        self.serialization += other.serialization
        for mine, theirs in ((self.violations, other.violations), (self.errors, other.errors),
                             (self.notes, other.notes)):
            for k, n in theirs.items():
                mine[k] = mine.get(k, 0) + n

    @property
    def total_violations(self) -> int:
        return sum(self.violations.values())

    def line(self) -> str:
        v = ", ".join(f"{k}={n}" for k, n in sorted(self.violations.items())) or "none"
        e = ", ".join(f"{k} x{n}" for k, n in sorted(self.errors.items()))
        notes = ", ".join(f"{k}={n}" for k, n in sorted(self.notes.items()))
        return (f"rounds={self.rounds} checks={self.checks} violations={self.total_violations} ({v}) "
                f"deadlocks={self.deadlocks} serialization_failures={self.serialization}"
                + (f" errors: {e}" if e else "") + (f" [{notes}]" if notes else ""))


class Arena:
    """One database and the connections that play rounds on it."""

    def __init__(self, dialect: str, dsn: str, label: str) -> None:
        assert dialect == "postgres", "only the PostgreSQL arena is written; SQL Server skips before this"
        self.dialect = dialect
        self.dsn = dsn
        self.label = label                  # what schema is installed (the working tree, or a revision)
        self.admin = Worker(dsn, "admin")
        self.workers = [Worker(dsn, f"w{i}") for i in range(3)]
        self.controller = Worker(dsn, "controller")
        self.procedures = {r["proname"] for r in self.rows(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'mjsched'")}
        self.type_id = str(self.rows("INSERT INTO mjsched.scheduled_job_type (name, driver_class) "
                                     "VALUES ('interleaving', 'interleaving') RETURNING id")[0]["id"])
        self._installs = 0
        self.retries = bool(self.rows(   # a schema with retries (009): attempts, retry_at
            "SELECT 1 AS x FROM information_schema.columns WHERE table_schema = 'mjsched' "
            "AND table_name = 'scheduled_job_run' AND column_name = 'attempt'"))
        self.tags = bool(self.rows(      # a schema with tags and their limits (010): invariant I10
            "SELECT 1 AS x FROM information_schema.tables WHERE table_schema = 'mjsched' "
            "AND table_name = 'tag_limit'"))

    def close(self) -> None:
        for w in [self.admin, self.controller, *self.workers]:
            try:
                w.close()
            except psycopg2.Error:
                pass

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        outcome = self.admin.call(sql, params)
        if outcome.sqlstate:
            raise AssertionError(f"admin query failed: {outcome.sqlstate} {outcome.error}\n{sql}")
        return outcome.rows

    def has(self, proc: str) -> bool:
        return proc in self.procedures

    def pause_points(self) -> list[str]:
        """Every mjsched.test_pause('<procedure>:<step>') call in the installed procedures."""
        return sorted({r["point"] for r in self.rows(
            r"""SELECT (regexp_matches(p.prosrc, 'test_pause\(\s*''([^'']+)''', 'g'))[1] AS point
                  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'mjsched' AND p.proname <> 'test_pause'""")})

    # -- states ------------------------------------------------------------------------------
    def install(self, state: State) -> None:
        """Empty the tables and write the state, in one round trip (TRUNCATE now and then, so
        the DELETEs never scan much)."""
        self._installs += 1
        tagged = ", mjsched.job_tag, mjsched.job_pause, mjsched.tag_limit" if self.tags else ""
        # CASCADE: every table that refers to the jobs goes too (alert rules and alerts, and any
        # added later), as the DELETEs remove them by their ON DELETE CASCADE
        wipe = (f"TRUNCATE mjsched.scheduled_job_run{tagged}, mjsched.scheduled_job CASCADE" if self._installs % 500 == 0
                else "DELETE FROM mjsched.scheduled_job_run; DELETE FROM mjsched.scheduled_job"
                     + ("; DELETE FROM mjsched.tag_limit" if self.tags else ""))
        with self.admin.conn.cursor() as cur:
            parts = [wipe]
            for table, columns, rows in (("scheduled_job", JOB_COLUMNS, job_rows(state, self.type_id)),
                                         ("scheduled_job_run", RUN_COLUMNS + RETRY_COLUMNS if self.retries
                                          else RUN_COLUMNS, [r if self.retries else r[:len(RUN_COLUMNS)]
                                                             for r in run_rows(state)])):
                if rows:
                    marks = "(" + ", ".join(["%s"] * len(columns)) + ")"
                    values = ", ".join(cur.mogrify(marks, r).decode() for r in rows)
                    parts.append(f"INSERT INTO mjsched.{table} ({', '.join(columns)}) VALUES {values}")
            if self.tags:
                parts += self._tag_limit(state)
            cur.execute(";\n".join(parts))

    def _tag_limit(self, state: State) -> list[str]:
        """I10's setting: every other job carries the tag 'limited', whose limit is its Running tick
        runs now, or one more every other install: each round starts at or one below the limit,
        so a claim of a tagged job must be refused, or exactly one of two racing claims admitted."""
        ids = [j.id for n, j in enumerate(state.jobs) if n % 2 == 0]
        if not ids:
            return []
        running = sum(1 for j in state.jobs if j.id in ids for r in j.runs
                      if r.status == "Running" and r.scheduled_for is not None)
        values = ", ".join(f"('{i}', 'limited')" for i in ids)
        return [f"INSERT INTO mjsched.job_tag (scheduled_job_id, tag) VALUES {values}",
                "INSERT INTO mjsched.tag_limit (tag, max_running, set_at, set_by) "
                f"VALUES ('limited', {running + self._installs % 2}, now(), 'interleaving')"]

    # -- checks ------------------------------------------------------------------------------
    def check(self, state: State, calls: Sequence[Call], outcomes: Sequence[Outcome]) -> tuple[list[Violation], int]:
        found = invariants.table_violations(self.rows(invariants.table_checks(self.retries, self.tags)), state)
        checks = len(invariants.TABLE_INVARIANTS) + 1   # + I7, read from the outcomes
        checks += len(invariants.TAG_INVARIANTS) if self.tags else 0
        renewals = ("renew", "renew_skip")
        renewed = [str(r["lock_token"]) for c, o in zip(calls, outcomes) if c.op in renewals for r in o.rows]
        if any(c.op in renewals for c in calls):
            checks += 1
        if renewed:
            runs: dict[str, list[dict[str, Any]]] = {}
            for r in self.rows("SELECT lock_token::text AS token, status, lease_expires_at "
                               "FROM mjsched.scheduled_job_run WHERE lock_token = ANY (%s::uuid[])", (renewed,)):
                runs.setdefault(r["token"], []).append(r)
            job_ids = [j.id for t in renewed if (j := state.job_of_token(t.lower()))]
            jobs = {r["id"]: r for r in self.rows(
                "SELECT id::text AS id, lock_token, expected_completion_at FROM mjsched.scheduled_job "
                "WHERE id = ANY (%s::uuid[])", (job_ids,))}
            found += invariants.renewal_violations(calls, outcomes, state, runs, jobs)
        return found, checks

    # -- playing ---------------------------------------------------------------------------
    def _cancel_stragglers(self, threads: list[threading.Thread], workers: list[Worker]) -> None:
        for thread, worker in zip(threads, workers):
            if thread.is_alive():
                log.warning("interleaving: a call on %s still ran after %.0f s; cancelling it", worker.name,
                            JOIN_SECONDS)
                self.rows("SELECT pg_cancel_backend(%s)", (worker.pid,))
                thread.join(JOIN_SECONDS)

    def barrier_round(self, state: State, calls: Sequence[Call], rng: random.Random) -> RoundResult:
        self.install(state)
        workers = self.workers[:len(calls)]
        outcomes: list[Outcome | None] = [None] * len(calls)
        barrier = threading.Barrier(len(calls), timeout=JOIN_SECONDS)
        delays = [0.0] * len(calls)
        if rng.random() < 0.7:
            delays[rng.randrange(len(calls))] = rng.uniform(0.0, 0.0015)

        def play(i: int) -> None:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                outcomes[i] = Outcome([], "barrier", "the barrier broke")
                return
            if delays[i]:
                time.sleep(delays[i])          # jitter only: which call runs first is the point
            outcomes[i] = workers[i].call(calls[i].sql(self.dialect), calls[i].params)

        threads = [threading.Thread(target=play, args=(i,), name=f"interleaving-{i}", daemon=True)
                   for i in range(len(calls))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + JOIN_SECONDS
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        hung = [i for i, t in enumerate(threads) if t.is_alive()]
        self._cancel_stragglers(threads, workers)
        final = [o or Outcome([], None, None) for o in outcomes]
        for i in hung:
            final[i].timed_out = True
        violations, checks = self.check(state, calls, final)
        return RoundResult(final, violations, checks)

    # -- forced pauses -------------------------------------------------------------------------
    def _activity(self, pid: int) -> dict[str, Any]:
        rows = self.rows("SELECT state, wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s", (pid,))
        return rows[0] if rows else {}

    def _wait_parked_blocked_or_done(self, worker: Worker, thread: threading.Thread,
                                     parked: bool) -> str:
        """'done', 'parked' (on the pause's advisory lock), 'blocked' (on a row lock) or 'stuck'."""
        deadline = time.monotonic() + BLOCK_WAIT_SECONDS
        while True:
            if not thread.is_alive():
                return "done"
            act = self._activity(worker.pid)
            if act.get("wait_event_type") == "Lock":
                if act.get("wait_event") == "advisory":
                    return "parked" if parked else "blocked"
                if not parked:
                    return "blocked"
            if time.monotonic() > deadline:
                return "stuck"
            thread.join(0.001)

    def start(self, worker: Worker, call: Call) -> "Pending":
        """Run ``call`` on ``worker`` in a thread of its own; see ``Pending``."""
        pending = Pending(worker, call)
        pending.thread = threading.Thread(target=pending.run, args=(self.dialect,), daemon=True,
                                          name=f"interleaving-{worker.name}")
        pending.thread.start()
        return pending

    def settle(self, pending: "Pending", parked: bool = False) -> str:
        """Wait (bounded) until the call is done, blocked on a lock, or parked at its pause."""
        return self._wait_parked_blocked_or_done(pending.worker, pending.thread, parked)

    def finish(self, pendings: Sequence["Pending"]) -> list[Outcome]:
        """Join every call (bounded); one still running is a hang: reported, then cancelled."""
        deadline = time.monotonic() + JOIN_SECONDS
        for p in pendings:
            p.thread.join(max(0.0, deadline - time.monotonic()))
        hung = [p for p in pendings if p.thread.is_alive()]
        self._cancel_stragglers([p.thread for p in pendings], [p.worker for p in pendings])
        final = []
        for p in pendings:
            outcome = p.outcome or Outcome([], None, None)
            outcome.timed_out = p in hung
            final.append(outcome)
        return final

    def pause_round(self, state: State, paused: Call, point: str, other: Call, key: int) -> RoundResult:
        """Park ``paused`` at ``point``; run ``other`` to its end (or until it blocks); let go."""
        self.install(state)
        first, second = self.workers[0], self.workers[1]
        first.execute("SELECT set_config('mjsched.pause_at', %s, false), set_config('mjsched.pause_key', %s, false)",
                      (point, str(key)))
        self.controller.execute("SELECT pg_advisory_lock(%s)", (key,))
        pendings: list[Pending] = []
        try:
            pendings.append(self.start(first, paused))
            where = self.settle(pendings[0], parked=True)
            if where != "parked":
                note = "not reached" if where == "done" else f"first call {where}"
            else:
                pendings.append(self.start(second, other))
                note = "other " + self.settle(pendings[1])
        finally:
            self.controller.execute("SELECT pg_advisory_unlock(%s)", (key,))
        outcomes = self.finish(pendings)
        first.execute("SELECT set_config('mjsched.pause_at', '', false)")
        calls = [paused, other][:len(pendings)]
        violations, checks = self.check(state, calls, outcomes)
        return RoundResult(outcomes, violations, checks, note)


@dataclass
class Pending:
    """A call running on its own thread, for tests that stage calls one after another."""
    worker: Worker
    call: Call
    outcome: Outcome | None = None
    thread: threading.Thread = field(init=False)

    def run(self, dialect: str) -> None:
        self.outcome = self.worker.call(self.call.sql(dialect), self.call.params)


def play_barrier(arena: Arena, ops: Sequence[Any], rounds: int, rng: random.Random, label: str,
                 seed: int, replay: bool = False) -> Stats:
    """``rounds`` barrier rounds of the given operations over freshly generated states;
    with ``replay``, the one operation races its own replay (same arguments, p_replay set)."""
    stats = Stats()
    needs = [n for op in ops for n in op.needs]
    for n in range(rounds):
        for _attempt in range(50):
            state = generate(rng, datetime.now(timezone.utc), needs)
            calls = [op.build(state, rng) for op in ops]
            if all(calls):
                break
        else:
            raise AssertionError(f"{label}: 50 generated states lacked what the calls need")
        if replay:
            calls = [calls[0], replay_of(calls[0])]
        result = arena.barrier_round(state, calls, rng)
        stats.add(result, label, lambda: f"seed {seed} {label} round {n}: state [{state.describe()}]\n      calls: "
                                          + "; ".join(c.describe() for c in calls))
    return stats


def assert_clean(stats: Stats, label: str, seed: int) -> None:
    """No violation, no deadlock, no serialization failure, no other error or hang."""
    if stats.total_violations or stats.deadlocks or stats.serialization or stats.errors:
        examples = "\n  ".join(stats.examples)
        raise AssertionError(f"{label} (seed {seed}): {stats.line()}\n  {examples}")
