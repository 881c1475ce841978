"""Starting, stopping and closing an engine leaves no thread of its own behind."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest

from tests.support.pg import wait_for

pytestmark = pytest.mark.postgres
ENGINE_THREADS = ("mjsched-poller", "mjsched-listener", "mjsched-heartbeat", "mjsched-completions")


def engine_threads() -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t.is_alive() and t.name.startswith(ENGINE_THREADS))


def test_close_joins_every_background_thread_promptly(make_engine: Callable[..., Any]) -> None:
    before = engine_threads()
    engine = make_engine()
    engine.start_polling()
    assert "mjsched-listener" in engine_threads()
    started = time.monotonic()
    engine.close()
    assert time.monotonic() - started < 0.9, "close() waited out the listener's 1 s wait"
    assert engine_threads() == before


def test_restarting_polling_runs_exactly_one_listener(make_engine: Callable[..., Any]) -> None:
    before = engine_threads().count("mjsched-listener")
    engine = make_engine()
    for _ in range(3):
        engine.start_polling()
        engine.stop_polling(wait=False)
    engine.start_polling()
    wait_for(lambda: engine_threads().count("mjsched-listener") == before + 1, timeout=5,
             message="the stopped listeners to exit")
    job = engine.create_job("after-restarts", "python", "0 0 1 1 *", configuration={"callable": "os:getpid"})
    assert engine.get_job(job).name == "after-restarts"
    engine.close()
    assert engine_threads().count("mjsched-listener") == before
