"""The state-changing procedures, as the rounds call them: raw SQL on a real connection.

``SQL`` holds each call's text keyed by dialect (PostgreSQL placeholders are ``%s``,
SQL Server's ``?``), so a SQL Server half needs no change here. Every operation builds
its arguments from the round's state and only plays a move a correct caller could make
in it (``needs``: see states.PROVIDES); the round's clock goes in as p_now wherever the
procedure takes one. Operations whose procedure is not installed (the v3 additions on an
older schema) are skipped by the tests.
"""
from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable

from tests.interleaving.states import A, B, C, LEASE, State

SQL: dict[str, dict[str, str]] = {
    "claim": {
        "postgres": "SELECT * FROM mjsched.claim_due_jobs(%s, %s, %s, %s, %s::uuid, %s)",
        "mssql": "EXEC mjsched.claim_due_jobs @p_instance = ?, @p_max_jobs = ?, @p_lease_seconds = ?, "
                 "@p_now = ?, @p_claim_id = ?, @p_replay = ?;",
    },
    "renew": {
        "postgres": "SELECT lock_token FROM mjsched.extend_job_leases(%s::uuid[], %s, %s, %s)",
        "mssql": "EXEC mjsched.extend_job_leases @p_tokens = ?, @p_lease_seconds = ?, @p_instance = ?, @p_now = ?;",
    },
    # the renewal this release's engines make: never waits on a held job row (busy tokens are
    # answered renewed = false and are neither renewed nor lost; only renewed ones are checked)
    "renew_skip": {
        "postgres": "SELECT lock_token FROM mjsched.renew_leases(%s::uuid[], %s, %s, %s) WHERE renewed",
        "mssql": "EXEC mjsched.renew_leases @p_tokens = ?, @p_lease_seconds = ?, @p_instance = ?, @p_now = ?;",
    },
    "complete": {
        "postgres": "SELECT run_id, completed FROM mjsched.complete_job_runs(%s::jsonb, %s)",
        "mssql": "EXEC mjsched.complete_job_runs @p_items = ?, @p_now = ?;",
    },
    # the completion this release's engines make: never waits on a held job row (busy items are
    # answered busy = 1 and nothing of them is written)
    "complete_skip": {
        "postgres": "SELECT run_id, completed, busy FROM mjsched.complete_runs(%s::jsonb, %s)",
        "mssql": "EXEC mjsched.complete_runs @p_items = ?, @p_now = ?;",
    },
    "sweep": {
        "postgres": "SELECT * FROM mjsched.sweep_expired_leases(%s)",
        "mssql": "EXEC mjsched.sweep_expired_leases @p_now = ?;",
    },
    "acquire": {
        "postgres": "SELECT acquired FROM mjsched.acquire_job_lock(%s::uuid, %s::uuid, %s, %s, %s, %s)",
        "mssql": "EXEC mjsched.acquire_job_lock @p_job_id = ?, @p_token = ?, @p_instance = ?, "
                 "@p_lease_seconds = ?, @p_require_due = ?, @p_now = ?;",
    },
    "release": {
        "postgres": "SELECT released FROM mjsched.release_job_lock(%s::uuid, %s::uuid)",
        "mssql": "EXEC mjsched.release_job_lock @p_job_id = ?, @p_token = ?;",
    },
    "begin": {
        "postgres": "SELECT run_id FROM mjsched.begin_job_run(%s::uuid, %s::uuid, %s, %s, %s)",
        "mssql": "EXEC mjsched.begin_job_run @p_job_id = ?, @p_token = ?, @p_instance = ?, "
                 "@p_scheduled_for = ?, @p_now = ?;",
    },
    "enqueue": {
        "postgres": "SELECT enqueued FROM mjsched.enqueue_job_run(%s::uuid, %s, %s)",
        "mssql": "EXEC mjsched.enqueue_job_run @p_job_id = ?, @p_scheduled_for = ?, @p_now = ?;",
    },
    "advance": {
        "postgres": "SELECT advanced FROM mjsched.advance_job(%s::uuid, %s::uuid, %s, %s)",
        "mssql": "EXEC mjsched.advance_job @p_job_id = ?, @p_token = ?, @p_next_run_at = ?, @p_release = ?;",
    },
    "update": {
        "postgres": "SELECT updated FROM mjsched.update_job(%s::uuid, %s::jsonb)",
        "mssql": "EXEC mjsched.update_job @p_job_id = ?, @p_fields = ?;",
    },
    "pause": {
        "postgres": "SELECT updated FROM mjsched.update_job(%s::uuid, %s::jsonb)",
        "mssql": "EXEC mjsched.update_job @p_job_id = ?, @p_fields = ?;",
    },
    "delete": {
        "postgres": "SELECT deleted FROM mjsched.delete_job(%s::uuid)",
        "mssql": "EXEC mjsched.delete_job @p_job_id = ?;",
    },
    "manual": {
        "postgres": "SELECT * FROM mjsched.start_manual_run(%s::uuid, %s::uuid, %s, %s, %s, %s, %s)",
        "mssql": "EXEC mjsched.start_manual_run @p_job_id = ?, @p_request_id = ?, @p_instance = ?, "
                 "@p_lease_seconds = ?, @p_force = ?, @p_replay = ?, @p_now = ?;",
    },
    "release_engine": {
        "postgres": "SELECT * FROM mjsched.release_engine_locks(%s, %s, %s)",
        "mssql": "EXEC mjsched.release_engine_locks @p_instance = ?, @p_reason = ?, @p_now = ?;",
    },
    "unlock": {
        "postgres": "SELECT * FROM mjsched.force_unlock_job(%s::uuid, %s, %s)",
        "mssql": "EXEC mjsched.force_unlock_job @p_job_id = ?, @p_reason = ?, @p_now = ?;",
    },
    "cancel": {
        "postgres": "SELECT * FROM mjsched.cancel_run(%s::uuid, %s, %s, %s::uuid)",
        "mssql": "EXEC mjsched.cancel_run @p_run_id = ?, @p_requested_by = ?, @p_now = ?, @p_request_id = ?;",
    },
}


