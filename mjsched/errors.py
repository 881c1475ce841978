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

    def __init__(self, job_id: Any, status: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job_id={job_id!r}: status is {status}, not Active (pass force=True to run it anyway)")


class RunNotFound(SchedulerError, LookupError):
    """The run id does not name a run in the database."""

    def __init__(self, run_id: Any) -> None:
        self.run_id = run_id
        super().__init__(f"run_id={run_id!r}: no such run")


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
