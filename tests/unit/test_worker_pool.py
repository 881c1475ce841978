"""The engine's worker pool when threads cannot be started (a process or container thread limit)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterator

import pytest

from mjsched.engine.worker_pool import WorkerPool


@pytest.fixture
def two_threads_at_most(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Thread.start() of a pool worker fails after two of them started."""
    real = threading.Thread.start
    started = [0]

    def start(self: threading.Thread) -> None:
        if self.name.startswith("mjsched-worker"):
            if started[0] >= 2:
                raise RuntimeError("can't start new thread")
            started[0] += 1
        real(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    yield


def test_prestart_keeps_the_workers_it_could_start_and_says_so(two_threads_at_most: None,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    pool = WorkerPool(4)
    gate, ran = threading.Event(), [threading.Event() for _ in range(3)]

    def call(i: int) -> None:
        ran[i].set()
        gate.wait(10)
    try:
        with caplog.at_level(logging.WARNING, logger="mjsched.engine.worker_pool"):
            pool.prestart()
        assert "started 2 of 4 worker threads ahead of runs" in caplog.text
        pool.submit(call, 0)
        pool.submit(call, 1)
        assert ran[0].wait(10) and ran[1].wait(10)     # the two started workers took them
        with pytest.raises(RuntimeError, match="can't start new thread"):
            pool.submit(call, 2)                        # no idle worker and none can start: refused
    finally:
        gate.set()
        pool.shutdown()
    assert not ran[2].wait(0.2), "a refused call ran anyway"


def test_a_refused_call_is_never_run_later(two_threads_at_most: Any) -> None:
    """Before: the call was queued before its thread failed to start, and a worker freed later ran a
    run the engine had already given up (removed from its registry, its lease left to lapse)."""
    pool = WorkerPool(3)
    gate, first, refused, probe = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    try:
        pool.submit(lambda: (first.set(), gate.wait(10)))
        pool.submit(lambda: gate.wait(10))
        assert first.wait(10)
        with pytest.raises(RuntimeError):
            pool.submit(refused.set)
        gate.set()                                       # both workers come back idle
        deadline = time.monotonic() + 10
        while True:                                      # a call after it, once a worker is idle again
            try:
                pool.submit(probe.set)
                break
            except RuntimeError:
                assert time.monotonic() < deadline, "no worker came back"
                time.sleep(0.01)
        assert probe.wait(10)                            # queued after the refused call, if that was queued
    finally:
        pool.shutdown()
    assert not refused.wait(0.2)
