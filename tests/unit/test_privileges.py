"""The engine/admin split has one list in three places: sql/postgres/grants.sql,
sql/mssql/grants.sql and mjsched.privileges (which the start-up probe reads). And every
routine the SQL defines is classified: internal, an engine's, or an admin's (a routine added
without a decision is an admin one, and an engine that needs it would fail: this test says so
first)."""
from __future__ import annotations

import re
from pathlib import Path

from mjsched import sqlfiles
from mjsched.privileges import ADMIN_ROUTINES, ENGINE_ROUTINES, split_missing

SQL = Path(__file__).resolve().parents[2] / "sql"


def _pg_engine_list() -> set[str]:
    text = (SQL / "postgres" / "grants.sql").read_text(encoding="utf-8")
    found = re.search(r"(?s)c_engine_routines CONSTANT text\[\] := ARRAY\[(.*?)\];", text)
    assert found, "no c_engine_routines in sql/postgres/grants.sql"
    return set(re.findall(r"'(\w+)'", found.group(1)))


def _mssql_engine_list() -> set[str]:
    text = (SQL / "mssql" / "grants.sql").read_text(encoding="utf-8")
    found = re.search(r"(?is)INSERT INTO @v_engine \(name\)\s+VALUES (.*?);", text)
    assert found, "no @v_engine list in sql/mssql/grants.sql"
    return set(re.findall(r"N'(\w+)'", found.group(1)))


def _internal() -> set[str]:
    text = sqlfiles.versioned("postgres", "002_procedures").text
    found = re.search(r"(?is)FUNCTION mjsched\.internal_routines\(\)\s+RETURNS text\[\].*?ARRAY\[(.*?)\]", text)
    assert found
    return set(re.findall(r"'(\w+)'", found.group(1)))


def test_one_engine_list_in_both_dialects_and_python() -> None:
    assert _pg_engine_list() == set(ENGINE_ROUTINES)
    assert _mssql_engine_list() == set(ENGINE_ROUTINES)
    assert not ENGINE_ROUTINES & ADMIN_ROUTINES


def test_every_postgres_routine_is_classified() -> None:
    defined = set()
    for script in sqlfiles.scripts("postgres"):
        text = script.text
        for name, returns in re.findall(r"(?is)CREATE OR REPLACE FUNCTION mjsched\.(\w+)\(.*?RETURNS\s+(\w+)", text):
            if returns.lower() != "trigger":
                defined.add(name)
    unclassified = defined - _internal() - ENGINE_ROUTINES - ADMIN_ROUTINES
    assert unclassified == set(), (
        f"{sorted(unclassified)}: decide whether the engine calls it (add it to the engine lists of "
        "sql/postgres/grants.sql, sql/mssql/grants.sql and mjsched/privileges.py) or it defines jobs "
        "(ADMIN_ROUTINES); until then grants.sql gives it to the admin role only")
    assert {"insert_job", "update_job", "delete_job", "ensure_job_type", "force_unlock_job"} <= ADMIN_ROUTINES


def test_the_probe_splits_what_is_missing() -> None:
    assert split_missing(["insert_job", "claim_due_jobs", "update_job", "claim_due_jobs"]) == \
        (["claim_due_jobs"], ["insert_job", "update_job"])
    assert split_missing([]) == ([], [])


def test_the_tokens_are_denied_to_both_roles_on_sql_server() -> None:
    text = " ".join((SQL / "mssql" / "grants.sql").read_text(encoding="utf-8").split())
    for table in ("scheduled_job", "scheduled_job_run"):
        assert f"DENY SELECT (lock_token) ON OBJECT::mjsched.{table} TO mjsched_engine, mjsched_admin;" in text
    pg = (SQL / "postgres" / "grants.sql").read_text(encoding="utf-8")
    assert "a.attname <> 'lock_token'" in pg and "GRANT SELECT (%s) ON mjsched.%I TO %I" in pg
