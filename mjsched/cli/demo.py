"""``mjsched demo``: a zero-setup tour on the embedded PostgreSQL (or any --dsn).

It creates (or reuses, by name) three sample jobs, runs an engine, and shows a live
table of their runs: redrawn in place on a terminal, one plain line per finished
run otherwise. At the end it drains the engine, pauses the demo jobs (their history
stays, so ``mjsched runs`` shows it) and prints a summary.

The python jobs call :func:`sample_task` and :func:`failing_task` below.
"""
from __future__ import annotations

import logging
import os
import platform
import shutil
import sys
import time
from collections import deque
from datetime import datetime, timezone
from typing import Any

from ..errors import ConfigurationError
from ..notify import LoggingNotifier
from .context import Context, UsageError
from .terminal import EXIT_OK, GracefulStop, clip, drain, duration as fmt_ms, table

UTC = timezone.utc
log = logging.getLogger(__name__)

SHELL_COMMAND = 'echo "hello from the shell job on $(hostname) at $(date -u +%H:%M:%S)"'
DEMO_JOBS: list[dict[str, Any]] = [
    {"name": "demo-shell", "driver": "shell", "cron": "*/5 * * * * *", "every": "every 5 s",
     "configuration": {"command": SHELL_COMMAND, "timeout": 30}},
    {"name": "demo-python", "driver": "python", "cron": "*/10 * * * * *", "every": "every 10 s",
     "configuration": {"callable": "mjsched.cli.demo:sample_task", "kwargs": {"numbers": [3, 1, 4, 1, 5, 9, 2, 6]}}},
    {"name": "demo-failing", "driver": "python", "cron": "5/10 * * * * *", "every": "every 10 s (at :05)",
     "configuration": {"callable": "mjsched.cli.demo:failing_task", "kwargs": {"reason": "the disk is full (demo)"}},
     "notify_on_failure": True},
]


def sample_task(numbers: list[int]) -> dict[str, Any]:
    """The python demo job: a little work, returned as the run's details."""
    return {"sum": sum(numbers), "max": max(numbers), "python": platform.python_version()}


def failing_task(reason: str) -> None:
    """The failing demo job: raising marks the run Failed and sends the failure notification."""
    raise RuntimeError(reason)


class _Events(logging.Handler):
    """Keeps recent log records (warnings, notifications) for the live view."""

    def __init__(self, sink: deque[str], echo: bool) -> None:
        super().__init__(logging.INFO)
        self.sink = sink
        self.echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and getattr(record, "action", None) != "notification":
            return
        first = record.getMessage().splitlines()[0]
        tag = "notification" if getattr(record, "action", None) == "notification" else record.levelname.lower()
        line = f"{datetime.now(UTC):%H:%M:%S}  {tag}: {first}"
        self.sink.append(line)
        if self.echo:
            print(line, flush=True)


def _ensure_jobs(engine: Any) -> dict[str, Any]:
    existing = {j.name: j for j in engine.list_jobs()}
    jobs = {}
    for spec in DEMO_JOBS:
        fields = {"cron": spec["cron"], "timezone": "UTC", "configuration": spec["configuration"],
                  "notify_on_failure": spec.get("notify_on_failure", False), "status": "Active",
                  "description": f"mjsched demo job ({spec['every']})"}
        if spec["name"] in existing and existing[spec["name"]].driver == spec["driver"]:
            jobs[spec["name"]] = engine.update_job(existing[spec["name"]].id, **fields)
        else:
            job_id = engine.create_job(name=spec["name"], driver=spec["driver"], **fields)
            jobs[spec["name"]] = engine.get_job(job_id)
    return jobs


def _summary_line(run: Any) -> str:
    details = run.details or {}
    if run.error_message:
        return run.error_message
    if "stdout_tail" in details:
        return str(details["stdout_tail"]).strip().splitlines()[-1] if str(details["stdout_tail"]).strip() else ""
    return ", ".join(f"{k}={v}" for k, v in details.items() if k != "python")


def cmd_demo(ctx: Context) -> int:
    """The verb's handler: the tour is for people, so there is no --json."""
    if ctx.json:
        raise UsageError("demo prints a live table for people and has no --json; "
                         "script against `mjsched runs --json` or `mjsched status --json`")
    return run_demo(ctx, ctx.args.duration)


