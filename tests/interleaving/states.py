"""Generated starting states for the interleaving rounds.

A state is a handful of jobs, each built from one *kind* (a moment in a job's life that a
correct engine can leave behind: a claimed run, a manual lock before its run begins, a
Queue job with ticks waiting, a Concurrent job whose lock was already dropped...), with
live or lapsed leases, and a finished history whose statistics match its runs. Every
state satisfies the invariants, so a violation after a round is the round's doing.

Times are relative to the round's clock ``now`` (passed as p_now to the procedures that
take one), so a lapsed lease is written directly instead of waited for.

Each kind also says which caller moves it makes legitimate (``PROVIDES``): the operation
catalogue only plays moves a correct engine could make in the state (it never, say,
releases the lock of a Skip job under its own running run), so what breaks is the protocol.
"""
from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

LEASE = 30.0          # the engines' lease (seconds) in every call of a round
A = "eng-a"           # holds most leases in a state and renews them
B = "eng-b"           # holds other leases, silent during the round
C = "eng-c"           # a third engine: claims, manual runs

FINISHED = ("Completed", "Failed", "Timeout", "Cancelled", "Abandoned")
RUN_COLUMNS = ("id", "scheduled_job_id", "scheduled_for", "status", "success", "queued_at", "started_at",
               "completed_at", "duration_ms", "executed_by_instance", "lock_token", "lease_expires_at")
RETRY_COLUMNS = ("attempt", "retry_at")   # a schema with retries (009) only
JOB_COLUMNS = ("id", "job_type_id", "name", "cron_expression", "status", "concurrency_mode", "next_run_at",
               "end_at", "max_queued_runs", "max_runtime_seconds", "lock_token", "locked_at",
               "locked_by_instance", "expected_completion_at", "run_count", "success_count", "failure_count",
               "total_duration_ms")


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass
class Run:
    id: str
    status: str
    scheduled_for: datetime | None
    started_at: datetime | None = None
    token: str | None = None
    lease: datetime | None = None
    instance: str | None = None
    queued_at: datetime | None = None
    completed_at: datetime | None = None
    attempt: int = 1                    # retries (009): a tick's later attempts
    retry_at: datetime | None = None    # a Queued retry: when it is due


@dataclass
class Job:
    id: str
    kind: str
    mode: str                           # Skip | Queue | Concurrent
    status: str = "Active"
    next_run_at: datetime | None = None
    end_at: datetime | None = None
    max_queued_runs: int = 5
    max_runtime: float | None = None
    token: str | None = None            # the job lock
    lock_until: datetime | None = None
    locked_by: str | None = None
    lock_role: str | None = None        # what its holder may still do: manual (begin/release), served
                                        # (advance/release: the claim found its tick already run),
                                        # claimed (a Concurrent claim, to advance), run (its run's lock)
    runs: list[Run] = field(default_factory=list)

    def running(self, instance: str | None = None) -> list[Run]:
        return [r for r in self.runs if r.status == "Running" and instance in (None, r.instance)]

    def queued(self) -> list[Run]:
        return [r for r in self.runs if r.status == "Queued"]


@dataclass
class State:
    now: datetime
    jobs: list[Job]
    # tokens a call of the round already acts on as their holder (begin, release, advance): an
    # engine makes those moves one after another, so no other call of the round takes them
    reserved: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return ", ".join(f"{j.kind}/{j.mode}{'' if j.status == 'Active' else '/' + j.status}"
                         f"{'/lapsed' if j.lock_until and j.lock_until < self.now else ''}" for j in self.jobs)

    def tokens_of(self, instance: str) -> list[str]:
        """Every token an engine believes it holds: its job locks and its runs'."""
        found: list[str] = []
        for job in self.jobs:
            if job.token and job.locked_by == instance:
                found.append(job.token)
            found += [r.token for r in job.running(instance) if r.token]
        return list(dict.fromkeys(found))

    def job_of_token(self, token: str) -> Job | None:
        for job in self.jobs:
            if job.token == token or any(r.token == token for r in job.runs):
                return job
        return None

    def with_need(self, need: str) -> list[Job]:
        return [j for j in self.jobs if need in PROVIDES[j.kind](j)]

    def take(self, need: str, op: str, rng: random.Random) -> Job | None:
        """A job providing ``need`` whose lock token no other call of the round holds."""
        free = [j for j in self.with_need(need) if j.token not in self.reserved]
        if not free:
            return None
        job = rng.choice(free)
        self.reserved[str(job.token)] = op
        return job


def _lease(rng: random.Random, now: datetime, lapsed: bool) -> datetime:
    secs = -rng.uniform(0.2, 5.0) if lapsed else rng.uniform(5.0, 25.0)
    return now + timedelta(seconds=secs)


