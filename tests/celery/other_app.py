"""Another application on the same broker as ``worker_app``: its own tasks, its own queue.

Its workers answer every broadcast (inspect, revoke) on the broker, but consume only
MJSCHED_OTHER_QUEUE and register none of ``worker_app``'s tasks.
"""
from __future__ import annotations

import os

from celery import Celery

BROKER = os.environ.get("MJSCHED_CELERY_BROKER", "redis://127.0.0.1:6379/15")
QUEUE = os.environ.get("MJSCHED_OTHER_QUEUE", "mjsched-test-other")

app = Celery("mjsched_test_other", broker=BROKER)
app.conf.update(task_default_queue=QUEUE, worker_hijack_root_logger=False,
                broker_connection_retry_on_startup=True)


@app.task(name="other.ping")
def ping() -> str:
    return "pong"
