"""A dashboard made before a fork (mounted at import under gunicorn --preload or uWSGI
without lazy-apps) works in the forked workers: the engine it made itself is made again in
the child, on connections of the child's own; one the caller gave refuses there, as the
caller's engine does (docs/guide/deployment.md)."""
from __future__ import annotations

from typing import Any

import pytest

from mjsched.web import create_app
from tests.support.forks import FORKS, in_child
from tests.support.pg import Sql

from .conftest import Browserless, shell_job

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]


def sessions(sql: Sql) -> set[int]:
    return {r["pid"] for r in sql.rows("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                       "AND application_name = 'mjsched'")}


class take_every_slot:
    """The dashboard's request slots all taken in the parent, as by its requests in flight at a
    fork; a child with the parent's semaphore would wait 10 s and answer "Busy" (503)."""

    def __init__(self, dashboard: Any) -> None:
        self.slots, self.taken = dashboard._db_slots, 0
        while self.slots.acquire(timeout=0):
            self.taken += 1
        assert self.taken >= 2

    def release(self) -> None:
        for _ in range(self.taken):
            self.slots.release()
        self.taken = 0


@pytest.mark.parametrize("fork", list(FORKS), ids=list(FORKS))
def test_a_dashboard_made_before_the_fork_answers_in_the_child(engine: Any, pg_dsn: str, fork: str) -> None:
    job_id = shell_job(engine, "nightly")
    dashboard = create_app(pg_dsn)
    sql = Sql(pg_dsn)
    try:
        assert "nightly" in Browserless(dashboard).html("/jobs")    # the parent's dashboard has connections
        before = sessions(sql)
        busy = take_every_slot(dashboard)     # the parent's requests in flight at the fork

        def child() -> dict[str, Any]:
            web = Browserless(dashboard)
            page = web.get("/jobs")
            paused = web.post(f"/jobs/{job_id}/pause")     # an action: through the dashboard's engine
            return {"status": page.status_code, "listed": "nightly" in page.get_data(as_text=True),
                    "paused": paused.status_code}

        result = in_child(FORKS[fork], child)
        busy.release()
        assert result == {"status": 200, "listed": True, "paused": 303}
        assert engine.get_job(job_id).status.value == "Paused"
        assert before <= sessions(sql)        # the parent's sessions were not used or ended by the child
        assert "nightly" in Browserless(dashboard).html("/jobs")
    finally:
        dashboard.close()
        sql.close()


def test_a_dashboard_on_the_callers_engine_reads_but_its_actions_refuse_in_the_child(engine: Any) -> None:
    """Pages read through the backend, which opens connections of the child's own; an action
    goes through the caller's engine, whose copy refuses, and the page says why."""
    job_id = shell_job(engine, "nightly")
    dashboard = create_app(engine)
    busy = take_every_slot(dashboard)

    def child() -> dict[str, Any]:
        web = Browserless(dashboard)
        listed = "nightly" in web.html("/jobs")
        reply = web.post(f"/jobs/{job_id}/pause")
        text = reply.get_data(as_text=True)
        if reply.status_code == 303:
            text = web.html(reply.headers["Location"])
        return {"listed": listed, "status": reply.status_code, "text": text}

    result = in_child(FORKS["os.fork"], child)
    busy.release()
    assert result["listed"]
    assert "post_fork" in result["text"] and "lazy-apps" in result["text"], result
    assert engine.get_job(job_id).status.value == "Active"      # nothing was paused behind the error