def _history(rng: random.Random, job: Job, now: datetime) -> None:
    for k in range(rng.randint(0, 2)):
        tick = now - timedelta(seconds=100 + 10 * k)
        status = rng.choice(FINISHED + ("Skipped",))
        job.runs.append(Run(new_id(), status, tick, tick + timedelta(seconds=0.5), new_id(), None,
                            rng.choice((A, B)), None, tick + timedelta(seconds=1.5)))


def _held(job: Job, rng: random.Random, now: datetime, instance: str, tick: datetime | None,
          lapsed: bool) -> Run:
    """The job locked by a claim (or a manual acquire) with its run Running under the same token."""
    token = new_id()
    lease = _lease(rng, now, lapsed)
    job.token, job.lock_until, job.locked_by, job.lock_role = token, lease, instance, "run"
    started = (tick or now - timedelta(seconds=12)) + timedelta(seconds=0.5)
    run = Run(new_id(), "Running", tick, started, token, lease, instance)
    job.runs.append(run)
    return run


def make_job(kind: str, rng: random.Random, now: datetime) -> Job:
    """One job of the given kind; leases live or lapsed at random."""
    sec = lambda s: now + timedelta(seconds=s)  # noqa: E731 - a short local helper
    lapsed = rng.random() < 0.6
    mode = rng.choice(("Skip", "Queue", "Concurrent"))
    job = Job(new_id(), kind, mode, max_queued_runs=rng.randint(1, 3),
              max_runtime=120.0 if rng.random() < 0.2 else None)
    tick = sec(-20)
    if kind == "free_due":
        job.next_run_at = sec(-rng.uniform(0.5, 30))
    elif kind == "free_idle":
        job.next_run_at = None if rng.random() < 0.2 else sec(30)
    elif kind in ("held_run", "held_other"):
        job.mode = rng.choice(("Skip", "Queue"))
        job.next_run_at = tick                  # a claim leaves the schedule to the completion
        _held(job, rng, now, A if kind == "held_run" else B, tick, lapsed)
    elif kind == "held_queue":
        job.mode = "Queue"
        job.next_run_at = tick
        run = _held(job, rng, now, A, tick, lapsed)
        for k in range(rng.randint(1, job.max_queued_runs)):   # ticks that came while it ran
            q_tick = run.started_at + timedelta(seconds=4.5 + 5 * k)
            job.runs.append(Run(new_id(), "Queued", q_tick, queued_at=q_tick + timedelta(seconds=0.1)))
    elif kind == "queue_waiting":
        job.mode = "Queue"
        job.next_run_at = sec(rng.choice((-1, 5)))
        start = sec(-40)
        job.runs.append(Run(new_id(), "Completed", start, start + timedelta(seconds=0.5), new_id(), None, A,
                            None, sec(-2)))
        for k in range(rng.randint(1, job.max_queued_runs)):
            q_tick = start + timedelta(seconds=5 + 5 * k)
            job.runs.append(Run(new_id(), "Queued", q_tick, queued_at=q_tick + timedelta(seconds=0.1)))
    elif kind == "manual_lock":
        job.mode = rng.choice(("Skip", "Queue"))
        job.next_run_at = sec(rng.choice((-3, 30)))
        job.token, job.lock_until, job.locked_by, job.lock_role = new_id(), _lease(rng, now, lapsed), A, "manual"
    elif kind == "manual_run":
        job.mode = rng.choice(("Skip", "Queue"))
        job.next_run_at = sec(rng.choice((-3, 30)))
        _held(job, rng, now, A, None, lapsed)
    elif kind == "served_lock":
        job.next_run_at = tick                  # claimed, but the tick already had a run
        job.runs.append(Run(new_id(), "Completed", tick, tick + timedelta(seconds=0.5), new_id(), None, B,
                            None, tick + timedelta(seconds=1)))
        job.token, job.lock_until, job.locked_by, job.lock_role = new_id(), _lease(rng, now, lapsed), A, "served"
    elif kind == "concurrent_claimed":
        job.mode = "Concurrent"
        job.next_run_at = tick                  # its claim has not advanced the schedule yet
        _held(job, rng, now, A, tick, lapsed)
        job.lock_role = "claimed"
    elif kind in ("retry_waiting", "held_retry"):
        # a tick whose first attempt failed: its retry (attempt 2) waits for retry_at, or runs
        done = sec(-rng.uniform(1, 6))
        job.runs.append(Run(new_id(), rng.choice(("Failed", "Timeout")), tick, tick + timedelta(seconds=0.5),
                            new_id(), None, A, None, done))
        if kind == "retry_waiting":
            job.next_run_at = sec(rng.choice((-1, 5, 30)))
            job.runs.append(Run(new_id(), "Queued", tick, queued_at=done, attempt=2,
                                retry_at=sec(rng.choice((-0.5, 0, 4)))))
            if job.mode == "Queue" and rng.random() < 0.5:   # a tick kept while the failed attempt ran
                q_tick = tick + timedelta(seconds=4.5)
                job.runs.append(Run(new_id(), "Queued", q_tick, queued_at=q_tick + timedelta(seconds=0.1)))
        else:
            job.mode = rng.choice(("Skip", "Queue"))
            job.next_run_at = sec(rng.choice((-1, 30)))     # a retry leaves the schedule alone
            run = _held(job, rng, now, A, tick, lapsed)
            run.attempt, run.started_at = 2, done + timedelta(seconds=0.5)
    elif kind == "rewound":
        # next_run_at moved back (an operator's edit) over a tick whose run the purge deleted;
        # a later tick's run is kept: the claim must count the due tick as served (I9)
        job.next_run_at = sec(-30)
        job.runs.append(Run(new_id(), "Completed", sec(-20), sec(-19.5), new_id(), None, A, None, sec(-19)))
    elif kind == "concurrent_running":
        job.mode = "Concurrent"
        job.next_run_at = sec(rng.choice((-1, 5)))
        for k in range(rng.randint(1, 2)):
            t = sec(-20 - 10 * k)
            job.runs.append(Run(new_id(), "Running", t, t + timedelta(seconds=0.5), new_id(),
                                _lease(rng, now, rng.random() < 0.6), A))
    else:
        raise ValueError(kind)
    if kind in ("free_due", "held_run", "manual_lock") and rng.random() < 0.1:
        job.status = "Paused"
    if kind in ("free_due", "held_run", "held_other") and rng.random() < 0.05:
        job.end_at = sec(-1)                    # past its window: the sweep expires it
    _history(rng, job, now)
    return job