def run_demo(ctx: Any, duration: float | None) -> int:
    """The tour, top to bottom: sample jobs, an engine, the live view until the duration is up or
    a signal comes, a bounded drain, then the demo jobs paused and a summary."""
    _check_duration(duration)
    tty = sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
    events = _capture_log(int(getattr(ctx.args, "verbose", 0) or 0), echo=not tty)
    print("mjsched demo: starting" + (" the embedded PostgreSQL" if ctx.on_embedded else ""), flush=True)
    engine = ctx.engine(long_running=True, install=True, max_concurrent_jobs=4, lease_timeout=30.0,
                        max_poll_interval=1.0, notifier=LoggingNotifier(logging.getLogger("mjsched.demo.notify")))
    jobs = _ensure_jobs(engine)
    began_db = engine.backend.db_now()
    print(f"mjsched demo: {len(jobs)} jobs on {ctx.describe_database()}; "
          + (f"running for {duration:g} s" if duration else "press Ctrl-C to stop"), flush=True)
    notice = ctx.embedded.as_root_notice() if ctx.on_embedded and ctx.embedded is not None else None
    if notice:      # as root the demo's server and jobs are the machine's, not this user's: say so
        print(f"mjsched demo: {notice}", flush=True)
    view = _LiveView(ctx, jobs, events, duration, tty)
    stop = GracefulStop()
    started = time.monotonic()
    with stop.installed():
        engine.start_polling()
        _watch(engine, view, began_db, started, stop)
        print("mjsched demo: stopping (waiting up to 10 s for running jobs)", flush=True)
        code = drain(engine, 10.0, stop)
    for job in jobs.values():
        engine.pause_job(job.id)
    runs = _demo_runs(engine, view.ids, began_db, limit=1000)
    _print_summary(runs, jobs, view.ids, time.monotonic() - started)
    return EXIT_OK if code == EXIT_OK else code


def _check_duration(duration: float | None) -> None:
    if duration is not None and not (0 < duration <= 86_400):
        raise ConfigurationError("--duration", duration, "must be between 0 and 86400 seconds")


def _capture_log(verbose: int, echo: bool) -> deque[str]:
    """The mjsched log's warnings and notifications go to the returned list the view shows (and,
    with echo, to stdout); -v adds the whole log on stderr."""
    events: deque[str] = deque(maxlen=6)
    mjlog = logging.getLogger("mjsched")
    mjlog.handlers[:] = [_Events(events, echo=echo)]
    mjlog.setLevel(logging.INFO)
    mjlog.propagate = False
    if verbose:
        logging.basicConfig(level=logging.DEBUG if verbose > 1 else logging.INFO, stream=sys.stderr)
        mjlog.propagate = True
    return events


def _demo_runs(engine: Any, ids: dict[str, str], since: datetime, limit: int) -> list[Any]:
    """This demo's runs: of the demo jobs, started since it began (by the database's clock)."""
    return [r for r in engine.list_runs(limit=limit) if r.scheduled_job_id in ids and r.started_at is not None
            and r.started_at >= since]


def _watch(engine: Any, view: _LiveView, began_db: datetime, started: float, stop: GracefulStop) -> None:
    """Refresh the view (twice a second on a terminal, else once) until the duration is up or a signal came."""
    duration = view.duration
    while True:
        elapsed = time.monotonic() - started
        view.show(_demo_runs(engine, view.ids, began_db, limit=200), elapsed)
        if duration is not None and elapsed >= duration:
            return
        if stop.wait(min(0.5 if view.tty else 1.0, max(0.05, (duration or 1e9) - elapsed))):
            return


