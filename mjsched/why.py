"""Why did a job not run? The reasons for one tick, from the database's own state.

``mjsched jobs why JOB [--at TIME]``, ``SchedulingEngine.why(job, at=None)`` and the panel on
the dashboard's job page all answer with a ``WhyReport``: the tick asked about (the job's next
run, or the last tick of its schedule at or before ``at``), and a list of ``Reason``s, each
with a stable ``code`` (``REASON_CODES``), a sentence that names the facts, and those facts.

Two steps, so each can be tested alone:

* **Facts** (``WhyFacts``): one read query per dialect (``why_facts`` in
  ``sql/<dialect>/queries.sql``) returns the job, the runs around the tick (its own run, the
  run started last before it, the first run started after it, the Running run, the next
  pending retry, the last run), the queue, the due jobs ahead of it, and the engines with what
  each reports at registration (cap, allow-list: 011_engine_reports.sql) and its runs in
  flight. ``facts_from_row`` turns that row into ``WhyFacts``; whether each engine is alive
  (``mjsched.liveness``, which probes a pid on this host) is decided there too.
* **Reasons** (``explain``): a pure function of the facts. It walks the claim rule in its
  order (``claimable()`` and ``claim_ticks`` in ``sql/postgres/002_procedures/``, then
  what the engine does with a claim, ``mjsched/engine/dispatch.py``):

  1. what became of the tick, when a run holds it (``ran``, ``running``, ``queued``,
     ``retry_pending``, ``skipped_missed``, ``refused``, ``set_aside``, ``not_started``,
     ``retry_dropped``, ``driver_not_allowed``); or, for a past tick no run holds, what
     passed it over (``before_created``, ``skipped_overlap``, ``queue_full``,
     ``coalesced``, ``history_purged``, ``rescheduled``);
  2. the job: its status (``paused``, ``disabled``, ``pending``, ``expired``), its window
     (``before_window``, ``after_window``), a next run (``unscheduled``, ``set_aside``,
     ``already_served``, ``scheduled``);
  3. the claim of a due tick: the job's lock (``locked``, ``locked_by_gone_engine``,
     ``lease_lapsed``), queued ticks first (``queue_ahead``), the due jobs ahead of it
     (``backlog``);
  4. the engines: ``no_engine``, ``driver_not_allowed``, ``driver_partly_allowed``,
     ``engines_full``;
  5. what the engine will do with the claim: ``will_skip_missed``, ``refused``;
  6. the verdict when nothing stands in the way: ``due`` (it will be claimed at the next
     poll) or ``scheduled``.

A reason is ``blocking`` when it keeps the tick from running (or says it did not); the report's
``verdict`` is the first blocking reason, else the tick's outcome or ``due``/``scheduled``.
Codes are stable: scripts may match on them. ``RESERVED_CODES`` are named for features not
built yet: their place in the walk is marked in ``explain`` (none at present).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import liveness, scheduling, schedules

UTC = timezone.utc

# Every code explain() produces, and what it means. Stable: renaming one is a breaking change.
REASON_CODES: dict[str, str] = {
    # 1. the tick's own record
    "ran": "the tick ran: its run ended (Completed, Failed, Timeout, Cancelled or Abandoned)",
    "running": "the tick's run is running now",
    "queued": "the tick waits as a Queued run (concurrency_mode Queue) for the running run to end",
    "retry_pending": "a retry of the tick waits for its time (the job's retry policy)",
    "skipped_missed": "the tick was recorded Skipped by the missed-run policy Skip",
    "refused": "the tick was recorded Skipped: the engine's driver is missing or refused the configuration",
    "set_aside": "no engine will run the job until its definition is fixed (schedule or row unusable)",
    "not_started": "the tick was claimed but its run never started (handed back, recorded Skipped)",
    "retry_dropped": "the tick's retry was recorded Skipped (the next tick came first, or the window closed)",
    "driver_not_allowed": "the job's driver is allowed on no live engine (allowed_drivers): its runs end Failed",
    "before_created": "the tick is older than the job",
    "skipped_overlap": "the tick came while another run of the job ran; concurrency_mode Skip drops it",
    "queue_full": "the tick came while another run ran and was not kept as a Queued run",
    "coalesced": "the tick was missed and served by the late claim of an earlier tick (RunOnce)",
    "history_purged": "the run history before the tick was purged: whether it ran is no longer recorded",
    "rescheduled": "the job's next run was recomputed past the tick (its schedule, status or start changed)",
    # 2. the job
    "paused": "the job is Paused",
    "disabled": "the job is Disabled",
    "pending": "the job is Pending (never activated)",
    "expired": "the job is Expired (its window ended, or its one run was served)",
    "before_window": "the tick is before the job's start_at",
    "after_window": "the tick is at or after the job's end_at",
    "unscheduled": "the job has no next run yet: an engine computes it at its next poll",
    "already_served": "the next run is at or before a tick that already has a run: it counts as served",
    "scheduled": "the tick is in the future: it will be claimed when it comes",
    # 3. the claim
    "locked": "the job is locked by a live engine's lease (a run of it holds the lock)",
    "locked_by_gone_engine": "the job is locked by an engine that is not alive: the lock lapses at its lease",
    "lease_lapsed": "the job's lock lapsed: the next claim takes it over",
    "queue_ahead": "Queued ticks of the job are served first, one at a time",
    "tag_limit": "every slot of one of the job's tags is taken (its tag's concurrency limit): it waits for one",
    "backlog": "more due jobs come before it than the live engines have free slots",
    # 4. the engines
    "no_engine": "no engine is alive",
    "driver_partly_allowed": "some live engines may not run the job's driver: their runs of it end Failed",
    "engines_full": "every live engine is at its cap (max_concurrent_jobs)",
    # 5. the claim's outcome
    "will_skip_missed": "the due tick was missed: when claimed it will be recorded Skipped (missed-run policy Skip)",
    # 6. the verdict
    "due": "the tick is due and nothing stands in the way: it will be claimed at the next poll",
}

# Codes named for features not built yet, so that they have a place and a name. A code moves to
# REASON_CODES when explain() produces it (and its integration case is written).
RESERVED_CODES: dict[str, str] = {}

# Run messages the engine and the procedures write (their start is what tells them apart).
_SET_ASIDE = "set aside:"
_REFUSED = "not run:"
_RETRY_DROPPED = "retry not run:"
_NOT_STARTED = ("not started:", "the engine stopped before this run could start")
_NOT_ALLOWED = "is not allowed on this engine"
_MISSED_SKIP = "missed-run policy Skip"
_ENDED = ("Completed", "Failed", "Timeout", "Cancelled", "Abandoned")


# -- facts ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunFact:
    """One run row, as the why query reads it."""

    id: str
    scheduled_for: datetime | None
    attempt: int
    status: str
    error: str | None
    missed: int | None            # details.missed of a run the missed-run policy Skipped
    queued_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    engine: str | None            # executed_by_instance
    retry_at: datetime | None
    lease: datetime | None        # lease_expires_at

    @classmethod
    def from_row(cls, row: Mapping[str, Any], prefix: str) -> "RunFact | None":
        if row.get(f"{prefix}_id") is None:
            return None
        missed = row.get(f"{prefix}_missed")
        try:
            missed = int(missed) if missed is not None else None
        except (TypeError, ValueError):
            missed = None
        return cls(id=str(row[f"{prefix}_id"]).lower(), scheduled_for=_instant(row.get(f"{prefix}_scheduled_for")),
                   attempt=int(row.get(f"{prefix}_attempt") or 1), status=str(row.get(f"{prefix}_status")),
                   error=row.get(f"{prefix}_error"), missed=missed,
                   queued_at=_instant(row.get(f"{prefix}_queued_at")),
                   started_at=_instant(row.get(f"{prefix}_started_at")),
                   completed_at=_instant(row.get(f"{prefix}_completed_at")), engine=row.get(f"{prefix}_engine"),
                   retry_at=_instant(row.get(f"{prefix}_retry_at")), lease=_instant(row.get(f"{prefix}_lease")))

    def describe(self) -> str:
        """'run <id> (tick <t>, attempt n)' for sentences."""
        what = f"tick {_t(self.scheduled_for)}" if self.scheduled_for else "a manual run"
        return f"run {self.id} ({what}{f', attempt {self.attempt}' if self.attempt > 1 else ''})"


@dataclass(frozen=True)
class TagLimitFact:
    """A limited tag the job carries (tag_limit, 010_tags.sql) and its Running runs now."""

    tag: str
    max_running: int
    running: int


@dataclass(frozen=True)
class EngineFact:
    """One engine_instance row, with what it reports and whether it is alive."""

    instance: str
    host: str | None
    pid: int | None
    version: str | None
    last_seen_at: datetime | None
    stopped_at: datetime | None
    silent_seconds: float | None
    heartbeat_seconds: float | None
    max_concurrent_jobs: int | None
    allowed_drivers: frozenset[str] | None    # None: every driver (or not reported: an older engine)
    running: int
    state: str                                # liveness.LIVE, STALE, DEAD or STOPPED

    @property
    def live(self) -> bool:
        return self.state == liveness.LIVE

    def allows(self, driver: str) -> bool:
        return self.allowed_drivers is None or driver in self.allowed_drivers

    @property
    def free(self) -> int | None:
        """Slots free (None: the engine did not report its cap)."""
        return None if self.max_concurrent_jobs is None else max(0, self.max_concurrent_jobs - self.running)

    def describe(self) -> str:
        cap = "?" if self.max_concurrent_jobs is None else str(self.max_concurrent_jobs)
        drivers = "all" if self.allowed_drivers is None else ",".join(sorted(self.allowed_drivers))
        return f"{self.instance} ({self.state}, {self.running}/{cap} running, drivers {drivers})"


@dataclass(frozen=True)
class WhyFacts:
    """What ``explain`` reads: the why query's row, typed (``facts_from_row``)."""

    db_now: datetime
    asked_at: datetime | None     # the instant asked about (--at), None: the next tick
    tick: datetime | None         # the tick explained (None: the job has no next run)
    job_id: str
    name: str
    driver: str
    status: str
    cron_expression: str | None
    interval_seconds: int | None
    run_at: datetime | None
    timezone: str
    start_at: datetime | None
    end_at: datetime | None
    next_run_at: datetime | None
    last_run_at: datetime | None
    created_at: datetime | None
    updated_at: datetime | None
    concurrency_mode: str
    missed_run_policy: str
    max_queued_runs: int
    run_immediately_if_never_run: bool
    run_count: int
    locked_by_instance: str | None
    locked_at: datetime | None
    expected_completion_at: datetime | None   # the lock's lease (set exactly while the job is locked)
    jitter_seconds: int | None = None      # the job's jitter: its ticks move by an offset hashed from its name
    tick_run: RunFact | None = None           # the tick's own run (its last attempt)
    prior_run: RunFact | None = None          # the run started last at or before the tick
    after_run: RunFact | None = None          # the first run started after the tick
    holder_run: RunFact | None = None         # the Running run started last
    retry_run: RunFact | None = None          # the next pending retry (Queued, attempt > 1)
    last_run: RunFact | None = None           # the run started last
    running_runs: int = 0
    queued_ticks: int = 0
    oldest_queued_tick: datetime | None = None
    newest_served_tick: datetime | None = None
    oldest_run_kept: datetime | None = None
    due_ahead: int = 0
    engines: tuple[EngineFact, ...] = ()
    max_catch_up_runs: int = 100
    tag_limits: tuple[TagLimitFact, ...] = ()    # the limits of the job's tags, by tag

    # what scheduling.schedule_of reads
    @property
    def anchor(self) -> datetime | None:
        return self.start_at or self.created_at


