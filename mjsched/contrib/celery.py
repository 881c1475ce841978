"""Celery helpers for the ``celery`` driver (extra ``mjsched[celery]``).

* :class:`DeduplicatedTask`: a task base class, for the workers, that refuses to execute a
  task id (and retry number) it has executed before, so a message sent again for the same
  mjsched run (same derived task id) runs once. Backed by Redis ``SET NX EX``.
* :func:`import_beat_schedule`: turns an app's ``beat_schedule`` into mjsched jobs,
  idempotently by name.

Limits of the guard, honestly: it remembers an id for ``mjsched_guard_ttl`` seconds (default
7 days) only; it marks an id when the task *starts*, so a worker that dies mid-task and has
its message redelivered (``acks_late``) does not run it again (at most once per id: pick
this guard for tasks where a double run is worse than a missed one); it needs Redis (the
``mjsched_guard_url`` setting, else the app's Redis result backend, else its Redis broker)
and fails the task, rather than running it unguarded, when Redis cannot be reached.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery import Task
from celery.exceptions import Ignore

log = logging.getLogger("mjsched.contrib.celery")

GUARD_PREFIX = "mjsched:celery:executed:"
DEFAULT_GUARD_TTL = 7 * 24 * 3600

_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def guard_url(app: Any) -> str:
    """The Redis URL the guard uses for ``app``; ConfigurationError when there is none."""
    from ..errors import ConfigurationError

    conf = app.conf
    for value in (conf.get("mjsched_guard_url"), conf.result_backend, conf.broker_url):
        if isinstance(value, str) and value.split("://", 1)[0] in ("redis", "rediss"):
            return value
    raise ConfigurationError("mjsched_guard_url", conf.get("mjsched_guard_url"),
                             "the duplicate guard needs Redis: set app.conf.mjsched_guard_url = 'redis://...'")


def _client(url: str) -> Any:
    import redis

    with _clients_lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
        return _clients[url]


def claim_execution(app: Any, task_id: str, retries: int = 0, owner: str = "") -> bool:
    """True the first time ``(task_id, retries)`` is claimed within the TTL, False after."""
    ttl = int(app.conf.get("mjsched_guard_ttl") or DEFAULT_GUARD_TTL)
    key = f"{GUARD_PREFIX}{task_id}:{retries}"
    return bool(_client(guard_url(app)).set(key, owner or "1", nx=True, ex=ttl))


class DeduplicatedTask(Task):
    """Refuses (Celery ``Ignore``: no result stored, message acked) a task id it already ran.

    Use ``@app.task(base=DeduplicatedTask)`` or ``Celery(..., task_cls=DeduplicatedTask)``.
    A retry (``self.retry()``) keeps the task id; it is a new claim (the retry number is
    part of the key). A direct call (``task(...)``, not through a worker) is not guarded.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.id and not request.called_directly:
            if not claim_execution(self.app, request.id, int(request.retries or 0), str(request.hostname or "")):
                log.warning("task %s [%s] already executed (retry %s); refused by the mjsched duplicate guard",
                            self.name, request.id, request.retries)
                raise Ignore()
        return super().__call__(*args, **kwargs)
