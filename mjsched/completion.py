"""Writes run completions in batches, and keeps retrying them through outages.

Completions gathered within a few milliseconds go to the database in one
``complete_job_runs`` call (still fenced per run). A batch that fails is then
retried item by item, with backoff between rounds, until each lands or its
give-up time passes: an item the database refuses for good never holds back
the others. If the engine dies first, the lease expires and the run becomes
Abandoned. Once stopped, the writer gives up at the first failure instead of
retrying, and takes nothing new.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Callable

from .backends.base import Backend, Completion
from .errors import SchedulerError

log = logging.getLogger(__name__)

Callback = Callable[[bool | None], None]   # True landed, False fenced out, None gave up


@dataclass
class _Item:
    completion: Completion
    on_done: Callback
    give_up_at: float


class CompletionWriter:
    def __init__(self, backend: Backend, *, batch_window: float = 0.002, max_batch: int = 200,
                 give_up_after: float = 900.0) -> None:
        self._backend = backend
        self._window = batch_window
        self._max_batch = max_batch
        self._give_up_after = give_up_after
        self._queue: queue.Queue[_Item | None] = queue.Queue()
        self._pending = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False

    def submit(self, completion: Completion, on_done: Callback) -> None:
        item = _Item(completion, on_done, time.monotonic() + self._give_up_after)
        with self._start_lock:
            closed = self._closed
            if not closed:
                with self._cond:
                    self._pending += 1
                self._ensure_started()
        if closed:   # a run that outlived close(): its lease lapses and the sweep abandons it
            log.warning("completion of run %s (%s) after the engine closed; not written", completion.run_id,
                        completion.status, extra={"action": "completion_given_up"})
            self._call(item, None)
            return
        self._queue.put(item)

    def _ensure_started(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="mjsched-completions", daemon=True)
            self._thread.start()

    def flush(self, timeout: float | None) -> bool:
        """Wait until every submitted completion was written or given up (None: no bound)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    @property
    def pending(self) -> int:
        with self._cond:
            return self._pending

    def stop(self, timeout: float = 5.0) -> None:
        """Flush for at most ``timeout`` seconds, then stop; what is left is given up."""
        self.flush(timeout)
        with self._start_lock:
            self._closed = True
        self._stop.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def _take_batch(self) -> list[_Item]:
        first = self._queue.get()
        if first is None:
            return []
        batch = [first]
        deadline = time.monotonic() + self._window
        while len(batch) < self._max_batch:
            left = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)
                break
            batch.append(item)
        return batch

    def _loop(self) -> None:
        while not self._stop.is_set():
            batch = self._take_batch()
            if batch:
                self._write(batch)
        while True:   # stopped: whatever is still queued is given up, so flush() never waits on it
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                log.error("gave up writing the completion of run %s (%s): the writer stopped",
                          item.completion.run_id, item.completion.status, extra={"action": "completion_given_up"})
                self._done(item, None)

    def _write(self, batch: list[_Item]) -> None:
        try:
            results = self._backend.complete_job_runs([i.completion for i in batch])
        except SchedulerError as exc:
            self._retry_one_by_one(batch, exc)
            return
        except Exception:  # a bug must not kill the writer
            log.exception("unexpected error writing completions; dropping %d", len(batch))
            for item in batch:
                self._done(item, None)
            return
        for item in batch:
            self._done(item, results.get(item.completion.run_id, False))

    def _retry_one_by_one(self, batch: list[_Item], exc: SchedulerError) -> None:
        delay = 0.1
        while batch:
            now = time.monotonic()
            for item in [i for i in batch if i.give_up_at <= now or self._stop.is_set()]:
                log.error("gave up writing the completion of run %s (%s): %s", item.completion.run_id,
                          item.completion.status, exc, extra={"action": "completion_given_up"})
                self._done(item, None)
                batch.remove(item)
            if not batch:
                return
            log.warning("could not write %d completion(s), retrying in %.1fs: %s", len(batch), delay, exc,
                        extra={"action": "completion_retry"})
            if self._stop.wait(delay):
                continue          # stopping: the next round gives every item up
            delay = min(delay * 2, 5.0)
            for item in list(batch):
                try:
                    outcome = self._backend.complete_job_runs([item.completion]).get(item.completion.run_id, False)
                except SchedulerError as again:
                    exc = again
                    continue
                except Exception:  # a bug must not kill the writer
                    log.exception("unexpected error writing the completion of run %s; dropping it",
                                  item.completion.run_id)
                    outcome = None
                self._done(item, outcome)
                batch.remove(item)

    def _done(self, item: _Item, outcome: bool | None) -> None:
        try:
            self._call(item, outcome)
        finally:
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()

    @staticmethod
    def _call(item: _Item, outcome: bool | None) -> None:
        try:
            item.on_done(outcome)
        except Exception:
            log.exception("completion callback failed for run %s", item.completion.run_id)
