"""The celery allow-list (issue 33, item 3): an engine given celery_allowed_apps /
celery_allowed_brokers refuses a job naming another app or broker with a Failed run and one
WARNING, never imports the app (a module with an import side effect) nor connects."""
from __future__ import annotations

import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from mjsched import ConfigurationError
from mjsched.cli.config import load
from mjsched.models import RunStatus

from .conftest import REDIS_URL

pytestmark = pytest.mark.celery

ALLOWED_APP = "tests.celery.worker_app:app"
SIDE_EFFECT = "tests.celery.side_effect_app"


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "imported"
    monkeypatch.setenv("MJSCHED_SIDE_EFFECT_FILE", str(path))
    sys.modules.pop(SIDE_EFFECT, None)
    return path


def _refusals(caplog: pytest.LogCaptureFixture, run_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == "celery_not_allowed"
            and run_id in r.getMessage()]


def test_an_app_outside_the_allow_list_is_a_failed_run_and_never_imported(
        make_engine: Any, redis_up: None, marker: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    admin = make_engine()
    restricted = make_engine(celery_allowed_apps=[ALLOWED_APP], celery_allowed_brokers=[REDIS_URL],
                             max_poll_interval=0.5)
    other = {"app": f"{SIDE_EFFECT}:app", "task": "t.add", "args": [1, 1], "mode": "send"}
    with pytest.raises(ConfigurationError) as refused:          # create_job on it: refused, not imported
        restricted.create_job(f"other-{uuid.uuid4().hex[:6]}", "celery", "* * * * * *", configuration=other)
    assert refused.value.field == "configuration.app" and "celery_allowed_apps" in str(refused.value)
    job_id = admin.create_job(f"other-{uuid.uuid4().hex[:6]}", "celery", "0 0 1 1 *", configuration=other)

    run = restricted.execute_job(job_id)                         # by hand
    assert run.status is RunStatus.FAILED
    assert run.error_message == (f"celery app '{SIDE_EFFECT}:app' is not allowed on this engine "
                                 f"(celery_allowed_apps={ALLOWED_APP}); not imported")
    assert len(_refusals(caplog, run.id)) == 1

    admin.update_job(job_id, cron="* * * * * *")                 # at its ticks
    restricted.start_polling()
    deadline = time.monotonic() + 20
    scheduled: list[Any] = []
    while time.monotonic() < deadline and not scheduled:
        scheduled = [r for r in restricted.list_runs(job_id, status="Failed") if r.scheduled_for is not None]
        time.sleep(0.2)
    restricted.pause_job(job_id)
    restricted.stop_polling(wait=True, max_wait=10)
    assert scheduled, "no scheduled run of the refused job within 20 s"
    assert "is not allowed on this engine" in scheduled[0].error_message
    assert len(_refusals(caplog, scheduled[0].id)) == 1
    assert SIDE_EFFECT not in sys.modules and not marker.exists(), "the refused app was imported"


def test_a_broker_outside_the_allow_list_is_a_failed_run(make_engine: Any, redis_up: None,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    admin = make_engine()
    restricted = make_engine(celery_allowed_brokers=["redis://127.0.0.1:6379/15"])
    name = f"broker-{uuid.uuid4().hex[:6]}"
    foreign = admin.create_job(name, "celery", "0 0 1 1 *", configuration={
        "app": "redis://:secret@10.9.8.7:6379/15", "task": "t.add", "mode": "send", "send_timeout": 1})
    run = restricted.execute_job(foreign)
    assert run.status is RunStatus.FAILED
    assert run.error_message.startswith("celery broker redis://10.9.8.7:6379/15 is not allowed on this engine")
    assert "secret" not in run.error_message and len(_refusals(caplog, run.id)) == 1
    # credentials do not matter, the place does: the allowed broker is used
    allowed = admin.create_job(f"{name}-ok", "celery", "0 0 1 1 *", configuration={
        "app": "redis://:whatever@127.0.0.1:6379/15", "task": "t.add", "args": [1, 2], "mode": "send"})
    sent = restricted.execute_job(allowed)
    assert sent.status is RunStatus.COMPLETED, sent.error_message
    with pytest.raises(ConfigurationError) as backend:
        restricted.create_job(f"{name}-be", "celery", "0 0 1 1 *", configuration={
            "app": REDIS_URL, "backend": "redis://127.0.0.1:6379/3", "task": "t.add"})
    assert backend.value.field == "configuration.backend"


def test_allow_lists_from_the_config_file_the_environment_and_flags(tmp_path: Path) -> None:
    (tmp_path / "mjsched.toml").write_text('[scheduled_jobs]\ncelery_allowed_apps = ["proj.celery:app"]\n'
                                           'celery_allowed_brokers = ["amqp://u:p@mq.internal//"]\n')
    settings = load({}, env={}, cwd=tmp_path)
    assert settings["celery_allowed_brokers"] == ["amqp://mq.internal:5672//"]     # credentials dropped
    allow = settings.engine_options().celery_allow
    assert allow is not None and allow.apps == frozenset({"proj.celery:app"})
    env = {"MJSCHED_CELERY_ALLOWED_APPS": "a.b:app, c.d:app"}
    assert load({}, env=env, cwd=tmp_path)["celery_allowed_apps"] == ["a.b:app", "c.d:app"]
    flags = {"celery_allowed_apps": ("x.y:app", "--celery-allowed-apps")}
    assert load(flags, env=env, cwd=tmp_path)["celery_allowed_apps"] == ["x.y:app"]
    assert load({}, env={}, cwd=tmp_path / "none").engine_options().celery_allow is None
    (tmp_path / "mjsched.toml").write_text('[scheduled_jobs]\ncelery_allowed_apps = ["proj.celery"]\n')
    with pytest.raises(ConfigurationError) as bad:
        load({}, env={}, cwd=tmp_path)
    assert "scheduled_jobs.celery_allowed_apps" in str(bad.value) and "'proj.celery'" in str(bad.value)
