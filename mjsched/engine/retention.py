"""Run-history retention in the engine: the housekeeping purge and ``prune_runs``.

The rules and the batches are the procedure's (``purge_runs``, sql/<dialect>/006_retention.sql):
at most ``purge_batch_size`` rows per call, never a Running or Queued run, no lock on job
rows, one purger at a time across every engine (the others are answered busy and skip).
Here: *when* to purge. A poll starts a pass at most every ``purge_interval`` seconds, on a
thread of its own, so a claim never waits for it; a pass stops after ``purge_pass_seconds``
or ``PASS_BATCHES`` calls and the next pass goes on from its cursor. A whole sweep (every job,
one pass or several) that deleted nothing doubles the wait before the next sweep starts (up to
``2 ** QUIET_DOUBLINGS`` intervals): an idle fleet does not ask the database every 10 s for
what it answered "none" to. The passes within a sweep keep the interval; a pass that deletes
anything, or a job edit this engine makes or hears of (retention rules may have changed), brings
the interval back.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from .. import retention, validation
from ..backends.base import Backend
from ..errors import CannotConnect, ConfigurationError, PurgeBusy, SchedulerError
from .options import EngineOptions
from .stats import EngineStats

log = logging.getLogger(__name__)

PASS_BATCHES = 20                 # calls per housekeeping pass at most (besides the time budget)
QUIET_DOUBLINGS = 3               # after empty sweeps, a sweep starts at most every 2, 4, 8 intervals
PRUNE_BUSY_SECONDS = 30.0         # prune_runs waits this long at most while another purger holds the lock
Cursor = tuple[Any, Any, Any]
START: Cursor = (None, None, None)


def default_rules(options: EngineOptions) -> tuple[float | None, int | None]:
    """The engine's defaults as purge_runs takes them: (seconds, count), None for a rule off."""
    days, count = options.keep_runs_days, options.keep_runs_count
    return (days * 86_400.0 if days else None), (count or None)


