"""The values of run-history retention: per-job settings, engine options, durations (mjsched/retention.py)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from mjsched import retention, validation
from mjsched.engine.options import EngineOptions
from mjsched.engine.stats import EngineStats
from mjsched.errors import ConfigurationError, SchedulerError


@pytest.mark.parametrize("text, seconds", [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45),
                                           ("2w", 14 * 86400), ("30", 30 * 86400), (" 1.5 D ", 1.5 * 86400)])
def test_durations_in_text(text: str, seconds: float) -> None:
    assert retention.duration("older_than", text) == seconds


@pytest.mark.parametrize("value", ["0d", "-3d", "soon", "3y", "", None, True, float("nan"), timedelta(0),
                                   36501 * 86400.0])
def test_bad_durations_name_the_field(value: object) -> None:
    with pytest.raises(ConfigurationError) as error:
        retention.duration("older_than", value)
    assert error.value.field == "older_than"


def test_durations_from_timedelta_and_seconds() -> None:
    assert retention.duration("x", timedelta(hours=2)) == 7200
    assert retention.duration("x", 90) == 90.0


@pytest.mark.parametrize("field, value", [("keep_runs_days", -1), ("keep_runs_days", 36501), ("keep_runs_days", 1.0),
                                          ("keep_runs_days", "7"), ("keep_runs_count", True),
                                          ("keep_runs_count", 1_000_000_001)])
def test_job_fields_refuse_bad_retention(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError) as error:
        validation.job_fields({field: value}, creating=False, current={})
    assert error.value.field == field


def test_job_fields_keep_none_and_zero() -> None:
    assert validation.job_fields({"keep_runs_days": None, "keep_runs_count": 0}, creating=False, current={}) == \
        {"keep_runs_days": None, "keep_runs_count": 0}


@pytest.mark.parametrize("kwargs, field", [({"keep_runs_days": -1}, "keep_runs_days"),
                                           ({"keep_runs_count": 2.5}, "keep_runs_count"),
                                           ({"purge_interval": 0}, "purge_interval"),
                                           ({"purge_pass_seconds": -1}, "purge_pass_seconds"),
                                           ({"purge_batch_size": 4001}, "purge_batch_size")])
def test_engine_options_refuse_bad_retention(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        EngineOptions(**kwargs)  # type: ignore[arg-type]
    assert error.value.field == field


def test_engine_options_defaults_purge_but_keep_everything() -> None:
    options = EngineOptions()
    assert (options.keep_runs_days, options.keep_runs_count, options.purge_interval) == (None, None, 10.0)
    assert EngineOptions(purge_interval=None).purge_interval is None


# -- when the housekeeping purges (engine/retention.py), with a stand-in for the procedure ---------------

class _Procedure:
    """purge_runs' answers, scripted: each call takes ``cost`` seconds of a fake clock."""

    def __init__(self, answers: list[retention.PurgeBatch], clock: list[float], cost: float = 0.06) -> None:
        self.answers, self.clock, self.cost, self.calls = answers, clock, cost, []

    def purge_runs(self, keep_seconds, keep_count, **kwargs):  # type: ignore[no-untyped-def]
        self.calls.append((keep_seconds, keep_count, kwargs["cursor"]))
        self.clock[0] += self.cost
        return self.answers.pop(0) if self.answers else retention.PurgeBatch(1000, "j", None, "r")

    def purge_job_changes(self, keep_seconds, batch_size):  # type: ignore[no-untyped-def]
        self.clock[0] += self.cost
        return 0


def test_a_pass_is_bounded_resumes_from_its_cursor_and_skips_when_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    from mjsched.engine import retention as purging

    clock = [100.0]
    monkeypatch.setattr(purging.time, "monotonic", lambda: clock[0])
    options = EngineOptions(keep_runs_days=2, keep_runs_count=5, purge_interval=10, purge_pass_seconds=0.2)
    stats = EngineStats()
    proc = _Procedure([], clock)
    purger = purging.RunPurger(proc, options, stats, clock=lambda: clock[0])  # type: ignore[arg-type]
    assert purger.run_pass() == 4000                     # 0.2 s of 0.06 s batches: 4 calls
    assert len(proc.calls) == 4 and proc.calls[0] == (172800.0, 5, (None, None, None))
    assert proc.calls[1][2] == ("j", None, "r")           # each call goes on from the previous one's cursor
    assert stats["runs_purged"] == 4000
    proc.answers = [retention.PurgeBatch(0, "j", None, "r", busy=True)]
    assert purger.run_pass() == 0 and len(proc.calls) == 5   # busy: the pass ends at once
    proc.answers = [retention.PurgeBatch(7, None, None, None)]
    assert purger.run_pass() == 7 and purger._cursor == purging.START   # done: the next pass starts over
    proc.cost = 0.0
    assert stats["runs_purged"] == 4007
    assert purging.PASS_BATCHES == 20 and purger.run_pass() == 20_000  # K batches bound a pass too


