"""The two SQL trees agree: same procedures, parameters (names and order), result
columns, tables and columns, constraints, indexes and triggers.

The engine calls procedures by name with ``p_``-named parameters in both dialects, and
reads result columns by name; a drift between sql/postgres and sql/mssql would only
show on a real SQL Server, which this project's machines cannot run. So the parity is
checked here, from the files (tests/support/sqlparity.py reads them), and a
deliberately drifted tree (tests/fixtures/drift) shows the check can fail.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from mjsched import sqlfiles
from mjsched.models import Job
from tests.support import sqlparity
from tests.support.sqlparity import Allowed

ROOT = Path(__file__).resolve().parents[2]
DRIFT = ROOT / "tests" / "fixtures" / "drift"
PG = sqlparity.load(ROOT / "sql" / "postgres", "postgres")
MS = sqlparity.load(ROOT / "sql" / "mssql", "mssql")
DIFFERENCES = sqlparity.compare(PG, MS)

# The only differences there may be, each for a reason the dialects impose.
ALLOWED = [
    Allowed("constraint ck_scheduled_job_run_details: only in mssql",
            "jsonb validates JSON in PostgreSQL; an nvarchar(max) column needs an ISJSON check"),
    Allowed("index uq_scheduled_job_run_tick: where None != 'scheduled_for IS NOT NULL'",
            "a SQL Server UNIQUE index treats NULLs as equal; the filter restores PostgreSQL's "
            "NULLs-are-distinct, so manual runs (scheduled_for NULL) never collide"),
    Allowed("index ix_scheduled_job_keep_rule: missing in mssql",
            "a SQL Server filtered index cannot hold OR: the jobs with a retention rule are indexed there "
            "by two filtered indexes, one per rule"),
    Allowed("index ix_scheduled_job_keep_days: only in mssql", "the first of those two"),
    Allowed("index ix_scheduled_job_keep_count: only in mssql", "the second of those two"),
    Allowed("index ix_scheduled_job_claim: columns ('status', 'mjsched . claim_at ( next_run_at , priority )') "
            "!= ('status', 'claim_at')",
            "the claim's priority order (015_priorities.sql): PostgreSQL indexes the expression "
            "claim_at(next_run_at, priority); SQL Server indexes the same expression as a computed column"),
    Allowed("routine advance_job: parameter p_guard default False != True",
            "PostgreSQL keeps the previous release's four-parameter advance_job beside this one (an overload; "
            "defaults here would make a four-argument call ambiguous); T-SQL has no overloads, so defaults "
            "answer the previous release's call there"),
    Allowed("routine advance_job: parameter p_expected_next_run_at default False != True",
            "the second of those two parameters"),
    Allowed("trigger trg_scheduled_job_inserted: missing in mssql",
            "PostgreSQL's insert trigger only wakes the engines (NOTIFY), which SQL Server lacks; it is apart "
            "from the update trigger there because a WHEN that names OLD cannot apply to an INSERT"),
    Allowed("trigger trg_scheduled_job_audited_write: missing in mssql",
            "PostgreSQL's audit trigger for INSERT and DELETE is apart from its BEFORE UPDATE OF <columns> one "
            "(a column list applies to UPDATE only, and the version moves on in a BEFORE trigger); SQL "
            "Server's one trigger is AFTER INSERT, UPDATE, DELETE and tests UPDATE(column) itself"),
    Allowed("trigger trg_job_tag_audited_delete: missing in mssql",
            "PostgreSQL's tag audit reads a statement's rows from transition tables, and a trigger with "
            "transition tables may have one event only: its DELETE trigger is apart from the INSERT one; SQL "
            "Server's one trigger is AFTER INSERT, DELETE, with inserted and deleted"),
]


# claim_due_jobs: the claim's columns, then every field of its Job but id (job_id) and lock_token (the
# roles may not read it; the claim's own token is lock_token), in table order.
CLAIM_COLUMNS = ["job_id", "run_id", "lock_token", "scheduled_for", "from_queue", "db_now", "next_due_at", "due_left",
                 "locked_out", "replied_at"] + [f.name for f in dataclasses.fields(Job) if f.name not in ("id", "lock_token")]


def _about(prefix: str) -> list[str]:
    return [d for d in sqlparity.unexplained(DIFFERENCES, ALLOWED) if d.startswith(prefix)]


def test_the_reader_sees_both_trees_whole() -> None:
    for tree in (PG, MS):
        assert tree.problems == [], tree.problems
        assert {"scheduled_job_type", "scheduled_job", "scheduled_job_run", "engine_instance"} <= set(tree.tables)
        assert {"acquire_job_lock", "release_job_lock", "extend_job_leases", "claim_due_jobs",
                "complete_job_runs", "complete_job_run", "sweep_expired_leases", "enqueue_job_run",
                "probe_permissions"} <= set(tree.routines)
        assert len(tree.routines) >= 16 and len(tree.indexes) >= 11
    assert len(PG.tables["scheduled_job"]) == len(MS.tables["scheduled_job"]) >= 30


def test_same_set_of_procedures() -> None:
    assert set(PG.routines) == set(MS.routines)
    assert [d for d in _about("routine") if d.endswith(("missing in mssql", "only in mssql"))] == []


def test_same_parameter_names_in_the_same_order() -> None:
    for name, routine in PG.routines.items():
        assert [p.name for p in MS.routines[name].params] == [p.name for p in routine.params], name
    assert [d for d in _about("routine") if " parameter" in d] == []


def test_same_result_columns() -> None:
    for name, routine in PG.routines.items():
        ms = MS.routines[name]
        assert len(ms.result_sets) <= 1, f"{name} returns {len(ms.result_sets)} result sets"
        assert list(ms.result_sets[0] if ms.result_sets else ()) == \
            list(routine.result_sets[0] if routine.result_sets else ()), name
    assert [d for d in _about("routine") if " result" in d] == []


def test_a_claim_carries_every_column_of_its_job_but_the_lock_token() -> None:
    """The engine builds each claimed Job from the claim's own row (no second round trip)."""
    for tree in (PG, MS):
        columns = tree.routines["claim_due_jobs"].result_sets[0]
        assert sorted(columns) == sorted(CLAIM_COLUMNS) and len(columns) == len(CLAIM_COLUMNS), tree.dialect


