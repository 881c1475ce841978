"""A tiny WSGI app with a scheduling engine, as a newcomer writes one (tests/integration/test_gunicorn.py).

``MJSCHED_APP_START=import`` starts the engine when the module is imported (with gunicorn
``--preload`` that is the master); ``post_fork`` leaves it to gunicorn's post_fork hook
(tests/support/gunicorn_conf.py), once per worker: the way docs/guide/deployment.md shows.
Every request uses the engine (lists its jobs) and answers what that gave, with its pid.
"""
from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any, Callable, Iterable

import mjsched

logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(process)d %(name)s %(levelname)s %(message)s")

DSN = os.environ["MJSCHED_APP_DSN"]
engine: mjsched.SchedulingEngine | None = None


def start() -> None:
    """Make the engine, declare the job (restart-safe) and poll."""
    global engine
    engine = mjsched.SchedulingEngine(DSN, max_poll_interval=0.5, lease_timeout=30)
    engine.ensure_job("tick", "python", every="1s", high_frequency_ok=True,
                      configuration={"callable": "tests.support.jobs:bump_counter",
                                     "kwargs": {"dsn": DSN, "name": "tick"}})
    engine.start_polling()


if os.environ.get("MJSCHED_APP_START") == "import":
    start()


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    try:
        assert engine is not None
        answer, status = {"jobs": [job.name for job in engine.list_jobs()]}, "200 OK"
    except mjsched.EngineForked as exc:
        answer, status = {"refused": str(exc)}, "503 Service Unavailable"
    body = json.dumps({"pid": os.getpid(), **answer}).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
