"""Schedule decisions as pure functions of the times they are given.

The database decides who runs a tick; this module decides which tick comes
next, what a late tick means (the missed-run policy) and what becomes of one
claimed row (``plan_claim``: run it, record it Skipped, or only move the
schedule on; the dispatcher carries the plan out). Nothing here reads a
clock: callers pass the database's time. Every instant in and out is an aware
datetime (naive ones raise ``ConfigurationError`` naming the parameter).

The rules (README "Time semantics" is the user-facing copy):

* **Missed tick.** A claimed tick ``T`` is *missed* when the tick after it had
  also come by the claim time ``now`` (inclusive: ``next(T) <= now``). The
  number of missed ticks ``n`` is the number of ticks in ``(T, now]``: ``T`` and
  the ``n - 1`` ticks after it were missed, the ``n``-th is the current one.
  No grace period: a tick is missed as soon as the next one has come, however
  close. Ticks that come while a run of the job
  is still executing are not missed ticks: the job's next_run_at only moves at
  completion (Skip mode drops them; Queue mode keeps them as Queued runs, which
  never go through ``plan_tick``), and Concurrent mode claims them as they come.
* **Skip** — one ``Skipped`` run for ``T`` (details ``{"missed": n}``), next
  run = first tick after ``now`` (the current tick is not run either).
* **RunOnce** (default) — run once now; the run's ``scheduled_for`` is ``T``,
  the oldest missed tick; next run = first tick after completion.
* **RunAll** — run ``T``; next run = the tick right after ``T`` even if past, so
  the backlog drains oldest first, one tick per poll, and ends with the current
  tick. Bounded: when more than ``max_catch_up`` ticks were missed, nothing is
  replayed; the tick is served as RunOnce, with a warning (``TickPlan.note``),
  logged once because afterwards no backlog is left.
* The policy applies in every concurrency mode, Concurrent included.
* Counting stops at ``max_catch_up + 1``: ``missed`` is exact up to the bound
  and ``max_catch_up + 1`` beyond it (the note then says "more than N").
* **The three kinds** (mjsched/schedules.py) follow the same rules: an interval's
  ticks are ``anchor + k * every``; a one-off (``run_at``) has a single tick, so no
  tick can come after it: it counts as missed (one missed tick) when it is claimed
  ``ONE_OFF_MISFIRE_GRACE`` or more after ``run_at`` (Quartz's default misfire
  threshold). Once its tick is served (run, or recorded Skipped) the job's next run
  is ``ENDED``, which the schema's trigger turns into status ``Expired``.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Protocol, TypeVar

from . import cron, schedules
from .errors import ConfigurationError
from .frozen import quick_init
from .models import Claim, ConcurrencyMode, Job, MissedRunPolicy
from .schedules import Schedule

log = logging.getLogger(__name__)

T = TypeVar("T")
HIGH_FREQUENCY_THRESHOLD = timedelta(minutes=5)
_EPSILON = timedelta(microseconds=1)
ONE_OFF_MISFIRE_GRACE = timedelta(seconds=60)
# The next run of a one-off job whose tick was served: later than any run_at, so the trigger of
# scheduled_job (001_schema.sql) sets the job Expired (next_run_at NULL) in the same write.
ENDED = datetime(9999, 12, 31, tzinfo=timezone.utc)


class UnusableSchedule(Exception):
    """A job row's schedule cannot be computed from what is stored (a cron, a zone or an
    instant no engine can use, written by plain SQL); ``cause`` is what was raised."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = cause


