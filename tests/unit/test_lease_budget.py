"""The lease budget's invariants (issue 38 item 2): every interval derived from the lease,
checked together over leases from 50 ms to a day (a table, and Hypothesis between).

Each invariant is a predicate on a budget and has its own test; each test also shows that a
budget with a wrong rule fails it (``dataclasses.replace`` on a real budget), so none can pass
by saying nothing. Where an invariant holds only over part of the range today, the test says
which part and pins the edge, instead of the budget's values changing silently.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjsched.errors import ConfigurationError
from mjsched.engine.leases import Heartbeat, LeaseKeeper
from mjsched.engine.options import EngineOptions
from mjsched.engine.wiring import backend_defaults
from mjsched.lease_budget import (CANCEL_CHECK_SECONDS, FENCE_MARGIN_FLOOR, RENEWALS_PER_LEASE, SWEEP_INTERVAL_CEILING,
                                  LeaseBudget)

DAY = 86_400.0
LEASES = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 6.4, 8.0, 10.0, 16.0, 30.0, 40.0, 60.0, 120.0, 121.0,
          260.0, 300.0, 600.0, 3_600.0, DAY)
Check = Callable[[LeaseBudget], bool]


def budgets(low: float = 0.0, high: float = math.inf) -> list[LeaseBudget]:
    return [LeaseBudget.of(lease) for lease in LEASES if low <= lease <= high]


def holds(check: Check, low: float = 0.0, high: float = math.inf) -> None:
    for budget in budgets(low, high):
        assert check(budget), budget


def fails(check: Check, lease: float = 600.0, **wrong: float) -> None:
    """A budget of ``lease`` with the rules in ``wrong`` changed breaks the invariant."""
    assert not check(dataclasses.replace(LeaseBudget.of(lease), **wrong))


# -- the invariants ------------------------------------------------------------------------
def renews_three_times_per_lease(b: LeaseBudget) -> bool:
    """A lease survives two missed renewals."""
    return b.heartbeat_interval <= b.longest_heartbeat_interval \
        and math.isclose(b.longest_heartbeat_interval * RENEWALS_PER_LEASE, b.lease)


def cancels_are_read_within_a_beat_and_5_s(b: LeaseBudget) -> bool:
    return b.cancel_check_interval <= b.heartbeat_interval and b.cancel_check_interval <= CANCEL_CHECK_SECONDS


def fences_before_takeover(b: LeaseBudget) -> bool:
    """The holder stops at lease_until - margin; the database's expiry, the earliest instant
    another engine may take the job, is never before lease_until (fencing.py)."""
    return b.fence_margin > 0 and b.fence_after < b.lease and math.isclose(b.fence_after + b.fence_margin, b.lease)


def fence_leaves_room_to_kill(b: LeaseBudget) -> bool:
    """The margin fits a kill and a thread switch (0.5 s), or a quarter lease when that is shorter."""
    return b.fence_margin >= min(FENCE_MARGIN_FLOOR, b.lease / 4) - 1e-12


def a_healthy_renewal_lands_before_the_fence(b: LeaseBudget) -> bool:
    """A beat's renewal has at least a quarter of the lease to be answered before the fence
    would stop a run that is renewed in time."""
    return b.lease - b.fence_margin - b.heartbeat_interval >= b.lease / 4 - 1e-12


def call_bound_is_within_the_renewal_period(b: LeaseBudget) -> bool:
    """A hung call is abandoned before the next beat is due."""
    return b.call_timeout <= b.heartbeat_interval


def a_hung_renewal_and_its_retry_fit_before_the_fence(b: LeaseBudget) -> bool:
    """A beat whose call hangs to its bound, then one retry that also hangs to its bound,
    still end before the fence: a hung call cannot eat the lease."""
    return b.heartbeat_interval + 2 * b.call_timeout <= b.fence_after


def lock_wait_is_below_the_call_bound(b: LeaseBudget) -> bool:
    """A statement waiting on an outsider's lock fails as a lock timeout (retried), not as an
    abandoned connection."""
    return b.lock_timeout < b.call_timeout


def retries_fit_one_call_and_half_a_lease(b: LeaseBudget) -> bool:
    return b.call_timeout <= b.retry_max_delay <= b.lease / 2


def completion_window_spans_a_beat_within_the_lease(b: LeaseBudget) -> bool:
    """A completion in flight is renewed at least once more, and a stuck one lets go within a lease."""
    return b.heartbeat_interval < b.completion_window < b.lease


def writer_outlasts_the_lease(b: LeaseBudget) -> bool:
    """An outage shorter than a lease loses no completion; the writer is still trying when
    renewals stop for a stalled completion."""
    return b.writer_give_up > b.lease and b.writer_give_up > b.completion_window


def writer_outlasts_a_stalled_completions_lease(b: LeaseBudget) -> bool:
    """The writer retries until the lease of a stalled completion has surely lapsed (its last
    renewal comes up to completion_window after the hand-over, and grants a whole lease)."""
    return b.writer_give_up >= b.completion_window + b.lease


def sweep_finds_an_expired_lease_within_half_a_lease(b: LeaseBudget) -> bool:
    """The sweep may wait one more interval while jobs are due (Dispatcher.poll): two intervals."""
    return 2 * b.sweep_interval <= b.lease / 2 and b.sweep_interval <= SWEEP_INTERVAL_CEILING


def sweep_runs_at_least_as_often_as_the_heartbeat(b: LeaseBudget) -> bool:
    return b.sweep_interval <= b.heartbeat_interval


def claims_pause_past_the_fenced_lease(b: LeaseBudget) -> bool:
    """After a fence no claim comes before the fenced run's lease could have lapsed."""
    return b.fenced_claim_pause > b.fence_margin


