"""The dispatcher: one poll, start to end, and the gate that stops new runs.

A poll sweeps expired leases (at most once per ``sweep_interval`` from the background
loop), gives unscheduled jobs a next run, claims up to the free slots, starts a run per
claim, keeps Queue-mode ticks of running jobs as Queued runs, and returns how long the
loop may sleep. What becomes of each claim is decided by ``scheduling.plan_claim`` (a pure
function, tested as a table); this module only carries the plan out. A claim whose reply was
lost is asked again under its id as a replay (``PendingClaim``), and what was already started
from it is not started twice.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from .. import scheduling, tracing, validation
from ..scheduling import ClaimAction, plan_claim
from ..backends.base import Backend, Completion, SweepResult
from ..clock import DbClock
from ..drivers.celery_trust import refusal_for
from ..errors import SchedulerError
from ..models import Claim, ClaimBatch, DispatchResult, Job, RunStatus
from .background import BackgroundTasks
from .completions import CompletionWriter
from .housekeeping import Housekeeping
from .leases import Heartbeat
from .options import EngineOptions
from .run import Run, RunRegistry, RunServices
from .set_aside import SetAside
from .stats import EngineStats

log = logging.getLogger(__name__)

SCHEDULE_REFRESH_SECONDS = 5.0   # unscheduled jobs are looked for at least this often
# A claim that only advanced ticks already served (run-less claims) leaves its slots free: claim
# again in the same poll, at most this many times, so a backlog of served ticks never starves runs.
MAX_CLAIM_ROUNDS = 4
DUE_MARGIN_SECONDS = 0.0002      # wake just after the next due instant, not just before it
# With every slot taken, the background loop claims (its heartbeat, the counters) at most this
# often: a freed slot wakes it anyway, and a claim for no slot only delayed the one that follows.
FULL_CLAIM_SECONDS = 1.0
# While due jobs wait for slots (a backlog), the background loop claims once half the slots are
# free (or as many as the due jobs left), or this long after its last claim: a claim per freed
# slot paid the claim's fixed cost (its due_left count, a round trip, a commit) for a row or
# two (bench.throughput: a quarter of the claims took 0-9 rows). A job waiting in a backlog is
# already late; this bounds what the batching adds to it.
CLAIM_GATHER_SECONDS = 0.05


@dataclass
class PendingClaim:
    """A claim under way: its id, and the runs (or run-less ticks) already started from it.
    Kept when the claim raised, since it may have committed: the next poll replays it."""

    claim_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    handled: set[str] = field(default_factory=set)

    def first_time(self, claim: Claim) -> bool:
        """True once per run (or run-less tick) of this claim: a replay never starts one twice."""
        key = claim.run_id or claim.job_id
        if key in self.handled:
            return False
        self.handled.add(key)
        return True


class Dispatcher:
    def __init__(self, *, backend: Backend, options: EngineOptions, registry: RunRegistry,
                 services: RunServices, writer: CompletionWriter, keeper: Heartbeat,
                 housekeeping: Housekeeping, clock: DbClock, side_work: BackgroundTasks,
                 stats: EngineStats, wake: Callable[[], None]) -> None:
        self._backend = backend
        self._options = options
        self._registry = registry
        self._services = services
        self._writer = writer
        self._keeper = keeper
        self._housekeeping = housekeeping
        self._reports = housekeeping.reports       # errors about a job, logged once (log_once.py)
        self._set_aside: SetAside = housekeeping.set_aside   # rows no engine can schedule or read
        self._clock = clock
        self._side_work = side_work
        self._stats = stats
        self._wake = wake
        self._lock = threading.Lock()            # one poll at a time
        self._accepting = True                   # False once stop_polling began: no new dispatches
        self._accept_lock = threading.Lock()     # a claim becomes a run only while accepting, under this lock
        self._pending: PendingClaim | None = None   # a claim whose reply or handling failed
        self._schedule_dirty = True
        self._schedule_more = False     # a reschedule sweep has pages left: poll again at once
        self._schedule_checked = 0.0
        self._last_sweep = 0.0
        self._due_left = 0              # due jobs the last claim left for want of slots (0: no backlog)
        self._next_due: datetime | None = None   # the last claim's next_due_at
        self._claimed_at = float("-inf")          # monotonic time of the last claim call

    # -- the loop's entry points --------------------------------------------------------------
    def poll(self) -> tuple[DispatchResult, float]:
        """The background loop's poll: sweeps only when the sweep interval has passed, and
        not while jobs are due (their claims come first; the sweep follows at the next poll),
        unless a whole second interval has passed."""
        interval = self._options.lease_budget.sweep_interval
        since = time.monotonic() - self._last_sweep
        due = since >= interval and (since >= 2 * interval or not self._claims_due())
        return self.dispatch(sweep=due, claim_when_full=False)

    def _claims_due(self) -> bool:
        """Due jobs are known to wait: the last claim left some for want of slots, or its
        next due instant has come."""
        return self._due_left > 0 or (self._next_due is not None and self._next_due <= self._clock.now())

    def job_changed(self) -> None:
        self._schedule_dirty = True

    def schedule_unscheduled(self) -> None:
        """Reschedule for at most a short budget; while pages are left, wake the poller so
        the rest (and the jobs now due) come at the next poll, not at the next idle one."""
        changed, self._schedule_dirty = self._schedule_dirty, False
        self._schedule_checked = time.monotonic()
        self._schedule_more = self._housekeeping.schedule_unscheduled(restart=changed)
        if self._schedule_more:
            self._wake()

    def dispatch(self, sweep: bool, claim_when_full: bool = True) -> tuple[DispatchResult, float]:
        """One poll: sweep, claim up to the free slots, start runs; (result, seconds to sleep).
        ``claim_when_full`` False (the background loop): with no slot free and a claim made
        within FULL_CLAIM_SECONDS, or in a backlog with too few slots free and a claim made
        within CLAIM_GATHER_SECONDS (``_claim_later``), no claim, and a result that counts
        nothing (the counters are the claims'); the last claim's backlog and next due instant
        stand."""
        with self._lock:
            try:
                if not self._accepting:
                    return DispatchResult(), self._options.max_poll_interval
                result, delay = self._dispatch_locked(sweep, claim_when_full)
            finally:
                # the gate closed before or during this poll (returned or raised): no poll
                # will replay a claim left unanswered, so this one hands it back
                if not self._accepting:
                    self._hand_back_pending()
        if (result.dispatched or result.swept or result.due_left_waiting) and log.isEnabledFor(logging.INFO):
            log.info("poll: swept=%d, dispatched=%d, locked_out=%d, due_left_waiting=%d, inflight=%d/%d",
                     result.swept, result.dispatched, result.locked_out, result.due_left_waiting,
                     self._registry.live_count(), self._options.max_concurrent_jobs, extra={"action": "poll"})
        return result, delay

    def _dispatch_locked(self, sweep: bool, claim_when_full: bool) -> tuple[DispatchResult, float]:
        """``dispatch`` with its lock held and the gate open when it began."""
        # a completion whose job row was just released lands before a sweep or claim takes the job over
        self._writer.retry_busy_now()
        swept = self._sweep() if sweep else SweepResult()
        if self._schedule_dirty or self._schedule_more or \
                time.monotonic() - self._schedule_checked > SCHEDULE_REFRESH_SECONDS:
            self.schedule_unscheduled()
        delay = self._options.max_poll_interval
        wait = self._claim_later() if not claim_when_full and self._pending is None else 0.0
        if wait > 0:
            db_now = self._clock.now()   # a freed slot wakes us
            result, next_due = DispatchResult(swept=swept.swept), None
            delay = min(delay, wait)
        else:
            started, free, batch, db_now = self._claim_rounds()
            self._due_left = batch.due_left if len(batch.claims) >= free else 0
            self._next_due = next_due = batch.next_due_at
            result = DispatchResult(swept=swept.swept, dispatched=len(started), locked_out=batch.locked_out,
                                    due_left_waiting=self._due_left, run_ids=tuple(started))
        self._housekeeping.purge_if_due()      # in the background: the claims never wait for it
        if next_due is not None:
            # from the clock now, not from the claim's db_now: this poll's own time since the
            # claim would otherwise make the next wake-up that much late
            delay = min(delay, (next_due - self._clock.now()).total_seconds() + DUE_MARGIN_SECONDS)
        delay = min(delay, self._enqueue_queue_ticks(db_now))
        return result, max(0.0, delay)

    def _sweep(self) -> SweepResult:
        swept = self._backend.sweep_expired_leases()
        self._last_sweep = time.monotonic()
        if swept.swept and self._registry.busy():
            self._keeper.renew()   # learn at once which of our own runs were abandoned
        return swept

    # -- claims -------------------------------------------------------------------------------
    def _claim_later(self) -> float:
        """Seconds the background loop waits before its next claim (0: claim now). With no
        slot free, until one frees (at most FULL_CLAIM_SECONDS between claims); in a backlog,
        until half the slots are free or as many as the due jobs left (at most
        CLAIM_GATHER_SECONDS after the last claim)."""
        fenced = self._keeper.fence.claim_pause()
        if fenced > 0:   # a run was just fenced: the path to the database is suspect (fencing.py)
            return fenced
        since = time.monotonic() - self._claimed_at
        free = self._slots_free()
        if free == 0:
            return max(0.0, FULL_CLAIM_SECONDS - since)
        if self._due_left and free < min(self._options.max_concurrent_jobs // 2, self._due_left):
            return max(0.0, CLAIM_GATHER_SECONDS - since)
        return 0.0

    def _claim_rounds(self) -> tuple[list[str], int, ClaimBatch, datetime]:
        """Claim and start, again while a round only advanced served ticks and filled no slot;
        returns the ids of the runs started."""
        started: list[str] = []
        for _ in range(MAX_CLAIM_ROUNDS):
            free = self._slots_free()
            batch, db_now = self._claim(free)
            started += self._start_claims(batch, db_now)
            self._pending = None
            if not any(c.run_id is None for c in batch.claims) or len(batch.claims) < free:
                break
        return started, free, batch, db_now

    def _slots_free(self) -> int:
        return max(0, self._options.max_concurrent_jobs - self._registry.live_count())

    def _claim(self, free: int) -> tuple[ClaimBatch, datetime]:
        # A claim that raised may have committed: call again under its id, as a replay.
        replay = self._pending is not None
        if self._pending is None:
            self._pending = PendingClaim()
        claim_id = self._pending.claim_id
        self._claimed_at = time.monotonic()
        batch = self._backend.claim_due_jobs(self._options.instance_name, free, self._options.lease_timeout,
                                             claim_id=claim_id, replay=replay)
        if replay:   # a WARNING only when the lost claim had taken something (after an outage: rarely)
            log.log(logging.WARNING if batch.claims else logging.INFO,
                    "claim %s had failed; asked again as a replay: %d claim(s) answered",
                    claim_id, len(batch.claims), extra={"action": "claim_replayed"})
        # The clock at the claim's end, not its start: an estimate from db_now ran behind by the
        # claim's duration, and the next due instant was slept past by as much.
        self._clock.observe(batch.replied_at or batch.db_now)
        return batch, batch.db_now or self._clock.now()

    def _start_claims(self, batch: ClaimBatch, db_now: datetime) -> list[str]:
        """Start a run per claim of a committed claim. Nothing that goes wrong here may leave a
        claim Running with nobody executing it: a row that cannot be decoded or scheduled is
        set aside, and any other failure hands its claim back (``_give_back``)."""
        assert self._pending is not None
        try:
            self._housekeeping.warn_high_frequency(list(batch.jobs.values()))
        except Exception as exc:  # noqa: BLE001 - advice only: never a reason to leave claims unstarted
            log.debug("high-frequency check of a claim skipped: %s", exc)
        started: list[str] = []
        ready: list[Run] = []
        traced = tracing.wanted()   # once per claim: a span per run only where one is received
        try:
            for claim in batch.claims:
                job = batch.jobs[claim.job_id]
                if not self._pending.first_time(claim):   # started before a replay of its claim
                    continue
                registered = len(ready)
                try:
                    if job.undecodable:   # a stored value no engine can read: before any run started
                        self._end_unstarted(self._set_aside.undecodable(job, claim.run_id, claim.lock_token))
                    elif self._start_claim(job, claim, db_now, ready, traced) and claim.run_id is not None:
                        started.append(claim.run_id)
                except scheduling.UnusableSchedule as exc:   # the row itself: before any run started
                    self._end_unstarted(self._set_aside.unusable_schedule(job, claim.run_id, claim.lock_token,
                                                                          exc.cause))
                except Exception as exc:  # noqa: BLE001 - between a committed claim and its start
                    if len(ready) == registered:
                        self._give_back(job, claim.run_id, claim.lock_token, exc)
                    else:   # its run is registered already: it starts with the others (finally below)
                        log.error("job %r: %s: %s after its run was prepared; the run starts", job.name,
                                  type(exc).__name__, exc, extra={"action": "dispatch_failed", "job_id": job.id})
        finally:
            failed = self._hand_to_pool(ready)
        return [run_id for run_id in started if run_id not in failed]

    def _hand_to_pool(self, ready: list[Run]) -> set[str]:
        """The registered runs of one claim go to the pool together, once the claim's rows are
        all read: a worker woken per run while the rest were still being prepared took the GIL
        from this thread run by run. Also when preparing a later one raised (finally above):
        a registered run is always started, or its claim handed back. Returns the ids of the
        runs the pool refused."""
        failed: set[str] = set()
        for run in ready:
            try:
                run.start()
            except Exception as exc:  # noqa: BLE001 - the pool refused it (shut down): hand it back
                failed.add(run.run_id)
                self._give_back(run.job, run.run_id, run.token, exc)
                continue
            self._stats.bump("dispatched")
        return failed

    def _give_back(self, job: Job, run_id: str | None, token: str, exc: BaseException) -> None:
        """A claim that failed between its commit and its driver's start is handed back at
        once, not left Running until its lease lapses: its run ends Skipped, unstarted (which
        releases the lock and leaves the schedule alone: the tick, which now has a run, is
        advanced past at the next claim), or a run-less claim's lock is released."""
        log.error("could not start run of job %r: %s: %s; its claim is handed back", job.name,
                  type(exc).__name__, exc, extra={"action": "dispatch_failed", "job_id": job.id})
        try:
            if run_id is None:
                self._backend.release_job_lock(job.id, token)
            else:
                self._end_unstarted(Completion(run_id, token, RunStatus.SKIPPED.value,
                                               f"not started: {type(exc).__name__}: {exc}"[:2000], None, None))
        except Exception as again:  # noqa: BLE001 - the database or the writer failed too: the lease lapses
            log.warning("job %r: could not hand its claim back (%s); its lease will lapse", job.name, again)

    def _start_claim(self, job: Job, claim: Claim, db_now: datetime, ready: list[Run], traced: bool = True) -> bool:
        """Carry out one claim's plan (``scheduling.plan_claim``): prepare and register its run,
        to be started with the claim's others (``ready``) (True), or settle a claim that runs
        nothing (False)."""
        run_id, token = claim.run_id, claim.lock_token
        refused = None if run_id is None else self._definition_refused(job)
        attempt = self._attempt_of(run_id) if claim.from_queue and run_id is not None and refused is None else 1
        plan = plan_claim(job, claim, db_now, max_catch_up=self._options.max_catch_up_runs, refused=refused,
                          attempt=attempt)
        if plan.note:
            log.warning("job %r: %s", job.name, plan.note, extra={"action": "missed_runs"})
        if plan.action is ClaimAction.ADVANCE or plan.release_job:
            self._backend.advance_job(job.id, token, plan.next_run_at, release=True, guard=True,
                                      expected_next_run_at=plan.seen_next_run_at)
        if plan.action is ClaimAction.ADVANCE or run_id is None:   # (only a run-less claim is ADVANCE)
            log.warning("job %r: tick %s already served (it or a later tick has a run); advanced to %s", job.name,
                        claim.scheduled_for, plan.next_run_at, extra={"action": "tick_already_served"})
            return False
        if plan.action is ClaimAction.SKIP:   # refused (reported once), or the missed-run policy Skip
            self._end_unstarted(Completion(run_id, token, RunStatus.SKIPPED.value, plan.error, plan.details,
                                           plan.next_run_at, guard=True, expected_next_run_at=plan.seen_next_run_at))
            return False
        run = Run.begin(self._services, job, run_id, token, claim.scheduled_for, manual=False,
                        catch_up=plan.catch_up, seen_next_run_at=plan.seen_next_run_at, attempt=plan.attempt,
                        last_enqueued=plan.queued_after, lease_from=self._lease_from(job, db_now), traced=traced)
        with self._accept_lock:
            accepted = self._accepting
            if accepted:
                self._registry.add(run)
        if not accepted:   # stop_polling() began while this claim was in the database: hand it back
            self._hand_back(job.id, run_id, token, job.name)
            return False
        ready.append(run)   # started (its lease watched) also when polled by hand (dispatch_due_jobs)
        return True

    def _lease_from(self, job: Job, db_now: datetime) -> float:
        """time.monotonic() no later than the start of the transaction that claimed ``job``,
        which its lease runs from (Run.lease_until): this call's start, less how long before
        this call's transaction the claim was made (a replay answers an earlier call's claims;
        ``locked_at`` and ``db_now`` are both the database's clock)."""
        decoded = isinstance(job.locked_at, datetime) and isinstance(db_now, datetime)   # not an Undecodable
        earlier = max(0.0, (db_now - job.locked_at).total_seconds()) if decoded else 0.0
        return self._claimed_at - earlier

    def _attempt_of(self, run_id: str) -> int:
        """The attempt number of a claimed Queued run (a Queue-mode tick's is 1)."""
        found = self._backend.get_run(run_id)
        return found.attempt if found is not None else 1

    def _end_unstarted(self, completion: Completion | None) -> None:
        """A claimed run that will not execute: recorded (Skipped, or Failed when set aside as
        undecodable), then the loop polls again."""
        if completion is not None:
            self._writer.submit(completion, lambda _ok: self._wake())

    def _definition_refused(self, job: Job) -> str | None:
        """Why no run of ``job`` can succeed on this engine (its driver is not installed here, or
        the driver refuses its configuration), or None. Logged once per job and reason.
        A celery job outside this engine's allow-list is left to its run, which ends Failed
        saying so: its driver's checks, which import the app, are not called."""
        if refusal_for(self._options.celery_allow, job.driver, job.configuration) is not None:
            return None
        try:
            validation.check_runnable(job.driver, job.configuration)
            return None
        except Exception as exc:  # noqa: BLE001 - a plugin may raise anything from its validation
            reason = f"not run: {type(exc).__name__}: {exc}; fix the job's driver or configuration"
        if self._reports.first_refusal(job, reason):
            log.error("job %r (%s): %s (each tick is recorded Skipped until then)", job.name, job.id, reason,
                      extra={"action": "job_refused", "job_id": job.id})
        return reason

    # -- queue mode ---------------------------------------------------------------------------
    def keep_queue_ticks(self) -> float:
        """Between polls (``run_due_jobs`` waiting for its runs): keep the Queue-mode ticks due by
        now as Queued runs, as a poll does; returns seconds to the next such tick."""
        with self._lock:
            return self._enqueue_queue_ticks(self._clock.now())

    def _enqueue_queue_ticks(self, db_now: datetime) -> float:
        """Keep ticks of our running Queue-mode jobs as Queued runs; return seconds to the next one."""
        wait = self._options.max_poll_interval
        for run in self._registry.busy():
            if not scheduling.keeps_ticks_queued(run.job.concurrency_mode, manual=run.manual,
                                                 catch_up=run.catch_up, attempt=run.attempt):
                continue
            try:
                schedule = scheduling.schedule_of(run.job)
                base = run.last_enqueued or run.scheduled_for or db_now
                tick = schedule.next_after(base)
            except Exception as exc:  # noqa: BLE001 - no tick to keep for this job; the others go on
                if self._reports.first_unusable(run.job):
                    log.error("job %r: cannot compute the ticks to queue: %s: %s", run.job.name,
                              type(exc).__name__, exc, extra={"action": "bad_schedule"})
                continue
            pending: datetime | None = tick
            while pending is not None and pending <= db_now:
                if self._backend.enqueue_job_run(run.job.id, pending):
                    log.info("job %r still running: tick %s kept as a Queued run", run.job.name,
                             pending.isoformat(), extra={"action": "queued"})
                run.note_enqueued(pending)
                try:
                    pending = schedule.next_after(pending)
                except Exception:  # noqa: BLE001 - past the last instant there is: nothing more to queue
                    pending = None
            if pending is not None:
                wait = min(wait, (pending - db_now).total_seconds() + DUE_MARGIN_SECONDS)
        return wait

    # -- the gate -----------------------------------------------------------------------------
    def open_gate(self) -> None:
        with self._accept_lock:
            self._accepting = True

    def close_gate(self, wait: bool, timeout: float | None) -> None:
        """From here on no claim becomes a run of this engine. With ``wait``, a poll under
        way finishes first (within ``timeout``), so its runs are drained like the others;
        a poll still in the database after that hands its claims back when it returns."""
        got = self._lock.acquire(timeout=-1 if timeout is None else timeout) if wait \
            else self._lock.acquire(blocking=False)
        try:
            with self._accept_lock:
                self._accepting = False
            if got:   # else the poll under way owns it, and hands it back as it ends (dispatch)
                self._hand_back_pending()
        finally:
            if got:
                self._lock.release()

    def _hand_back_pending(self) -> None:
        """With the poll lock held and the gate closed: no poll will replay the claim that
        raised, so replay it and hand it back, in the background (the database just failed
        and may be slow; stop_polling(wait=False) never waits for it)."""
        unanswered, self._pending = self._pending, None
        if unanswered is not None:
            self._side_work.submit(self._hand_back_unanswered, unanswered)

    def _hand_back_unanswered(self, pending: PendingClaim) -> None:
        """The last claim raised and may have committed: replay it once more and hand back
        what it took, so those jobs do not wait out a lease for an engine that stopped."""
        try:
            batch = self._backend.claim_due_jobs(self._options.instance_name, 0, self._options.lease_timeout,
                                                 claim_id=pending.claim_id, replay=True)
        except SchedulerError as exc:
            log.warning("could not replay claim %s at stop (%s); its jobs wait out their lease",
                        pending.claim_id, exc)
            return
        for claim in batch.claims:
            if (claim.run_id or claim.job_id) not in pending.handled:
                self._hand_back(claim.job_id, claim.run_id, claim.lock_token)

    def _hand_back(self, job_id: str, run_id: str | None, token: str, name: str | None = None) -> None:
        """A claim this engine will not run: its run ends Skipped unstarted (which releases the
        lock, leaves the schedule alone and counts in no statistic), or a run-less claim just
        lets the lock go; both through the procedures, fenced by the claim's token."""
        name = name or job_id
        if run_id is None:
            try:
                self._backend.release_job_lock(job_id, token)
            except SchedulerError as exc:
                log.warning("could not release job %r (%s); its lease will lapse", name, exc)
            return
        log.warning("job %r: claimed as the engine stopped; run %s recorded Skipped, not started",
                    name, run_id, extra={"action": "claim_handed_back"})
        self._writer.submit(Completion(run_id, token, RunStatus.SKIPPED.value,
                                       "the engine stopped before this run could start", None, None),
                            lambda _ok: None)
