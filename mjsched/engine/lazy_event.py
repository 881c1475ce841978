"""A ``threading.Event`` that makes its Condition only when someone waits on it or sets it.

Every run carries a ``cancel_event`` (drivers read it through ``ExecutionContext``), but
almost no run is ever cancelled or waits on it: the run ends and the event is dropped.
``threading.Event()`` builds a Condition and a Lock up front, about 5 % of an engine's CPU
per no-op run (bench.throughput --profile). This one answers ``is_set()`` from its flag
and builds the Condition on the first ``set``, ``clear`` or ``wait``.
"""
from __future__ import annotations

import threading

from ..forking import ProcessLock

_MAKING = ProcessLock()   # two first users at once share one Condition


class LazyEvent(threading.Event):
    """Behaves as ``threading.Event`` (it is one: isinstance checks and type hints hold)."""

    def __init__(self) -> None:   # noqa: D107 - no super().__init__: that builds the Condition
        self._flag = False
        self._made: threading.Condition | None = None

    @property
    def _cond(self) -> threading.Condition:   # type: ignore[override]
        """Event's own methods reach the Condition through this attribute."""
        made = self._made
        if made is None:
            with _MAKING:
                if self._made is None:
                    self._made = threading.Condition(threading.Lock())
                made = self._made
        return made
