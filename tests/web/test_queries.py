"""The dashboard's named SQL: the same names in both dialects, the T-SQL twins parse as T-SQL
(sqlglot; no SQL Server runs here), placeholders become pyodbc's in order, and SQL Server's
one-row-per-run jobs page folds into PostgreSQL's shape."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from mjsched.web.pages import fold_recent, like_pattern, positional
from mjsched.web.queries import MSSQL, POSTGRES

sqlglot = pytest.importorskip("sqlglot")

PARAMS = {"status": None, "search": None, "tag": None, "limit": 51, "offset": 0, "recent": 20,
          "job_id": "00000000-0000-0000-0000-000000000001"}


def test_both_dialects_have_the_same_queries() -> None:
    assert set(MSSQL) == set(POSTGRES)


@pytest.mark.parametrize("name", sorted(MSSQL))
def test_each_tsql_twin_parses_as_tsql(name: str) -> None:
    from tests.unit.test_tsql_static import sqlfluff_errors, sqlglot_errors

    query, values = positional(MSSQL[name], PARAMS)
    assert "%(" not in query and query.count("?") == len(values)
    # the parsers read T-SQL variables where pyodbc binds '?'
    as_variables = re.sub(r"%\((\w+)\)s", r"@p_\1", MSSQL[name])
    assert sqlglot_errors(as_variables) == [] and sqlfluff_errors(as_variables) == []
    assert "LIMIT" not in query.upper() and "NOW()" not in query.upper() and "::" not in query


def test_placeholders_become_positional_in_order() -> None:
    query, values = positional("SELECT %(a)s, %(b)s WHERE x = %(a)s OFFSET %(offset)s", {"a": 1, "b": "x", "offset": 5})
    assert query == "SELECT ?, ? WHERE x = ? OFFSET ?" and values == [1, "x", 1, 5]


def test_search_patterns_take_wildcards_literally() -> None:
    assert like_pattern("50%_[a]\\") == "%50\\%\\_\\[a]\\\\%"


def test_sql_servers_jobs_page_folds_into_one_row_per_job() -> None:
    t = [datetime(2026, 12, 4, h, tzinfo=timezone.utc) for h in range(3)]
    base = {"name": "a", "total": 2}
    rows = [{**base, "id": "A", "run_status": "Failed", "run_duration_ms": 10, "run_started_at": t[0],
             "run_completed_at": t[0], "run_error": "boom"},
            {**base, "id": "A", "run_status": "Completed", "run_duration_ms": 20, "run_started_at": t[1],
             "run_completed_at": t[1], "run_error": None},
            {**base, "name": "b", "id": "B", "run_status": None, "run_duration_ms": None, "run_started_at": None,
             "run_completed_at": None, "run_error": None}]
    folded = fold_recent(rows)
    assert [j["id"] for j in folded] == ["A", "B"]
    assert folded[0]["statuses"] == ["Failed", "Completed"] and folded[0]["durations"] == [10, 20]
    assert folded[0]["errors"] == ["boom", None] and folded[0]["completed"] == t[:2]
    assert folded[1]["statuses"] == [] and "run_status" not in folded[1] and folded[1]["total"] == 2