class RunPurger:
    """The housekeeping purge of one engine. ``maybe_start()`` is called by every poll."""

    def __init__(self, backend: Backend, options: EngineOptions, stats: EngineStats,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._backend = backend
        self._options = options
        self._stats = stats
        self._clock = clock
        self._cursor: Cursor = START
        self._last_start = float("-inf")
        self._quiet = 0               # whole sweeps in a row that deleted nothing (at most QUIET_DOUBLINGS)
        self._sweep_deleted = 0       # rows the sweep under way deleted so far
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        stats.setdefault("runs_purged", 0)

    def maybe_start(self) -> bool:
        """Start a pass in the background when the interval has passed and none is under way."""
        interval = self._options.purge_interval
        if interval is None:
            return False
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return False
            now = self._clock()
            if now - self._last_start < self.wait_seconds(interval):
                return False
            self._last_start = now
            self._thread = threading.Thread(target=self.run_pass, name="mjsched-purge", daemon=True)
            self._thread.start()
            return True

    def wait_seconds(self, interval: float) -> float:
        """Seconds before the next pass: the interval within a sweep; before a new sweep, the
        interval doubled per empty sweep in a row."""
        return interval if self._cursor != START else interval * 2 ** self._quiet

    def job_changed(self) -> None:
        """A job was added or edited (through this engine, or heard on the change feed): its
        retention rules may have changed, so the next sweep comes after the interval again."""
        self._quiet = 0

    def run_pass(self) -> int:
        """One bounded pass; returns the rows it deleted. Never raises: a failure is logged and
        the next pass tries again."""
        keep_seconds, keep_count = default_rules(self._options)
        started = time.monotonic()
        deadline = started + self._options.purge_pass_seconds
        purged = batches = changes = 0
        swept = failed = False
        try:
            while batches < PASS_BATCHES:
                batch = self._backend.purge_runs(keep_seconds, keep_count, per_job=True, cursor=self._cursor,
                                                 batch_size=self._options.purge_batch_size)
                batches += 1
                if batch.busy:      # another engine is purging: this one skips its pass
                    break
                purged += batch.purged
                self._cursor = (batch.next_job_id, batch.next_completed_at, batch.next_run_id)
                if batch.done or time.monotonic() >= deadline:
                    swept = batch.done
                    break
            if batches and not batch.busy and time.monotonic() < deadline:
                changes = self._purge_changes(keep_seconds)
        except SchedulerError as exc:   # an unreachable database is the poll's line to say, once per poll
            failed = True
            log.log(logging.INFO if isinstance(exc, CannotConnect) else logging.WARNING,
                    "run-history purge failed (the next pass tries again): %s", exc, extra={"action": "purge_failed"})
        except NotImplementedError:
            return 0
        self._count_quiet(purged + changes, swept and not failed)
        if purged:
            self._stats.bump("runs_purged", purged)
            log.info("purged %d finished run(s) in %.3fs (%d batch(es))%s", purged, time.monotonic() - started,
                     batches, "" if self._cursor == START else "; more next pass",
                     extra={"action": "runs_purged", "purged": purged})
        return purged

    def _count_quiet(self, deleted: int, swept: bool) -> None:
        """The backoff's bookkeeping after a pass: a sweep is empty only if none of its passes
        deleted anything; any deletion brings the interval back at once."""
        self._sweep_deleted += deleted
        if deleted:
            self._quiet = 0
        if swept:
            if not self._sweep_deleted:
                self._quiet = min(self._quiet + 1, QUIET_DOUBLINGS)
            self._sweep_deleted = 0

    def _purge_changes(self, keep_seconds: float | None) -> int:
        """The audit trail's rows past the same rule in days (013_audit.sql), one batch a pass;
        returns how many went."""
        gone = self._backend.purge_job_changes(keep_seconds, self._options.purge_batch_size)
        if gone:
            self._stats.bump("job_changes_purged", gone)
            log.info("purged %d audit trail row(s) older than the retention rule", gone,
                     extra={"action": "job_changes_purged", "purged": gone})
        return gone

    def join(self, timeout: float | None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)


def prune(backend: Backend, options: EngineOptions, *, older_than: Any = None, keep_last: Any = None,
          job_id: str | None = None, dry_run: bool = False, batch_size: int | None = None,
          stats: EngineStats | None = None) -> int:
    """Delete (or, ``dry_run``, count) finished runs at once, batch after batch, until none is
    left; returns how many. With ``older_than`` and/or ``keep_last`` these apply to every job
    (or ``job_id``) whatever its own settings: runs older than ``older_than`` that are not among
    a job's newest ``keep_last``. Without either, the retention rules apply (each job's own,
    else the engine's). Waits up to PRUNE_BUSY_SECONDS while another purger holds the lock,
    then raises PurgeBusy."""
    if not isinstance(dry_run, bool):
        raise ConfigurationError("dry_run", dry_run, "must be True or False")
    size = validation.positive_int("batch_size", batch_size if batch_size is not None else options.purge_batch_size,
                                   maximum=retention.MAX_BATCH)
    if older_than is None and keep_last is None:
        keep_seconds, keep_count = default_rules(options)
        per_job = True
    else:
        keep_seconds = retention.duration("older_than", older_than) if older_than is not None else None
        keep_count = validation.positive_int("keep_last", keep_last, maximum=retention.MAX_KEEP_COUNT) \
            if keep_last is not None else None
        per_job = False
    total = 0
    cursor: Cursor = START
    busy_since: float | None = None
    delay = 0.02
    started = time.monotonic()
    while True:
        batch = backend.purge_runs(keep_seconds, keep_count, per_job=per_job, job_id=job_id, cursor=cursor,
                                   batch_size=size, dry_run=dry_run)
        if batch.busy:
            busy_since = busy_since if busy_since is not None else time.monotonic()
            if time.monotonic() - busy_since > PRUNE_BUSY_SECONDS:
                raise PurgeBusy(PRUNE_BUSY_SECONDS)
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
            continue
        busy_since, delay = None, 0.02
        total += batch.purged
        if not dry_run and stats is not None and batch.purged:
            stats.bump("runs_purged", batch.purged)
        if batch.done:
            break
        cursor = (batch.next_job_id, batch.next_completed_at, batch.next_run_id)
    if not dry_run:
        log.info("pruned %d finished run(s) in %.2fs", total, time.monotonic() - started,
                 extra={"action": "runs_purged", "purged": total})
    return total
