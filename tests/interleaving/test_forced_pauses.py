"""Forced pauses at statement boundaries: a procedure is parked between two of its
statements (mjsched.test_pause, the owner-only hook) while another procedure runs to its
end or until it blocks on a row lock; then the first goes on. Every boundary of every
multi-statement procedure, against every operation, over generated states; the same
invariants as the barrier rounds after each one.

The points are read from the installed procedures (every test_pause('<procedure>:<step>')
in pg_proc.prosrc), so a new boundary is covered as soon as it is written.
"""
from __future__ import annotations

from datetime import datetime, timezone
from itertools import count

import pytest

from tests.interleaving.catalogue import OPS
from tests.interleaving.conftest import SEED, record, rng_for, scale
from tests.interleaving.rounds import Arena, Stats, assert_clean
from tests.interleaving.states import generate

pytestmark = pytest.mark.interleaving

REACHED_ROUNDS = 3        # per (point, other operation): rounds in which the point was reached
ATTEMPTS = 12             # states tried per (point, other operation) before giving up on reaching it
# kinds that make a boundary reachable (a claimable queue for the queued path, say)
POINT_KINDS = {"claim_due_jobs:queued_jobs_locked": ("queue_waiting", "retry_waiting"),
               "claim_due_jobs:due_jobs_locked": ("free_due",)}
KEYS = count(7_340_000)


@pytest.mark.parametrize("name", list(OPS))
def test_forced_pauses_keep_the_invariants(arena: Arena, name: str) -> None:
    if not arena.has("test_pause"):
        pytest.skip("no mjsched.test_pause hook in this schema: forced pauses need it")
    paused_op = OPS[name]
    if not arena.has(paused_op.proc):
        pytest.skip(f"not installed in this schema: {paused_op.proc}")
    points = [p for p in arena.pause_points() if p.split(":")[0] == paused_op.proc]
    if not points:
        pytest.skip(f"{paused_op.proc} has no pause point (a single statement)")
    rng = rng_for(f"pause:{name}")
    stats = Stats()
    unreached: list[str] = []
    for point in points:
        for other_name, other_op in OPS.items():
            if not arena.has(other_op.proc):
                continue
            reached = 0
            for _ in range(ATTEMPTS):
                if reached >= max(1, int(REACHED_ROUNDS * scale())):
                    break
                state = generate(rng, datetime.now(timezone.utc), [*paused_op.needs, *other_op.needs],
                                 POINT_KINDS.get(point, ()))
                first, second = paused_op.build(state, rng), other_op.build(state, rng)
                if first is None or second is None:
                    continue
                result = arena.pause_round(state, first, point, second, next(KEYS))
                if result.note == "not reached":
                    continue
                reached += 1
                label = f"{point} vs {other_name}"
                stats.add(result, label, lambda: f"seed {SEED} {label}: state [{state.describe()}]\n      calls: "
                                                  f"{first.describe()} parked; {second.describe()}")
            if not reached:
                unreached.append(f"{point} vs {other_name}")
    record("pause", name, stats)
    print(f"\npause {name} ({', '.join(points)}): {stats.line()}"
          + (f"\n  never reached: {', '.join(unreached)}" if unreached else ""))
    assert_clean(stats, f"pauses in {paused_op.proc}", SEED)
    assert len(unreached) < len(points) * len(OPS), f"no point of {paused_op.proc} was ever reached"