# What each kind makes legitimate: a need -> whether this job provides it.
PROVIDES: dict[str, Any] = {
    "free_due": lambda j: set(),
    "free_idle": lambda j: set(),
    "held_other": lambda j: set(),
    "queue_waiting": lambda j: set(),
    "held_run": lambda j: {"a_run", "a_token"} | ({"queue_run"} if j.mode == "Queue" else set()),
    "held_queue": lambda j: {"a_run", "a_token", "queue_run"},
    "manual_lock": lambda j: {"a_token", "manual_lock", "free_lock"},
    "manual_run": lambda j: {"a_run", "a_token"},
    "served_lock": lambda j: {"free_lock", "advance_lock", "a_token"},
    "concurrent_claimed": lambda j: {"a_run", "a_token", "advance_lock"},
    "concurrent_running": lambda j: {"a_run", "a_token"},
    "retry_waiting": lambda j: set(),
    "rewound": lambda j: set(),
    "held_retry": lambda j: {"a_run", "a_token"},
}
KINDS = tuple(PROVIDES)
PROVIDERS: dict[str, tuple[str, ...]] = {
    "a_run": ("held_run", "held_queue", "manual_run", "concurrent_claimed", "concurrent_running", "held_retry"),
    "a_token": ("held_run", "held_queue", "manual_lock", "manual_run", "concurrent_claimed", "concurrent_running",
                "held_retry"),
    "queue_run": ("held_queue",),
    "manual_lock": ("manual_lock",),
    "free_lock": ("manual_lock", "served_lock"),
    "advance_lock": ("served_lock", "concurrent_claimed"),
}


def generate(rng: random.Random, now: datetime, needs: Iterable[str], kinds: Iterable[str] = ()) -> State:
    """A state in which every need is met (once per time it is listed), with the given kinds
    and a few jobs of any kind; sometimes wide (many copies), which widens the windows of
    set-based statements."""
    kinds = list(kinds) + [rng.choice(PROVIDERS[n]) for n in sorted(needs)]
    kinds += [rng.choice(KINDS) for _ in range(rng.randint(1, 3))]
    kinds *= rng.choice((1, 1, 1, 2, 3, 8))
    return State(now, [make_job(k, rng, now) for k in kinds])


def job_rows(state: State, type_id: str) -> list[tuple[Any, ...]]:
    rows = []
    for n, j in enumerate(state.jobs):
        counted = [r for r in j.runs if r.status in FINISHED]
        ok = sum(r.status == "Completed" for r in counted)
        rows.append((j.id, type_id, f"{j.kind}-{n}", "*/10 * * * *", j.status, j.mode, j.next_run_at, j.end_at,
                     j.max_queued_runs, j.max_runtime, j.token, j.lock_until and state.now - timedelta(seconds=20),
                     j.locked_by, j.lock_until, len(counted), ok, len(counted) - ok, 1000 * len(counted)))
    return rows


def run_rows(state: State) -> list[tuple[Any, ...]]:
    rows = []
    for j in state.jobs:
        for r in j.runs:
            done = r.completed_at is not None
            rows.append((r.id, j.id, r.scheduled_for, r.status,
                         (r.status == "Completed") if done else None, r.queued_at, r.started_at, r.completed_at,
                         1000 if done else None, r.instance, r.token, r.lease, r.attempt, r.retry_at))
    return rows
