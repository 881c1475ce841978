"""The log-once memory (engine/log_once.py) and DispatchResult's renamed field."""
from __future__ import annotations

import dataclasses

import pytest

import mjsched
from mjsched.engine.log_once import LogOnce


def test_a_key_is_first_once_and_the_memory_is_bounded() -> None:
    said = LogOnce(limit=2)
    assert [said.first(k) for k in ("a", "a", "b", "c", "a")] == [True, False, True, True, False]
    assert said.first("d") is True      # past the limit the memory starts again
    assert said.first("a") is True      # so a report may be said once more, never held forever


def test_due_left_waiting_is_also_read_under_its_first_name() -> None:
    result = mjsched.DispatchResult(1, 2, 3, 4)   # positional order unchanged
    assert (result.due_left_waiting, result.skipped_at_capacity) == (4, 4)
    assert [f.name for f in dataclasses.fields(result)] == ["swept", "dispatched", "locked_out",
                                                            "due_left_waiting", "run_ids"]
    with pytest.raises(AttributeError):
        result.skipped_at_capacity = 5  # type: ignore[misc]  # the old name only reads