@dataclass(frozen=True)
class Call:
    """One procedure call of a round, and what the invariants need to know about it."""
    op: str
    proc: str
    params: tuple[Any, ...]
    renews: tuple[str, ...] = ()        # extend_job_leases: the tokens sent
    moves: tuple[str, ...] = ()         # tokens whose own holder ends or frees them in this call
    frees_instance: str | None = None   # release_engine_locks: everything of this engine ends

    def sql(self, dialect: str) -> str:
        return SQL[self.op][dialect]

    def describe(self) -> str:
        shown = ", ".join(_short(p) for p in self.params)
        return f"{self.proc}({shown})"


def _short(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%H:%M:%S.%f")
    if isinstance(value, list):
        return "[" + ", ".join(_short(v) for v in value[:4]) + (", ..." if len(value) > 4 else "") + "]"
    text = str(value)
    return text[:8] if len(text) == 36 else text[:60]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


Builder = Callable[[State, random.Random], "Call | None"]


@dataclass(frozen=True)
class Op:
    name: str
    proc: str
    build: Builder
    needs: frozenset[str] = field(default_factory=frozenset)


def _claim(s: State, rng: random.Random) -> Call:
    return Call("claim", "claim_due_jobs", (rng.choice((C, C, B)), rng.choice((1, 10, 100)), LEASE, s.now,
                                            str(uuid.uuid4()), False))


def _renew(s: State, rng: random.Random) -> Call | None:
    tokens = s.tokens_of(A)
    if not tokens:
        return None
    if len(tokens) > 1 and rng.random() < 0.3:
        tokens = rng.sample(tokens, rng.randint(1, len(tokens)))
    return Call("renew", "extend_job_leases", (tokens, LEASE, A, s.now), renews=tuple(tokens))


def _renew_skip(s: State, rng: random.Random) -> Call | None:
    call = _renew(s, rng)
    return None if call is None else Call("renew_skip", "renew_leases", call.params, renews=call.renews)


def _complete(s: State, rng: random.Random) -> Call | None:
    runs = [(j, r) for j in s.with_need("a_run") for r in j.running(A)]
    if not runs:
        return None
    picked = rng.sample(runs, min(len(runs), rng.choice((1, 1, 2, 8))))
    items = []
    for job, run in picked:
        scheduled = run.scheduled_for is not None
        items.append({"run_id": run.id, "token": run.token,
                      "status": rng.choice(("Completed", "Completed", "Failed", "Timeout", "Cancelled", "Skipped")),
                      "error_message": None, "details": None,
                      "next_run_at": _iso(s.now + timedelta(seconds=30)) if scheduled else None,
                      "guard": scheduled, "expected_next_run_at": _iso(job.next_run_at) if scheduled else None})
        if scheduled and items[-1]["status"] in ("Failed", "Timeout") and rng.random() < 0.6:
            items[-1]["retry_in"] = rng.choice((0, 0.5, 30))   # retries (009): the next attempt, recorded here
    return Call("complete", "complete_job_runs", (json.dumps(items), s.now),
                moves=tuple(i["token"] for i in items))


def _complete_skip(s: State, rng: random.Random) -> Call | None:
    call = _complete(s, rng)
    return None if call is None else Call("complete_skip", "complete_runs", call.params, moves=call.moves)


def _sweep(s: State, rng: random.Random) -> Call:
    return Call("sweep", "sweep_expired_leases", (s.now,))


def _acquire(s: State, rng: random.Random) -> Call:
    job = rng.choice(s.jobs)
    return Call("acquire", "acquire_job_lock", (job.id, str(uuid.uuid4()), C, LEASE, rng.random() < 0.3, s.now))


def _release(s: State, rng: random.Random) -> Call | None:
    job = s.take("free_lock", "release", rng)
    if job is None:
        return None
    return Call("release", "release_job_lock", (job.id, job.token), moves=(job.token,))


def _begin(s: State, rng: random.Random) -> Call | None:
    job = s.take("manual_lock", "begin", rng)
    if job is None:
        return None
    return Call("begin", "begin_job_run", (job.id, job.token, A, None, s.now))


def _enqueue(s: State, rng: random.Random) -> Call | None:
    jobs = s.with_need("queue_run")
    if not jobs:
        return None
    job = rng.choice(jobs)
    run = job.running(A)[0]
    # the job's tick grid after its run started (some already queued: a replayed enqueue)
    ticks = [run.started_at + timedelta(seconds=4.5 + 5 * k) for k in range(6)]
    ticks = [t for t in ticks if t <= s.now]
    return Call("enqueue", "enqueue_job_run", (job.id, rng.choice(ticks), s.now))


def _advance(s: State, rng: random.Random) -> Call | None:
    job = s.take("advance_lock", "advance", rng)
    if job is None:
        return None
    return Call("advance", "advance_job", (job.id, job.token, s.now + timedelta(seconds=rng.choice((-1, 30))), True),
                moves=(job.token,))


def _update(s: State, rng: random.Random) -> Call:
    job = rng.choice(s.jobs)
    fields = rng.choice(({"cron_expression": "*/5 * * * *"}, {"next_run_at": _iso(s.now + timedelta(seconds=60))},
                         {"next_run_at": _iso(s.now - timedelta(seconds=1))}, {"status": "Active"},
                         {"end_at": _iso(s.now - timedelta(seconds=0.5))}, {"max_runtime_seconds": 600},
                         {"description": "edited"}))
    return Call("update", "update_job", (job.id, json.dumps(fields)))


def _pause(s: State, rng: random.Random) -> Call:
    job = rng.choice(s.jobs)
    return Call("pause", "update_job", (job.id, json.dumps({"status": rng.choice(("Paused", "Paused", "Disabled"))})))


def _delete(s: State, rng: random.Random) -> Call:
    return Call("delete", "delete_job", (rng.choice(s.jobs).id,))


def _manual(s: State, rng: random.Random) -> Call:
    job = rng.choice(s.jobs)
    return Call("manual", "start_manual_run", (job.id, str(uuid.uuid4()), C, LEASE, rng.random() < 0.3, False, s.now))


def _release_engine(s: State, rng: random.Random) -> Call:
    instance = rng.choice((A, A, B))
    return Call("release_engine", "release_engine_locks", (instance, "interleaving: engine restarted", s.now),
                frees_instance=instance)


def _unlock(s: State, rng: random.Random) -> Call:
    job = rng.choice(s.jobs)
    return Call("unlock", "force_unlock_job", (job.id, "interleaving: operator unlock", s.now),
                moves=tuple(t for t in [job.token] + [r.token for r in job.runs] if t))


def _cancel(s: State, rng: random.Random) -> Call | None:
    """An operator's cancel_run: of a Queued run (ends it Cancelled, counted), a Running one (only
    records the request: its holder still ends it), or a finished one (changes nothing). With a
    request id, so that its replay (same arguments) is the replay of that request."""
    runs = [r for j in s.jobs for r in j.runs]
    if not runs:
        return None
    live = [r for r in runs if r.status in ("Queued", "Running")]
    run = rng.choice(live if live and rng.random() < 0.8 else runs)
    return Call("cancel", "cancel_run", (run.id, "interleaving: operator", s.now,
                                         str(uuid.UUID(int=rng.getrandbits(128), version=4))))


OPS: dict[str, Op] = {op.name: op for op in (
    Op("claim", "claim_due_jobs", _claim),
    Op("renew", "extend_job_leases", _renew, frozenset({"a_token"})),
    Op("complete", "complete_job_runs", _complete, frozenset({"a_run"})),
    Op("sweep", "sweep_expired_leases", _sweep),
    Op("acquire", "acquire_job_lock", _acquire),
    Op("release", "release_job_lock", _release, frozenset({"free_lock"})),
    Op("begin", "begin_job_run", _begin, frozenset({"manual_lock"})),
    Op("enqueue", "enqueue_job_run", _enqueue, frozenset({"queue_run"})),
    Op("advance", "advance_job", _advance, frozenset({"advance_lock"})),
    Op("update", "update_job", _update),
    Op("pause", "update_job", _pause),
    Op("delete", "delete_job", _delete),
    # v3 additions: played only where the database has them
    Op("manual", "start_manual_run", _manual),
    Op("release_engine", "release_engine_locks", _release_engine),
    Op("unlock", "force_unlock_job", _unlock),
    Op("renew_skip", "renew_leases", _renew_skip, frozenset({"a_token"})),
    Op("complete_skip", "complete_runs", _complete_skip, frozenset({"a_run"})),
    Op("cancel", "cancel_run", _cancel),     # 008_run_requests
)}
BASE_OPS = tuple(n for n in OPS if n not in ("manual", "release_engine", "unlock", "renew_skip", "complete_skip",
                                             "cancel"))
TRIPLES = (("claim", "renew", "sweep"), ("claim", "complete", "sweep"), ("renew", "sweep", "acquire"),
           ("claim", "renew_skip", "sweep"), ("claim", "complete_skip", "sweep"))


def replay_of(call: Call) -> Call:
    """The same call again, as a caller whose reply was lost sends it (p_replay where the
    procedure has one)."""
    params = list(call.params)
    if call.op in ("claim", "manual"):
        params[5] = True
    return replace(call, params=tuple(params))