def facts_from_row(row: Mapping[str, Any], *, asked_at: datetime | None = None, lease_seconds: float = 600.0,
                   max_catch_up_runs: int = 100,
                   engine_state: Callable[[Mapping[str, Any]], str] | None = None) -> WhyFacts:
    """``WhyFacts`` from the why query's row (either dialect). ``engine_state`` decides whether an
    engine row is alive (default: ``liveness.engine_state`` with ``lease_seconds``)."""
    state = engine_state or (lambda e: liveness.engine_state(e, lease_seconds=lease_seconds))
    raw = row.get("engines")
    listed = json.loads(raw) if isinstance(raw, (str, bytes)) and raw else (raw or [])
    engines = []
    for e in listed:
        silent = e.get("silent_seconds")
        silent = float(silent) if silent is not None else None
        drivers = e.get("allowed_drivers")
        view = {**e, "silent_for": silent}
        engines.append(EngineFact(
            instance=str(e.get("instance")), host=e.get("host"), pid=e.get("pid"), version=e.get("version"),
            last_seen_at=_instant(e.get("last_seen_at")), stopped_at=_instant(e.get("stopped_at")),
            silent_seconds=silent, heartbeat_seconds=e.get("heartbeat_seconds"),
            max_concurrent_jobs=e.get("max_concurrent_jobs"),
            allowed_drivers=None if drivers is None else frozenset(d for d in str(drivers).split(",") if d),
            running=int(e.get("running") or 0), state=state(view)))
    tick_run = RunFact.from_row(row, "tick")
    tick = _instant(row.get("tick"))
    if tick_run is not None and tick_run.scheduled_for is not None:
        tick = tick_run.scheduled_for   # the latest served instant in [tick, asked_at]
    return WhyFacts(
        db_now=_instant(row["db_now"]) or datetime.now(UTC), asked_at=asked_at, tick=tick,
        job_id=str(row["id"]).lower(), name=str(row["name"]), driver=str(row["driver"]), status=str(row["status"]),
        cron_expression=row.get("cron_expression"), interval_seconds=row.get("interval_seconds"),
        jitter_seconds=row.get("jitter_seconds"),
        run_at=_instant(row.get("run_at")), timezone=str(row.get("timezone") or "UTC"),
        start_at=_instant(row.get("start_at")), end_at=_instant(row.get("end_at")),
        next_run_at=_instant(row.get("next_run_at")), last_run_at=_instant(row.get("last_run_at")),
        created_at=_instant(row.get("created_at")), updated_at=_instant(row.get("updated_at")),
        concurrency_mode=str(row.get("concurrency_mode")), missed_run_policy=str(row.get("missed_run_policy")),
        max_queued_runs=int(row.get("max_queued_runs") or 0),
        run_immediately_if_never_run=bool(row.get("run_immediately_if_never_run")),
        run_count=int(row.get("run_count") or 0), locked_by_instance=row.get("locked_by_instance"),
        locked_at=_instant(row.get("locked_at")), expected_completion_at=_instant(row.get("expected_completion_at")),
        tick_run=tick_run, prior_run=RunFact.from_row(row, "prior"),
        after_run=RunFact.from_row(row, "after"), holder_run=RunFact.from_row(row, "holder"),
        retry_run=RunFact.from_row(row, "retry"), last_run=RunFact.from_row(row, "last"),
        running_runs=int(row.get("running_runs") or 0), queued_ticks=int(row.get("queued_ticks") or 0),
        oldest_queued_tick=_instant(row.get("oldest_queued_tick")),
        newest_served_tick=_instant(row.get("newest_served_tick")),
        oldest_run_kept=_instant(row.get("oldest_run_kept")), due_ahead=int(row.get("due_ahead") or 0),
        engines=tuple(engines), max_catch_up_runs=max_catch_up_runs, tag_limits=_tag_limits(row.get("tag_limits")))


