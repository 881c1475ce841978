"""What each page shows, read through the named SQL of ``queries.py``.

Functions of a :class:`Reader` return plain dicts and lists for the templates; secrets
are masked here (``mjsched.redaction``), before anything reaches a template.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable, Sequence

from ..backends.base import Backend
from ..decoding import Undecodable, decode_json
from ..liveness import engine_state
from ..redaction import redact, redact_text, secret_values
from ..set_aside import set_aside_jobs
from . import humanize
from .queries import QUERIES

JOB_STATUSES = ("Pending", "Active", "Paused", "Disabled", "Expired")
RUN_STATUSES = ("Queued", "Running", "Completed", "Failed", "Timeout", "Cancelled", "Abandoned", "Skipped")
FINISHED = frozenset({"Completed", "Failed", "Timeout", "Cancelled", "Abandoned"})
PAGE_SIZE = 50
RECENT_RUNS = 20          # the jobs page's success rate and sparkline are over this many runs


def like_pattern(text: str) -> str:
    """A substring pattern for ILIKE / LIKE ... ESCAPE '\\', with the user's ``%``, ``_`` (and SQL
    Server's ``[``) taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").replace("[", "\\[")
    return "%" + escaped + "%"


_NAMED = re.compile(r"%\((\w+)\)s")


