"""``default_max_runtime``: every run is bounded, also when its job sets no max_runtime. A hung
run of such a job is stopped as a Timeout that names the setting, logged and counted, and its
slot goes to the next due job (before it, the engine renewed a live thread's lease for ever)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterator

import pytest

import mjsched
from tests.support import hang
from tests.support.pg import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

YEARLY = "0 0 1 1 *"


@pytest.fixture
def hung() -> Iterator[None]:
    hang.RELEASE.clear()
    hang.ENTERED.clear()
    yield
    hang.RELEASE.set()      # the leaked thread returns; its late result is discarded


def test_a_hung_job_without_max_runtime_frees_its_slot_at_default_max_runtime(
        make_engine: Any, tmp_path: Path, hung: None, caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="mjsched")
    engine = make_engine(max_concurrent_jobs=1, lease_timeout=2.0, default_max_runtime=1.0, max_poll_interval=0.5)
    hung_id = engine.create_job(name="hangs", driver="python", cron=YEARLY, run_immediately_if_never_run=True,
                                configuration={"callable": "tests.support.hang:hang"})
    assert engine.get_job(hung_id).max_runtime_seconds is None
    engine.start_polling()
    assert hang.ENTERED.wait(15), "the hung job never started"
    marker = tmp_path / "second"
    second_id = engine.create_job(name="second", driver="python", cron=YEARLY, run_immediately_if_never_run=True,
                                  configuration={"callable": "tests.support.async_jobs:write_marker",
                                                 "kwargs": {"path": str(marker), "text": "ran"}})
    engine.on_job_changed()
    # the only slot is freed by the bound, so the second due job runs
    wait_for(lambda: [r.status for r in engine.list_runs(second_id)] == [mjsched.RunStatus.COMPLETED],
             timeout=20, message="the second due job to run")
    assert marker.read_text() == "ran"
    [timed_out] = engine.list_runs(hung_id)
    assert timed_out.status is mjsched.RunStatus.TIMEOUT
    assert "default_max_runtime of 1s" in timed_out.error_message
    assert engine.stats["timeouts"] == 1 and engine.stats["default_max_runtime_timeouts"] == 1
    assert [r.job_id for r in caplog.records if getattr(r, "action", None) == "run_exceeded_default_max_runtime"] \
        == [hung_id]
    assert engine.leaked == 1            # its thread still hangs, counted, holding no slot


def test_a_job_s_own_max_runtime_wins_over_the_default(make_engine: Any, hung: None) -> None:
    engine = make_engine(default_max_runtime=30.0)
    job_id = engine.create_job(name="own-bound", driver="python", cron=YEARLY, max_runtime=1.0,
                               configuration={"callable": "tests.support.hang:hang"})
    run = engine.execute_job(job_id)
    assert run.status is mjsched.RunStatus.TIMEOUT
    assert run.error_message.startswith("exceeded max_runtime of 1s") and "default_max_runtime" not in \
        run.error_message
    assert engine.stats["default_max_runtime_timeouts"] == 0


def test_default_max_runtime_none_leaves_a_run_unbounded(make_engine: Any, hung: None) -> None:
    engine = make_engine(default_max_runtime=None, lease_timeout=2.0)
    job_id = engine.create_job(name="unbounded", driver="python", cron=YEARLY,
                               configuration={"callable": "tests.support.hang:hang", "kwargs": {"limit": 2.5}})
    run = engine.execute_job(job_id)       # returns when the job does (2.5 s), not timed out
    assert run.status is mjsched.RunStatus.COMPLETED


@pytest.mark.parametrize("value", [0, -1, float("nan"), True, "1h", 4e7])
def test_a_bad_default_max_runtime_is_refused_naming_it(pg_dsn: str, value: Any) -> None:
    with pytest.raises(mjsched.ConfigurationError) as info:
        mjsched.SchedulingEngine(pg_dsn, default_max_runtime=value)
    assert info.value.field == "default_max_runtime"


def test_the_default_bound_is_a_day(pg_dsn: str) -> None:
    with mjsched.SchedulingEngine(pg_dsn) as engine:
        assert engine.options.default_max_runtime == 86_400.0
