"""The Celery app the tests' workers run (and the engines import as ``tests.celery.worker_app:app``).

Everything comes from the environment so that a test's subprocesses agree:
MJSCHED_CELERY_BROKER, MJSCHED_CELERY_BACKEND ('' for none), MJSCHED_CELERY_QUEUE and
MJSCHED_CELERY_TAG (the prefix of the Redis counters the tasks write: how many times
each task id was delivered and executed).
"""
from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery
from celery.signals import task_prerun

from mjsched.contrib.celery import DeduplicatedTask

BROKER = os.environ.get("MJSCHED_CELERY_BROKER", "redis://127.0.0.1:6379/15")
BACKEND = os.environ.get("MJSCHED_CELERY_BACKEND", "redis://127.0.0.1:6379/14")
QUEUE = os.environ.get("MJSCHED_CELERY_QUEUE", "mjsched-test")
TAG = os.environ.get("MJSCHED_CELERY_TAG", "mjsched-test")
COUNTERS = os.environ.get("MJSCHED_CELERY_COUNTERS", "redis://127.0.0.1:6379/13")

app = Celery("mjsched_test_worker", broker=BROKER, backend=BACKEND or None)
app.conf.update(
    task_default_queue=QUEUE,
    result_extended=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # Redis: a worker killed with -9 has its unacknowledged messages redelivered after 5 s (kombu's
    # sweep for them runs every interval x throttle seconds: 10 x 10 by default, 1 s here)
    broker_transport_options={"visibility_timeout": 5, "unacked_restore_interval": 1,
                              "unacked_restore_throttle": 1},
    mjsched_guard_url=COUNTERS,
    worker_hijack_root_logger=False,
)
app_without_backend = Celery("mjsched_test_nobackend", broker=BROKER)

_redis = redis.Redis.from_url(COUNTERS, socket_connect_timeout=5, socket_timeout=5)


def counter(kind: str, task_id: str) -> str:
    return f"{TAG}:{kind}:{task_id}"


@task_prerun.connect
def _delivered(task_id: str | None = None, **_: Any) -> None:
    if task_id:
        _redis.incr(counter("delivered", task_id))


def _executed(task_id: str) -> None:
    _redis.incr(counter("executed", task_id))
    _redis.sadd(f"{TAG}:executed", task_id)


@app.task(bind=True, name="t.add")
def add(self: Any, x: int, y: int) -> int:
    _executed(self.request.id)
    return x + y


@app.task(bind=True, name="t.boom")
def boom(self: Any) -> None:
    _executed(self.request.id)
    raise ValueError("boom from the worker")


@app.task(bind=True, name="t.sleep")
def sleep(self: Any, seconds: float) -> str:
    _executed(self.request.id)
    time.sleep(seconds)
    _redis.incr(counter("finished", self.request.id))
    return "slept"


@app.task(bind=True, name="t.tick", base=DeduplicatedTask, acks_late=True)
def tick(self: Any, job: str, work: float = 0.0) -> str:
    """The per-second task: guarded, acknowledged late (a killed worker's message is redelivered)."""
    _executed(self.request.id)
    if work:
        time.sleep(work)
    _redis.incr(counter("finished", self.request.id))
    return job


@app.task(bind=True, name="t.traced")
def traced(self: Any) -> str:
    """Continues the trace the run's span handed on in the task's headers (the OpenTelemetry
    way: extract, then a span of its own), and answers "trace id/parent span id/own span id"
    as the worker saw them, or "untraced" when no ``traceparent`` header came."""
    _executed(self.request.id)
    header = getattr(self.request, "traceparent", None) or (self.request.headers or {}).get("traceparent")
    if not header:
        return "untraced"
    from opentelemetry import propagate, trace
    from opentelemetry.sdk.trace import TracerProvider

    parent = propagate.extract({"traceparent": header})
    span = TracerProvider().get_tracer("worker").start_span("worker.task", context=parent)
    own = span.get_span_context()
    parent_span = trace.get_current_span(parent).get_span_context()
    span.end()
    return f"{own.trace_id:032x}/{parent_span.span_id:016x}/{own.span_id:016x}"
