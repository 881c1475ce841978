"""The gateways' read queries: both dialects name the same ones, every name a gateway asks
for exists, and queries.sql is never applied as a schema version.

The procedures' parity is test_sql_parity's; the reads (job and run lists, the status
summary, column privileges) live in sql/<dialect>/queries.sql and are compared here, so a
read added to one gateway without its twin fails here instead of on a real SQL Server.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from mjsched import sqlfiles
from mjsched.backends import queries

ROOT = Path(__file__).resolve().parents[2]
GATEWAYS = {"postgres": ROOT / "mjsched" / "backends" / "postgres.py",
            "mssql": ROOT / "mjsched" / "backends" / "mssql.py"}
_ASKED = re.compile(r'self\._read\(\s*"(\w+)"')


def asked_for(path: Path) -> set[str]:
    """The query names a gateway passes to ``_read``."""
    return set(_ASKED.findall(path.read_text(encoding="utf-8")))


def missing_twins(a: dict[str, str], b: dict[str, str]) -> set[str]:
    return set(a) ^ set(b)


def test_both_dialects_name_the_same_queries() -> None:
    assert missing_twins(queries.named("postgres"), queries.named("mssql")) == set()
    assert len(queries.named("postgres")) >= 14


@pytest.mark.parametrize("dialect", sorted(GATEWAYS))
def test_every_query_a_gateway_asks_for_exists_and_every_query_is_asked_for(dialect: str) -> None:
    asked = asked_for(GATEWAYS[dialect])
    assert "list_jobs" in asked and "status_counts" in asked   # the reader of the gateway sees its calls
    assert asked == set(queries.named(dialect)), (asked ^ set(queries.named(dialect)))


def test_a_query_missing_in_one_dialect_is_caught() -> None:
    pg = dict(queries.named("postgres"))
    ms = dict(queries.named("mssql"))
    del ms["get_run"]
    assert missing_twins(pg, ms) == {"get_run"}


@pytest.mark.parametrize("dialect", ["postgres", "mssql"])
def test_placeholders_are_filled_and_nothing_else_is(dialect: str) -> None:
    text = queries.query(dialect, "job_runs", run_columns="r_cols")
    assert "{" not in text and text.count("r_cols") == 3
    with pytest.raises(KeyError, match="needs job_columns"):
        queries.query(dialect, "get_jobs")
    with pytest.raises(KeyError, match="no query 'nope'"):
        queries.query(dialect, "nope")
    assert queries.placeholders(dialect, "db_now") == set()
    assert all(not q.startswith("--") for q in queries.named(dialect).values())   # comments stay in the file


@pytest.mark.parametrize("dialect", ["postgres", "mssql"])
def test_queries_sql_is_not_a_schema_version(dialect: str) -> None:
    names = [s.name for s in sqlfiles.scripts(dialect)]
    assert names and "queries" not in names
    assert (sqlfiles.sql_dir(dialect) / queries.FILE).is_file()


def test_a_name_defined_twice_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "twice").mkdir()
    (tmp_path / "twice" / queries.FILE).write_text("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    monkeypatch.setattr(sqlfiles, "sql_dir", lambda dialect: tmp_path / dialect)
    queries.named.cache_clear()
    try:
        with pytest.raises(ValueError, match="defined twice"):
            queries.named("twice")
    finally:
        queries.named.cache_clear()
