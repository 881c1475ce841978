"""Job bodies the chaos tests schedule (``python`` driver targets, importable by path).

Every body appends one line per execution to ``<dir>/<key>.log``:
``<run id> <start epoch> <end epoch> <pid> <instance>`` (one ``os.write`` on an
``O_APPEND`` descriptor, so lines from concurrent processes never interleave).
``bump`` also keeps ShedLock's unsynchronised counter: read ``<key>.count``,
sleep a few milliseconds, write it back plus one, with no lock at all. If two
executions of one job ever overlapped, an increment would be lost and the
counter would fall behind the number of Completed runs.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any

# Threads of hung jobs (thread isolation) wait on this, so a test can end them.
RELEASE = threading.Event()


def _record(directory: str, key: str, context: Any, start: float, end: float, note: str = "") -> None:
    line = f"{context.run.id} {start:.6f} {end:.6f} {os.getpid()} {context.run.executed_by_instance} {note}\n"
    fd = os.open(os.path.join(directory, f"{key}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _mark(directory: str, key: str, context: Any, what: str) -> None:
    fd = os.open(os.path.join(directory, f"{key}.events"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{what} {context.run.id} {time.time():.6f} {os.getpid()} "
                     f"{context.run.executed_by_instance}\n".encode())
    finally:
        os.close(fd)


def bump(dir: str, key: str, context: Any, hold: float = 0.005) -> dict[str, Any]:  # noqa: A002 - config key
    start = time.time()
    path = os.path.join(dir, f"{key}.count")
    try:
        with open(path) as fh:
            value = int(fh.read() or 0)
    except FileNotFoundError:
        value = 0
    time.sleep(hold)
    # Written to a temporary file and renamed: an engine killed with SIGKILL between a
    # truncating open and the write would otherwise leave the counter empty (read as 0), a
    # "lost update" that no overlap caused. Overlapping runs still lose updates (both read
    # the same value), which is what the counter is there to catch.
    scratch = f"{path}.{os.getpid()}.{threading.get_ident()}"
    with open(scratch, "w") as fh:
        fh.write(str(value + 1))
    os.replace(scratch, path)
    end = time.time()
    _record(dir, key, context, start, end)
    return {"count": value + 1}


def long_job(dir: str, key: str, seconds: float, context: Any, cooperative: bool = True) -> dict[str, Any]:  # noqa: A002
    """Runs ``seconds``; returns early (as a failure) on cancel when ``cooperative``."""
    start = time.time()
    _mark(dir, key, context, "start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cooperative and context.cancel_event.wait(0.05):
            _mark(dir, key, context, "cancelled")
            raise RuntimeError("cancelled before the end")
        if not cooperative and RELEASE.wait(0.05):
            _mark(dir, key, context, "released")
            raise RuntimeError("released by the test before the end")
    _record(dir, key, context, start, time.time())
    _mark(dir, key, context, "end")
    return {"slept": seconds}


def hang(dir: str, key: str, context: Any, seconds: float = 60.0) -> None:  # noqa: A002
    """A hung job: ignores cancel_event; ends only on RELEASE (or after ``seconds``)."""
    _mark(dir, key, context, "start")
    RELEASE.wait(seconds)
    _mark(dir, key, context, "released")
