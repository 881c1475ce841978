"""The run's trace crosses into a real Celery worker (issue 36 item 4): the celery driver
sends the run span's context as the task's ``traceparent`` header, and the worker's own
span continues that trace under the run's span."""
from __future__ import annotations

import uuid
from typing import Any

import pytest

from mjsched.models import RunStatus
from tests.support.tracing import exporter, run_spans  # noqa: F401 - exporter is a fixture

from .conftest import Worker

pytestmark = pytest.mark.celery


def test_a_worker_continues_the_runs_trace(make_engine: Any, session_worker: Worker, exporter: Any) -> None:
    engine = make_engine()
    job = engine.create_job(f"traced-{uuid.uuid4().hex[:8]}", "celery", "0 0 1 1 *",
                            configuration={"app": "tests.celery.worker_app:app", "task": "t.traced"})
    run = engine.execute_job(job)
    assert run.status is RunStatus.COMPLETED, run.error_message
    (span,) = run_spans(exporter)
    seen = run.details["result"].strip("'\"")
    assert seen != "untraced", "the task got no traceparent header"
    trace_id, parent_span_id, own_span_id = seen.split("/")
    assert trace_id == f"{span.context.trace_id:032x}"          # one trace, scheduler to worker
    assert parent_span_id == f"{span.context.span_id:016x}"     # the worker's span is the run's child
    assert own_span_id != parent_span_id