def _tag_limits(raw: Any) -> tuple[TagLimitFact, ...]:
    """The why query's tag_limits JSON array (NULL from SQL Server's FOR JSON when there are none)."""
    listed = json.loads(raw) if isinstance(raw, (str, bytes)) and raw else (raw or [])
    return tuple(TagLimitFact(tag=str(t["tag"]), max_running=int(t["max_running"]), running=int(t.get("running") or 0))
                 for t in listed)


def tick_at_or_before(job: Any, at: datetime) -> datetime | None:
    """The last tick of ``job``'s schedule at or before ``at`` (the tick that should have run by
    then); the first one after ``at`` when none comes before it; None when the schedule cannot be
    computed (``job``: a ``Job``, or anything with the schedule's fields)."""
    try:
        schedule = scheduling.schedule_of(job)
        if isinstance(schedule, schedules.OneOffSchedule):
            return schedule.run_at
        first_after = schedule.next_after(at)
        window = timedelta(minutes=1)
        while window <= timedelta(days=3660):
            start = at - window
            first = schedule.next_after(start)
            if first is not None and first <= at:
                found = first
                while True:
                    nxt = schedule.next_after(found)
                    if nxt is None or nxt > at:
                        return found
                    found = nxt
            window *= 4
        return first_after
    except Exception:  # noqa: BLE001 - a schedule no engine can compute: the caller asks about `at` itself
        return None