# -- one test each -------------------------------------------------------------------------
def test_the_heartbeat_renews_at_least_three_times_per_lease() -> None:
    holds(renews_three_times_per_lease)
    fails(renews_three_times_per_lease, heartbeat_interval=300.0)


def test_below_15_ms_the_heartbeats_5_ms_floor_wins_over_three_renewals() -> None:
    """Two rules disagree for leases under 15 ms: the keeper never beats faster than 5 ms."""
    assert renews_three_times_per_lease(LeaseBudget.of(0.015))
    assert not renews_three_times_per_lease(LeaseBudget.of(0.0149))


def test_engine_options_refuse_a_heartbeat_the_budget_does_not_allow() -> None:
    for budget in budgets():
        longest = budget.longest_heartbeat_interval
        assert EngineOptions(lease_timeout=budget.lease, heartbeat_interval=longest).lease_budget == \
            LeaseBudget.of(budget.lease, heartbeat_interval=longest)
        with pytest.raises(ConfigurationError, match="three times per lease"):
            EngineOptions(lease_timeout=budget.lease, heartbeat_interval=longest * 1.001)


def test_cancel_requests_are_read_at_every_beat_and_at_least_every_5_s() -> None:
    holds(cancels_are_read_within_a_beat_and_5_s)
    fails(cancels_are_read_within_a_beat_and_5_s, cancel_check_interval=150.0)


def test_a_run_is_fenced_before_its_lease_can_be_taken_over() -> None:
    holds(fences_before_takeover)
    fails(fences_before_takeover, fence_margin=0.0, fence_after=600.0)
    fails(fences_before_takeover, fence_after=600.0)


def test_the_fence_margin_leaves_room_to_kill_the_run() -> None:
    holds(fence_leaves_room_to_kill)
    fails(fence_leaves_room_to_kill, fence_margin=0.01)


def test_a_renewal_answered_in_time_is_never_fenced() -> None:
    holds(a_healthy_renewal_lands_before_the_fence)
    fails(a_healthy_renewal_lands_before_the_fence, fence_margin=480.0)


def test_the_call_bound_is_within_the_renewal_period_from_an_8_s_lease() -> None:
    """Below 8 s the call bound's 2 s floor (a busy but healthy server) exceeds lease / 4."""
    holds(call_bound_is_within_the_renewal_period, low=8.0)
    assert not call_bound_is_within_the_renewal_period(LeaseBudget.of(7.9))
    fails(call_bound_is_within_the_renewal_period, call_timeout=300.0)


def test_a_hung_renewal_and_its_retry_end_before_the_fence_from_a_6_4_s_lease() -> None:
    """Below 6.4 s the 2 s call floor makes a beat plus two hung calls outlast lease - margin."""
    holds(a_hung_renewal_and_its_retry_fit_before_the_fence, low=6.4)
    assert not a_hung_renewal_and_its_retry_fit_before_the_fence(LeaseBudget.of(6.3))
    fails(a_hung_renewal_and_its_retry_fit_before_the_fence, call_timeout=300.0)


def test_the_lock_wait_is_below_the_call_bound() -> None:
    holds(lock_wait_is_below_the_call_bound)
    fails(lock_wait_is_below_the_call_bound, lock_timeout=65.0)


