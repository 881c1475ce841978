"""LeaseBudget: every interval the engine derives from its lease, computed here only.

A lease is how long a claimed run stays this engine's without a renewal. The heartbeat, the
cancel check, the completion window, the self-fencing margin, the sweep, the completion
writer's patience and the database calls' bounds all follow from it. Each is a named field of
one frozen value, so a rule such as "renew at least three times per lease" or "a run is
stopped before its lease can be taken over" is written once and its invariants are tested
together (tests/unit/test_lease_budget.py). The parts take the budget, or one field of it;
none divides the lease itself.

Pure and dependency-free: the engine and the backends both import it.
"""
from __future__ import annotations

from dataclasses import dataclass

# A lease must survive two missed renewals: the heartbeat renews at least this often per lease.
RENEWALS_PER_LEASE = 3
# Without an explicit heartbeat_interval it renews four times per lease (one more than the rule asks).
DEFAULT_RENEWALS_PER_LEASE = 4
MIN_HEARTBEAT_INTERVAL = 0.005   # seconds: the keeper's thread never spins faster than this
CANCEL_CHECK_SECONDS = 5.0       # cancel requests are read at least this often (and as often as leases renew)
FENCE_MARGIN_FLOOR = 0.5         # seconds: a kill, a thread switch and a loaded machine fit in this
FENCE_MARGIN_CEILING = 5.0       # a long lease needs no more than this to stop a run
SWEEP_INTERVAL_CEILING = 1.0     # the background loop sweeps at most this often: a busy engine polls
                                 # many times a second and a sweep per poll is waste
WRITER_GRACE = 60.0              # seconds a completion is retried past the lease
DEFAULT_STATEMENT_TIMEOUT = 60.0  # the backends' statement_timeout when none is given
CALL_OVER_STATEMENT = 5.0        # a call outlives the server's statement_timeout by this much
MIN_CALL_TIMEOUT = 2.0           # below this a busy but healthy server would see calls abandoned
RETRY_CEILING = 15.0             # seconds all retries of one call may take, at most (unless a call takes longer)
LOCK_TIMEOUT_FLOOR = 0.1         # seconds an engine's statement waits for a lock, at least
LOCK_TIMEOUT_CEILING = 2.0       # ... and at most: engines hold each other's rows for milliseconds


@dataclass(frozen=True)
class LeaseBudget:
    """Every interval derived from one lease (seconds). Build it with :meth:`of`; the fields
    are plain so a test can build a budget with a wrong rule and see an invariant fail.

    Why the less obvious rules: the call bound is a quarter of the lease because a call that
    cannot finish in that time leaves too little of the lease to retry; it is at least 2 s (a
    busy but healthy server) and at most statement_timeout + 5 s (the server gives up first).
    The lock timeout is short because engines hold each other's rows for milliseconds: a lock
    held longer is an outsider's (an operator's open transaction, a report, a LOCK TABLE), and
    a statement that waited for it would stall the poll or the renewal behind it; past it the
    statement fails as transient and is retried, or the next poll or beat tries again. The
    fence margin leaves a kill, a thread switch and a loaded machine room to stop the run.
    """

    lease: float                      # what a claim or a renewal grants: the run is ours this long unrenewed
    statement_timeout: float          # the server's bound on one statement (an input: the call bound follows it)
    heartbeat_interval: float         # the renewal period: the given one, else a quarter of the lease (>= 5 ms)
    longest_heartbeat_interval: float  # lease / 3: a lease survives two missed renewals
    cancel_check_interval: float      # min(heartbeat, 5 s): a cancel is seen within 5 s even on a 600 s lease
    completion_window: float          # lease / 2: a completion not written by then stops being renewed, so
                                      # its lease lapses and another engine takes the job
    fence_margin: float               # a run is stopped this long before its lease could lapse:
                                      # lease / 8 in [0.5 s, 5 s], never over lease / 4
    fence_after: float                # lease - fence_margin: how long a run goes unrenewed before it is stopped
    fenced_claim_pause: float         # lease: after a fence, claims wait for a good renewal or this long
    sweep_interval: float             # min(1 s, lease / 4): expired leases are found well within a lease
    writer_give_up: float             # 1.5 leases + 60 s: a completion is retried until its lease surely
                                      # lapsed (renewed for completion_window, then one lease more)
    call_timeout: float               # per database call: lease / 4 in [2 s, statement_timeout + 5 s], unless given
    retry_max_delay: float            # all retries of one call: half a lease, at least one call, at most 15 s
    lock_timeout: float               # a statement's wait for a lock someone else holds: lease / 8 in [0.1 s, 2 s]

    @classmethod
    def of(cls, lease: float, *, heartbeat_interval: float | None = None,
           statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
           call_timeout: float | None = None) -> LeaseBudget:
        """The budget of ``lease``. ``heartbeat_interval``: the engine's explicit one (None:
        derived); ``statement_timeout``: the backend's; ``call_timeout``: a caller-given
        call bound (None: derived), which the retry budget then follows."""
        heartbeat = heartbeat_interval if heartbeat_interval is not None \
            else max(MIN_HEARTBEAT_INTERVAL, lease / DEFAULT_RENEWALS_PER_LEASE)
        margin = min(lease / 4.0, max(FENCE_MARGIN_FLOOR, min(lease / 8.0, FENCE_MARGIN_CEILING)))
        call = call_timeout if call_timeout is not None \
            else max(MIN_CALL_TIMEOUT, min(lease / 4.0, statement_timeout + CALL_OVER_STATEMENT))
        return cls(
            lease=lease,
            statement_timeout=statement_timeout,
            heartbeat_interval=heartbeat,
            longest_heartbeat_interval=lease / RENEWALS_PER_LEASE,
            cancel_check_interval=min(heartbeat, CANCEL_CHECK_SECONDS),
            completion_window=lease / 2,
            fence_margin=margin,
            fence_after=lease - margin,
            fenced_claim_pause=lease,
            sweep_interval=min(SWEEP_INTERVAL_CEILING, lease / 4),
            writer_give_up=lease / 2 + lease + WRITER_GRACE,   # completion_window + lease + grace
            call_timeout=call,
            retry_max_delay=max(call, min(RETRY_CEILING, lease / 2)),
            lock_timeout=max(LOCK_TIMEOUT_FLOOR, min(lease / 8.0, LOCK_TIMEOUT_CEILING)),
        )

