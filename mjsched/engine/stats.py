"""The engine's counters (``engine.stats``), safe to bump from any thread."""
from __future__ import annotations

import threading
from collections.abc import Mapping


class EngineStats(dict[str, int]):
    """Counters bumped by the poll, dispatch, heartbeat and worker threads at once.

    ``stats[name] += n`` reads, adds and writes back in three steps; a thread switch between
    them loses the other thread's increment, so every writer goes through ``bump()``, which
    does the three under one lock. Readers are unchanged: it is a plain ``dict`` to them
    (``engine.stats["dispatched"]``, ``dict(engine.stats)``, ``json.dumps``), and a copy taken
    with ``dict(...)`` or ``snapshot()`` is a consistent one.
    """

    def __init__(self, counters: Mapping[str, int] | None = None) -> None:
        super().__init__(counters or {})
        self._lock = threading.Lock()

    def bump(self, name: str, n: int = 1) -> None:
        """Add ``n`` to the counter ``name`` (created at 0 if new), atomically."""
        with self._lock:
            self[name] = self.get(name, 0) + n

    def snapshot(self) -> dict[str, int]:
        """A copy of every counter, taken while no bump is half done."""
        with self._lock:
            return dict(self)
