"""One exception hierarchy for everything mjsched raises.

Every error a caller can provoke with bad input names the offending field and
value, so a message is enough to fix the call without reading our code.
"""
from __future__ import annotations

from typing import Any


class SchedulerError(Exception):
    """Base of every mjsched error."""


class ConfigurationError(SchedulerError, ValueError):
    """A value given to mjsched is not acceptable.

    ``field`` names the parameter or configuration key, ``value`` is what was
    given (shortened when huge, so logs stay readable).
    """

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={_short(value)}: {reason}")


class InvalidCronExpression(ConfigurationError):
    """A cron expression that cannot be parsed or never fires."""

    def __init__(self, value: Any, reason: str, field: str = "cron") -> None:
        super().__init__(field, value, reason)


class UnknownTimezone(ConfigurationError):
    """A timezone name that is not in the IANA database."""

    def __init__(self, value: Any, field: str = "timezone") -> None:
        super().__init__(field, value, "not a known IANA timezone (e.g. 'Europe/Berlin')")


class UnknownDriver(ConfigurationError):
    """No driver is registered under the given name."""

    def __init__(self, value: Any, known: list[str] | None = None) -> None:
        hint = f"; registered: {', '.join(sorted(known))}" if known else ""
        super().__init__("driver", value, "no driver registered under this name" + hint)


class JobNotFound(SchedulerError, LookupError):
    """The job id (or name) does not name a job in the database.

    ``by`` says how the value was looked up: "id" (a UUID, or a value that is no string) or
    "name" (any other string: see ``mjsched.engine.refs``)."""

    def __init__(self, job_id: Any, by: str = "id") -> None:
        self.job_id = job_id
        self.by = by
        how = " (not a UUID, so it was looked up as a name: no job has this name)" if by == "name" else ""
        super().__init__(f"job_id={job_id!r}: no such job{how}")


class UnknownParameter(ConfigurationError):
    """A run parameter (execute_job(parameters=...)) whose key is no configuration key of the
    job's driver: merged, it would be ignored, so the run would do what the job always does.
    ``key``, ``driver``, ``nearest`` (the closest known key, or None) and ``known``."""

    def __init__(self, key: str, value: Any, driver: str, known: Any, nearest: str | None,
                 field: str | None = None) -> None:
        self.key, self.driver, self.nearest, self.known = key, driver, nearest, sorted(known)
        hint = f"did you mean {nearest!r}? " if nearest else ""
        super().__init__(field or f"parameters.{key}", value, f"not a configuration key of the {driver} driver, so it "
                                                     f"would be ignored ({hint}its keys: {', '.join(self.known)})")


class JobNameTaken(ConfigurationError):
    """create_job, update_job or a rename gave a name another job has: job names are unique.

    ``existing_id`` is the id of the job that has it, when it could be read."""

    def __init__(self, name: Any, existing_id: str | None = None) -> None:
        self.name = name
        self.existing_id = existing_id
        holder = f" (job {existing_id})" if existing_id else ""
        super().__init__("name", name, f"another job already has this name{holder}; job names are unique: "
                                       "choose another, or use ensure_job() to create or update by name")


class LockNotAcquired(SchedulerError):
    """Another holder owns the job's lock and its lease has not expired."""

    def __init__(self, job_id: Any) -> None:
        self.job_id = job_id
        super().__init__(f"job_id={job_id!r}: lock is held by another holder")


class JobNotActive(SchedulerError):
    """execute_job on a job that is not Active (Paused, Disabled, Pending, Expired), without force."""

    def __init__(self, job_id: Any, status: str, remedy: str = "pass force=True to run it anyway") -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job_id={job_id!r}: status is {status}, not Active ({remedy})")


class RunNotFound(SchedulerError, LookupError):
    """The run id does not name a run in the database."""

    def __init__(self, run_id: Any) -> None:
        self.run_id = run_id
        super().__init__(f"run_id={run_id!r}: no such run")


class AmbiguousRunId(SchedulerError, LookupError):
    """A shortened run id (a prefix, or the short id ``mjsched runs`` shows) that more than one
    run's id matches. ``candidates``: the full ids of the first runs it matches (more may)."""

    def __init__(self, run_id: Any, candidates: list[str], more: bool = False) -> None:
        self.run_id = run_id
        self.candidates = list(candidates)
        self.more = more
        count = f"{len(self.candidates)}{' or more' if more else ''}"
        super().__init__(f"run_id={run_id!r}: ambiguous, {count} runs match ({', '.join(self.candidates)}"
                         f"{', ...' if more else ''}); give more of the id")


class RunNotCancellable(SchedulerError):
    """cancel_run on a run that already ended (Completed, Failed, Timeout, Cancelled, ...)."""

    def __init__(self, run_id: Any, status: str) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(f"run_id={run_id!r}: status is {status}; only a Queued or Running run can be cancelled")


class EngineStopped(SchedulerError, RuntimeError):
    """``dispatch_due_jobs`` or ``run_due_jobs`` on an engine whose polling was stopped
    (``state`` "stopped") or that was closed ("closed"): it starts no runs any more, so the
    call would claim nothing while due jobs wait. ``method`` names the call."""

    def __init__(self, method: str, state: str) -> None:
        self.method = method
        self.state = state
        remedy = ("call start_polling() to poll again" if state == "stopped"
                  else "make a new SchedulingEngine")
        super().__init__(f"{method}(): this engine was {state} and starts no runs any more; {remedy}")


class EngineForked(SchedulerError, RuntimeError):
    """A call on a SchedulingEngine in a process forked from the one that made it (gunicorn
    ``--preload``, uWSGI without ``lazy-apps``, ``os.fork``, multiprocessing's "fork"). The
    copy shares its parent's database connections and has none of its threads, so it never
    runs and never touches them; the engine works on in the process that made it.
    ``method`` names the call; ``parent_pid`` is that process (docs/guide/deployment.md)."""

    def __init__(self, method: str, parent_pid: int) -> None:
        self.method = method
        self.parent_pid = parent_pid
        super().__init__(
            f"{method}(): this SchedulingEngine was made in process {parent_pid} and this process is a fork "
            "of it, which shares its database connections; the copy refuses to run. Make and start the "
            "engine after the fork: in gunicorn's post_fork hook (or without --preload), with uWSGI's "
            "lazy-apps = true, or as a separate `mjsched run` service (docs/guide/deployment.md)")


class DatabaseError(SchedulerError):
    """The database failed or could not be reached (after retries).

    The driver's own exception is kept on ``__cause__``.
    """


class CannotConnect(DatabaseError):
    """No connection to the database server could be opened (after retries): the server is
    down or unreachable, or it refused the login.

    ``where`` is ``host:port``, ``reason`` the driver's explanation (no credentials), and
    ``operation`` the call that needed the connection (for logs; the message leaves it out)."""

    def __init__(self, where: str, reason: str, operation: str | None = None) -> None:
        self.where = where
        self.reason = reason
        self.operation = operation
        super().__init__(f"cannot connect to {where}: {reason}")


class SchemaNotInstalled(DatabaseError):
    """The mjsched schema is missing or older than this code needs."""


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 15] + f"...<{len(text)} chars>"


class PurgeBusy(SchedulerError):
    """prune_runs gave up: another session kept the run-history purge lock all along."""

    def __init__(self, waited: float) -> None:
        self.waited = waited
        super().__init__(f"another purge held the run-history purge lock for {waited:g}s; try again later")