def test_passes_start_at_most_every_interval() -> None:
    from mjsched.engine import retention as purging

    now = [0.0]
    started: list[int] = []

    class Quick(purging.RunPurger):
        def run_pass(self) -> int:
            started.append(1)
            return 0
    purger = Quick(_Procedure([], [0.0]), EngineOptions(purge_interval=10), {}, clock=lambda: now[0])  # type: ignore[arg-type]
    assert purger.maybe_start() is True
    purger.join(5)
    for t in (1.0, 9.9):
        now[0] = t
        assert purger.maybe_start() is False
    now[0] = 10.0
    assert purger.maybe_start() is True
    purger.join(5)
    assert len(started) == 2
    assert Quick(_Procedure([], [0.0]), EngineOptions(purge_interval=None), {}).maybe_start() is False  # type: ignore[arg-type]


def test_empty_sweeps_space_the_passes_out_and_a_purge_brings_the_interval_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mjsched.engine import retention as purging

    clock = [0.0]
    monkeypatch.setattr(purging.time, "monotonic", lambda: clock[0])
    nothing = retention.PurgeBatch(0, None, None, None)           # the sweep's end, nothing deleted
    partway = retention.PurgeBatch(0, "j", None, "r")             # more jobs to look at
    proc = _Procedure([], clock, cost=0.0)
    purger = purging.RunPurger(proc, EngineOptions(purge_interval=10), EngineStats(),  # type: ignore[arg-type]
                               clock=lambda: clock[0])

    def sweep(*answers: retention.PurgeBatch, cost: float = 0.0) -> float:
        proc.answers, proc.cost = list(answers), cost
        purger.run_pass()
        return purger.wait_seconds(10)

    assert [sweep(nothing) for _ in range(5)] == [20, 40, 80, 80, 80]   # doubling, at most 8 intervals
    # A sweep of several passes (each out of time after one call): its passes keep the interval,
    # and only its end says whether it was empty.
    assert [sweep(partway, cost=1.0), sweep(partway, cost=1.0), sweep(nothing)] == [10, 10, 80]
    purger.job_changed()                                          # an edit: rules may have changed
    assert purger.wait_seconds(10) == 10 and sweep(nothing) == 20
    # One pass of the sweep deleted rows, its last pass none: the sweep was not empty.
    assert sweep(retention.PurgeBatch(3, "j", None, "r"), cost=1.0) == 10
    assert sweep(nothing) == 10
    assert sweep(nothing) == 20
    assert sweep(retention.PurgeBatch(0, "j", None, "r", busy=True)) == 20  # busy: nothing learnt
    assert sweep(retention.PurgeBatch(2, None, None, None)) == 10           # a purge: the interval again

    class Failing(_Procedure):
        def purge_job_changes(self, keep_seconds, batch_size):  # type: ignore[no-untyped-def]
            raise SchedulerError("audit purge failed")
    failing = purging.RunPurger(Failing([nothing], clock), EngineOptions(purge_interval=10),  # type: ignore[arg-type]
                                EngineStats(), clock=lambda: clock[0])
    failing.run_pass()
    assert failing.wait_seconds(10) == 10                         # a failed pass is no empty sweep

    started: list[float] = []

    class Counted(purging.RunPurger):
        def run_pass(self) -> int:
            started.append(clock[0])
            self._quiet = 2                                        # as after two empty sweeps
            return 0
    counted = Counted(proc, EngineOptions(purge_interval=10), EngineStats(), clock=lambda: clock[0])  # type: ignore[arg-type]
    for t in range(0, 100):
        clock[0] = float(t)
        if counted.maybe_start():
            counted.join(5)
    assert started == [0.0, 40.0, 80.0]
