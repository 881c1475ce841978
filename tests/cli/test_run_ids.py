"""Run ids a person can use (issue 35 item 3): `runs` and `runs --follow` show the part of a run
id that differs from run to run (a PostgreSQL run id is a UUID version 7: its first 8 hex
digits are the time, the same for every run within about 65 s), and `runs show` and `runs
cancel` take that short id back, or any unique prefix; an ambiguous prefix is refused (exit 2)
naming the candidates, an unknown one answers "no such run" naming what was given."""
from __future__ import annotations

import queue
import re
import signal
import threading
import uuid
from typing import Callable

import pytest

import mjsched
from mjsched.engine.refs import short_run_id
from tests.cli.conftest import Cli
from tests.cli.test_cli import assert_one_line_error
from tests.support.pg import Sql

pytestmark = pytest.mark.postgres


def burst(make_engine: Callable[..., mjsched.SchedulingEngine], count: int = 4) -> list[mjsched.JobRun]:
    """``count`` runs of one job, made within a second: their ids share their first 8 hex digits."""
    engine = make_engine()
    job = engine.create_job("burst", "shell", "0 3 * * *", configuration={"command": ["true"]})
    runs = [engine.execute_job(job) for _ in range(count)]
    assert len({r.id[:8] for r in runs}) == 1, "the runs were meant to be made within the same 65 s"
    return runs


def queued_run(sql: Sql, job_id: str) -> str:
    """A Queued run of the job, as a Queue-mode job keeps a tick that came while it ran."""
    return str(sql.rows("INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at) "
                        "VALUES (%s, now(), 'Queued', now()) RETURNING id", (job_id,))[0]["id"])


def test_runs_lists_a_short_id_that_differs_between_runs(cli: Cli, pg_dsn: str,
                                                          make_engine: Callable[..., mjsched.SchedulingEngine]) -> None:
    runs = burst(make_engine)
    table = cli("runs", "--dsn", pg_dsn, expect=0).stdout.splitlines()
    assert table[0].startswith("RUN ")
    shown = [line.split()[0] for line in table[1:]]
    assert sorted(shown) == sorted(r.id[-12:] for r in runs)      # the random part: 4 different ids
    assert all(short_run_id(r.id) == r.id.replace("-", "")[-12:] for r in runs)


def test_show_and_cancel_take_the_short_id_or_any_unique_prefix(cli: Cli, pg_dsn: str, sql: Sql,
                                                                 make_engine: Callable[..., mjsched.SchedulingEngine]
                                                                 ) -> None:
    runs = burst(make_engine)
    run = runs[0]
    shown = cli("runs", "show", short_run_id(run.id), "--dsn", pg_dsn, expect=0).stdout
    assert shown.startswith(f"run {run.id} of job burst: Completed")
    assert cli.json("runs", "show", run.id[:18], "--dsn", pg_dsn)["id"] == run.id     # a prefix with its hyphens
    unique = next(n for n in range(9, 33) if sum(r.id.replace("-", "").startswith(run.id.replace("-", "")[:n])
                                                  for r in runs) == 1)
    assert cli.json("runs", "show", run.id.replace("-", "")[:unique].upper(), "--dsn", pg_dsn)["id"] == run.id
    # a finished run is found and refused for what it is, no longer "no such run"
    assert_one_line_error(cli("runs", "cancel", short_run_id(run.id), "--dsn", pg_dsn), run.id, "Completed",
                          "can be cancelled")
    waiting = queued_run(sql, run.scheduled_job_id)
    cancelled = cli.json("runs", "cancel", short_run_id(waiting), "--dsn", pg_dsn)
    assert (cancelled["id"], cancelled["status"]) == (waiting, "Cancelled")


def test_an_ambiguous_prefix_names_the_candidates_and_an_unknown_one_what_was_given(
        cli: Cli, pg_dsn: str, make_engine: Callable[..., mjsched.SchedulingEngine]) -> None:
    runs = burst(make_engine)
    first8 = runs[0].id[:8]                # what `runs` used to show: every run of the burst has it
    refused = cli("runs", "cancel", first8, "--dsn", pg_dsn)
    assert_one_line_error(refused, f"run_id={first8!r}", "ambiguous", f"{len(runs)} runs match", *(r.id for r in runs))
    assert_one_line_error(cli("runs", "show", first8, "--dsn", pg_dsn), "ambiguous")
    assert_one_line_error(cli("runs", "cancel", "0123456789ab", "--dsn", pg_dsn), "run_id='0123456789ab': no such run")
    assert_one_line_error(cli("runs", "show", "not-a-run", "--dsn", pg_dsn), "run_id='not-a-run': no such run")
    assert_one_line_error(cli("runs", "show", str(uuid.uuid4()), "--dsn", pg_dsn), "no such run")


def test_runs_follow_shows_the_short_id(cli: Cli, pg_dsn: str,
                                        make_engine: Callable[..., mjsched.SchedulingEngine]) -> None:
    runs = burst(make_engine, 2)
    tail = cli.spawn("runs", "--follow", "--interval", "0.1", "--dsn", pg_dsn)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in tail.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        printed = [lines.get(timeout=30), lines.get(timeout=30)]
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=15) == 0
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait(timeout=10)
    ids = {m.group(0) for line in printed for m in re.finditer(r"\b[0-9a-f]{12}\b", line)}
    assert ids == {r.id[-12:] for r in runs}, printed
