"""A run named by a shortened id (issue 35 item 3), through the API, on each dialect: the
database finds the runs a prefix or a short id matches (query runs_by_ref); one is the run,
several are AmbiguousRunId naming them, none is RunNotFound naming what was given."""
from __future__ import annotations

import os
from typing import Callable

import pytest

import mjsched
from mjsched.backends import queries
from mjsched.engine.refs import short_run_id
from tests.support.db import Db
from tests.support.pg import Sql


def test_get_run_and_cancel_run_take_a_unique_prefix_or_the_short_id(
        db: Db, make_engine: Callable[..., mjsched.SchedulingEngine]) -> None:
    engine = make_engine()
    job_id = engine.create_job("burst", "shell", "0 3 * * *", configuration={"command": ["true"]})
    runs = [engine.execute_job(job_id) for _ in range(3)]
    hexes = [r.id.replace("-", "") for r in runs]
    for run, digits in zip(runs, hexes):
        assert engine.get_run(short_run_id(run.id)).id == run.id
        assert engine.get_run(run.id.upper()).id == run.id
        unique = next(n for n in range(1, 33) if sum(h.startswith(digits[:n]) for h in hexes) == 1)
        assert engine.get_run(digits[:unique]).id == run.id          # without hyphens, as short as unique
    common = os.path.commonprefix(hexes)
    if common:     # PostgreSQL's version-7 ids of runs a moment apart share their time part
        with pytest.raises(mjsched.AmbiguousRunId) as caught:
            engine.get_run(common)
        assert sorted(caught.value.candidates) == sorted(r.id for r in runs) and not caught.value.more
        assert f"run_id={common!r}: ambiguous, 3 runs match" in str(caught.value)
    with pytest.raises(mjsched.RunNotCancellable, match="Completed"):
        engine.cancel_run(short_run_id(runs[0].id))
    for given in ("0123456789ab", "zz", ""):
        with pytest.raises(mjsched.RunNotFound, match=f"run_id={given!r}: no such run"):
            engine.get_run(given)


@pytest.mark.postgres
def test_a_prefix_is_a_range_of_the_primary_key_on_postgresql(sql: Sql) -> None:
    """A prefix is looked up as an index range, however large the history (a short id, which
    is the id's end, is a scan: docs/guide/cli.md says so)."""
    text = queries.query("postgres", "runs_by_ref", run_columns="id, status")
    with sql.conn.cursor() as cur:
        cur.execute("SET enable_seqscan = off")
        cur.execute("EXPLAIN " + text, {"low": "019a" + "0" * 28, "high": "019a" + "f" * 28, "tail": None,
                                        "limit": 11})
        plan = "\n".join(r[0] for r in cur.fetchall())
        cur.execute("RESET enable_seqscan")
    assert "Scan using scheduled_job_run_pkey" in plan and "Index Cond: ((id >= " in plan, plan