# -- reasons --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reason:
    code: str                  # one of REASON_CODES
    sentence: str              # for a person: names the facts
    blocking: bool             # keeps the tick from running (or says it did not run)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class WhyReport:
    job_id: str
    name: str
    tick: datetime | None
    asked_at: datetime | None
    db_now: datetime
    verdict: str               # the code of the first blocking reason, else of the outcome
    summary: str               # the verdict's sentence
    reasons: tuple[Reason, ...]
    engines: tuple[EngineFact, ...] = ()

    @property
    def codes(self) -> list[str]:
        return [r.code for r in self.reasons]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (instants as ISO 8601 text)."""
        def plain(value: Any) -> Any:
            if isinstance(value, datetime):
                return value.isoformat()
            if isinstance(value, (frozenset, set)):
                return sorted(value)
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            return value
        return {"job": {"id": self.job_id, "name": self.name}, "tick": plain(self.tick),
                "asked_at": plain(self.asked_at), "db_now": plain(self.db_now), "verdict": self.verdict,
                "summary": self.summary,
                "reasons": [{"code": r.code, "blocking": r.blocking, "sentence": r.sentence, "facts": plain(r.facts)}
                            for r in self.reasons],
                "engines": [plain({"instance": e.instance, "state": e.state, "host": e.host, "pid": e.pid,
                                   "version": e.version, "last_seen_at": e.last_seen_at,
                                   "max_concurrent_jobs": e.max_concurrent_jobs, "running": e.running,
                                   "allowed_drivers": None if e.allowed_drivers is None else sorted(e.allowed_drivers)})
                            for e in self.engines]}


def explain(f: WhyFacts) -> WhyReport:
    """The reasons for the tick of ``f``, in the claim's order (module doc). Pure."""
    out: list[Reason] = []

    def add(code: str, sentence: str, blocking: bool, **facts: Any) -> None:
        assert code in REASON_CODES, code
        out.append(Reason(code, sentence, blocking, facts))

    now, tick = f.db_now, f.tick
    record = _tick_record(f, add) if tick is not None and f.tick_run is not None else None
    pending = record in (None, "pending")
    past = tick is not None and tick <= now and f.tick_run is None and not _is_next(f, tick)
    if past:
        _passed_over(f, add)
    if pending:
        _job_state(f, add, out, future_tick=tick is not None and tick > now and not _is_next(f, tick),
                   context_only=past)
    return _report(f, out)


def _is_next(f: WhyFacts, tick: datetime) -> bool:
    return f.next_run_at is not None and f.next_run_at == tick


def _tick_record(f: WhyFacts, add: Callable[..., None]) -> str:
    """What became of a tick a run holds. 'done' when that settles it; 'pending' when the tick
    still waits (Queued) and the job's state decides when it runs."""
    run = f.tick_run
    assert run is not None and f.tick is not None
    err = run.error or ""
    if run.status == "Running":
        _running_tick(f, run, add)
        return "done"
    if run.status == "Queued":
        _queued_tick(f, run, add)
        return "pending"
    if run.status == "Skipped":
        _skipped_tick(f, run, err, add)
        return "done"
    facts = _run_facts(run)
    if run.status == "Failed" and err.startswith(_SET_ASIDE):
        add("set_aside", f"The tick {_t(f.tick)} was not run: engine {run.engine} {err} (recorded Failed at "
                         f"{_t(run.completed_at)}).", True, run=facts, message=err)
        return "done"
    if run.status == "Failed" and _NOT_ALLOWED in err:
        add("driver_not_allowed", f"The tick {_t(f.tick)} was claimed by engine {run.engine}, which may not run "
                                  f"driver {f.driver!r}: {err} (recorded Failed at {_t(run.completed_at)}).", True,
            run=facts, driver=f.driver, engine=run.engine)
        return "done"
    outcome = f"ended {run.status}" + (f": {_clip(err)}" if err and run.status != "Completed" else "")
    add("ran", f"The tick {_t(f.tick)} did run: {run.describe()} started at {_t(run.started_at)} on engine "
               f"{run.engine} and {outcome} at {_t(run.completed_at)}.", run.status != "Completed", run=facts)
    retry = f.retry_run
    if retry is not None and retry.scheduled_for == f.tick:
        add("retry_pending", f"Attempt {retry.attempt} of this tick is due at {_t(retry.retry_at)}.",
            False, run=_run_facts(retry))
    return "done"


def _running_tick(f: WhyFacts, run: RunFact, add: Callable[..., None]) -> None:
    """A tick whose run is Running, and whether the engine running it is still alive."""
    facts = _run_facts(run)
    add("running", f"The tick {_t(f.tick)} is running now: {run.describe()} started at {_t(run.started_at)} on "
                   f"engine {run.engine}; its lease runs until {_t(run.lease)}.", False, run=facts)
    runner = next((e for e in f.engines if e.instance == run.engine), None)
    if runner is None or not runner.live:
        state = runner.state if runner is not None else "unknown to the registry"
        lease = run.lease or f.expected_completion_at
        add("locked_by_gone_engine", f"Engine {run.engine}, which runs it, is {state}: the run is probably lost. "
                                     f"Its lease runs until {_t(lease)}"
                                     + (f" (in {_span(lease - f.db_now)})" if lease and lease > f.db_now else "")
                                     + ", then the next claim takes the job over and ends that run Abandoned "
                                       "(`mjsched jobs unlock` frees it now).", True,
            engine=run.engine, engine_state=state, lease_until=lease, run=facts)


def _queued_tick(f: WhyFacts, run: RunFact, add: Callable[..., None]) -> None:
    """A tick whose run is Queued: a retry waiting for its time, or a Queue-mode tick behind a run."""
    facts = _run_facts(run)
    if run.attempt > 1:
        waiting = run.retry_at is not None and run.retry_at > f.db_now
        add("retry_pending", f"Attempt {run.attempt} of the tick {_t(f.tick)} (a retry after attempt "
                             f"{run.attempt - 1} ended Failed or Timeout) is due at {_t(run.retry_at)}"
                             + (f", in {_span(run.retry_at - f.db_now)}." if waiting else  # type: ignore[operator]
                                "; it is due now."), waiting, run=facts)
        return
    holder = f.holder_run
    held = f" behind {holder.describe()}, running on engine {holder.engine} since {_t(holder.started_at)}" \
        if holder is not None else ""
    add("queued", f"The tick {_t(f.tick)} was kept as a Queued run ({run.id}, queued at {_t(run.queued_at)}): "
                  f"concurrency_mode Queue runs it when the run before it ends{held}.", True, run=facts,
        holder=_run_facts(holder) if holder else None)