def test_the_retries_of_a_call_fit_one_call_and_half_a_lease_from_a_4_s_lease() -> None:
    """Below 4 s a retry budget of one whole call (2 s at least) is more than half the lease."""
    holds(retries_fit_one_call_and_half_a_lease, low=4.0)
    assert not retries_fit_one_call_and_half_a_lease(LeaseBudget.of(3.9))
    fails(retries_fit_one_call_and_half_a_lease, retry_max_delay=600.0)
    fails(retries_fit_one_call_and_half_a_lease, retry_max_delay=10.0)


def test_the_completion_window_spans_a_beat_and_ends_within_the_lease() -> None:
    holds(completion_window_spans_a_beat_within_the_lease)
    fails(completion_window_spans_a_beat_within_the_lease, completion_window=1200.0)
    fails(completion_window_spans_a_beat_within_the_lease, completion_window=100.0)


def test_the_completion_writer_outlasts_the_lease() -> None:
    holds(writer_outlasts_the_lease)
    fails(writer_outlasts_the_lease, writer_give_up=300.0)


def test_the_writer_outlasts_a_stalled_completions_lease() -> None:
    """A stalled completion's lease is renewed for half a lease after the hand-over and may
    hold one lease more: the writer keeps trying until then, so a run whose completion lands
    late (the database back after a long outage) ends with its own outcome, not Abandoned.
    (Until this budget named both rules, the writer gave up at lease + 60 s: above a 120 s
    lease, while the lease still held.)"""
    holds(writer_outlasts_a_stalled_completions_lease)
    assert writer_outlasts_a_stalled_completions_lease(LeaseBudget.of(600.0))
    fails(writer_outlasts_a_stalled_completions_lease, lease=600.0, writer_give_up=660.0)   # the old rule


def test_the_sweep_finds_an_expired_lease_within_half_a_lease() -> None:
    holds(sweep_finds_an_expired_lease_within_half_a_lease)
    fails(sweep_finds_an_expired_lease_within_half_a_lease, lease=2.0, sweep_interval=1.0)


def test_the_sweep_runs_at_least_as_often_as_the_default_heartbeat() -> None:
    holds(sweep_runs_at_least_as_often_as_the_heartbeat)
    fails(sweep_runs_at_least_as_often_as_the_heartbeat, lease=2.0, sweep_interval=1.0)


def test_claims_pause_after_a_fence_until_the_fenced_lease_lapsed() -> None:
    holds(claims_pause_past_the_fenced_lease)
    fails(claims_pause_past_the_fenced_lease, fenced_claim_pause=1.0)


# -- across the whole range, and with the other inputs --------------------------------------
ANY_LEASE: list[tuple[Check, float, float]] = [
    (renews_three_times_per_lease, 0.015, DAY), (cancels_are_read_within_a_beat_and_5_s, 0.0, DAY),
    (fences_before_takeover, 0.0, DAY), (fence_leaves_room_to_kill, 0.0, DAY),
    (a_healthy_renewal_lands_before_the_fence, 0.0, DAY), (call_bound_is_within_the_renewal_period, 8.0, DAY),
    (a_hung_renewal_and_its_retry_fit_before_the_fence, 6.4, DAY), (lock_wait_is_below_the_call_bound, 0.0, DAY),
    (retries_fit_one_call_and_half_a_lease, 4.0, DAY), (completion_window_spans_a_beat_within_the_lease, 0.015, DAY),
    (writer_outlasts_the_lease, 0.0, DAY), (writer_outlasts_a_stalled_completions_lease, 0.0, DAY),
    (sweep_finds_an_expired_lease_within_half_a_lease, 0.0, DAY),
    (sweep_runs_at_least_as_often_as_the_heartbeat, 0.0, DAY), (claims_pause_past_the_fenced_lease, 0.0, DAY),
]
# What holds whatever heartbeat_interval EngineOptions accepts (<= lease / 3), not only the default.
ANY_HEARTBEAT = [renews_three_times_per_lease, cancels_are_read_within_a_beat_and_5_s,
                 a_healthy_renewal_lands_before_the_fence, completion_window_spans_a_beat_within_the_lease]
# What holds whatever the server's statement_timeout.
ANY_STATEMENT_TIMEOUT = [call_bound_is_within_the_renewal_period, a_hung_renewal_and_its_retry_fit_before_the_fence,
                         lock_wait_is_below_the_call_bound, retries_fit_one_call_and_half_a_lease]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.015, max_value=DAY, allow_nan=False))
