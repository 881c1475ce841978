"""mjsched/decoding.py: stored values decoded by code that never raises (issue 32)."""
from __future__ import annotations

import json
import pickle
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mjsched.decoding import (MAX_JSON_DEPTH, Undecodable, bounded_json, decode_json, safe_caster,
                              text_nesting_exceeds, value_nesting_exceeds)
from mjsched.models import Job, JobRun

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=30)


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def nested(depth: int, array: bool = False) -> Any:
    value: Any = [] if array else {}
    for _ in range(depth - 1):
        value = [value] if array else {"a": value}
    return value


@settings(max_examples=300, derandomize=True)
@given(value=JSON, limit=st.integers(0, 6))
def test_the_text_scan_and_the_value_walk_agree_with_the_depth(value: Any, limit: int) -> None:
    deep = depth_of(value) > limit
    assert value_nesting_exceeds(value, limit) is deep
    assert text_nesting_exceeds(json.dumps(value), limit) is deep
    assert text_nesting_exceeds(json.dumps(value, ensure_ascii=False), limit) is deep


@pytest.mark.parametrize("depth", [1, 63, 64, 65, 1000, 100_000])
def test_nesting_past_the_interpreters_limit_is_answered(depth: int) -> None:
    for array in (False, True):
        value = nested(depth, array)
        assert value_nesting_exceeds(value) is (depth > MAX_JSON_DEPTH)
        text = "[" * depth + "]" * depth if array else '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)
        assert text_nesting_exceeds(text) is (depth > MAX_JSON_DEPTH)
        decoded = decode_json(text, "configuration")
        if depth > MAX_JSON_DEPTH:
            assert decoded == "<undecodable: nesting deeper than 64 levels>" and decoded.field == "configuration"
        else:
            assert decoded == value


def test_a_value_that_contains_itself_is_too_deep() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert value_nesting_exceeds(loop)
    assert bounded_json(loop, "details") == ({"details_dropped": "nesting deeper than 64 levels"},
                                             "nesting deeper than 64 levels")


@settings(max_examples=300, derandomize=True)
@given(text=st.text() | st.binary().map(lambda b: b.decode("latin-1")))
@example(text='{"n": 1' + "0" * 5000 + "}")
@example(text='["\\ud800"]')
@example(text="[" * 5000)
@example(text='"' + "[" * 5000 + '"')
def test_decode_json_never_raises(text: str) -> None:
    decoded = decode_json(text, "details")
    if isinstance(decoded, Undecodable):
        assert decoded.field == "details" and decoded.startswith("<undecodable: ")
    else:
        assert decoded == json.loads(text) or decoded != decoded   # NaN is not equal to itself


def test_a_marker_is_text_that_says_why() -> None:
    marker = Undecodable("configuration", "nesting deeper than 64 levels")
    assert isinstance(marker, str) and marker.value == marker == "<undecodable: nesting deeper than 64 levels>"
    again = pickle.loads(pickle.dumps(marker))
    assert (type(again), again.field, again.reason) == (Undecodable, "configuration", marker.reason)
    assert json.loads(json.dumps({"c": marker})) == {"c": str(marker)}


def test_safe_caster_marks_instead_of_raising() -> None:
    def year(text: str, _cursor: Any = None) -> datetime:
        return datetime(int(text), 1, 1, tzinfo=timezone.utc)

    cast = safe_caster(year, "timestamptz")
    assert cast("2020", None) == datetime(2020, 1, 1, tzinfo=timezone.utc)
    marked = cast("10000", None)
    assert isinstance(marked, Undecodable) and "year 10000 is out of range" in marked
    assert isinstance(safe_caster(year, "datetimeoffset")("x"), Undecodable)   # pyodbc's one-argument form
    # NULL is None without a call of the driver's caster (year(None) would raise)
    assert cast(None, None) is None and safe_caster(year, "datetimeoffset")(None) is None


def test_bounded_json_keeps_what_fits_and_says_what_it_dropped() -> None:
    assert bounded_json({"a": [1, 2]}, "details") == ({"a": [1, 2]}, None)
    assert bounded_json(None, "details") == (None, None)
    kept, why = bounded_json({"big": "x" * 1_000_001}, "details")
    assert why is not None and kept == {"details_dropped": why} and why.endswith("at most 1000000 allowed")


def _row(cls: type, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {name: None for name in cls.__dataclass_fields__}   # type: ignore[attr-defined]
    row.update(values)
    return row


def test_a_job_row_names_each_field_it_cannot_decode() -> None:
    row = _row(Job, id="1", job_type_id="2", name="j", driver="python", timezone="UTC", status="Active",
               concurrency_mode="Skip", missed_run_policy="RunOnce", configuration='{"callable": "os:getpid"}',
               run_count=0, max_queued_runs=5)
    job = Job.from_row(row)
    assert job.undecodable == () and job.configuration == {"callable": "os:getpid"}
    bad = Job.from_row({**row, "configuration": "[" * 100 + "]" * 100, "status": "Bogus",
                        "next_run_at": Undecodable("timestamptz", "year 10000 is out of range"),
                        "max_runtime_seconds": "not a number"})
    assert set(bad.undecodable) == {"configuration", "status", "next_run_at", "max_runtime_seconds"}
    assert bad.configuration == "<undecodable: nesting deeper than 64 levels>"
    assert bad.next_run_at.field == "next_run_at" and bad.status.value.startswith("<undecodable: ")
    assert bad.name == "j" and bad.timezone == "UTC"   # the rest of the row as stored


def test_a_run_row_names_each_field_it_cannot_decode() -> None:
    row = _row(JobRun, id="1", scheduled_job_id="2", status="Completed", details='{"ok": true}', attempt=1)
    assert JobRun.from_row(row).details == {"ok": True}
    bad = JobRun.from_row({**row, "details": "{" * 3, "parameters": '{"n": 1' + "0" * 5000 + "}"})
    assert bad.undecodable == ("details", "parameters") and bad.status.value == "Completed"