def _skipped_tick(f: WhyFacts, run: RunFact, err: str, add: Callable[..., None]) -> None:
    """A tick recorded Skipped, by what its message says skipped it."""
    facts = _run_facts(run)
    if run.missed is not None or err.startswith(_MISSED_SKIP):
        add("skipped_missed", f"The tick {_t(f.tick)} was recorded Skipped at {_t(run.completed_at)} by engine "
                              f"{run.engine}: missed-run policy Skip, {run.missed if run.missed is not None else 'some'}"
                              f" later tick(s) had already come when it was claimed (no engine had run it in "
                              f"time), so the job moved on to its next future tick. {err}".rstrip(), True,
            run=facts, missed=run.missed, policy=f.missed_run_policy)
    elif err.startswith(_SET_ASIDE):
        add("set_aside", f"The tick {_t(f.tick)} was not run: engine {run.engine} {err[:-1] if err.endswith('.') else err}"
                         f" (recorded Skipped at {_t(run.completed_at)}).", True, run=facts, message=err)
    elif err.startswith(_REFUSED):
        add("refused", f"The tick {_t(f.tick)} was recorded Skipped at {_t(run.completed_at)} by engine "
                       f"{run.engine}, which could not run it: {err[len(_REFUSED):].strip()}", True,
            run=facts, message=err)
    elif err.startswith(_RETRY_DROPPED):
        add("retry_dropped", f"Attempt {run.attempt} of the tick {_t(f.tick)} was recorded Skipped at "
                             f"{_t(run.completed_at)}: {err}", True, run=facts, message=err)
    elif err.startswith(_NOT_STARTED):
        add("not_started", f"The tick {_t(f.tick)} was claimed by engine {run.engine} at {_t(run.started_at)} "
                           f"but its run never started (recorded Skipped: {err}); the tick counts as served.",
            True, run=facts, message=err)
    else:
        add("ran", f"The tick {_t(f.tick)} has {run.describe()}, recorded Skipped at {_t(run.completed_at)} by "
                   f"engine {run.engine}: {err or 'no reason recorded'}.", True, run=facts)


def _passed_over(f: WhyFacts, add: Callable[..., None]) -> None:
    """A past tick no run holds, that is not the job's next run: what passed it over (the first
    explanation that fits, in this order)."""
    assert f.tick is not None
    for explain in (_outside_the_job, _during_a_run, _missed_until_a_claim, _history_purged):
        if explain(f, f.tick, add):
            return
    moved_to = f.after_run.scheduled_for if f.after_run is not None and f.after_run.scheduled_for else f.next_run_at
    add("rescheduled", f"No run holds the tick {_t(f.tick)}, and the job's schedule moved past it"
                       + (f" (to {_t(moved_to)})" if moved_to else "")
                       + ": its next run was recomputed after the tick came (an edit of its schedule, status or "
                         "start_at, or a resume, sets the next run from that moment; the ticks in between are not "
                         f"run). The job's row was last written at {_t(f.updated_at)}.", True,
        next_run_at=f.next_run_at, moved_to=moved_to, updated_at=f.updated_at)


def _outside_the_job(f: WhyFacts, tick: datetime, add: Callable[..., None]) -> bool:
    """The tick is older than the job, or outside its start/end window."""
    if f.created_at is not None and tick < f.created_at:
        add("before_created", f"The tick {_t(tick)} is older than the job, created at {_t(f.created_at)}.", True,
            created_at=f.created_at)
    elif f.start_at is not None and tick < f.start_at:
        add("before_window", f"The tick {_t(tick)} is before the job's start_at ({_t(f.start_at)}): no tick before "
                             "its window opens runs.", True, start_at=f.start_at)
    elif f.end_at is not None and tick >= f.end_at:
        add("after_window", f"The tick {_t(tick)} is at or after the job's end_at ({_t(f.end_at)}): its window had "
                            "closed.", True, end_at=f.end_at)
    else:
        return False
    return True


def _during_a_run(f: WhyFacts, tick: datetime, add: Callable[..., None]) -> bool:
    """The tick came while a run of the job ran, and its concurrency mode dropped it."""
    prior = f.prior_run
    if prior is None or prior.started_at is None or prior.started_at > tick \
            or (prior.completed_at is not None and prior.completed_at <= tick) or prior.status == "Queued" \
            or f.concurrency_mode == "Concurrent":
        return False
    during = (f"{prior.describe()}, started at {_t(prior.started_at)} on engine {prior.engine}, "
              + (f"ended {prior.status} at {_t(prior.completed_at)}" if prior.completed_at else "still running"))
    if f.concurrency_mode == "Queue":
        add("queue_full", f"The tick {_t(tick)} came while {during}; concurrency_mode Queue keeps such ticks as "
                          f"Queued runs, at most max_queued_runs ({f.max_queued_runs}) and only while a tick's "
                          "run runs: this one was not kept.", True, run=_run_facts(prior),
            max_queued_runs=f.max_queued_runs)
    else:
        add("skipped_overlap", f"The tick {_t(tick)} came while {during}: concurrency_mode Skip drops a tick "
                               "that comes during a run (the next run is the first tick after it ends).", True,
            run=_run_facts(prior))
    return True


def _missed_until_a_claim(f: WhyFacts, tick: datetime, add: Callable[..., None]) -> bool:
    """No engine claimed the job until after the tick: the claim skipped it or ran the overdue ticks once."""
    after = f.after_run
    if after is None or after.scheduled_for is None or after.scheduled_for >= tick:
        return False
    if after.status == "Skipped" and (after.missed is not None or (after.error or "").startswith(_MISSED_SKIP)):
        add("skipped_missed", f"The tick {_t(tick)} was missed: the claim at {_t(after.started_at)} by engine "
                              f"{after.engine} found the tick {_t(after.scheduled_for)} and "
                              f"{after.missed if after.missed is not None else 'more'} later tick(s), this one "
                              f"among them, already come; missed-run policy Skip recorded {after.describe()} "
                              "Skipped and moved on to the next future tick.", True, run=_run_facts(after),
            missed=after.missed, policy="Skip")
    else:
        add("coalesced", f"The tick {_t(tick)} was missed: no engine claimed the job until "
                         f"{_t(after.started_at)}, when engine {after.engine} ran the overdue tick "
                         f"{_t(after.scheduled_for)} once ({after.describe()}, {after.status}) for all the ticks "
                         f"missed since (missed-run policy {f.missed_run_policy}).", True,
            run=_run_facts(after), policy=f.missed_run_policy)
    return True


