"""The database's time, estimated between round trips without reading the local wall clock.

Each claim returns the database's clock as it ended (``replied_at``); between claims we
add the monotonic time elapsed. The estimate trails the database by the reply's transit
and never runs ahead of it, so no tick is taken for past before it is. Only schedule maths
use this estimate; leases are decided by the procedures on the database clock alone.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Callable


class DbClock:
    def __init__(self, fetch: Callable[[], datetime]) -> None:
        self._fetch = fetch
        self._lock = threading.Lock()
        self._base: tuple[datetime, float] | None = None

    def observe(self, db_now: datetime | None) -> None:
        if db_now is not None:
            with self._lock:
                self._base = (db_now, time.monotonic())

    def now(self) -> datetime:
        base = self._base   # one attribute read (observe() stores a whole tuple): no lock needed
        if base is None:
            self.observe(self._fetch())
            with self._lock:
                base = self._base
        assert base is not None
        return base[0] + timedelta(seconds=time.monotonic() - base[1])
