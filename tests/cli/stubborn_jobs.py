"""Jobs for the signal tests, imported by the ``mjsched run`` subprocess (python driver)."""
from __future__ import annotations

import time
from pathlib import Path


def ignore_cancel(marker: str, seconds: float = 120.0) -> None:
    """Say it started (a marker file), then keep working whatever cancel_event says."""
    Path(marker).write_text("started")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)
