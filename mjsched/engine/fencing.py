"""Self-fencing: a run whose lease this engine could not keep is stopped before any other
engine may take its job over.

The database hands a job to another engine once the lease it granted lapses, whatever the
reason the holder stopped renewing: a renewal blocked on a lock nobody listed, a stalled
link, a slow disk, a paused server process. The causes cannot all be listed, so the
guarantee does not depend on them. Each run knows until when its lease certainly holds
(``Run.lease_until``): the start, on this engine's monotonic clock, of the last call that
granted it (the claim, or a renewal that answered it renewed) plus the lease. The call's
start comes before the database's ``now()`` in that call, so the database's expiry is never
earlier than this. The budget's ``fence_margin`` seconds before it (mjsched/lease_budget.py),
this thread stops the run: the kill grace is zeroed and the cancel event set (a
process-isolated child's tree and a shell job's process group are killed at once), the slot
is freed, nothing more is written for it (its token is about to be taken over), and the
dispatcher claims nothing until a renewal has succeeded again or a lease has passed.

What stays outside (docs/guide/protocol.md "Self-fencing"): a thread-isolated body that
ignores its cancel event keeps running; a whole engine process paused (SIGSTOP, a VM
freeze) for longer than the margin cannot fence itself until it resumes.

The fence runs on its own thread and never touches the database: nothing it does can wait
on whatever stopped the renewal.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from typing import Iterable, Protocol, Sequence

from ..lease_budget import LeaseBudget

log = logging.getLogger(__name__)

IDLE_WAIT = 5.0         # with no run to watch, the thread looks again at least this often


class WatchedRun(Protocol):
    """What the fence needs of a run (``engine.run.Run``): until when its lease holds, and to
    be stopped (``fence``) or told its lease was renewed (``extend_lease``)."""
    @property
    def running(self) -> bool: ...
    @property
    def lease_until(self) -> float: ...

    def fence(self, unrenewed_for: float) -> bool: ...
    def extend_lease(self, until: float) -> None: ...


class WatchedRuns(Protocol):
    """The runs the fence watches (``engine.run.RunRegistry``)."""
    def snapshot(self) -> Sequence[WatchedRun]: ...
    def by_tokens(self, tokens: set[str]) -> Sequence[WatchedRun]: ...


class LeaseFence:
    """Watches every running run's ``lease_until`` and fences the ones about to lapse."""

    def __init__(self, registry: WatchedRuns, *, budget: LeaseBudget) -> None:
        self._registry = registry
        self._lease = budget.lease                    # what a renewal grants (Run.lease_until)
        self._claim_pause = budget.fenced_claim_pause
        self._fence_after = budget.fence_after        # how long a fenced run went unrenewed (its log line)
        self.margin = budget.fence_margin
        self._wake = threading.Condition(threading.Lock())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._fenced_at: float | None = None    # monotonic time of the last fence; None: none since a renewal
        self._next_check = 0.0                  # when the thread looks next at the latest (monotonic)
        self._poked = False
        self.fenced = 0

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        """Idempotent; from the first run on, the fence watches until stop()."""
        with self._start_lock:
            if self._thread is not None and self._thread.is_alive() and not self._stop.is_set():
                return
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._loop, args=(self._stop,), name="mjsched-fence",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._start_lock:
            self._stop.set()
            thread = self._thread
        self.poke()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def poke(self) -> None:
        """Look at the deadlines again now (also when the thread is looking already: it then
        looks once more instead of sleeping)."""
        with self._wake:
            self._poked = True
            self._wake.notify_all()

    def watch(self, lease_until: float) -> None:
        """A run whose lease holds until ``lease_until`` starts: wake the thread only when that
        comes before its next look (a float read on the hot path, no lock, most of the time)."""
        if lease_until - self.margin < self._next_check:
            self.poke()

    # -- what the keeper and the dispatcher tell and ask -------------------------------------
    def renewed(self, tokens: Iterable[str], call_started: float) -> None:
        """A renewal that began at ``call_started`` (monotonic) answered these tokens renewed:
        their runs' leases hold until ``call_started + lease``, and claims may go on."""
        until = call_started + self._lease
        for entry in self._registry.by_tokens(set(tokens)):
            entry.extend_lease(until)
        self._fenced_at = None

    def claim_pause(self) -> float:
        """Seconds the dispatcher should wait before it claims again (0: claim). After a fence
        the engine's path to the database is suspect: claims wait for a renewal that succeeds,
        or for one lease, whichever comes first."""
        fenced_at = self._fenced_at
        if fenced_at is None:
            return 0.0
        left = fenced_at + self._claim_pause - time.monotonic()
        if left <= 0:
            self._fenced_at = None
            return 0.0
        return left

    # -- the watch -------------------------------------------------------------------------
    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._wake:
                self._poked = False
                self._next_check = math.inf   # looking now: a run starting meanwhile pokes
            try:
                wait = self.check()
            except Exception:  # noqa: BLE001 - the fence must never die
                log.exception("lease fence iteration failed")
                wait = self.margin
            with self._wake:
                if not stop.is_set() and not self._poked:
                    self._next_check = time.monotonic() + wait
                    self._wake.wait(wait)

    def check(self) -> float:
        """Fence every running run whose lease could lapse within the margin; the seconds
        until the next one could."""
        now = time.monotonic()
        wait = IDLE_WAIT
        for entry in self._registry.snapshot():
            if not entry.running:
                continue
            fence_at = entry.lease_until - self.margin
            if fence_at <= now:
                if entry.fence(self._fence_after):
                    self.fenced += 1
                    self._fenced_at = time.monotonic()
            else:
                wait = min(wait, fence_at - now)
        return max(0.005, wait)
