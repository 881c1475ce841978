"""The change feed: a thread that waits on the backend's job-change notifications
(PostgreSQL LISTEN) and wakes the dispatcher, reconnecting with backoff."""
from __future__ import annotations

import logging
import threading
from typing import Callable

from ..backends.base import Backend, Listener
from ..errors import SchedulerError

log = logging.getLogger(__name__)

WAIT_SECONDS = 1.0            # one wait on the connection; stop() is seen within it
FIRST_RETRY_SECONDS = 0.5     # reconnect backoff: from here, doubling ...
MAX_RETRY_SECONDS = 10.0      # ... up to this


class ChangeFeed:
    def __init__(self, backend: Backend, on_change: Callable[[], None]) -> None:
        self._backend = backend
        self._on_change = on_change
        self._listener: Listener | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.join(timeout=10.0)   # a stop() just before: let that listener go first
        listener = self._listener = self._backend.listener()
        if listener is None:
            return
        stop = self._stop = threading.Event()   # fresh: the old thread must stay stopped
        try:
            listener.wait(0)   # LISTEN before start_polling() returns: a change made right after is heard
        except SchedulerError as exc:
            log.warning("job-change listener not connected yet (%s); retrying in the background", exc)
        self._thread = threading.Thread(target=self._loop, args=(listener, stop), name="mjsched-listener",
                                        daemon=True)
        self._thread.start()

    def _loop(self, listener: Listener, stop: threading.Event) -> None:
        delay = FIRST_RETRY_SECONDS
        try:
            while not stop.is_set():
                try:
                    if listener.wait(WAIT_SECONDS) and not stop.is_set():
                        self._on_change()
                    delay = FIRST_RETRY_SECONDS
                except SchedulerError:
                    if stop.wait(delay):
                        break
                    delay = min(delay * 2, MAX_RETRY_SECONDS)
        finally:
            listener.close()

    def stop(self) -> None:
        """Ask the thread to end and interrupt its wait (does not join)."""
        self._stop.set()
        if self._listener is not None:
            self._listener.interrupt()

    def join(self, timeout: float) -> None:
        """Wait for the thread to end; stop() interrupted its wait, so this is quick
        unless it was reconnecting (one connect timeout at most)."""
        thread, self._thread = self._thread, None
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout)
        if thread.is_alive():
            log.warning("the job-change listener did not stop within %.0fs; left to exit on its own", timeout)