class _LiveView:
    """On a terminal, one frame redrawn in place; otherwise one plain line per finished run, each
    printed once (a pipe or a log file gets no escape codes)."""

    def __init__(self, ctx: Any, jobs: dict[str, Any], events: deque[str], duration: float | None,
                 tty: bool) -> None:
        self.ctx = ctx
        self.jobs = jobs
        self.events = events
        self.duration = duration
        self.tty = tty
        self.ids = {j.id: j.name for j in jobs.values()}
        self._shown: set[str] = set()
        self._drawn = 0

    def show(self, runs: list[Any], elapsed: float) -> None:
        if self.tty:
            self._redraw(runs, elapsed)
        else:
            self._print_finished(runs)

    def _redraw(self, runs: list[Any], elapsed: float) -> None:
        frame = _frame(self.jobs, runs, self.events, elapsed, self.duration, self.ctx)
        width = shutil.get_terminal_size((100, 30)).columns
        lines = [line[:width] for line in frame]
        sys.stdout.write((f"\x1b[{self._drawn}F" if self._drawn else "") + "\x1b[J" + "\n".join(lines) + "\n")
        sys.stdout.flush()
        self._drawn = len(lines)

    def _print_finished(self, runs: list[Any]) -> None:
        for run in sorted(runs, key=lambda r: r.started_at):
            if run.finished and run.id not in self._shown:
                self._shown.add(run.id)
                print(f"{run.started_at.astimezone(UTC):%H:%M:%S}  {self.ids[run.scheduled_job_id]:<13} "
                      f"{run.status.value:<10} {fmt_ms(run.duration_ms):>7}  {clip(_summary_line(run), 70)}",
                      flush=True)


def _print_summary(runs: list[Any], jobs: dict[str, Any], ids: dict[str, str], total: float) -> None:
    """Runs by status, a table per demo job, and what to try next."""
    by_status: dict[str, int] = {}
    for run in runs:
        by_status[run.status.value] = by_status.get(run.status.value, 0) + 1
    print("")
    print(f"demo finished after {total:.1f} s: {len(runs)} runs "
          f"({', '.join(f'{n} {s.lower()}' for s, n in sorted(by_status.items())) or 'none'}) across {len(jobs)} jobs")
    print(table(["JOB", "SCHEDULE", "RUNS", "COMPLETED", "FAILED"],
                [[spec["name"], spec["every"], sum(1 for r in runs if ids[r.scheduled_job_id] == spec["name"]),
                  sum(1 for r in runs if ids[r.scheduled_job_id] == spec["name"] and r.status.value == "Completed"),
                  sum(1 for r in runs if ids[r.scheduled_job_id] == spec["name"] and r.status.value != "Completed")]
                 for spec in DEMO_JOBS]))
    print("")
    print("The demo jobs are paused; their history is kept. Next:")
    print("  mjsched runs                 # the run history")
    print("  mjsched status               # engines, due, running, failing")
    print("  mjsched jobs list            # the jobs; `mjsched jobs resume demo-shell` and `mjsched run` to go on")


def _frame(jobs: dict[str, Any], runs: list[Any], events: deque[str], elapsed: float,
           duration: float | None, ctx: Any) -> list[str]:
    lines = []
    if duration:
        done = min(1.0, elapsed / duration)
        bar = "#" * int(done * 30) + "." * (30 - int(done * 30))
        lines.append(f"mjsched demo  [{bar}] {elapsed:4.0f}/{duration:.0f} s   (Ctrl-C to stop)")
    else:
        lines.append(f"mjsched demo  {elapsed:4.0f} s   (Ctrl-C to stop)")
    lines.append(f"database: {ctx.describe_database()}")
    lines.append("")
    counts = {name: [0, 0, 0] for name in jobs}
    names = {j.id: j.name for j in jobs.values()}
    for run in runs:
        c = counts[names[run.scheduled_job_id]]
        if run.status.value == "Running":
            c[2] += 1
        elif run.status.value == "Completed":
            c[0] += 1
        else:
            c[1] += 1
    lines.extend(table(["JOB", "SCHEDULE", "COMPLETED", "FAILED", "RUNNING"],
                       [[spec["name"], spec["every"], *counts[spec["name"]]] for spec in DEMO_JOBS]).splitlines())
    lines.append("")
    recent = sorted(runs, key=lambda r: r.started_at, reverse=True)[:8]
    if recent:
        lines.extend(table(["STARTED (UTC)", "JOB", "STATUS", "DURATION", "OUTPUT / ERROR"],
                           [[f"{r.started_at.astimezone(UTC):%H:%M:%S}", names[r.scheduled_job_id], r.status.value,
                             fmt_ms(r.duration_ms), clip(_summary_line(r), 60)] for r in recent]).splitlines())
    else:
        lines.append("waiting for the first runs (the shell job fires every 5 s)...")
    if events:
        lines.append("")
        lines.append("log (warnings and notifications):")
        lines.extend("  " + clip(e, 110) for e in events)
    return lines