def test_every_invariant_holds_over_its_range(lease: float) -> None:
    budget = LeaseBudget.of(lease)
    for check, low, high in ANY_LEASE:
        if low <= lease <= high:
            assert check(budget), (check.__name__, budget)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.05, max_value=DAY, allow_nan=False), st.floats(min_value=0.001, max_value=1.0))
def test_the_heartbeat_invariants_hold_for_every_allowed_heartbeat(lease: float, share: float) -> None:
    longest = LeaseBudget.of(lease).longest_heartbeat_interval
    budget = EngineOptions(lease_timeout=lease, heartbeat_interval=longest * share).lease_budget
    for check in ANY_HEARTBEAT:
        assert check(budget), (check.__name__, budget)


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=8.0, max_value=DAY, allow_nan=False), st.floats(min_value=0.0, max_value=3_600.0))
def test_the_call_invariants_hold_for_every_statement_timeout(lease: float, statement_timeout: float) -> None:
    budget = LeaseBudget.of(lease, statement_timeout=statement_timeout)
    assert budget.call_timeout <= statement_timeout + 5.0 or budget.call_timeout == 2.0
    for check in ANY_STATEMENT_TIMEOUT:
        assert check(budget), (check.__name__, budget)


# -- the values, as they were before the budget --------------------------------------------
def test_the_values_are_those_the_modules_computed_before() -> None:
    """Pinned from the rules as each module wrote them (leases.py, fencing.py, watchdog.py,
    dispatch.py, wiring.py): the budget moved them, it changed none."""
    for lease in LEASES:
        b = LeaseBudget.of(lease)
        assert b.heartbeat_interval == max(0.005, lease / 4)
        assert b.cancel_check_interval == min(b.heartbeat_interval, 5.0)
        assert b.completion_window == lease / 2
        assert b.fence_margin == min(lease / 4.0, max(0.5, min(lease / 8.0, 5.0)))
        assert b.fence_after == lease - b.fence_margin and b.fenced_claim_pause == lease
        assert b.sweep_interval == min(1.0, lease / 4)
        assert b.writer_give_up == 1.5 * lease + 60   # changed on purpose: lease + 60 gave up too early
        assert b.call_timeout == max(2.0, min(lease / 4.0, 60.0 + 5.0))
        assert b.retry_max_delay == max(b.call_timeout, min(15.0, lease / 2))
        assert b.lock_timeout == max(0.1, min(lease / 8.0, 2.0))
        assert b.longest_heartbeat_interval == lease / 3


@pytest.mark.parametrize("lease, margin", [(2.0, 0.5), (1.0, 0.25), (16.0, 2.0), (600.0, 5.0)])
def test_the_fence_margin_and_its_bounds(lease: float, margin: float) -> None:
    """The floor (2 s), never more than a quarter lease (1 s), an eighth (16 s), the ceiling (600 s)."""
    assert LeaseBudget.of(lease).fence_margin == margin


def test_given_inputs_win_and_the_retries_follow_a_given_call_bound() -> None:
    b = LeaseBudget.of(600.0, heartbeat_interval=7.0, statement_timeout=10.0, call_timeout=40.0)
    assert (b.heartbeat_interval, b.cancel_check_interval, b.call_timeout, b.retry_max_delay) == (7.0, 5.0, 40.0, 40.0)
    assert LeaseBudget.of(600.0, statement_timeout=10.0).call_timeout == 15.0


# -- the parts read the budget -------------------------------------------------------------
def test_the_heartbeat_and_its_fence_take_their_intervals_from_the_budget() -> None:
    budget = LeaseBudget.of(40.0, heartbeat_interval=3.0)
    beat = Heartbeat(cast(Any, None), cast(Any, None), instance="i", budget=budget)   # nothing called
    assert (beat.interval, beat.cancel_check_interval, beat.completion_window) == (3.0, 3.0, 20.0)
    assert beat.fence.margin == budget.fence_margin == 5.0
    assert LeaseKeeper is Heartbeat     # the former name goes on working


def test_the_backends_bounds_come_from_the_budget_and_a_given_one_wins() -> None:
    opts = EngineOptions(lease_timeout=40.0, max_concurrent_jobs=3)
    assert backend_defaults(opts, {}) == {"pool_size": 7, "call_timeout": 10.0, "retry_max_delay": 15.0,
                                          "lock_timeout": 2.0}
    assert backend_defaults(opts, {"statement_timeout": 3})["call_timeout"] == 8.0   # statement_timeout + 5
    given = backend_defaults(opts, {"call_timeout": 30.0, "lock_timeout": 0.5})
    assert (given["call_timeout"], given["retry_max_delay"], given["lock_timeout"]) == (30.0, 30.0, 0.5)