def computed(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, any exception it raises turned into ``UnusableSchedule``:
    callers tell a bad row (set it aside) from their own failures (which must propagate)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - whatever a row's values make the computation raise
        raise UnusableSchedule(exc) from exc


def _aware(field: str, value: object) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise ConfigurationError(field, value, "must be a timezone-aware datetime")
    return value


def schedule_of(job: "Schedulable | Job") -> Schedule:
    """The job's schedule, whichever kind it holds (an interval anchored at start_at, else created_at),
    its cron's ``H`` items and its jitter resolved from its name."""
    return schedules.build(job.cron_expression, job.interval_seconds, job.run_at, job.timezone,
                           anchor=job.start_at or job.created_at, name=job.name,
                           jitter_seconds=job.jitter_seconds)


class Schedulable(Protocol):
    """What scheduling a job without a next_run_at reads: a ``Job``, or the lighter row a
    backend pages through after a bulk edit (``backends.base.UnscheduledJob``)."""

    @property
    def name(self) -> str: ...
    @property
    def jitter_seconds(self) -> int | None: ...
    @property
    def cron_expression(self) -> str | None: ...
    @property
    def interval_seconds(self) -> int | None: ...
    @property
    def run_at(self) -> datetime | None: ...
    @property
    def created_at(self) -> datetime | None: ...
    @property
    def timezone(self) -> str: ...
    @property
    def start_at(self) -> datetime | None: ...
    @property
    def run_immediately_if_never_run(self) -> bool: ...
    @property
    def last_run_at(self) -> datetime | None: ...
    @property
    def run_count(self) -> int: ...


def initial_next_run(job: Schedulable, now: datetime) -> datetime:
    """First due instant of a job that has none (see ``first_due``).

    "Never ran" means no recorded run at all: ``last_run_at`` is NULL and
    ``run_count`` is 0.
    """
    return first_due(schedule_of(job), now, start_at=job.start_at,
                     run_immediately=job.run_immediately_if_never_run,
                     never_ran=job.last_run_at is None and job.run_count == 0)


def initial_next_run_key(job: Schedulable) -> tuple[object, ...]:
    """Everything ``initial_next_run`` reads from a job: jobs with equal keys get the same
    first due instant at one ``now``, so a bulk reschedule computes it once per key."""
    anchor = job.created_at if job.interval_seconds is not None and job.start_at is None else None
    named = job.name if job.jitter_seconds or cron.uses_hash(job.cron_expression) else None
    return (job.cron_expression, job.interval_seconds, job.run_at, anchor, job.timezone, job.start_at,
            job.run_immediately_if_never_run, job.last_run_at is None and job.run_count == 0,
            named, job.jitter_seconds)


def first_due(schedule: Schedule, now: datetime, *, start_at: datetime | None,
              run_immediately: bool, never_ran: bool) -> datetime:
    """The first due instant of a job being scheduled at ``now`` (database time).

    * ``run_immediately`` and ``never_ran``: exactly ``now`` — or ``start_at`` when
      the window opens later (the job runs as soon as it may, not at a tick).
    * otherwise: the first cron tick strictly after ``now`` and at or after
      ``start_at`` (a tick exactly at ``start_at`` fires: the window is
      ``[start_at, end_at)``).
    * a one-off: its ``run_at``, even when past (the missed-run policy then decides at
      the claim; a tick already served is never run again: the claim finds its run).
    """
    _aware("now", now)
    if start_at is not None:
        _aware("start_at", start_at)
    if isinstance(schedule, schedules.OneOffSchedule):
        return schedule.run_at
    if run_immediately and never_ran:
        return max(now, start_at) if start_at else now
    after = now
    if start_at is not None and start_at > after + _EPSILON:   # (a year-1 start_at cannot lose a microsecond)
        after = start_at - _EPSILON
    return schedule.next_after(after)  # type: ignore[return-value]  # only a one-off has an end


@quick_init
@dataclass(frozen=True)
class TickPlan:
    """What to do with a claimed tick.

    ``run`` False: record it as Skipped. ``catch_up``: the next tick to serve is the
    one after this tick (RunAll backlog), not the first one after completion.
    ``missed``: how many ticks after this one had already passed at claim time
    (exact up to the catch-up bound, bound + 1 beyond it). ``note``: a warning
    for the log (and the Skipped run's error_message), or None.
    """

    run: bool
    catch_up: bool
    missed: int
    note: str | None = None


def missed_ticks(job: Job, scheduled_for: datetime, db_now: datetime, limit: int) -> list[datetime]:
    """Ticks in ``(scheduled_for, db_now]``, at most ``limit``: the ticks that had
    come after the claimed one by the claim time."""
    _aware("scheduled_for", scheduled_for)
    _aware("db_now", db_now)
    schedule = schedule_of(job)
    if isinstance(schedule, schedules.OneOffSchedule):   # no tick after it: late by the grace is missed
        return [scheduled_for] if limit and db_now - scheduled_for >= ONE_OFF_MISFIRE_GRACE else []
    return schedule.ticks_between(scheduled_for, db_now, limit=limit)


def plan_tick(job: Job, scheduled_for: datetime, db_now: datetime, max_catch_up: int) -> TickPlan:
    """Apply the missed-run policy to a tick claimed at ``db_now`` (module doc)."""
    if isinstance(max_catch_up, bool) or not isinstance(max_catch_up, int) or max_catch_up < 1:
        raise ConfigurationError("max_catch_up", max_catch_up, "must be an int >= 1")
    missed = len(missed_ticks(job, scheduled_for, db_now, limit=max_catch_up + 1))
    if missed == 0:
        return TickPlan(run=True, catch_up=False, missed=0)
    policy = job.missed_run_policy
    if policy is MissedRunPolicy.SKIP:
        return TickPlan(run=False, catch_up=False, missed=missed,
                        note=f"missed-run policy Skip: {_count(missed, max_catch_up)} tick(s) passed "
                             f"while no engine ran this job since {scheduled_for.isoformat()}; "
                             "skipped to the next future tick")
    if policy is MissedRunPolicy.RUN_ALL:
        if missed <= max_catch_up:
            return TickPlan(run=True, catch_up=True, missed=missed)
        return TickPlan(run=True, catch_up=False, missed=missed,
                        note=f"missed-run policy RunAll: more than {max_catch_up} missed ticks since "
                             f"{scheduled_for.isoformat()}; running once now instead "
                             "(raise max_catch_up_runs to replay more)")
    return TickPlan(run=True, catch_up=False, missed=missed)


def _count(missed: int, limit: int) -> str:
    return f"more than {limit}" if missed > limit else str(missed)


def next_run_after(job: Job, scheduled_for: datetime | None, now: datetime, catch_up: bool) -> datetime:
    """The next due instant once a tick is served (or skipped) at ``now``.

    Normal case: the first tick strictly after ``now`` — and after the tick served,
    so a tick is never served twice even if ``now`` lags behind it. Ticks that came
    while the job ran are dropped here (Skip mode; Queue mode keeps them as Queued
    runs). RunAll catch-up: the tick right after the one served, even if past.
    Manual runs (``scheduled_for`` None) count from ``now``.
    """
    _aware("now", now)
    schedule = schedule_of(job)
    if catch_up and scheduled_for is not None:
        nxt = schedule.next_after(_aware("scheduled_for", scheduled_for))
    else:
        base = now if scheduled_for is None else max(now, _aware("scheduled_for", scheduled_for))
        nxt = schedule.next_after(base)
    return ENDED if nxt is None else nxt


def schedule_moves_at_end(mode: ConcurrencyMode, *, manual: bool, attempt: int) -> bool:
    """The end of a run moves its job's schedule on. Not a manual run's (it served no tick),
    not a retry's (its tick's first attempt moved it already, and a tick that came due while
    the retry ran is still due: a retry never costs a tick), not a Concurrent run's (its
    claim moved it, ``plan_claim``)."""
    return not manual and attempt <= 1 and mode is not ConcurrencyMode.CONCURRENT


def keeps_ticks_queued(mode: ConcurrencyMode, *, manual: bool, catch_up: bool, attempt: int) -> bool:
    """While this run runs, ticks of its job that come due are kept as Queued runs: Queue
    mode, a tick's first attempt that is no RunAll catch-up (whose backlog is served tick by
    tick) and no manual run. Ticks due during a retry stay due: served when it ends."""
    return mode is ConcurrencyMode.QUEUE and not manual and not catch_up and attempt <= 1


class ClaimAction(enum.Enum):
    """What becomes of one claimed row (``ClaimPlan.action``)."""

    RUN = "run"          # its run starts on this engine
    SKIP = "skip"        # its run is recorded Skipped, never started
    ADVANCE = "advance"  # a run-less claim: its tick was served already; the job only moves on


@quick_init
@dataclass(frozen=True)
class ClaimPlan:
    """What the dispatcher does with one claimed row (``plan_claim``); it only carries it out.

    ``seen_next_run_at``: the job's next_run_at as the claim saw it, the compare-and-set guard
    of every write below (an edit since the claim stands). ``next_run_at``: where the job's
    schedule goes: ADVANCE and SKIP write it with the claim's end (SKIP: None leaves it
    alone); RUN writes it before the run starts only with ``release_job``, which also lets the
    job lock go (Concurrent mode: the run keeps only its own lease). ``attempt``: the run's
    attempt (a queued retry's, else 1). ``catch_up``: a RunAll backlog tick (the next tick to
    serve is the one after it). ``queued_after``: Queue mode keeps as Queued runs the ticks
    after this instant that come due while the run runs. ``error`` and ``details``: a Skipped
    run's message and details. ``note``: a warning for the log, or None.
    """

    action: ClaimAction
    seen_next_run_at: datetime | None
    next_run_at: datetime | None = None
    release_job: bool = False
    attempt: int = 1
    catch_up: bool = False
    queued_after: datetime | None = None
    error: str | None = None
    details: dict[str, Any] | None = None
    note: str | None = None


def plan_claim(job: Job, claim: Claim, db_now: datetime, *, max_catch_up: int, refused: str | None = None,
               attempt: int = 1) -> ClaimPlan:
    """Decide what becomes of one claim made at ``db_now``.

    ``refused``: why no run of ``job`` can succeed on this engine (its driver or configuration),
    or None; each such tick is recorded Skipped. ``attempt``: a queued run's attempt number (a
    tick's claim is always attempt 1). Raises ``UnusableSchedule`` when the job's schedule
    cannot be computed (the caller sets the row aside).
    """
    tick = claim.scheduled_for
    if claim.run_id is None:   # the tick was served (it, or a later tick, has a run): move on, run nothing
        return ClaimPlan(ClaimAction.ADVANCE, seen_next_run_at=tick,
                         next_run_at=computed(next_run_after, job, tick, db_now, catch_up=False))
    # a due tick's claim serves it; a queued run's claim carries the job's row as the claim left it
    seen = tick if claim.is_tick else job.next_run_at
    if refused is not None:
        nxt = None if claim.from_queue else computed(next_run_after, job, tick, db_now, catch_up=False)
        return ClaimPlan(ClaimAction.SKIP, seen, next_run_at=nxt, error=refused)
    policy = TickPlan(run=True, catch_up=False, missed=0)
    if claim.is_tick:
        policy = computed(plan_tick, job, tick, db_now, max_catch_up)
    if not policy.run:
        return ClaimPlan(ClaimAction.SKIP, seen, next_run_at=computed(next_run_after, job, tick, db_now,
                                                                      catch_up=False),
                         error=policy.note, details={"missed": policy.missed}, note=policy.note)
    attempt = attempt if claim.from_queue else 1   # a queued claim may be a retry (README "Retries")
    release, nxt = False, None
    if job.concurrency_mode is ConcurrencyMode.CONCURRENT and not claim.from_queue:
        release, nxt = True, computed(next_run_after, job, tick, db_now, catch_up=policy.catch_up)
    elif job.concurrency_mode is ConcurrencyMode.CONCURRENT and attempt > 1:
        # a Concurrent retry runs beside the ticks, as a tick run does: it keeps only its run
        # lease, and the schedule stays as it is
        release, nxt = True, job.next_run_at
    # Only ticks that come due while this run runs are queued: those before the claim were
    # missed (a tick's claim) or were queued or refused already (a queued run's claim).
    return ClaimPlan(ClaimAction.RUN, seen, next_run_at=nxt, release_job=release, attempt=attempt,
                     catch_up=policy.catch_up, queued_after=None if tick is None else max(tick, db_now),
                     note=policy.note)


def is_high_frequency(job: Job, now: datetime) -> timedelta | None:
    """The job's shortest gap between fires when it is under five minutes, else None."""
    gap = schedule_of(job).min_interval(after=_aware("now", now))
    return gap if gap < HIGH_FREQUENCY_THRESHOLD else None


def schedule_gap(text: str, timezone: str, now: datetime, name: str | None = None) -> timedelta | None:
    """The shortest gap between fires of a schedule text (``schedules.schedule_text``: a cron,
    ``every <n>s`` or ``at <instant>``) when under five minutes, else None.

    A cron is measured over the next six fire times after ``now`` (enough to see a burst such as
    "every minute from 9 to 10" without scanning a day); an
    interval is its length; a one-off never is. Exactly five minutes is not high-frequency.
    A cron with ``H`` is measured as resolved for ``name`` (one job of those sharing the text).
    """
    _aware("now", now)
    if text.startswith("at "):
        return None
    if text.startswith("every "):
        gap = timedelta(seconds=schedules.parse_duration(text[len("every "):]))
    else:
        gap = schedules.CronSchedule.parse(text, timezone, seed=name).min_interval(after=now)
    return gap if gap < HIGH_FREQUENCY_THRESHOLD else None
