"""Celery helpers for the ``celery`` driver (extra ``mjsched[celery]``).

* :class:`DeduplicatedTask`: a task base class, for the workers, that refuses to execute a
  task id (and retry number) it has executed before, so a message sent again for the same
  mjsched run (same derived task id) runs once. Backed by Redis ``SET NX EX``.
* :func:`fencing_token`: the sending run's fencing token (task header
  ``mjsched_fencing_token``), for a compare-and-set in what the task writes.
* :func:`import_beat_schedule`: turns an app's ``beat_schedule`` into mjsched jobs,
  idempotently by name.

Limits of the guard, honestly: it remembers an id for ``mjsched_guard_ttl`` seconds (default
7 days) only; it marks an id when the task *starts*, so a worker that dies mid-task and has
its message redelivered (``acks_late``) does not run it again (at most once per id: pick
this guard for tasks where a double run is worse than a missed one). Such a refusal is
recorded as the task's FAILURE (:class:`AlreadyStarted`) unless the id already has a final
state or another worker process is still running it, so a ``wait`` run ends at once and
the job's retry policy sends the tick again as a new attempt (a new task id); it needs Redis (the
``mjsched_guard_url`` setting, else the app's Redis result backend, else its Redis broker)
and fails the task, rather than running it unguarded, when Redis cannot be reached.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery import Task
from celery.exceptions import Ignore

from ..forking import ProcessLock

log = logging.getLogger(__name__)

GUARD_PREFIX = "mjsched:celery:executed:"
DEFAULT_GUARD_TTL = 7 * 24 * 3600

_clients: dict[str, Any] = {}
_clients_lock = ProcessLock()


def guard_url(app: Any) -> str:
    """The Redis URL the guard uses for ``app``; ConfigurationError when there is none."""
    from ..errors import ConfigurationError

    conf = app.conf
    for value in (conf.get("mjsched_guard_url"), conf.result_backend, conf.broker_url):
        if isinstance(value, str) and value.split("://", 1)[0] in ("redis", "rediss"):
            return value
    raise ConfigurationError("mjsched_guard_url", conf.get("mjsched_guard_url"),
                             "the duplicate guard needs Redis: set app.conf.mjsched_guard_url = 'redis://...'")


def _client(url: str) -> Any:
    import redis

    with _clients_lock:
        if url not in _clients:
            _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
        return _clients[url]


def claim_execution(app: Any, task_id: str, retries: int = 0, owner: str = "") -> bool:
    """True the first time ``(task_id, retries)`` is claimed within the TTL, False after."""
    ttl = int(app.conf.get("mjsched_guard_ttl") or DEFAULT_GUARD_TTL)
    key = f"{GUARD_PREFIX}{task_id}:{retries}"
    return bool(_client(guard_url(app)).set(key, owner or "1", nx=True, ex=ttl))


class AlreadyStarted(Exception):
    """The FAILURE the guard records for a task id that started once and was not run again."""


def _running_elsewhere(app: Any, task_id: str, owner: str) -> bool:
    """Whether the worker that claimed ``task_id`` (``owner``) runs it now in another process
    (a redelivery while the first execution is alive: a long task past Redis' visibility
    timeout). No answer within 2 s counts as no: the owner is taken for dead."""
    if not owner:
        return False
    try:
        active = app.control.inspect(destination=[owner], timeout=2.0, limit=1).active() or {}
    except Exception:  # noqa: BLE001 - the control channel is best effort here
        return False
    me = os.getpid()
    return any(isinstance(entry, dict) and entry.get("id") == task_id and entry.get("worker_pid") != me
               for entries in active.values() for entry in entries or ())


def _record_refusal(task: Task, request: Any) -> None:
    """Store AlreadyStarted as the task's result, so a run waiting for it ends now; left alone
    when the id has a final state (it finished) or is still running elsewhere."""
    from celery.states import READY_STATES

    backend = task.backend
    if "DisabledBackend" in type(backend).__name__:
        return
    try:
        if backend.get_task_meta(request.id).get("status") in READY_STATES:
            return
        owner = _client(guard_url(task.app)).get(f"{GUARD_PREFIX}{request.id}:{int(request.retries or 0)}")
        owner = owner.decode() if isinstance(owner, bytes) else str(owner or "")
        if _running_elsewhere(task.app, request.id, owner):
            return
        backend.mark_as_failure(request.id, AlreadyStarted(
            f"task {request.id} started once already (on {owner or 'a worker'}); not run again by the mjsched "
            "duplicate guard: its worker was probably lost mid-task"), request=request, call_errbacks=False)
    except Exception:  # noqa: BLE001 - the refusal stands; only its record failed
        log.exception("task %s [%s]: could not record the guard's refusal", task.name, request.id)


class DeduplicatedTask(Task):
    """Refuses (Celery ``Ignore``, message acked) a task id it already ran, and records the
    refusal as the task's FAILURE when nobody else will give it an outcome.

    Use ``@app.task(base=DeduplicatedTask)`` or ``Celery(..., task_cls=DeduplicatedTask)``.
    A retry (``self.retry()``) keeps the task id; it is a new claim (the retry number is
    part of the key). A direct call (``task(...)``, not through a worker) is not guarded.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.id and not request.called_directly:
            if not claim_execution(self.app, request.id, int(request.retries or 0), str(request.hostname or "")):
                log.warning("task %s [%s] already executed (retry %s); refused by the mjsched duplicate guard",
                            self.name, request.id, request.retries)
                _record_refusal(self, request)
                raise Ignore()
        return super().__call__(*args, **kwargs)


