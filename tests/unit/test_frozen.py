"""quick_init: a frozen dataclass's __init__ that stores its fields in one step, same contract."""
from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from mjsched.backends.base import Completion
from mjsched.frozen import quick_init
from mjsched.models import (Claim, ConcurrencyMode, Isolation, JobRun, JobStatus, MissedRunPolicy, RunStatus,
                            enum_member)


@quick_init
@dataclasses.dataclass(frozen=True)
class Sample:
    a: int
    b: str = "b"
    c: list[int] = dataclasses.field(default_factory=list)


def test_the_signature_is_the_dataclass_one() -> None:
    assert Sample(1) == Sample(a=1, b="b", c=[])
    assert Sample(1, "x", [2]) == Sample(a=1, b="x", c=[2])
    with pytest.raises(TypeError):
        Sample()     # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Sample(1, d=2)     # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Sample(1, a=2)     # type: ignore[misc]


def test_each_instance_gets_its_own_default_from_the_factory() -> None:
    first, second = Sample(1), Sample(2)
    assert first.c == [] and first.c is not second.c


def test_it_stays_frozen_hashable_and_replaceable() -> None:
    s = Sample(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.a = 2     # type: ignore[misc]
    assert hash(Sample(1, "x", ())) == hash(Sample(1, "x", ()))     # type: ignore[arg-type]
    assert dataclasses.replace(s, b="y") == Sample(1, "y")
    assert dataclasses.asdict(s) == {"a": 1, "b": "b", "c": []}


def test_post_init_still_runs() -> None:
    seen: list[int] = []

    @quick_init
    @dataclasses.dataclass(frozen=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            seen.append(self.n)

    Checked(3)
    assert seen == [3]


def test_a_class_it_cannot_serve_is_refused() -> None:
    with pytest.raises(TypeError):
        @quick_init
        @dataclasses.dataclass(frozen=True, slots=True)
        class Slotted:
            n: int
    with pytest.raises(TypeError):
        @quick_init
        @dataclasses.dataclass(frozen=True)
        class Hidden:
            n: int = dataclasses.field(default=0, init=False)


@pytest.mark.parametrize("cls", [Claim, JobRun, Completion])
def test_the_records_of_every_run_use_it(cls: type) -> None:
    assert "__dict__" in cls.__init__.__code__.co_names


def test_the_run_records_keep_their_values() -> None:
    now = datetime.now(timezone.utc)
    claim = Claim(job_id="j", run_id="r", lock_token="t", scheduled_for=now, db_now=now)
    assert (claim.from_queue, claim.is_tick) == (False, True)
    done = Completion("r", "t", "Completed")
    assert (done.guard, done.next_run_at, done.retry_in) == (False, None, None)
    record = JobRun(id="r", scheduled_job_id="j", scheduled_for=now, status=RunStatus.RUNNING, success=None,
                    error_message=None, details=None, queued_at=None, started_at=now, completed_at=None,
                    duration_ms=None, executed_by_instance="e", lock_token="t", lease_expires_at=None)
    assert record.finished is False and record.attempt == 1


@pytest.mark.parametrize("cls", [JobStatus, RunStatus, ConcurrencyMode, MissedRunPolicy, Isolation])
def test_enum_member_is_the_enum_call(cls: type) -> None:
    for member in cls:
        assert enum_member(cls, member.value) is cls(member.value)
        assert enum_member(cls, member) is member
    for bad in ("nope", None, ["Active"], 3):
        with pytest.raises(ValueError) as raised:
            enum_member(cls, bad)
        assert repr(bad) in str(raised.value)
