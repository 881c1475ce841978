"""mjsched.RetryPolicy: validated at construction (typed errors naming the field), the backoff
curve, jitter bounds, and the spec the command line reads."""
from __future__ import annotations

import dataclasses
import math
import random

import pytest

import mjsched
from mjsched.errors import ConfigurationError
from mjsched.retry import RetryPolicy, parse_spec, policy
from mjsched.validation import job_fields


def test_defaults_are_the_specs() -> None:
    assert mjsched.RetryPolicy() == RetryPolicy(max_attempts=3, initial_delay=30.0, factor=2.0, max_delay=3600.0,
                                                jitter=0.1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        RetryPolicy().max_attempts = 5   # type: ignore[misc]


@pytest.mark.parametrize("kwargs, field", [
    ({"max_attempts": 0}, "retry.max_attempts"), ({"max_attempts": 101}, "retry.max_attempts"),
    ({"max_attempts": 2.0}, "retry.max_attempts"), ({"max_attempts": True}, "retry.max_attempts"),
    ({"initial_delay": -1}, "retry.initial_delay"), ({"initial_delay": math.nan}, "retry.initial_delay"),
    ({"initial_delay": "30"}, "retry.initial_delay"), ({"factor": 0.5}, "retry.factor"),
    ({"factor": math.inf}, "retry.factor"), ({"max_delay": 1e9}, "retry.max_delay"),
    ({"initial_delay": 60, "max_delay": 10}, "retry.max_delay"), ({"jitter": 1.5}, "retry.jitter"),
    ({"jitter": -0.1}, "retry.jitter"),
])
def test_bad_values_raise_naming_the_field_and_the_value(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigurationError) as error:
        RetryPolicy(**kwargs)
    assert error.value.field == field and str(kwargs.get(field.split(".")[1])) in str(error.value)


def test_the_backoff_curve_is_capped() -> None:
    p = RetryPolicy(max_attempts=10, initial_delay=30, factor=2, max_delay=100, jitter=0)
    assert [p.base_delay(a) for a in range(1, 6)] == [30, 60, 100, 100, 100]
    assert RetryPolicy(max_attempts=100, initial_delay=1, factor=100, max_delay=5).base_delay(99) == 5


def test_jitter_stays_within_its_fraction() -> None:
    p = RetryPolicy(initial_delay=100, max_delay=100, jitter=0.1)
    rng = random.Random(7)
    delays = [p.delay(1, rng) for _ in range(2000)]
    assert 90 <= min(delays) < 92 and 108 < max(delays) <= 110


def test_retries_left_counts_the_first_run() -> None:
    p = RetryPolicy(max_attempts=3)
    assert [p.retries_left(a) for a in (1, 2, 3)] == [True, True, False]


def test_the_spec_and_mappings() -> None:
    assert parse_spec("3") == RetryPolicy(max_attempts=3)
    assert parse_spec("5, 60, 3, 600, 0") == RetryPolicy(5, 60, 3, 600, 0)
    assert parse_spec("2,7200").max_delay == 7200   # an initial delay past the default cap raises it
    for bad in ("", "a", "3,x", "1,2,3,4,5,6", "3,,2"):
        with pytest.raises(ConfigurationError, match="--retry"):
            parse_spec(bad)
    assert policy({"max_attempts": 4, "jitter": 0}) == RetryPolicy(max_attempts=4, jitter=0)
    with pytest.raises(ConfigurationError, match="retry.tries"):
        policy({"tries": 4})
    with pytest.raises(ConfigurationError, match="retry="):
        policy(3)


def test_job_fields_store_it_as_five_columns_or_none() -> None:
    stored = job_fields({"retry": RetryPolicy(4, 10, 2, 80, 0.5), "notify_final_attempt_only": False},
                        creating=False, current={"driver": "shell"})
    assert stored == {"retry_max_attempts": 4, "retry_initial_delay": 10.0, "retry_factor": 2.0,
                      "retry_max_delay": 80.0, "retry_jitter": 0.5, "notify_final_attempt_only": False}
    cleared = job_fields({"retry": None}, creating=False, current={"driver": "shell"})
    assert cleared == dict.fromkeys(("retry_max_attempts", "retry_initial_delay", "retry_factor", "retry_max_delay",
                                     "retry_jitter"))
    with pytest.raises(ConfigurationError, match="notify_final_attempt_only"):
        job_fields({"notify_final_attempt_only": "yes"}, creating=False, current={"driver": "shell"})
