"""Barrier rounds: every pair of state-changing procedures (and the triples that matter),
each call on its own connection, released together, over many generated states; the
invariants (invariants.py) are checked on the whole database after every round.

A call racing its own replay (the retry of a caller whose reply was lost, sent while
the first may still be running) is played separately: only replay-safe procedures may
be retried blindly.

Each operation alone comes first: a violation there is a sequential defect, not an
interleaving one, which tells the two apart in the summary.
"""
from __future__ import annotations

from itertools import combinations_with_replacement

import pytest

from tests.interleaving.catalogue import OPS, TRIPLES
from tests.interleaving.conftest import SEED, record, rng_for, scale
from tests.interleaving.rounds import Arena, assert_clean, play_barrier

pytestmark = pytest.mark.interleaving

SOLO_ROUNDS = 20
PAIR_ROUNDS = 60
TRIPLE_ROUNDS = 250
PAIRS = list(combinations_with_replacement(OPS, 2))


def _play(arena: Arena, names: tuple[str, ...], rounds: int, mode: str, replay: bool = False) -> None:
    ops = [OPS[n] for n in names]
    missing = sorted({op.proc for op in ops if not arena.has(op.proc)})
    if missing:
        pytest.skip(f"not installed in this schema: {', '.join(missing)}")
    label = "+".join(names)
    stats = play_barrier(arena, ops, max(1, int(rounds * scale())), rng_for(f"{mode}:{label}"), label, SEED,
                         replay)
    record(mode, label, stats)
    print(f"\n{mode} {label}: {stats.line()}")
    assert_clean(stats, label, SEED)


@pytest.mark.parametrize("name", list(OPS))
def test_each_operation_alone_keeps_the_invariants(arena: Arena, name: str) -> None:
    _play(arena, (name,), SOLO_ROUNDS, "solo")


@pytest.mark.parametrize("names", PAIRS, ids="+".join)
def test_racing_pairs_keep_the_invariants(arena: Arena, names: tuple[str, str]) -> None:
    _play(arena, names, PAIR_ROUNDS, "barrier")


@pytest.mark.parametrize("names", TRIPLES, ids="+".join)
def test_racing_triples_keep_the_invariants(arena: Arena, names: tuple[str, str, str]) -> None:
    _play(arena, names, TRIPLE_ROUNDS, "barrier")


@pytest.mark.parametrize("name", list(OPS))
def test_a_call_racing_its_own_replay_keeps_the_invariants(arena: Arena, name: str) -> None:
    _play(arena, (name,), PAIR_ROUNDS, "replay", replay=True)
