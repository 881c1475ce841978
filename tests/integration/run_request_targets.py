"""Targets of the ``python`` driver for tests/integration/test_run_requests.py.

Module level, so an engine in another process (engine_process.py) and a process-isolated
child import them by path. Each notes its pid in ``marker`` (a file) when it starts, so a
test waits for the run to be under way without sleeping.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any

WAIT_LIMIT = 120.0   # no target outlives a test run


def _started(marker: str | None) -> None:
    if marker:
        tmp = marker + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(tmp, marker)


def echo(context: Any, **kwargs: Any) -> dict[str, Any]:
    """Reports the kwargs it was called with and the run's parameters."""
    return {"kwargs": kwargs, "run_parameters": context.run.parameters,
            "configuration": context.job.configuration}


def wait_for_cancel(context: Any, marker: str | None = None) -> dict[str, Any]:
    """Cooperative: returns as soon as cancel_event is set (success: the engine still records
    the run Cancelled, since the cancel reached it first)."""
    _started(marker)
    stopped = context.cancel_event.wait(WAIT_LIMIT)
    return {"stopped_on_cancel": stopped}


def ignore_cancel(marker: str | None = None) -> None:
    """Ignores cancel_event and SIGTERM: only a kill ends it (or the time limit)."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:
        pass   # not the main thread (thread isolation): there is no signal to ignore
    _started(marker)
    end = time.monotonic() + WAIT_LIMIT
    while time.monotonic() < end:
        time.sleep(0.05)   # a hung job: the thing under test, not a synchronisation
