"""The engine's heartbeat: each beat renews, in one call, every lease its runs want kept,
enforces the runs' timeouts (max_runtime, a cancel's grace) and reads their cancel requests.

It runs on its own thread, every ``LeaseBudget.heartbeat_interval`` (a quarter of the lease
unless given; at least three times per lease), from the engine's first run until the engine
closes (so it keeps running while a stopping engine drains, and for manual runs whether or
not the engine polls). A lease that was not renewed (taken over or abandoned) cancels its run
and frees its slot; errors are logged, never raised. A run whose completion has not landed
within the budget's ``completion_window`` (half a lease) is no longer renewed: its lease
lapses and another engine takes the job, instead of a completion stuck on a dead connection
holding it for ever. Its self-fencing thread (fencing.py) starts and stops with it.

``LeaseKeeper`` is its former name, kept as an alias.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Protocol, Sequence

from ..backends.base import Backend
from ..errors import SchedulerError
from ..lease_budget import CANCEL_CHECK_SECONDS, LeaseBudget  # noqa: F401 - CANCEL_CHECK_SECONDS: its former home
from ..models import Job
from .fencing import LeaseFence, WatchedRun, WatchedRuns

log = logging.getLogger(__name__)


class KeptRun(WatchedRun, Protocol):
    """What the heartbeat needs of a run (``engine.run.Run``): its deadlines, and the ends it
    may ask of it (timed out, cancel overdue, lease lost); and what its fence needs."""
    @property
    def run_id(self) -> str: ...
    @property
    def job(self) -> Job: ...
    @property
    def deadline(self) -> float | None: ...
    @property
    def cancel_deadline(self) -> float | None: ...

    def time_out(self) -> None: ...
    def cancel_overdue(self) -> None: ...
    def lose(self) -> None: ...


class KeptRuns(WatchedRuns, Protocol):
    """The runs whose leases the heartbeat keeps (``engine.run.RunRegistry``)."""
    def snapshot(self) -> Sequence[KeptRun]: ...
    def by_tokens(self, tokens: set[str]) -> Sequence[KeptRun]: ...
    def tokens_to_renew(self, completion_window: float | None = None) -> list[str]: ...
    def stalled_completions(self, completion_window: float) -> Sequence[KeptRun]: ...


class Heartbeat:
    """Each beat renews the leases, enforces the runs' timeouts and checks their cancel requests."""

    def __init__(self, backend: Backend, registry: KeptRuns, *, instance: str, budget: LeaseBudget,
                 on_cancel_check: Callable[[list[str]], None] | None = None,
                 fence: LeaseFence | None = None) -> None:
        self._backend = backend
        self._registry = registry
        # stops a run whose lease it could not renew in time (fencing.py); started and stopped with the heartbeat
        self.fence = fence if fence is not None else LeaseFence(registry, budget=budget)
        self._instance = instance
        self.budget = budget
        self._lease = budget.lease
        self.interval = budget.heartbeat_interval
        self.completion_window = budget.completion_window
        self._stalled: set[str] = set()  # runs already reported as a stalled completion
        self._on_cancel_check = on_cancel_check      # the held tokens' cancel requests (check_cancels)
        # Cancel requests are read in the keeper's pass, at least as often as it renews (a read of
        # the held tokens' rows, no write, its own call: the renewal stays one call), and at least
        # every CANCEL_CHECK_SECONDS: a 600 s lease renews every 150 s, too slow for an operator.
        self.cancel_check_interval = budget.cancel_check_interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self.renewals = 0
        self._busy: set[str] = set()     # tokens whose last renewal found their job row held
        self._busy_said: set[str] = set()  # busy tokens already logged (two beats in a row)
        self.failures = 0

    def start(self) -> None:
        """Idempotent; from the first run on, the keeper runs until stop() (engine.close())."""
        with self._start_lock:
            if self._thread is not None and self._thread.is_alive() and not self._stop.is_set():
                return
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=5.0)   # a keeper being stopped: let it go before the next
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._loop, args=(self._stop,), name="mjsched-heartbeat",
                                            daemon=True)
            self._thread.start()
            self.fence.start()

    def stop(self) -> None:
        with self._start_lock:
            self._stop.set()
            self._wake.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self.fence.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def poke(self) -> None:
        """Re-evaluate deadlines now (a run whose deadline comes before the next beat was
        added; a later one is read at that beat). While the event is still set a flag read does, not Event.set: the
        keeper clears it before it reads the deadlines again, so the new run's is read."""
        if not self._wake.is_set():
            self._wake.set()

    def _loop(self, stop: threading.Event) -> None:
        next_beat = time.monotonic() + self.interval
        next_check = time.monotonic() + self.cancel_check_interval
        while not stop.is_set():
            now = time.monotonic()
            deadlines = [d for e in self._registry.snapshot() if e.running
                         for d in (e.deadline, e.cancel_deadline) if d is not None]
            wake_at = min([next_beat, *deadlines] + ([next_check] if self._on_cancel_check is not None else []))
            self._wake.wait(max(0.0, wake_at - now))
            self._wake.clear()
            if stop.is_set():
                break
            try:
                self.enforce_timeouts()
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.interval
                    self.renew()
                if self._on_cancel_check is not None and time.monotonic() >= next_check:
                    next_check = time.monotonic() + self.cancel_check_interval
                    self.check_cancels()
            except Exception:  # the keeper must never die
                log.exception("lease keeper iteration failed")

    def check_cancels(self) -> None:
        """The cancel requests of the runs this engine holds (no round trip when it holds none);
        errors are logged, the next pass asks again."""
        held = self._registry.tokens_to_renew(self.completion_window)
        if held and self._on_cancel_check is not None:
            try:
                self._on_cancel_check(sorted(held))
            except Exception:  # noqa: BLE001 - a cancel check never stops the keeper
                log.exception("reading cancel requests failed")

    def _note_busy(self, busy: set[str]) -> None:
        """A job row another session holds (an open admin transaction) defers only its own
        renewal, which the next beat retries; said once per run while it stays busy."""
        # A row held for a moment (another engine's claim or completion of the same job) is
        # normal: said only when it was already busy at the previous beat, once per spell.
        for entry in self._registry.by_tokens((busy & self._busy) - self._busy_said):
            log.warning("Lease of run %s (job %r) not renewed this time: another session holds the job's row "
                        "(an open transaction?); retrying at the next beat", entry.run_id, entry.job.name,
                        extra={"action": "lease_renewal_deferred"})
        self._busy_said = (self._busy_said & busy) | (busy & self._busy)
        self._busy = set(busy)

    def _note_stalled_completions(self) -> None:
        stalled = self._registry.stalled_completions(self.completion_window)
        for entry in stalled:
            if entry.run_id not in self._stalled:
                log.error("Completion of run %s (job %r) not written within %.1fs; its lease is no longer "
                          "renewed, so another engine may take the job (the run then ends Abandoned unless the "
                          "completion lands first)", entry.run_id, entry.job.name, self.completion_window,
                          extra={"action": "completion_stalled"})
        self._stalled = {e.run_id for e in stalled}

    def enforce_timeouts(self) -> None:
        """Runs past max_runtime time out; cancelled runs past their grace end Cancelled."""
        now = time.monotonic()
        for entry in self._registry.snapshot():
            if entry.running and entry.deadline is not None and entry.deadline <= now:
                entry.time_out()
            if entry.running and entry.cancel_deadline is not None and entry.cancel_deadline <= now:
                entry.cancel_overdue()

    def renew(self, tokens: list[str] | None = None) -> bool:
        """Renew ``tokens`` (default: every lease held) in one call; False on error."""
        with self._beat_lock:
            if tokens is None:
                self._note_stalled_completions()
            held = self._registry.tokens_to_renew(self.completion_window) if tokens is None else tokens
            if not held:
                return True       # nothing to renew: no round trip
            started = time.monotonic()   # before the call (and its retries): the lease runs from no later
            try:
                renewed, busy = self._backend.renew_leases(held, self._lease, self._instance)
            except SchedulerError as exc:
                self.failures += 1
                log.error("Lease renewal failed for %d lease(s) (non-fatal, retried at the next beat): %s",
                          len(held), exc, extra={"action": "lease_renewal_failed"})
                return False
            self.renewals += 1
            self.fence.renewed(renewed, started)
            self._note_busy(busy)
            lost = set(held) - renewed - busy
            # A COMPLETING run's token may be gone because its completion just landed; if
            # it was really taken over, the completion's fencing says so. Only a RUNNING
            # run is cancelled here.
            running = [e for e in self._registry.by_tokens(lost) if e.running]
            deleted = self._deleted_jobs({e.job.id for e in running})
            for entry in running:
                if entry.job.id in deleted:
                    log.warning("Job %r was deleted while its run %s was executing; cancelling the run",
                                entry.job.name, entry.run_id, extra={"action": "lease_lost", "reason": "job_deleted"})
                else:
                    log.warning("Lease of run %s (job %r) was NOT extended (token mismatch): the slot has "
                                "been handed off; cancelling the run", entry.run_id, entry.job.name,
                                extra={"action": "lease_lost"})
                entry.lose()
            return True

    def _deleted_jobs(self, job_ids: set[str]) -> set[str]:
        """Which of these jobs no longer exist (one read, only when a lease was lost), so the
        log says the job was deleted rather than that its slot was handed off."""
        if not job_ids:
            return set()
        try:
            present = {str(j.id).lower() for j in self._backend.get_jobs(sorted(job_ids))}
        except SchedulerError:
            return set()
        return {j for j in job_ids if str(j).lower() not in present}


LeaseKeeper = Heartbeat   # the former name (it also runs timeouts and cancel checks)