def fencing_token(request: Any) -> int | None:
    """The fencing token of the mjsched run that sent this task (``self.request`` in a bound
    task), or None for a message mjsched did not send. A later run of the same job always
    sends a larger one: write with ``... WHERE fence < :token`` so a stale run's task writes
    nothing (docs/guide/reliability.md, "Fencing tokens")."""
    value = getattr(request, "mjsched_fencing_token", None)
    if value is None:
        headers = getattr(request, "headers", None)
        if isinstance(headers, dict):
            value = headers.get("mjsched_fencing_token")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        log.warning("task header mjsched_fencing_token=%r is not an integer; ignored", value)
        return None


# -- importing beat_schedule ----------------------------------------------------------------------
ROUTING_OPTIONS = ("queue", "routing_key", "priority")


@dataclass
class ImportResult:
    """What :func:`import_beat_schedule` did, by job name; ``refused`` maps a name to why."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"created": self.created, "updated": self.updated, "unchanged": self.unchanged,
                "refused": self.refused}


class Refused(Exception):
    """An entry of beat_schedule that has no faithful mjsched form (the message says why)."""


def _seconds_to_cron(seconds: float) -> str:
    """The cron that fires every ``seconds``, when clock-aligned steps can express it exactly."""
    if seconds <= 0 or seconds != int(seconds):
        raise Refused(f"interval {seconds:g}s is not a whole number of seconds")
    s = int(seconds)
    if s < 60 and 60 % s == 0:
        return "* * * * * *" if s == 1 else f"*/{s} * * * * *"
    if s % 60 == 0 and s < 3600 and 60 % (s // 60) == 0:
        m = s // 60
        return "* * * * *" if m == 1 else f"*/{m} * * * *"
    if s % 3600 == 0 and s < 86400 and 24 % (s // 3600) == 0:
        h = s // 3600
        return "0 * * * *" if h == 1 else f"0 */{h} * * *"
    if s == 86400:
        return "0 0 * * *"
    raise Refused(f"interval {timedelta(seconds=s)} does not divide a minute, an hour or a day evenly, so no cron "
                  "fires at that rate; give the entry a crontab (or an interval such as 15 s, 5 min, 6 h)")


def _timezone_name(app: Any) -> str:
    zone = app.conf.timezone
    if zone is None:
        return "UTC"
    return str(getattr(zone, "key", zone))


def schedule_to_cron(schedule: Any, app: Any) -> tuple[str, str]:
    """``(cron, timezone)`` for a beat schedule; :class:`Refused` when there is none."""
    from celery.schedules import crontab, schedule as interval, solar

    if isinstance(schedule, solar):
        raise Refused(f"solar schedule {schedule.event!r} (sunrise/sunset at a place) has no cron form")
    if isinstance(schedule, crontab):
        fields = [schedule._orig_minute, schedule._orig_hour, schedule._orig_day_of_month,
                  schedule._orig_month_of_year, schedule._orig_day_of_week]
        cron = " ".join(str(f).replace(" ", "") for f in fields)
        if cron.split()[2] != "*" and cron.split()[4] != "*":
            raise Refused(f"crontab {cron!r} restricts both day_of_month and day_of_week: Celery fires when both "
                          "match, cron when either does; split it into two entries or drop one field")
        return cron, _timezone_name(app)
    if isinstance(schedule, interval):
        return _seconds_to_cron(schedule.run_every.total_seconds()), _timezone_name(app)
    if isinstance(schedule, timedelta):
        return _seconds_to_cron(schedule.total_seconds()), _timezone_name(app)
    if isinstance(schedule, (int, float)) and not isinstance(schedule, bool):
        return _seconds_to_cron(float(schedule)), _timezone_name(app)
    raise Refused(f"schedule of type {type(schedule).__name__} is not understood (crontab, timedelta or seconds)")


def beat_entry_to_job(name: str, entry: dict[str, Any], app: Any, app_path: str, mode: str) -> dict[str, Any]:
    """The job (name, cron, timezone, configuration) one beat_schedule entry stands for."""
    import json

    if not isinstance(entry, dict) or not isinstance(entry.get("task"), str):
        raise Refused("entry has no 'task' name")
    if "schedule" not in entry:
        raise Refused("entry has no 'schedule'")
    cron, zone = schedule_to_cron(entry["schedule"], app)
    args = entry.get("args") or []
    kwargs = entry.get("kwargs") or {}
    try:
        args = json.loads(json.dumps(list(args)))
        kwargs = json.loads(json.dumps(dict(kwargs)))
    except (TypeError, ValueError) as exc:
        raise Refused(f"args/kwargs are not JSON values (mjsched stores them as JSON): {exc}") from exc
    configuration: dict[str, Any] = {"app": app_path, "task": entry["task"], "args": args, "kwargs": kwargs,
                                     "mode": mode}
    for key, value in (entry.get("options") or {}).items():
        if key not in ROUTING_OPTIONS:
            raise Refused(f"option {key!r} has no equivalent in the celery driver (supported: "
                          f"{', '.join(ROUTING_OPTIONS)})")
        if value is not None:
            configuration[key] = value
    return {"name": name, "cron": cron, "timezone": zone, "configuration": configuration}


def load_app_path(app_path: str) -> Any:
    """The Celery app ``"pkg.module:app"`` names (ConfigurationError naming it otherwise)."""
    from ..drivers.celery import load_app

    return load_app({"app": app_path})


def import_beat_schedule(app: Any, engine: Any, *, app_path: str | None = None, status: str = "Active",
                         mode: str = "send", dry_run: bool = False) -> ImportResult:
    """Create or update one ``celery`` job per ``app.conf.beat_schedule`` entry, by name.

    ``app`` is a Celery app (then ``app_path``, the ``"pkg.module:app"`` the engines import,
    is required) or that path. New jobs get ``status`` (``"Paused"`` for a switch-over
    without a gap or a double run: import paused, stop beat, resume); existing jobs keep
    theirs, and only their schedule and configuration are brought in line. Entries without a
    faithful cron form (solar, uneven intervals, unsupported options) are refused by name and
    nothing is written for them. Until ``engine.ensure_job`` exists the lookup is by
    ``list_jobs()``; two jobs of one name are refused rather than guessed between.
    """
    app, app_path = _checked_arguments(app, app_path, mode, status)
    schedule = app.conf.beat_schedule or {}
    by_name: dict[str, list[Any]] = {}
    for job in engine.list_jobs():
        by_name.setdefault(job.name, []).append(job)
    result = ImportResult()
    for name in sorted(schedule):
        try:
            spec = beat_entry_to_job(name, schedule[name], app, app_path, mode)
            _import_entry(engine, name, spec, by_name.get(name, []), result, app_path=app_path, status=status,
                          dry_run=dry_run)
        except Refused as exc:
            result.refused[name] = str(exc)
    log.info("celery beat import from %s: %d created, %d updated, %d unchanged, %d refused%s", app_path,
             len(result.created), len(result.updated), len(result.unchanged), len(result.refused),
             " (dry run)" if dry_run else "")
    return result


def _checked_arguments(app: Any, app_path: str | None, mode: str, status: str) -> tuple[Any, str]:
    """The app and the path the engines import it by (an app given as a path is loaded here)."""
    from ..drivers.celery import MODES
    from ..errors import ConfigurationError

    if isinstance(app, str):
        app_path, app = app, load_app_path(app)
    if not app_path:
        raise ConfigurationError("app_path", app_path, "give the 'pkg.module:app' path the engines import the app by")
    if mode not in MODES:
        raise ConfigurationError("mode", mode, "must be 'send' or 'wait'")
    if status not in ("Active", "Paused", "Disabled"):
        raise ConfigurationError("status", status, "must be Active, Paused or Disabled")
    return app, app_path


def _import_entry(engine: Any, name: str, spec: dict[str, Any], existing: list[Any], result: ImportResult, *,
                  app_path: str, status: str, dry_run: bool) -> None:
    """Create the entry's job, or bring the one job of its name in line (schedule, configuration)."""
    if len(existing) > 1:
        raise Refused(f"{len(existing)} jobs are named {name!r}; rename or delete all but one")
    if not existing:
        if not dry_run:
            engine.create_job(name, "celery", spec["cron"], spec["timezone"], configuration=spec["configuration"],
                              status=status, description=f"imported from celery beat ({app_path})")
        result.created.append(name)
        return
    job = existing[0]
    changes: dict[str, Any] = {}
    if job.driver != "celery":
        changes["driver"] = "celery"
    if job.cron_expression != spec["cron"]:
        changes["cron"] = spec["cron"]
    if job.timezone != spec["timezone"]:
        changes["timezone"] = spec["timezone"]
    if job.configuration != spec["configuration"] or "driver" in changes:
        changes["configuration"] = spec["configuration"]
    if not changes:
        result.unchanged.append(name)
        return
    if not dry_run:
        engine.update_job(job.id, **changes)
    result.updated.append(name)