def _history_purged(f: WhyFacts, tick: datetime, add: Callable[..., None]) -> bool:
    """The runs of that time were purged by the run-history retention."""
    if f.oldest_run_kept is None or tick >= f.oldest_run_kept or f.run_count <= 0:
        return False
    add("history_purged", f"No run of the tick {_t(tick)} is kept: the job's oldest run kept started at "
                          f"{_t(f.oldest_run_kept)} (older runs were purged by the run-history retention), so "
                          "whether it ran is no longer recorded.", True, oldest_run_kept=f.oldest_run_kept)
    return True


def _job_state(f: WhyFacts, add: Callable[..., None], out: list[Reason], future_tick: bool,
               context_only: bool = False) -> None:
    """The job, the claim and the engines, for the tick still to come (or due). ``context_only``
    (a past tick no run holds, explained by ``_passed_over``): the job's status and the engines
    only, as they are now."""
    if context_only:
        _status(f, add)
        _engines(f, add, due=False)
        return
    schedulable = _schedulable(f, add)                                # 2. the job: status, window, next run
    due = schedulable and f.next_run_at is not None and f.next_run_at <= f.db_now and not future_tick
    if schedulable and f.next_run_at is not None:
        _next_run(f, add, due, future_tick)
    if due:                                                           # 3. the claim of a due tick
        _job_lock(f, add)
        _waits_in_the_claim(f, add)
    _other_retry(f, add)
    live = _engines(f, add, due)                                      # 4. the engines
    _what_the_claim_will_do(f, add, due)                              # 5. what the engine does with the claim
    if due and not any(r.blocking for r in out):                      # 6. the verdict when nothing stands in the way
        bound = min((e.heartbeat_seconds for e in live if e.heartbeat_seconds), default=None)
        add("due", f"The tick {_t(f.next_run_at)} is due (for {_span(f.db_now - f.next_run_at)}) and will be "  # type: ignore[operator]
                   "claimed at the next poll" + (f", within {bound:g} s" if bound else "") + ".", False,
            tick=f.next_run_at, poll_bound_seconds=bound)


def _schedulable(f: WhyFacts, add: Callable[..., None]) -> bool:
    """The job's status, its start/end window and whether it has a next run: True when a tick can run."""
    now, tick = f.db_now, f.tick
    schedulable = _status(f, add)
    at = tick if tick is not None and tick > now else now
    if f.start_at is not None and f.start_at > now:
        schedulable = False
        add("before_window", f"The job's window opens at its start_at, {_t(f.start_at)} (in "
                             f"{_span(f.start_at - now)}): no tick before it runs.", True, start_at=f.start_at)
    if f.end_at is not None and f.end_at <= at and f.status == "Active":
        schedulable = False
        add("after_window", f"The job's window closed at its end_at, {_t(f.end_at)}: the next claim makes it "
                            "Expired, and no tick runs.", True, end_at=f.end_at)
    if schedulable and f.next_run_at is None:
        _no_next_run(f, add)
        return False
    return schedulable


def _no_next_run(f: WhyFacts, add: Callable[..., None]) -> None:
    """An Active job without a next run: set aside (its schedule cannot be computed) or not yet computed."""
    error = _schedule_error(f)
    last = f.last_run
    if error is not None or (last is not None and (last.error or "").startswith(_SET_ASIDE)):
        message = (f"its schedule cannot be computed ({error})" if error is not None
                   else f"its last claimed run says: {last.error}")  # type: ignore[union-attr]
        add("set_aside", f"The job is set aside: it is Active but has no next run, and {message}. No engine "
                         "runs it until its definition is fixed (edit its schedule or row).", True,
            error=error, run=_run_facts(last) if last is not None else None)
    else:
        add("unscheduled", "The job has no next run yet (it was just created, resumed or edited): a live engine "
                           "computes it at its next poll.", not _live(f))


def _next_run(f: WhyFacts, add: Callable[..., None], due: bool, future_tick: bool) -> None:
    """The job's next run: already served by a run, or not due yet."""
    assert f.next_run_at is not None
    tick, now = f.tick, f.db_now
    if f.newest_served_tick is not None and f.next_run_at <= f.newest_served_tick:
        add("already_served", f"The job's next run, {_t(f.next_run_at)}, is at or before a tick that already has "
                              f"a run ({_t(f.newest_served_tick)}): it counts as served; the claim runs nothing "
                              "and moves the schedule on to the next tick.", True,
            next_run_at=f.next_run_at, newest_served_tick=f.newest_served_tick)
    elif not due:
        target = tick if future_tick and tick is not None else f.next_run_at
        detail = (f" (the job's next run comes first, at {_t(f.next_run_at)})"
                  if future_tick and f.next_run_at < target else "")
        add("scheduled", f"The tick {_t(target)} is not due yet: it comes in {_span(target - now)}, and will be "
                         f"claimed then{detail}.", False, tick=target, next_run_at=f.next_run_at)


