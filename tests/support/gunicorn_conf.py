"""gunicorn settings of the deployment test: 2 workers, the drain, and the hooks
docs/guide/deployment.md shows (the engine started in post_fork, stopped in worker_exit,
or in on_exit where the master runs it)."""
from __future__ import annotations

import os
from typing import Any

workers = 2
bind = os.environ["MJSCHED_APP_BIND"]
DRAIN = int(os.environ.get("MJSCHED_APP_DRAIN", "5"))
graceful_timeout = DRAIN        # how long the master waits for its workers at shutdown


def post_fork(server: Any, worker: Any) -> None:
    if os.environ.get("MJSCHED_APP_START") == "post_fork":
        from tests.support import gunicorn_app
        gunicorn_app.start()     # one engine per worker, made in the worker


def _stop() -> None:
    from tests.support import gunicorn_app
    if gunicorn_app.engine is not None:
        gunicorn_app.engine.stop_polling(wait=True, max_wait=DRAIN)   # a forked copy: returns at once


def worker_exit(server: Any, worker: Any) -> None:
    _stop()


def on_exit(server: Any) -> None:
    _stop()
