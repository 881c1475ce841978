"""Writes run completions in batches, and keeps retrying them through outages.

Completions gathered within a few milliseconds go to the database in one
``complete_runs`` call (still fenced per run). When a call fails, each of
its items is retried on its own, with its own backoff, until it lands or its
give-up time passes, while new completions keep being written: an item the
database refuses for good holds back no other. If the engine dies first, the
lease expires and the run becomes Abandoned. Once stopped, the writer gives up
what is left instead of retrying, and takes nothing new.

The completion never waits on a job row another session holds (an operator's open
transaction): such an item comes back busy, is retried alone every ``busy_retry``
seconds, and holds back no other. ``retry_busy_now()`` lets the poller try them just
before it sweeps, so a completion whose row was just released lands before the sweep
could abandon its run.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..backends.base import Backend, Completion
from ..errors import ConfigurationError, SchedulerError
from .conditions import WaitedCondition

log = logging.getLogger(__name__)

Callback = Callable[[bool | None], None]   # True landed, False fenced out, None gave up
_WAKE = object()   # queued by retry_busy_now(): end the writer's wait at once


@dataclass
class _Item:
    completion: Completion
    on_done: Callback
    give_up_at: float
    delay: float = 0.0          # current backoff; 0 until its first failure
    not_before: float = 0.0     # monotonic time of its next try
    busy: bool = False          # its job row was held by another session at its last try
    busy_since: float = 0.0     # when it first found its job row held (this spell)
    busy_said: bool = False     # the deferral was logged


class CompletionWriter:
    def __init__(self, backend: Backend, *, batch_window: float = 0.002, max_batch: int = 200,
                 give_up_after: float = 900.0, busy_retry: float = 0.2) -> None:
        self._backend = backend
        self._busy_retry = busy_retry
        self._window = batch_window
        self._max_batch = max_batch
        self._give_up_after = give_up_after
        # SimpleQueue: put and get are C calls, where queue.Queue takes a Condition per put and
        # per get (about 4 µs per completion); nothing here needs task_done or maxsize.
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._pending = 0
        self._busy = 0              # items waiting because their job row is held elsewhere
        self._passes = 0            # loop passes done (retry_busy_now waits for one)
        self._busy_now = False
        self._cond = WaitedCondition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False       # the writer thread is in _loop (set under _cond; False once it left)
        self._closed = False

    def submit(self, completion: Completion, on_done: Callback) -> None:
        item = _Item(completion, on_done, time.monotonic() + self._give_up_after)
        with self._cond:   # put under the lock stop() closes under: it can never slip in between and strand it
            closed = self._closed
            if not closed:
                self._pending += 1
                if not self._running:
                    self._start_thread()
                self._queue.put(item)
        if closed:   # a run that outlived close(): its lease lapses and the sweep abandons it
            log.warning("completion of run %s (%s) after the engine closed; not written", completion.run_id,
                        completion.status, extra={"action": "completion_given_up"})
            self._call(item, None)

    def _start_thread(self) -> None:
        """The writer thread (the caller holds _cond); again if a bug ever ended the last one."""
        self._running = True
        self._thread = threading.Thread(target=self._run_loop, name="mjsched-completions", daemon=True)
        self._thread.start()

    def _run_loop(self) -> None:
        try:
            self._loop()
        finally:
            with self._cond:
                self._running = False

    def flush(self, timeout: float | None) -> bool:
        """Wait until every submitted completion was written or given up (None: no bound)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    @property
    def pending(self) -> int:
        with self._cond:
            return self._pending

    @property
    def busy(self) -> int:
        with self._cond:
            return self._busy

    def retry_busy_now(self, timeout: float = 0.5) -> None:
        """Try the busy items at once and wait (at most ``timeout``) until that try is done."""
        with self._cond:
            if not self._busy or not self._running:
                return
            self._busy_now = True
            target = self._passes + 2     # a pass under way may have missed the request
        self._queue.put(_WAKE)
        with self._cond:
            self._cond.wait_for(lambda: self._passes >= target or not self._busy, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Flush for at most ``timeout`` seconds, then stop; what is left is given up."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
        self._stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _take_batch(self, timeout: float | None) -> list[_Item]:
        """New items gathered for one batch window; [] when none came within ``timeout``.
        After the first item it sleeps out the window, then takes what came meanwhile: one
        wake-up of this thread a batch, where a get() per item woke it once per completion."""
        try:
            first = self._queue.get(timeout=timeout)
        except queue.Empty:
            return []
        if first is None:
            self._queue.put(None)     # the loop sees _stop; keep the marker for the drain
            return []
        if first is _WAKE:
            return []
        batch: list[_Item] = [first]  # type: ignore[list-item]
        if self._window > 0:
            time.sleep(self._window)
        while len(batch) < self._max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)
                break
            if item is _WAKE:
                continue
            batch.append(item)  # type: ignore[arg-type]
        return batch

    def _loop(self) -> None:
        retry: list[_Item] = []      # failed items, each retried alone when its backoff is over
        while not self._stop.is_set():
            now = time.monotonic()
            wait = None if not retry else max(0.0, min(i.not_before for i in retry) - now)
            self._write_next(wait, retry)
            with self._cond:
                busy_now, self._busy_now = self._busy_now, False
            now = time.monotonic()
            for item in [i for i in retry if i.not_before <= now or (busy_now and i.busy)]:
                if self._stop.is_set():
                    break
                retry.remove(item)
                self._write([item], retry)
            with self._cond:
                self._busy = sum(1 for i in retry if i.busy)
                self._passes += 1
                self._cond.notify_all()
        while True:   # stopped: whatever is still queued is given up, so flush() never waits on it
            try:
                queued = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(queued, _Item):
                retry.append(queued)
        for item in retry:
            log.error("gave up writing the completion of run %s (%s): the writer stopped",
                      item.completion.run_id, item.completion.status, extra={"action": "completion_given_up"})
            self._done(item, None)

    def _write_next(self, wait: float | None, retry: list[_Item]) -> None:
        """The next batch, written. Its items (and the runs their callbacks hold) are let go
        as this returns, not kept by the loop while it waits for the next completion."""
        batch = self._take_batch(wait)
        if batch:
            self._write(batch, retry)

    def _write(self, batch: list[_Item], retry: list[_Item]) -> None:
        """One call for ``batch``; on failure each item goes to ``retry`` with its own backoff
        (or is given up), so new completions keep flowing past an item the database refuses."""
        try:
            results = self._backend.complete_runs([i.completion for i in batch])
        except SchedulerError as exc:
            now = time.monotonic()
            for item in batch:
                if item.give_up_at <= now or self._stop.is_set() or isinstance(exc, ConfigurationError):
                    log.error("gave up writing the completion of run %s (%s): %s", item.completion.run_id,
                              item.completion.status, exc, extra={"action": "completion_given_up"})
                    self._done(item, None)
                    continue
                item.busy = False
                item.delay = min(item.delay * 2, 5.0) if item.delay else 0.1
                item.not_before = now + item.delay
                retry.append(item)
            if len(batch) > 1 or batch[0].delay <= 0.1:
                log.warning("could not write %d completion(s), retrying each on its own: %s", len(batch), exc,
                            extra={"action": "completion_retry"})
            return
        except Exception:  # a bug must not kill the writer
            log.exception("unexpected error writing completions; dropping %d", len(batch))
            for item in batch:
                self._done(item, None)
            return
        now = time.monotonic()
        for item in batch:
            outcome = results.get(item.completion.run_id, False)
            if outcome is None and not self._stop.is_set() and item.give_up_at > now:   # busy: row held elsewhere
                if not item.busy:
                    item.busy_since = now
                elif not item.busy_said and now - item.busy_since >= 1.0:   # not a row held for a moment
                    item.busy_said = True
                    log.warning("completion of run %s (%s) deferred: another session holds its job's row (an "
                                "open transaction?); retrying every %.1fs", item.completion.run_id,
                                item.completion.status, self._busy_retry, extra={"action": "completion_deferred"})
                item.busy = True
                item.not_before = now + self._busy_retry
                retry.append(item)
                continue
            if outcome is None:
                log.error("gave up writing the completion of run %s (%s): its job's row was still held by "
                          "another session (writer stopped or give-up time passed)", item.completion.run_id,
                          item.completion.status, extra={"action": "completion_given_up"})
            self._done(item, outcome)

    def _done(self, item: _Item, outcome: bool | None) -> None:
        try:
            self._call(item, outcome)
        finally:
            with self._cond:
                self._pending -= 1
                if self._pending == 0:   # only flush() waits on the count, and only for zero
                    self._cond.notify_all()

    @staticmethod
    def _call(item: _Item, outcome: bool | None) -> None:
        try:
            item.on_done(outcome)
        except Exception:
            log.exception("completion callback failed for run %s", item.completion.run_id)