def test_same_tables_and_columns() -> None:
    assert set(PG.tables) == set(MS.tables)
    for name, columns in PG.tables.items():
        assert [c.name for c in MS.tables[name]] == [c.name for c in columns], name
    assert _about("table") == []


def test_same_constraints_indexes_and_triggers() -> None:
    assert _about("constraint") + _about("index") + _about("trigger") == []


def test_no_unexplained_difference_at_all() -> None:
    assert sqlparity.unexplained(DIFFERENCES, ALLOWED) == []


def test_every_allowed_difference_is_still_real() -> None:
    """An allowance that no longer matches anything must go, or it would hide a drift later."""
    assert [a.difference for a in ALLOWED if a.difference not in DIFFERENCES] == []


def test_the_mssql_permission_probe_lists_every_routine() -> None:
    text = sqlfiles.versioned("mssql", "002_procedures").text
    probe = next(b for b in sqlparity.split_batches(text) if "PROCEDURE mjsched.probe_permissions" in b)
    listed = re.findall(r"\(N'(\w+)'\)", probe)
    assert sorted(listed) == listed, "keep the probe's list sorted"
    assert set(listed) == set(MS.routines)


# -- the check can fail ----------------------------------------------------------------------------

def test_the_drifted_fixture_is_caught() -> None:
    drifted = sqlparity.load(DRIFT / "mssql", "mssql")
    found = sqlparity.compare(PG, drifted)
    expected = [line for line in (DRIFT / "expected.txt").read_text(encoding="utf-8").splitlines() if line]
    assert [e for e in expected if e not in found] == []
    # the faithful parts of the fixture produce no difference (no false alarms)
    assert [d for d in found if d.startswith(("routine initialize_next_run:", "table scheduled_job_type"))] == []


@pytest.mark.parametrize("edit, expected", [
    (("@p_job_id uniqueidentifier,\n    @p_token uniqueidentifier\nAS",
      "@p_token uniqueidentifier,\n    @p_job_id uniqueidentifier\nAS"),
     "routine release_job_lock: parameters ['p_job_id', 'p_token'] != ['p_token', 'p_job_id']"),
    (("SELECT COUNT(*) AS enqueued FROM @v_queued;", "SELECT COUNT(*) AS queued FROM @v_queued;"),
     "routine enqueue_job_run: result columns ['enqueued'] != ['queued']"),
    (("j.jitter_seconds, j.priority\n      FROM @v_out",
      "j.jitter_seconds\n      FROM @v_out"),
     f"routine claim_due_jobs: result columns {list(PG.routines['claim_due_jobs'].result_sets[0])} != "
     f"{list(PG.routines['claim_due_jobs'].result_sets[0])[:-1]}"),
    (("    SELECT @v_swept AS swept,", "    SELECT @v_swept AS swept;\n    SELECT @v_swept AS swept,"),
     "routine sweep_expired_leases: 2 result sets in mssql, expected at most one"),
    (("@p_scheduled_for datetimeoffset,\n    @p_now datetimeoffset = NULL\nAS\nBEGIN\n    SET NOCOUNT ON;\n"
      "    SET XACT_ABORT ON;\n    EXEC mjsched.check_test_clock @p_now = @p_now;\n"
      "    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());\n"
      "    DECLARE @v_limit",
      "@p_scheduled_for datetime2,\n    @p_now datetimeoffset = NULL\nAS\nBEGIN\n    SET NOCOUNT ON;\n"
      "    SET XACT_ABORT ON;\n    EXEC mjsched.check_test_clock @p_now = @p_now;\n"
      "    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());\n"
      "    DECLARE @v_limit"),
     "routine enqueue_job_run: parameter p_scheduled_for type timestamptz != datetime2"),
])
def test_an_edit_of_the_real_procedures_is_caught(edit: tuple[str, str], expected: str) -> None:
    old, new = edit
    text = sqlfiles.versioned("mssql", "002_procedures").text
    assert text.count(old) == 1, old
    tree = sqlparity.SqlTree("mssql")
    for script in sqlparity.versioned_scripts(ROOT / "sql" / "mssql"):
        source = script.text
        sqlparity.parse_mssql(source.replace(old, new) if script.name == "002_procedures" else source, tree)
    assert expected in sqlparity.compare(PG, tree)


def test_an_edit_of_the_real_schema_is_caught() -> None:
    tree = sqlparity.SqlTree("mssql")
    for script in sqlparity.versioned_scripts(ROOT / "sql" / "mssql"):
        source = script.text
        if script.name == "001_schema":
            source = source.replace("        notify_to                    nvarchar(1000) NULL,\n", "", 1)
        sqlparity.parse_mssql(source, tree)
    assert "table scheduled_job: column notify_to missing in mssql" in sqlparity.compare(PG, tree)