def _job_lock(f: WhyFacts, add: Callable[..., None]) -> None:
    """A due job's lock: held by a live engine, by a gone one, or lapsed."""
    now, lease, holder = f.db_now, f.expected_completion_at, f.holder_run
    held = (f"; {holder.describe()} holds it, running since {_t(holder.started_at)}" if holder is not None else "")
    if lease is None:
        return
    if lease < now:
        add("lease_lapsed", f"The job's lock by engine {f.locked_by_instance} lapsed at {_t(lease)}{held}: the "
                            "next claim takes it over (that run ends Abandoned).", False,
            engine=f.locked_by_instance, lease_until=lease)
        return
    holder_engine = next((e for e in f.engines if e.instance == f.locked_by_instance), None)
    after = {"Skip": " When it ends the job moves to its first tick after that: the ticks that came meanwhile "
                     "are dropped (concurrency_mode Skip).",
             "Queue": " Ticks that come meanwhile are kept as Queued runs (concurrency_mode Queue)."}
    if holder_engine is not None and holder_engine.live:
        add("locked", f"The job is locked by engine {f.locked_by_instance} since {_t(f.locked_at)}, lease "
                      f"until {_t(lease)}{held}.{after.get(f.concurrency_mode, '')}", True,
            engine=f.locked_by_instance, locked_at=f.locked_at, lease_until=lease,
            run=_run_facts(holder) if holder else None)
    else:
        state = holder_engine.state if holder_engine is not None else "unknown to the registry"
        add("locked_by_gone_engine", f"The job is locked by engine {f.locked_by_instance} ({state}) since "
                                     f"{_t(f.locked_at)}{held}; its lease runs until {_t(lease)} (in "
                                     f"{_span(lease - now)}), then the next claim takes the job over and "
                                     "ends that run Abandoned (`mjsched jobs unlock` frees it now).", True,
            engine=f.locked_by_instance, engine_state=state, lease_until=lease,
            run=_run_facts(holder) if holder else None)


def _waits_in_the_claim(f: WhyFacts, add: Callable[..., None]) -> None:
    """What a due job waits for inside the claim: its own Queued ticks, a full tag (a per-tag
    limit, 010_tags.sql: the claim takes only jobs whose tags all have a free slot), and the
    due jobs ahead of it."""
    if f.queued_ticks:
        add("queue_ahead", f"{f.queued_ticks} Queued tick(s) of the job, the oldest {_t(f.oldest_queued_tick)}, "
                           "are served first, one at a time (concurrency_mode Queue).", True,
            queued_ticks=f.queued_ticks, oldest=f.oldest_queued_tick)
    for limit in f.tag_limits:
        if limit.running >= limit.max_running:
            add("tag_limit", f"Every slot of its tag {limit.tag} is taken ({limit.running} of {limit.max_running} "
                             "Running across the engines): it waits for one (`mjsched tags list`).", True,
                tag=limit.tag, running=limit.running, max_running=limit.max_running)
    live = [e for e in f.engines if e.live]
    free = sum(e.free or 0 for e in live) if live and all(e.free is not None for e in live) else None
    if free is not None and f.due_ahead and f.due_ahead >= free > 0:
        add("backlog", f"{f.due_ahead if f.due_ahead < 1000 else 'over 1,000'} due job(s) come before it in the "
                       f"claim's order (oldest tick first) and the live engines have {free} free slot(s): it "
                       "waits its turn.", True, due_ahead=f.due_ahead, free_slots=free)


def _other_retry(f: WhyFacts, add: Callable[..., None]) -> None:
    """A retry pending for another tick than the one asked about."""
    retry, now = f.retry_run, f.db_now
    if retry is not None and (f.tick_run is None or retry.id != f.tick_run.id):
        waiting = retry.retry_at is not None and retry.retry_at > now
        add("retry_pending", f"Attempt {retry.attempt} of the tick {_t(retry.scheduled_for)} is pending: due at "
                             f"{_t(retry.retry_at)}" + (f" (in {_span(retry.retry_at - now)})." if waiting  # type: ignore[operator]
                                                        else " (due now)."), False, run=_run_facts(retry))


def _what_the_claim_will_do(f: WhyFacts, add: Callable[..., None], due: bool) -> None:
    """What the claiming engine will do: skip a missed tick, or refuse the job again."""
    if due and f.next_run_at is not None and f.missed_run_policy == "Skip":
        missed = _missed(f, f.next_run_at)
        if missed:
            add("will_skip_missed", f"The tick {_t(f.next_run_at)} was missed: {missed} later tick(s) have come since. "
                                    "When an engine claims it, missed-run policy Skip records it Skipped and moves "
                                    "to the next future tick.", True, missed=missed, policy="Skip")
    last = f.last_run
    if last is not None and last.status == "Skipped" and (last.error or "").startswith(_REFUSED):
        add("refused", f"The job's last tick was refused by engine {last.engine} at {_t(last.completed_at)}: "
                       f"{(last.error or '')[len(_REFUSED):].strip()} Each tick that engine claims is recorded "
                       "Skipped until the driver is installed or the configuration fixed.", True,
            run=_run_facts(last), message=last.error)


def _status(f: WhyFacts, add: Callable[..., None]) -> bool:
    """The job's status; True when it is Active."""
    now = f.db_now
    if f.status != "Active":
        if f.status == "Paused":
            add("paused", f"The job is Paused: no tick runs until it is resumed (resuming computes its next run from "
                          "then; ticks that came while it was paused are not run).", True, status=f.status)
        elif f.status == "Disabled":
            last = f.last_run
            why = (f" It was set aside by the schema upgrade: {last.error}" if last is not None
                   and last.engine == "mjsched install" and last.error else "")
            add("disabled", f"The job is Disabled: no tick runs until it is set Active.{why}", True, status=f.status)
        elif f.status == "Pending":
            add("pending", "The job is Pending: it was never activated; no tick runs until it is set Active.", True,
                status=f.status)
        else:
            ended = ("its window ended at " + _t(f.end_at) if f.end_at is not None and f.end_at <= now
                     else f"its one run (run_at {_t(f.run_at)}) was served" if f.run_at is not None
                     else "its window ended")
            add("expired", f"The job is Expired: {ended}; no tick runs again unless its schedule or window is "
                           "changed and it is set Active.", True, status=f.status, end_at=f.end_at, run_at=f.run_at)
    return f.status == "Active"