def positional(query: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """``%(name)s`` placeholders as pyodbc's ``?``, with the values in the order they appear."""
    values: list[Any] = []

    def one(match: re.Match[str]) -> str:
        values.append(params[match.group(1)])
        return "?"

    return _NAMED.sub(one, query), values


def fold_recent(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """SQL Server's jobs page (one row per recent run, oldest first within a job) folded into
    PostgreSQL's shape: one row per job with its recent runs as lists."""
    jobs: dict[Any, dict[str, Any]] = {}
    for row in rows:
        key = str(row["id"])
        job = jobs.get(key)
        if job is None:
            job = {k: v for k, v in row.items() if not k.startswith("run_")}
            job.update(statuses=[], durations=[], completed=[], errors=[])
            jobs[key] = job
        if row.get("run_status") is not None:
            job["statuses"].append(row["run_status"])
            job["durations"].append(row["run_duration_ms"])
            job["completed"].append(row["run_completed_at"])
            job["errors"].append(row["run_error"])
    return list(jobs.values())


def json_text(stored: Any, field: str, indent: int | None = None, known: Iterable[str] = ()) -> str:
    """A stored JSON column as masked text for a page ('' when empty; ``known``: the job's own
    secret values, masked too); a value that cannot be decoded (mjsched/decoding.py) shows as
    such, "<undecodable: nesting deeper than 64 levels>"."""
    value = decode_json(stored, field)
    if isinstance(value, Undecodable):
        return str(value)
    if not value:
        return ""
    return json.dumps(redact(value, known), indent=indent, sort_keys=True, default=str)


def seconds(value: Any) -> float | None:
    if value is None:
        return None
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@dataclass
class Page:
    number: int
    size: int
    has_next: bool
    total: int | None = None

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def pages(self) -> int | None:
        return None if self.total is None else max(1, -(-self.total // self.size))


def _resolved_cron(job: dict[str, Any]) -> str | None:
    """The job's cron with its H items resolved for its name, when it has any (else None)."""
    from ..cron import CronSchedule, uses_hash

    cron = job.get("cron_expression")
    if not uses_hash(cron):
        return None
    try:
        return CronSchedule.parse(cron, job.get("timezone") or "UTC", seed=job.get("name")).resolved
    except Exception:  # noqa: BLE001 - an unusable schedule: the page says why elsewhere
        return None


class Reader:
    """The pages' reads over one backend (PostgreSQL)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.sql = QUERIES[backend.dialect]

    def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        if self.backend.dialect == "postgres":
            return self.backend.run_statement(f"dashboard {name}", self.sql[name], params)
        query, values = positional(self.sql[name], params)
        return self.backend.run_statement(f"dashboard {name}", query, values)

    def summary(self) -> dict[str, Any]:
        return self._rows("summary")[0]

    # -- jobs ----------------------------------------------------------------------------
    def jobs(self, *, status: str | None, search: str | None, page: int, now: datetime,
             tag: str | None = None) -> dict[str, Any]:
        rows = self._rows("jobs_page", status=status, search=like_pattern(search) if search else None, tag=tag,
                          limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE, recent=RECENT_RUNS)
        if self.backend.dialect != "postgres":
            rows = fold_recent(rows)
        total = int(rows[0]["total"]) if rows else 0
        jobs = [self._job_row(r, now) for r in rows]
        tagged = {j.id: j for j in self.backend.get_jobs([j["id"] for j in jobs])}   # tags and pause records
        for row in jobs:
            found = tagged.get(row["id"])
            row["tags"] = found.tags if found is not None else ()
            row["paused_until"] = found.paused_until if found is not None else None
        return {"jobs": jobs, "now": now, "page": Page(page, PAGE_SIZE, page * PAGE_SIZE < total, total)}

    def pause_record(self, job_id: str) -> dict[str, Any]:
        """The job's tags and, when pause_jobs paused it, who, why and until when."""
        found = self.backend.get_job(job_id)
        if found is None:
            return {"tags": (), "pause": None}
        pause = None if found.paused_at is None else {
            "at": found.paused_at, "by": found.paused_by, "user": found.paused_by_user,
            "reason": redact_text(found.pause_reason) if found.pause_reason else None, "until": found.paused_until}
        return {"tags": found.tags, "pause": pause}

    @staticmethod
    def _job_row(r: dict[str, Any], now: datetime) -> dict[str, Any]:
        statuses: Sequence[str] = r.get("statuses") or []
        durations = r.get("durations") or []
        completed = r.get("completed") or []
        errors = r.get("errors") or []
        finished = [i for i, s in enumerate(statuses) if s in FINISHED]
        last = finished[-1] if finished else None
        ok = sum(1 for i in finished if statuses[i] == "Completed")
        return {
            **{k: r[k] for k in ("id", "name", "status", "cron_expression", "interval_seconds", "run_at",
                                 "timezone", "driver",
                                 "next_run_at", "last_run_at", "run_count", "locked_by_instance")},
            "id": str(r["id"]),
            "schedule_words": humanize.schedule_in_words(r),
            "running": r.get("expected_completion_at") is not None,
            "last_status": statuses[last] if last is not None else None,
            "last_when": completed[last] if last is not None else None,
            "last_error": redact_text(errors[last]) if last is not None and errors[last] else None,
            "success_rate": (100.0 * ok / len(finished)) if finished else None,
            "rate_over": len(finished),
            "sparkline": humanize.sparkline([d for i, d in enumerate(durations) if statuses[i] in FINISHED],
                                            label=f"last {len(finished)} durations"),
        }

    def set_aside(self, limit: int = 100) -> list[dict[str, Any]]:
        """Active jobs no engine will run until their schedule is fixed (mjsched/set_aside.py)."""
        return [{**dataclasses.asdict(job), "reason": redact_text(job.reason)}
                for job in set_aside_jobs(self.backend, limit=limit)]

    # -- one job ---------------------------------------------------------------------------
    def job(self, job_id: str) -> dict[str, Any] | None:
        rows = self._rows("job", job_id=job_id)
        if not rows:
            return None
        job = dict(rows[0])
        job["id"] = str(job["id"])
        configuration = decode_json(job.get("configuration"), "configuration")
        job["configuration_text"] = (str(configuration) if isinstance(configuration, Undecodable)
                                     else json_text(configuration, "configuration", indent=2) or "{}")
        job.pop("configuration", None)     # only its masked text reaches a template
        job["secret_values"] = (frozenset() if isinstance(configuration, Undecodable)    # for job_runs; popped
                                else secret_values(configuration or {}))                  # before rendering
        job["schedule_words"] = humanize.schedule_in_words(job)
        job["resolved_cron"] = _resolved_cron(job)
        return job

    def job_runs(self, job_id: str, *, status: str | None, page: int, known: frozenset[str] = frozenset()) \
            -> dict[str, Any]:
        """One page of the job's runs; ``known``: the job's secret values, masked where its runs show them."""
        rows = self._rows("job_runs", job_id=job_id, status=status, limit=PAGE_SIZE + 1,
                          offset=(page - 1) * PAGE_SIZE)
        return {"runs": [self._run_row(r, known) for r in rows[:PAGE_SIZE]],
                "page": Page(page, PAGE_SIZE, len(rows) > PAGE_SIZE)}

    def duration_chart(self, job_id: str, limit: int = 60) -> Any:
        rows = list(reversed(self._rows("job_durations", job_id=job_id, limit=limit)))
        return humanize.bar_chart([(r["started_at"].strftime("%Y-%m-%d %H:%M:%S"), r["duration_ms"], r["status"])
                                   for r in rows])

    @staticmethod
    def next_runs(cron: str | None, timezone: str, count: int = 10, *, job: dict[str, Any] | None = None,
                  jitter: Any = None) -> list[datetime]:
        """The next fire times of a cron, or of ``job``'s schedule whichever its kind; a cron's H
        and the jitter (``jitter``, else the job's) are hashed from ``job``'s name."""
        from ..schedules import next_run_times as schedule_times

        named = {"name": job.get("name"), "jitter": job.get("jitter_seconds") if jitter is None else jitter} \
            if job is not None else {}
        if job is not None and cron is None:
            if job.get("run_at") is not None:
                return schedule_times(run_at=job["run_at"], timezone=timezone, count=count)
            if job.get("interval_seconds") is not None:
                return schedule_times(every=job["interval_seconds"], timezone=timezone, count=count,
                                      start_at=job.get("start_at") or job.get("created_at"), **named)
            return []
        return schedule_times(str(cron), timezone, count=count, **named)

    # -- runs --------------------------------------------------------------------------------
    @staticmethod
    def _run_row(r: dict[str, Any], known: frozenset[str] = frozenset()) -> dict[str, Any]:
        row = dict(r)
        row["id"] = str(r["id"])
        row["scheduled_job_id"] = str(r["scheduled_job_id"])
        row["error_message"] = redact_text(r["error_message"], known) if r.get("error_message") else None
        row["details_text"] = json_text(r.get("details"), "details", known=known)[:2000]
        # execute_job(parameters=...): masked like configuration and details
        row["parameters_text"] = json_text(r.get("parameters"), "parameters", known=known)[:500]
        row["elapsed_s"] = seconds(r.get("elapsed"))
        row["lease_left_s"] = seconds(r.get("lease_left"))
        return row

    def running(self, limit: int = 200) -> list[dict[str, Any]]:
        return [self._run_row(r) for r in self._rows("runs_running", limit=limit)]

    def problems(self, limit: int = 50) -> list[dict[str, Any]]:
        return [self._run_row(r) for r in self._rows("runs_problems", limit=limit)]

    def runs_with_status(self, status: str, page: int) -> dict[str, Any]:
        name = "runs_queued" if status == "Queued" else "runs_by_status"
        rows = self._rows(name, status=status, limit=PAGE_SIZE + 1, offset=(page - 1) * PAGE_SIZE)
        return {"runs": [self._run_row(r) for r in rows[:PAGE_SIZE]],
                "page": Page(page, PAGE_SIZE, len(rows) > PAGE_SIZE)}

    # -- engines -------------------------------------------------------------------------------
    def engines(self, stale_after: float) -> list[dict[str, Any]]:
        out = []
        for r in self._rows("engines"):
            row = dict(r)
            row["silent_s"] = seconds(r["silent_for"])
            # mjsched.liveness: stale after 3 missed polls; dead at once if its pid is gone from
            # this host; ``stale_after`` only for engines that record no poll bound (older ones).
            row["state"] = engine_state({**row, "silent_for": row["silent_s"]}, lease_seconds=stale_after)
            out.append(row)
        return out

    # -- the one write that is not an engine method ---------------------------------------------
    def request_run(self, job_id: str) -> bool:
        """Make the job due now, if it is Active and not held by a live run (module doc)."""
        rows = self._rows("request_run", job_id=job_id)
        return bool(rows and rows[0].get("updated"))
