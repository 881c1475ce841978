"""The gateway contract: every database call the engine makes, in domain words.

One implementation per dialect (``postgres.py``, ``mssql.py``); the engine never
sees SQL or a driver module. Lock and lease rules are decided by the procedures
in ``sql/<dialect>/``; the docstrings below restate what each procedure
guarantees, and the integration tests hold both dialects to them.
"""
from __future__ import annotations

import abc
import contextlib
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

from ..errors import JobNameTaken, SchedulerError
from ..frozen import quick_init
from ..models import Claim, ClaimBatch, Job, JobChange, JobRun
from ..retention import PurgeBatch
from ..redaction import redact_dsn
from . import queries

T = TypeVar("T")

NAME_CONSTRAINT = "uq_scheduled_job_name"   # job names are unique (sql/*/005_job_names.sql)
NEW_JOB_ID = "id"   # the key of insert_job's fields that holds the id its caller chose for the job


def with_new_job_id(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` of a job to insert, with the id of the new job (a new UUID, unless they hold
    one): chosen before the call, so every retry of it carries the same id, and insert_job
    answers a retry whose first attempt committed (its reply lost) with the job it inserted."""
    return {NEW_JOB_ID: str(uuid.uuid4()), **fields}


@quick_init
@dataclass(frozen=True)
class Completion:
    """How one run ended, for ``complete_runs``."""

    run_id: str
    token: str
    status: str                      # Completed | Failed | Timeout | Cancelled | Skipped
    error_message: str | None = None
    details: Mapping[str, Any] | None = None
    next_run_at: datetime | None = None   # None: leave the job's schedule alone
    # Compare-and-set: with guard, next_run_at is applied only while the job's next_run_at
    # is still expected_next_run_at (seen at the claim), so an edit made during the run wins.
    guard: bool = False
    expected_next_run_at: datetime | None = None
    # A Failed or Timeout attempt of a tick with a retry left: seconds until the next attempt,
    # which the completion records in the same transaction (None: no retry).
    retry_in: float | None = None


def completions_json(items: Iterable[Completion], instant: Callable[[datetime], Any]) -> str:
    """``complete_runs``' p_items, with instants written by the dialect's ``instant``."""
    return json.dumps([{
        "run_id": i.run_id, "token": i.token, "status": i.status,
        "error_message": i.error_message, "details": i.details,
        "next_run_at": instant(i.next_run_at) if i.next_run_at else None,
        "guard": i.guard,
        "expected_next_run_at": instant(i.expected_next_run_at) if i.expected_next_run_at else None,
        **({"retry_in": i.retry_in} if i.retry_in is not None else {}),
    } for i in items], default=str)


def completion_outcomes(rows: Iterable[Mapping[str, Any]]) -> dict[str, bool | None]:
    """``complete_runs``' rows (run_id, completed, busy) as the backend's complete_runs answers them."""
    return {str(r["run_id"]): (None if r["busy"] and not r["completed"] else bool(r["completed"]))
            for r in rows}


@dataclass(frozen=True)
class ManualStart:
    """What ``start_manual_run`` did: ``outcome`` is started | locked | not_active | not_found."""

    outcome: str
    run_id: str | None = None
    lock_token: str | None = None


def manual_start(rows: Sequence[Mapping[str, Any]]) -> ManualStart:
    r = rows[0] if rows else {"outcome": "not_found"}
    return ManualStart(str(r["outcome"]), str(r["run_id"]).lower() if r.get("run_id") else None,
                       str(r["lock_token"]).lower() if r.get("lock_token") else None)


@dataclass(frozen=True)
class CancelOutcome:
    """What ``cancel_run`` did: ``outcome`` is requested | already_requested | cancelled (a
    Queued run, ended at once) | not_cancellable (``status`` says why) | not_found."""

    outcome: str
    status: str | None = None
    requested_at: datetime | None = None
    requested_by: str | None = None


@dataclass(frozen=True)
class CancelRequest:
    """A Running run of this engine whose cancel an operator requested (``cancel_requests``)."""

    run_id: str
    token: str
    requested_at: datetime
    requested_by: str | None


def cancel_outcome(rows: Sequence[Mapping[str, Any]]) -> CancelOutcome:
    r = rows[0] if rows else {"outcome": "not_found"}
    return CancelOutcome(str(r["outcome"]), r.get("status"), r.get("cancel_requested_at"),
                         r.get("cancel_requested_by"))


def cancel_requests(rows: Iterable[Mapping[str, Any]]) -> list[CancelRequest]:
    return [CancelRequest(str(r["run_id"]).lower(), str(r["lock_token"]).lower(), r["cancel_requested_at"],
                          r["cancel_requested_by"]) for r in rows]


@dataclass(frozen=True)
class SweepResult:
    swept: int = 0            # Running runs whose lease lapsed, now Abandoned
    locks_freed: int = 0      # job locks whose lease lapsed, now free
    expired_jobs: int = 0     # Active jobs past end_at, now Expired


@dataclass(frozen=True)
class UnscheduledJob:
    """An Active job without a next_run_at: what scheduling it reads and no more, since a
    bulk edit leaves tens of thousands of them to read a page at a time."""

    id: str
    name: str
    driver: str
    cron_expression: str | None
    timezone: str
    start_at: datetime | None
    run_immediately_if_never_run: bool
    last_run_at: datetime | None
    run_count: int
    high_frequency_ok: bool = False       # the job's opt-out of the high-frequency warning
    frequency_warned: str | None = None   # the schedule last warned for ("cron | timezone")
    interval_seconds: int | None = None   # an every= job's interval
    run_at: datetime | None = None        # a run_at= job's one instant
    created_at: datetime | None = None    # an every= job's anchor when it has no start_at
    jitter_seconds: int | None = None     # the job's jitter bound (schedules.jitter_offset)

    @property
    def schedule_text(self) -> str:
        from ..schedules import schedule_text

        return schedule_text(self.cron_expression, self.interval_seconds, self.run_at)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "UnscheduledJob":
        interval, jitter = row.get("interval_seconds"), row.get("jitter_seconds")
        return cls(str(row["id"]).lower(), row["name"], row["driver"], row["cron_expression"], row["timezone"],
                   row["start_at"], bool(row["run_immediately_if_never_run"]), row["last_run_at"],
                   int(row["run_count"]), bool(row.get("high_frequency_ok")), row.get("frequency_warned"),
                   None if interval is None else int(interval), row.get("run_at"), row.get("created_at"),
                   None if jitter is None else int(jitter))


class Listener(abc.ABC):
    """A change feed from the database (PostgreSQL LISTEN/NOTIFY)."""

    @abc.abstractmethod
    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when a job changed meanwhile."""

    def interrupt(self) -> None:
        """End the ``wait`` under way, and every later one, at once: the listener is
        being shut down. Safe from any thread; the default does nothing."""

    @abc.abstractmethod
    def close(self) -> None: ...


@contextlib.contextmanager
def naming(fields: Mapping[str, Any], holders: Callable[[str], list[Job]] | None = None) -> Iterator[None]:
    """Around an insert or update of a job row: a JobNameTaken the dialect raised (from the
    unique violation, which does not say the value) names the name that was written and, when
    ``holders`` can read it, the job that has it."""
    try:
        yield
    except JobNameTaken as exc:
        name = fields.get("name")
        if exc.name is not None or name is None:
            raise
        holder = None
        if holders is not None:
            try:
                holder = next((j.id for j in holders(str(name))), None)
            except SchedulerError:
                pass        # the error says the name either way
        raise JobNameTaken(name, holder) from exc.__cause__


def replayed_attempts(replay: bool, attempt: Callable[[Any, bool], list[dict[str, Any]]]) -> Callable[[Any], Any]:
    """One replay-safe call (``claim_due_jobs``, ``start_manual_run``) for a backend's retry
    loop: ``attempt(cursor, replay)`` runs the procedure; every try after the first is a
    replay, since the one before it may have committed before its reply was lost."""
    tries = 0

    def run(cursor: Any) -> list[dict[str, Any]]:
        nonlocal tries
        tries += 1
        return attempt(cursor, replay or tries > 1)
    return run


def deleted_or_replayed(attempt: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """``delete_job`` for a backend's retry loop: a retry that finds nothing to delete answers
    True, since the attempt before it may have deleted the job and lost its reply (the caller
    would otherwise be told JobNotFound for its own delete). Only an id that never existed
    and whose first reply was lost is answered True wrongly; the job is gone either way."""
    tries = 0

    def run(cursor: Any) -> bool:
        nonlocal tries
        tries += 1
        return attempt(cursor) or tries > 1
    return run


def claim_batch(rows: Iterable[Mapping[str, Any]]) -> ClaimBatch:
    """``claim_due_jobs``'s rows as a ClaimBatch: one row per claim, with its job's columns,
    then the tail row (job_id NULL) with db_now, next_due_at, the two counters and replied_at."""
    claims: list[Claim] = []
    jobs: dict[str, Job] = {}
    tail: Mapping[str, Any] = {}
    for r in rows:
        if r["job_id"] is None:
            tail = r
            continue
        job_id = str(r["job_id"])
        claims.append(Claim(job_id=job_id, run_id=str(r["run_id"]) if r["run_id"] else None,
                            lock_token=str(r["lock_token"]), scheduled_for=r["scheduled_for"],
                            db_now=r["db_now"], from_queue=bool(r["from_queue"])))
        jobs[job_id] = Job.from_row(r, id=r["job_id"], lock_token=None)
    return ClaimBatch(claims=claims, jobs=jobs, next_due_at=tail.get("next_due_at"), db_now=tail.get("db_now"),
                      due_left=int(tail.get("due_left") or 0), locked_out=int(tail.get("locked_out") or 0),
                      replied_at=tail.get("replied_at"))


class Backend(abc.ABC):
    """A dialect's gateway. Methods are thread-safe; each is one round trip.

    Transient failures (connection lost, deadlock, serialization failure) are
    retried inside each method; what still fails raises ``mjsched.DatabaseError``.
    ``now`` parameters exist for tests only: production passes None and the
    database clock decides.
    """

    dialect: str = ""
    _retry_attempts: int = 5
    _retry_max_delay: float = 15.0

    # -- the skeleton of every call ------------------------------------------------
    def _retried(self, what: str, once: Callable[[], T]) -> T:
        """``once()`` (one attempt of the call ``what``), its errors translated by the dialect
        (``_translate``), transient ones (``_is_transient``) retried with exponential backoff
        within ``_retry_attempts`` and ``_retry_max_delay`` seconds. Each retry is a DEBUG line;
        a call that got through after retries is one WARNING; one that did not raises, and its
        caller says so (the poller: one line per failed poll, not one per attempt)."""
        logger = logging.getLogger(type(self).__module__)
        first: list[str] = []

        def before_sleep(rs: Any) -> None:
            error = self._describe(rs.outcome.exception() if rs.outcome else None)
            if not first:
                first.append(error)
            logger.debug("transient database error in %s on %s (attempt %d), retrying: %s", what, self.where,
                         rs.attempt_number, error, extra={"action": "db_retry"})
        retrying = Retrying(
            retry=retry_if_exception(self._is_transient),
            stop=stop_after_attempt(self._retry_attempts) | stop_after_delay(self._retry_max_delay),
            wait=wait_exponential(multiplier=0.05, max=2.0),
            reraise=True,
            before_sleep=before_sleep,
        )
        with self._translate(what):
            for attempt in retrying:
                with attempt:
                    result = once()
                    if first:
                        logger.warning("transient database error in %s on %s, got through at attempt %d: %s",
                                       what, self.where, attempt.retry_state.attempt_number, first[0],
                                       extra={"action": "db_retried"})
                    return result
        raise AssertionError("unreachable")

    @property
    def where(self) -> str:
        """The server, for messages (host:port, never credentials)."""
        return "?"

    @staticmethod
    def _is_transient(exc: BaseException) -> bool:
        return False

    def _describe(self, exc: BaseException | None) -> str:
        """One line of ``exc`` fit for a log (no credentials)."""
        text = str(exc).strip() if exc is not None else ""
        return redact_dsn(text.splitlines()[0]) if text else "?"

    def _translate(self, what: str) -> contextlib.AbstractContextManager[None]:
        """The dialect's errors as mjsched's (DatabaseError, SchemaNotInstalled, ...)."""
        return contextlib.nullcontext()

    # -- schema ------------------------------------------------------------------
    def _query(self, name: str) -> str:
        """Read query ``name`` of sql/<dialect>/queries.sql, its column lists those this role may
        read (asked only for a query that lists columns, so the privilege lookup is one too)."""
        needed = queries.placeholders(self.dialect, name)
        columns = {}
        if "job_columns" in needed:
            columns["job_columns"] = self._readable("scheduled_job", "j")
        if "run_columns" in needed:
            columns["run_columns"] = self._readable("scheduled_job_run")
        return queries.query(self.dialect, name, **columns)

    def _readable(self, table: str, alias: str | None = None) -> str:
        """``alias.*``, or the columns of ``table`` this role may read when it may not read all
        of them: grants.sql keeps lock_token from the roles (a token is the right to complete or
        release a run; an engine learns its own from the procedures that hand them out).
        Asked once per table (``_column_privileges``), then cached."""
        cache: dict[str, list[str] | None] = self.__dict__.setdefault("_column_lists", {})
        prefix = f"{alias}." if alias else ""
        if table not in cache:
            rows = self._column_privileges(table)
            if not rows:
                return prefix + "*"      # not installed: the query fails as it always did
            cache[table] = None if all(r["readable"] for r in rows) else [r["name"] for r in rows if r["readable"]]
        names = cache[table]
        if names is None:
            return prefix + "*"
        return ", ".join(prefix + self._quote_identifier(n) for n in names)

    def _column_privileges(self, table: str) -> list[dict[str, Any]]:
        """Rows (name, readable) for each column of ``mjsched.<table>``, in table order."""
        raise NotImplementedError

    @staticmethod
    def _quote_identifier(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    @abc.abstractmethod
    def install(self) -> list[str]:
        """Apply the missing versioned scripts under a database-wide lock; return their names."""

    @abc.abstractmethod
    def installed_versions(self) -> list[str]: ...

    # -- lock and lease procedures ---------------------------------------------------
    @abc.abstractmethod
    def acquire_job_lock(self, job_id: str, token: str, instance: str, lease_seconds: float,
                         require_due: bool = False, now: datetime | None = None) -> bool:
        """Take the lock iff free or lease-expired (and, with require_due, the job is
        Active and due). Takeover abandons the old holder's Running runs."""

    @abc.abstractmethod
    def release_job_lock(self, job_id: str, token: str) -> bool:
        """Clear the lock only when ``token`` holds it."""

    @abc.abstractmethod
    def extend_job_leases(self, tokens: Sequence[str], lease_seconds: float,
                          instance: str | None = None, now: datetime | None = None) -> set[str]:
        """Renew, in one call, every lease whose token still holds; return the renewed
        tokens. Also marks ``instance`` as seen."""

    @abc.abstractmethod
    def renew_leases(self, tokens: Sequence[str], lease_seconds: float, instance: str | None = None,
                     now: datetime | None = None) -> tuple[set[str], set[str]]:
        """Renew every lease whose token still holds, without waiting on a job row another
        session holds: returns (renewed, busy). A busy token is neither renewed nor lost (a
        later call decides); a token in neither set is lost. Also marks ``instance`` as seen."""

    @abc.abstractmethod
    def claim_due_jobs(self, instance: str, max_jobs: int, lease_seconds: float,
                       now: datetime | None = None, claim_id: str | None = None,
                       replay: bool = False) -> ClaimBatch:
        """Lock up to ``max_jobs`` claimable jobs (Queued runs first, then due ticks),
        skipping rows others are claiming, and start their runs; all in one transaction.
        The batch carries each claimed job's row as the claim left it (``ClaimBatch.jobs``,
        read in that transaction: no second round trip), without its lock_token.

        Idempotent per ``claim_id`` (a fresh UUID when None): a retry after a lost reply
        is sent with ``replay`` and answers what the lost call claimed, if it committed.
        The backend replays its own retries; the caller passes ``replay=True`` when it
        calls again with the ``claim_id`` of a claim that raised."""

    @abc.abstractmethod
    def complete_runs(self, items: Sequence[Completion],
                      now: datetime | None = None) -> dict[str, bool | None]:
        """Finish runs, fenced per run by token; update statistics; set next_run_at and
        release the job lock where the same token still holds it. One transaction, which
        never waits on a job row another session holds (procedure ``complete_runs``).
        Per run id: True finished (or already finished by this token), False fenced out,
        None busy -- its job row is held by another session (an open transaction) and
        nothing of it was written: call again later."""

    def complete_job_runs(self, items: Sequence[Completion],
                          now: datetime | None = None) -> dict[str, bool | None]:
        """``complete_runs`` under its name before issue 38 (the method is named after the
        procedure it calls); kept for callers of that name."""
        return self.complete_runs(items, now=now)

    def complete_job_run(self, run_id: str, token: str, status: str, error_message: str | None,
                         details: Mapping[str, Any] | None, next_run_at: datetime | None,
                         now: datetime | None = None) -> bool:
        item = Completion(run_id, token, status, error_message, details, next_run_at)
        return bool(self.complete_runs([item], now=now).get(run_id, False))

    @abc.abstractmethod
    def sweep_expired_leases(self, now: datetime | None = None) -> SweepResult:
        """Abandon Running runs whose lease lapsed, free lapsed locks, expire ended jobs."""

    @abc.abstractmethod
    def enqueue_job_run(self, job_id: str, scheduled_for: datetime,
                        now: datetime | None = None) -> bool:
        """Keep a tick of a Queue-mode job as one Queued run (bounded, one per tick)."""

    @abc.abstractmethod
    def advance_job(self, job_id: str, token: str, next_run_at: datetime | None, release: bool,
                    guard: bool = False, expected_next_run_at: datetime | None = None) -> bool:
        """Set next_run_at of a job whose lock ``token`` holds; optionally release it. With
        ``guard``, next_run_at moves only while it is still ``expected_next_run_at`` (what the
        claim saw): a schedule edited since keeps the edit's next run (the release is made)."""

    @abc.abstractmethod
    def begin_job_run(self, job_id: str, token: str, instance: str,
                      scheduled_for: datetime | None = None, now: datetime | None = None) -> str | None:
        """Insert a Running run for a job locked by ``token``; None when not ours."""

    @abc.abstractmethod
    def start_manual_run(self, job_id: str, request_id: str, instance: str, lease_seconds: float,
                         force: bool = False, replay: bool = False, now: datetime | None = None,
                         parameters: Mapping[str, Any] | None = None) -> ManualStart:
        """Take the job's lock and start a manual run, in one replay-safe call: the lock
        token derives from ``request_id``, and the backend's retries are replays that
        answer the run a lost call started. Refused (``not_active``) for a job that is
        not Active unless ``force``; ``locked`` while a live lease holds the job.
        ``parameters`` (a JSON object) is stored on the run."""

    @abc.abstractmethod
    def cancel_run(self, run_id: str, requested_by: str, now: datetime | None = None,
                   request_id: str | None = None) -> CancelOutcome:
        """Record an operator's request to cancel a run (a Queued run ends Cancelled at once);
        the engine holding a Running run reads it through ``cancel_requests``. The request
        carries ``request_id`` (a new one when None), recorded with it: the backend's retry
        after a lost reply is a replay that answers what this request did."""

    @abc.abstractmethod
    def cancel_requests(self, tokens: Sequence[str]) -> list[CancelRequest]:
        """Of these lease tokens, the Running runs whose cancel was requested (read only)."""

    @abc.abstractmethod
    def release_engine_locks(self, instance: str, reason: str | None = None,
                             now: datetime | None = None) -> tuple[int, int]:
        """Hand back everything ``instance`` holds: its Running runs end Abandoned with
        ``reason`` and its job locks are freed, fenced. Returns (runs abandoned, locks freed)."""

    @abc.abstractmethod
    def engines_holding_locks(self, host: str) -> list[dict[str, Any]]:
        """Engines registered on ``host`` that still hold a lock or a Running run:
        ``instance``, ``pid`` and ``stopped_at`` (None unless it stopped cleanly)."""

    @abc.abstractmethod
    def force_unlock_job(self, job_id: str, reason: str | None = None,
                         now: datetime | None = None) -> tuple[str | None, int] | None:
        """The operator's override: free the job's lock whoever holds it, abandoning the run
        that held it. Returns (old holder, runs abandoned), or None when it was not locked."""

    @abc.abstractmethod
    def initialize_next_run(self, job_id: str, next_run_at: datetime) -> bool:
        """Set next_run_at of an Active job that has none (compare-and-set)."""

    @abc.abstractmethod
    def initialize_next_runs(self, items: Sequence[tuple[str, datetime]]) -> int:
        """``initialize_next_run`` for many jobs in one call: each (job_id, next_run_at) is
        set only while the job is Active and has none; rows another session holds locked
        are skipped, not waited for. Returns how many were set (0 for no items)."""

    @abc.abstractmethod
    def register_engine(self, instance: str, host: str, pid: int, version: str,
                        heartbeat_seconds: float | None = None, max_concurrent_jobs: int | None = None,
                        allowed_drivers: Iterable[str] | None = None) -> None:
        """Record a live engine. ``heartbeat_seconds`` is its poll bound: each claim refreshes
        its ``last_seen_at``, so status can call it stale after a few of them.
        ``max_concurrent_jobs`` (its cap) and ``allowed_drivers`` (its allow-list; None: every
        driver) are what ``jobs why`` reads to say that no live engine may run a job
        (011_engine_reports.sql)."""

    @abc.abstractmethod
    def unregister_engine(self, instance: str) -> None: ...

    @abc.abstractmethod
    def probe_permissions(self) -> list[str]:
        """Names of mjsched procedures the connected role may NOT execute."""

    # -- rows ------------------------------------------------------------------------
    @abc.abstractmethod
    def ensure_job_type(self, driver: str, isolation: str = "thread",
                        default_max_runtime: float | None = None) -> str: ...

    @abc.abstractmethod
    def insert_job(self, fields: Mapping[str, Any]) -> str:
        """The id of the new job. Replay-safe: the id is chosen before the call
        (``with_new_job_id``), and a retry that finds the job its lost first attempt inserted
        (same id, name and job type) answers that id. A name another job holds raises
        ``JobNameTaken``; an id another job holds, ``ConfigurationError`` naming ``id``."""

    @abc.abstractmethod
    def update_job(self, job_id: str, fields: Mapping[str, Any]) -> bool: ...

    @abc.abstractmethod
    def delete_job(self, job_id: str) -> bool:
        """True when the job was deleted, by this call or by a retried attempt of it
        (``deleted_or_replayed``)."""

    @abc.abstractmethod
    def get_jobs(self, job_ids: Iterable[str]) -> list[Job]: ...

    def get_job(self, job_id: str) -> Job | None:
        jobs = self.get_jobs([job_id])
        return jobs[0] if jobs else None

    @abc.abstractmethod
    def list_jobs(self, status: str | None = None, tag: str | None = None) -> list[Job]:
        """Every job, or those of ``status`` and/or carrying ``tag``, by name."""

    @abc.abstractmethod
    def pause_jobs(self, tag: str, reason: str | None, until: datetime | None, user: str | None) -> int:
        """pause_jobs (sql/*/010_tags.sql): every Active job carrying ``tag`` becomes Paused, with a
        record of the database login, ``user``, ``reason`` and ``until`` (when the claims resume it;
        None: never). Returns how many were paused."""

    @abc.abstractmethod
    def resume_jobs(self, tag: str) -> int:
        """resume_jobs: every Paused job carrying ``tag`` becomes Active; returns how many."""

    @abc.abstractmethod
    def set_tag_limit(self, tag: str, max_running: int | None, user: str | None) -> None:
        """set_tag_limit: at most ``max_running`` Running runs of the tag's jobs (None: no limit)."""

    @abc.abstractmethod
    def tag_summary(self) -> list[dict[str, Any]]:
        """Every tag: tag, jobs, max_running, set_at, set_by, set_by_user, running."""

    @abc.abstractmethod
    def waiting_for_tag(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """The due jobs a tag's limit holds back now (job_id, name, tag, max_running, running,
        next_run_at), or those of one job (the read query waiting_for_tag)."""

    def jobs_named(self, name: str) -> list[Job]:
        """The jobs called ``name``, as the database compares names (exactly in PostgreSQL; under
        the column's collation in SQL Server), oldest first: one at most once the names are
        unique (005_job_names). This default reads every job; the dialects ask by name."""
        return sorted((j for j in self.list_jobs() if j.name == name), key=lambda j: (j.created_at, j.id))

    @abc.abstractmethod
    def unscheduled_jobs(self, limit: int = 500, after: str | None = None) -> list[UnscheduledJob]:
        """Active jobs with no next_run_at (new, or edited by someone else), in id order
        (the server's), only ids after ``after``: a caller pages with the last id it got."""

    @abc.abstractmethod
    def active_schedules(self) -> list[dict[str, Any]]:
        """Distinct (schedule, timezone, driver) of Active cron and every= jobs (``schedule``: the
        cron expression or 'every <n>s', as schedules.schedule_text) not yet warned about for
        their present schedule and not opted out (high_frequency_ok), with ``example`` (a job
        name), ``jobs`` (how many share it) and ``job_ids`` (the first 1,000 of them, to record
        the warning): start-up checks without loading jobs."""

    def note_frequency_warned(self, items: Sequence[tuple[str, str]]) -> int:
        """Record (job id, schedule key) high-frequency warnings (note_frequency_warned); how
        many were marked. A backend without the procedure records nothing."""
        return 0

    def purge_runs(self, keep_seconds: float | None, keep_count: int | None, *, per_job: bool = True,
                   job_id: str | None = None, cursor: tuple[str | None, Any, str | None] = (None, None, None),
                   batch_size: int = 1000, max_jobs: int = 500, dry_run: bool = False,
                   now: datetime | None = None) -> "PurgeBatch":
        """One batch of the run-history purge (procedure ``purge_runs``, 006_retention.sql):
        deletes at most ``batch_size`` finished runs the retention rules let go (``per_job``:
        the jobs' keep_runs_* override ``keep_seconds``/``keep_count``), never a Running or
        Queued one, and answers the cursor of the next call. Only one session purges at a
        time: another purger's call answers ``busy`` and does nothing. ``dry_run`` counts
        what this call's page of jobs would lose and deletes nothing."""
        raise NotImplementedError(f"{type(self).__name__} has no purge_runs")

    def purge_job_changes(self, keep_seconds: float | None, batch_size: int = 1000,
                          now: datetime | None = None) -> int:
        """Delete at most ``batch_size`` rows of the audit trail that the jobs' keep_runs_days
        (else ``keep_seconds``) let go, oldest first (``purge_job_changes``, 013_audit.sql)."""
        return 0

    def set_job_alerts(self, job_id: str, rules: Mapping[str, Any]) -> bool:
        """Replace the job's deadline-alert rules (``set_job_alerts``, 014_alerts.sql); False: no such job."""
        raise NotImplementedError(f"{type(self).__name__} has no deadline alerts")

    def job_alert_rules(self, job_id: str) -> dict[str, Any] | None:
        """The job's alert rules (columns of job_alert_rule), None when it has none."""
        return None

    def evaluate_alerts(self, call: str, limit: int = 100, now: datetime | None = None) -> list[dict[str, Any]]:
        """Open and resolve deadline alerts; the rows this call (``call``, a token: a replay of a
        lost reply answers them again) opened or resolved (``evaluate_alerts``, 014_alerts.sql)."""
        raise NotImplementedError(f"{type(self).__name__} has no deadline alerts")

    def open_alerts(self, job_id: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """The open alerts (of one job), newest first."""
        return []

    def open_alert_counts(self) -> dict[str, int]:
        """Open alerts by kind (the metrics' gauge)."""
        return {}

    def job_history(self, job_id: str | None, name: str | None, limit: int = 100) -> list[JobChange]:
        """A job's audit trail, newest first: by ``job_id``, else by ``name`` (a deleted job's too)."""
        raise NotImplementedError(f"{type(self).__name__} has no audit trail")

    @abc.abstractmethod
    def list_runs(self, job_id: str | None = None, status: str | None = None,
                  limit: int = 100) -> list[JobRun]: ...

    @abc.abstractmethod
    def get_run(self, run_id: str) -> JobRun | None: ...

    @abc.abstractmethod
    def runs_by_ref(self, digits: str, tail: str | None, limit: int) -> list[JobRun]:
        """At most ``limit`` runs, by id, whose id without hyphens begins with the hex
        ``digits``, or (``tail`` given: 12 hex digits) whose id ends with ``tail``: what a
        shortened run id names (mjsched/engine/refs.py)."""

    @abc.abstractmethod
    def db_now(self) -> datetime: ...

    def why_facts(self, job_id: str, tick: datetime | None = None,
                  at: datetime | None = None) -> dict[str, Any] | None:
        """The row ``jobs why`` explains (query ``why_facts``, mjsched/why.py): the job, the runs
        around ``tick`` (None: its next run; the tick's run is the latest run of an instant in
        [tick, at]), its queue, the due jobs ahead of it and the engines (a JSON array in
        ``engines``); None when there is no such job. One statement."""
        raise NotImplementedError(f"{type(self).__name__} has no why_facts")

    @abc.abstractmethod
    def status_summary(self) -> dict[str, Any]:
        """Counts for ``mjsched status``: engines, due, running, failing, abandoned."""

    # -- change feed -------------------------------------------------------------------
    def listener(self) -> Listener | None:
        """A change feed, or None when the dialect has none (the poller then relies on
        its bounded idle interval)."""
        return None

    @abc.abstractmethod
    def close(self) -> None: ...

    def run_statement(self, what: str, statement: str,
                      params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        """The rows of one statement of this dialect that a caller keeps itself (the dashboard's
        named SQL, mjsched/web/queries.py), run as every call here is: bounded, retried when the
        error is transient, errors as mjsched's. ``params`` as the dialect's driver takes them
        (PostgreSQL: a mapping for ``%(name)s``; SQL Server: a sequence for ``?``); ``what`` names
        the statement in logs and errors. Never a statement built from values."""
        raise NotImplementedError(f"{type(self).__name__} runs no caller's statements")


def drivers_text(allowed_drivers: Iterable[str] | None) -> str | None:
    """An allow-list as engine_instance.allowed_drivers holds it: the names sorted, joined by
    commas (None: every driver)."""
    return None if allowed_drivers is None else ",".join(sorted(set(allowed_drivers)))


BackendFactory = Callable[[str], Backend]
