"""A script's ``-- mjsched:after-drain`` line splits it in two (sqlfiles.AFTER_DRAIN, issue 32)."""
from __future__ import annotations

from mjsched import sqlfiles
from mjsched.sqlfiles import SqlScript


def test_a_script_without_the_line_is_all_first_part() -> None:
    script = SqlScript("001_x", "CREATE TABLE t (a int);\n-- mjsched: not the marker\n")
    assert (script.first_part, script.after_drain) == (script.text, "")


def test_the_line_splits_the_script_once() -> None:
    script = SqlScript("009_x", "ALTER TABLE t ADD b int;\n-- mjsched:after-drain (why)\nDROP INDEX i;\n"
                                "-- mjsched:after-drain\nCREATE INDEX j ON t (b);\n")
    assert script.first_part == "ALTER TABLE t ADD b int;\n"
    assert script.after_drain == "\nDROP INDEX i;\n-- mjsched:after-drain\nCREATE INDEX j ON t (b);\n"


def test_only_the_run_index_swap_waits_for_the_drain() -> None:
    """PostgreSQL: 009_retries' swap of the per-tick UNIQUE index, nothing else; SQL Server's
    procedures never name an index, so its scripts have no such part."""
    waiting = {s.name: s.after_drain for s in sqlfiles.scripts("postgres") if s.after_drain}
    assert list(waiting) == ["009_retries"]
    assert "DROP INDEX mjsched.uq_scheduled_job_run_tick" in waiting["009_retries"]
    assert "DROP INDEX" not in next(s for s in sqlfiles.scripts("postgres") if s.name == "009_retries").first_part
    assert [s.name for s in sqlfiles.scripts("mssql") if s.after_drain] == []
