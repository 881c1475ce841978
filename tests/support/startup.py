"""Timeouts of process-isolated runs, tested past the child's start.

A run's ``max_runtime`` counts from the run's start, and a process-isolated child spends the
first part of it starting an interpreter and importing its driver. On a loaded machine that
start can outlast a short ``max_runtime``: the timeout then ends a child that never reached its
driver (its ``SIGTERM`` may even come before the child's handler is set), and what the test
means to show, a driver stopped in the middle of its work, is not what ran. ``past_start``
tries again with a longer ``max_runtime`` until the driver was seen to start, and fails only
if it never was: the test stays about the mid-run case, whatever the machine's load.
"""
from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")

LADDER = (1.0, 4.0, 16.0)   # seconds: a child start of 16 s is a broken machine, not a loaded one


def past_start(attempt: Callable[[float], tuple[T, bool]],
               ladder: tuple[float, ...] = LADDER) -> tuple[T, float]:
    """``attempt(max_runtime)`` runs the case once, on fresh state, and answers its result and
    whether the driver had started before the timeout. Answers the first started attempt's
    result and its ``max_runtime``."""
    for max_runtime in ladder:
        result, started = attempt(max_runtime)
        if started:
            return result, max_runtime
    raise AssertionError(f"the driver never started within a max_runtime of {ladder[-1]:g}s")
