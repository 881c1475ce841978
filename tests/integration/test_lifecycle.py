"""Starting, stopping and closing an engine leaves no thread of its own behind."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Callable

import psycopg2
import pytest

from mjsched.engine import control
from tests.support import drivers
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


def test_close_waits_one_grace_for_a_completion_that_does_not_land(
        pg_dsn: str, make_engine: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A run returned, but its completion cannot land (an admin session holds its job's row):
    close() gives up on it after CLOSE_GRACE_SECONDS in all, as documented. It used to wait
    for that same completion three times, each with a bound of its own (the runs going idle,
    the writer's flush, the writer's stop): 5 + 5 + 5 s, which with a 10 s drain and an exit
    made a SIGTERMed engine miss tests/celery/test_cluster.py's 30 s."""
    caplog.set_level(logging.WARNING, logger="mjsched")
    monkeypatch.setattr(control, "CLOSE_GRACE_SECONDS", 1.0)
    monkeypatch.setattr(control, "CLOSE_LAST_WRITE_SECONDS", 0.2)
    gate = f"close-grace-{uuid.uuid4().hex[:8]}"
    engine = make_engine(lease_timeout=5.0, max_poll_interval=0.5)
    job = engine.create_job("close-grace", "test-block", "* * * * * *", configuration={"gate": gate})
    engine.start_polling()
    assert drivers.started(gate).wait(10)
    admin = psycopg2.connect(pg_dsn)      # an open transaction holding the job's row, as psql would
    try:
        with admin.cursor() as cur:
            cur.execute("SELECT id FROM mjsched.scheduled_job WHERE id = %s FOR UPDATE", (job,))
        drivers.gate(gate).set()            # the run returns; its completion meets the held row
        wait_for(lambda: engine.parts.writer.busy, timeout=10, message="the completion to find its job row held")
        started = time.monotonic()
        engine.close()
        took = time.monotonic() - started
    finally:
        admin.rollback()
        admin.close()
    # the grace, the last write's 0.2 s (twice: completions, then notifications), the writer's
    # join (1 s at most) and the close of the pool
    assert took < 1.0 + 0.4 + 1.5, f"close() took {took:.1f}s with a 1 s grace"
    assert any("gave up writing the completion" in r.getMessage() for r in caplog.records)
    assert not engine.parts.writer.pending