def _engines(f: WhyFacts, add: Callable[..., None], due: bool) -> list[EngineFact]:
    """Whether a live engine may claim and run the job now; returns the live engines."""
    live = [e for e in f.engines if e.live]
    if not live:
        last = max((e for e in f.engines if e.last_seen_at is not None), key=lambda e: e.last_seen_at,  # type: ignore
                   default=None)
        seen = (f" The last engine seen, {last.instance} on {last.host}, is {last.state}: last seen at "
                f"{_t(last.last_seen_at)}." if last is not None else " No engine has ever registered.")
        add("no_engine", f"No engine is alive: nothing claims the job's ticks until one runs (`mjsched run`).{seen}",
            True, engines=[e.instance for e in f.engines])
    else:
        refusing = [e for e in live if not e.allows(f.driver)]
        if len(refusing) == len(live):
            add("driver_not_allowed", f"The job's driver {f.driver!r} is allowed on no live engine ("
                                      + "; ".join(f"{e.instance}: {','.join(sorted(e.allowed_drivers or ()))}"
                                                  for e in refusing)
                                      + "): an engine still claims its ticks, and each run ends Failed. Start an "
                                        "engine that allows it, or add it to an engine's allowed_drivers.", True,
                driver=f.driver, engines=[e.instance for e in refusing])
        elif refusing:
            add("driver_partly_allowed", f"The job's driver {f.driver!r} is not allowed on "
                                         + ", ".join(e.instance for e in refusing)
                                         + ": a tick one of them claims ends Failed (the engines that allow it: "
                                         + ", ".join(e.instance for e in live if e.allows(f.driver)) + ").", False,
                driver=f.driver, engines=[e.instance for e in refusing])
        if all(e.free == 0 for e in live):
            add("engines_full", "Every live engine is at its cap: "
                                + ", ".join(f"{e.instance} {e.running}/{e.max_concurrent_jobs}" for e in live)
                                + ". A due tick waits for a run to end.", due,
                engines=[{"instance": e.instance, "running": e.running, "cap": e.max_concurrent_jobs} for e in live])
    return live


def _report(f: WhyFacts, reasons: list[Reason]) -> WhyReport:
    blocking = [r for r in reasons if r.blocking]
    if blocking:
        head = blocking[0]
    else:
        terminal = [r for r in reasons if r.code in ("ran", "running", "due", "scheduled", "retry_pending")]
        head = terminal[0] if terminal else (reasons[0] if reasons else
                                             Reason("scheduled", "Nothing is known to stand in the way.", False))
    return WhyReport(job_id=f.job_id, name=f.name, tick=f.tick, asked_at=f.asked_at, db_now=f.db_now,
                     verdict=head.code, summary=head.sentence, reasons=tuple(reasons), engines=f.engines)


# -- helpers --------------------------------------------------------------------------------------
def _live(f: WhyFacts) -> bool:
    return any(e.live for e in f.engines)


def _schedule_error(f: WhyFacts) -> str | None:
    """Why the job's first due instant cannot be computed now (set aside), or None."""
    try:
        scheduling.initial_next_run(_Schedulable(f), f.db_now)
        return None
    except Exception as exc:  # noqa: BLE001 - whatever the row makes the computation raise
        return f"{type(exc).__name__}: {exc}"


def _missed(f: WhyFacts, tick: datetime) -> int:
    try:
        return len(scheduling.missed_ticks(_Schedulable(f), tick, f.db_now, limit=f.max_catch_up_runs + 1))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - an unusable schedule is reported as set aside, not here
        return 0


class _Schedulable:
    """The fields of WhyFacts under the names scheduling reads."""

    def __init__(self, f: WhyFacts) -> None:
        self.cron_expression, self.interval_seconds, self.run_at = f.cron_expression, f.interval_seconds, f.run_at
        self.timezone, self.start_at, self.created_at = f.timezone, f.start_at, f.created_at
        self.run_immediately_if_never_run, self.last_run_at = f.run_immediately_if_never_run, f.last_run_at
        self.run_count = f.run_count
        self.name, self.jitter_seconds = f.name, f.jitter_seconds   # H and the jitter are hashed from the name


def _run_facts(run: RunFact | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {"id": run.id, "scheduled_for": run.scheduled_for, "attempt": run.attempt, "status": run.status,
            "error_message": run.error, "started_at": run.started_at, "completed_at": run.completed_at,
            "engine": run.engine, "retry_at": run.retry_at, "lease_expires_at": run.lease}


def _instant(value: Any) -> datetime | None:
    """An aware datetime from a driver's value or JSON text (any number of fractional digits)."""
    if value is None or isinstance(value, datetime):
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value
    if isinstance(value, str):
        text = value.strip().replace("Z", "+00:00").replace(" ", "T", 1)
        head, dot, rest = text.partition(".")
        if dot:
            digits = "".join(ch for ch in rest if ch.isdigit())
            tail = rest[len(digits):]
            text = f"{head}.{(digits + '000000')[:6]}{tail}"
        if len(text) >= 3 and text[-3] in "+-" and text[-2:].isdigit() and ":" not in text[-3:]:
            text += ":00"
        parsed = datetime.fromisoformat(text)
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return None   # an Undecodable (mjsched/decoding.py): not a usable instant


def _t(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(delta: timedelta) -> str:
    """A duration in words: '2 d 3 h', '5 h 10 min', '7 min', '12 s'."""
    seconds = abs(delta.total_seconds())
    if not math.isfinite(seconds):
        return "?"
    if seconds < 1:
        return "under a second"
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    for i, (unit, size) in enumerate(units):
        if seconds >= size:
            whole = int(seconds // size)
            if unit == "s" or i + 1 >= len(units):
                return f"{whole} {unit}"
            sub, sub_size = units[i + 1]
            rest = int((seconds - whole * size) // sub_size)
            return f"{whole} {unit}" + (f" {rest} {sub}" if rest and unit != "min" else "")
    return f"{int(seconds)} s"


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def codes_in(reports: Iterable[WhyReport]) -> set[str]:
    return {code for report in reports for code in report.codes}


__all__: Sequence[str] = ("REASON_CODES", "RESERVED_CODES", "Reason", "WhyReport", "WhyFacts", "RunFact",
                          "EngineFact", "TagLimitFact", "explain", "facts_from_row", "tick_at_or_before")
