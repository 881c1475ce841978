"""How a run's fencing token reaches what the job calls (issue 37 item 5): the http driver's
``X-Mjsched-Fencing-Token`` and ``Idempotency-Key`` (one key per run, the next run's differs;
a header the job sets wins), the celery driver's task header, the sql driver's named
parameters, and ``context.fencing_token`` read once from its source."""
from __future__ import annotations

import dataclasses
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from mjsched.drivers.base import ExecutionContext
from mjsched.drivers.celery import CeleryJob
from mjsched.drivers.http import HttpJob, fencing_headers
from mjsched.drivers.sql import SqlJob, _with_run_parameters
from mjsched.errors import ConfigurationError
from tests.unit.test_drivers import http_server, make_context  # noqa: F401 - the fixture


def with_token(context: ExecutionContext, token: int | None) -> ExecutionContext:
    context.run = dataclasses.replace(context.run, fencing_token=token)
    return context


def test_the_header_rule() -> None:
    assert fencing_headers("J", "R", 7) == {"X-Mjsched-Fencing-Token": "7", "Idempotency-Key": "J:7"}
    assert fencing_headers("J", "R", None) == {"Idempotency-Key": "J:run:R"}


def test_http_sends_the_token_and_a_key_per_run(http_server: Any) -> None:  # noqa: F811
    server, base = http_server
    first = with_token(make_context("http", {"url": f"{base}/a"}), 41)
    assert HttpJob().execute(first).success
    assert HttpJob().execute(first).success                       # the same run sends again: same key
    later = with_token(make_context("http", {"url": f"{base}/a"}), 42)
    later.job = dataclasses.replace(later.job, id=first.job.id)    # the job's next run
    assert HttpJob().execute(later).success
    sent = [(r["headers"]["X-Mjsched-Fencing-Token"], r["headers"]["Idempotency-Key"]) for r in server.requests]
    job = first.job.id
    assert sent == [("41", f"{job}:41"), ("41", f"{job}:41"), ("42", f"{job}:42")]


def test_a_header_the_job_sets_wins_whatever_its_case(http_server: Any) -> None:  # noqa: F811
    server, base = http_server
    context = with_token(make_context("http", {"url": f"{base}/a", "headers": {"idempotency-key": "mine"}}), 5)
    assert HttpJob().execute(context).success
    headers = {k.lower(): v for k, v in server.requests[0]["headers"].items()}
    assert headers["idempotency-key"] == "mine"
    assert list(k.lower() for k in server.requests[0]["headers"]).count("idempotency-key") == 1
    assert headers["x-mjsched-fencing-token"] == "5"


def test_context_reads_the_token_once_and_only_when_asked() -> None:
    calls: list[int] = []

    def source() -> int:
        calls.append(1)
        return 9

    context = make_context("http", {"url": "http://127.0.0.1:9/"})
    context.fencing_source = source
    assert calls == []
    assert (context.fencing_token, context.fencing_token, context.run.fencing_token) == (9, 9, 9)
    assert calls == [1]
    bare = make_context("http", {"url": "http://127.0.0.1:9/"})
    assert bare.fencing_token is None


def test_the_sql_driver_names_the_run_for_the_statement() -> None:
    context = with_token(make_context("sql", {}), 12)
    statement = "UPDATE t SET v = 1, fence = %(mjsched_fencing_token)s WHERE fence < %(mjsched_fencing_token)s"
    assert _with_run_parameters({"a": 1}, statement, context) == \
        {"a": 1, "mjsched_fencing_token": 12, "mjsched_run_id": context.run.id}
    assert _with_run_parameters({"mjsched_run_id": "mine"}, "SELECT 1", context) == {"mjsched_run_id": "mine"}


def test_the_sql_driver_checks_fence() -> None:
    base = {"dsn": "postgresql://u@h/db", "statement": "SELECT 1"}
    SqlJob().validate_configuration({**base, "fence": True})
    with pytest.raises(ConfigurationError, match="configuration.fence"):
        SqlJob().validate_configuration({**base, "fence": "yes"})


def test_the_celery_driver_sends_the_token_as_a_task_header() -> None:
    sent: list[dict[str, Any]] = []
    app = SimpleNamespace(send_task=lambda *a, **kw: sent.append(kw["headers"]))
    context = with_token(make_context("celery", {}), 3)
    assert CeleryJob()._send(app, {"send_timeout": 5}, "t", "id", context) is None
    assert sent[0]["mjsched_fencing_token"] == 3 and sent[0]["mjsched_run_id"] == context.run.id


def test_a_worker_reads_the_token() -> None:
    pytest.importorskip("celery")
    from mjsched.contrib.celery import fencing_token

    assert fencing_token(SimpleNamespace(mjsched_fencing_token=4)) == 4
    assert fencing_token(SimpleNamespace(headers={"mjsched_fencing_token": "5"})) == 5
    assert fencing_token(SimpleNamespace(headers=None)) is None


def test_contexts_are_plain_dataclasses_still() -> None:
    context = ExecutionContext(job=make_context("http", {}).job, run=make_context("http", {}).run,
                               cancel_event=threading.Event(), logger=make_context("http", {}).logger)
    assert context.fencing_source is None
