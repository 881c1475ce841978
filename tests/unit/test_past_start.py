"""The test helper that keeps a timeout test about a driver stopped mid-run (tests/support/startup.py)."""
from __future__ import annotations

import pytest

from tests.support.startup import past_start


def test_it_tries_longer_max_runtimes_until_the_driver_started() -> None:
    tried: list[float] = []

    def attempt(max_runtime: float) -> tuple[str, bool]:
        tried.append(max_runtime)
        return f"run-{max_runtime:g}", max_runtime >= 4.0

    assert past_start(attempt) == ("run-4", 4.0)
    assert tried == [1.0, 4.0]


def test_a_driver_that_never_starts_fails_the_test_and_names_the_longest_try() -> None:
    with pytest.raises(AssertionError, match="never started within a max_runtime of 16s"):
        past_start(lambda max_runtime: (None, False))
