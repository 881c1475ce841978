"""The engine's counters (``engine.stats``), safe to bump from any thread."""
from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Callable

from ..forking import ProcessLock


class EngineStats(dict[str, int]):
    """Counters bumped by the poll, dispatch, heartbeat and worker threads at once.

    ``stats[name] += n`` reads, adds and writes back in three steps; a thread switch between
    them loses the other thread's increment, so every writer goes through ``bump()``, which
    does the three under one lock. Readers are unchanged: it is a plain ``dict`` to them
    (``engine.stats["dispatched"]``, ``dict(engine.stats)``, ``json.dumps``), and a copy taken
    with ``dict(...)`` or ``snapshot()`` is a consistent one.

    It is also the one channel every counted event passes: ``tell(callback)`` hands each bump
    on (the engine tells its listeners' ``on_count``), outside the lock, so a counter and
    what observers hear of it can never disagree.
    """

    def __init__(self, counters: Mapping[str, int] | None = None) -> None:
        super().__init__(counters or {})
        # A forked copy (engine.stats read in a worker) must not wait on a lock a parent's bump
        # held at the fork: there it takes a lock of that process's own. Not a ProcessLock
        # here, where every run bumps: its with-statement costs 0.8 µs, a plain lock's 0.2.
        self._lock, self._pid, self._elsewhere = threading.Lock(), os.getpid(), ProcessLock()
        self._tell: Callable[[str, int], None] | None = None

    def tell(self, callback: Callable[[str, int], None]) -> None:
        """Hand every bump to ``callback(name, n)`` from now on (it must not raise)."""
        self._tell = callback

    def bump(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``name`` (created at 0 if new), atomically; then tell."""
        with self._lock if os.getpid() == self._pid else self._elsewhere:
            self[name] = self.get(name, 0) + n
        if self._tell is not None:
            self._tell(name, n)

    def snapshot(self) -> dict[str, int]:
        """A copy of every counter, taken while no bump is half done."""
        with self._lock if os.getpid() == self._pid else self._elsewhere:
            return dict(self)
