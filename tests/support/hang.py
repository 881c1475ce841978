"""A python-driver target that hangs: it ignores its cancel_event and waits until the test
releases it (``RELEASE``), so a test leaves no thread behind."""
from __future__ import annotations

import threading

RELEASE = threading.Event()
ENTERED = threading.Event()


def hang(limit: float = 60.0) -> None:
    ENTERED.set()
    RELEASE.wait(limit)
