"""The driver contract: what a job type implements, and what it is handed."""
from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, TypeVar

from ..models import Job, JobRun


@dataclass(frozen=True)
class JobResult:
    """What a driver reports. ``details`` must be JSON-serialisable."""

    success: bool = True
    error_message: str | None = None
    details: dict[str, Any] | None = None


@dataclass(frozen=True)
class Notification:
    subject: str
    body: str
    priority: str = "Normal"          # "Low" | "Normal" | "High"
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExecutionContext:
    """Handed to ``execute``. ``job`` is a frozen snapshot taken at claim time.

    ``heartbeat()`` renews this run's lease now and says whether it still holds
    it (False: the lease was taken over or the run timed out; stop working).
    ``cancel_event`` is set on timeout, on lease loss, at shutdown and when an
    operator cancels the run (``engine.cancel_run``); long drivers should check it.
    ``job.configuration`` is the job's configuration with the run's parameters merged
    over it (``run.parameters``: what ``execute_job(parameters=...)`` was given).
    ``cancel_grace`` is set (seconds) when an operator cancelled the run: how long a
    process-isolated run has between the cancel and SIGKILL.
    """

    job: Job
    run: JobRun
    cancel_event: threading.Event
    logger: logging.Logger
    heartbeat: Callable[[], bool] = lambda: True
    cancel_grace: float | None = None
    # Reads the run's fencing token from the database the first time a driver asks for it
    # (``fencing_token``): one read for the runs that use it, none for the others.
    fencing_source: Callable[[], int | None] | None = field(default=None, repr=False)

    @property
    def fencing_token(self) -> int | None:
        """This run's fencing token: an integer that grows with every start of the job (a
        later holder of the job always has a larger one); None for a run that has none.
        Hand it to what the job writes (compare-and-set on it): docs/guide/reliability.md."""
        if self.run.fencing_token is None and self.fencing_source is not None:
            token = self.fencing_source()
            if token is not None:
                self.run = dataclasses.replace(self.run, fencing_token=token)
        return self.run.fencing_token


class BaseScheduledJob:
    """Base class of every driver; a fresh instance runs each execution.

    Class attributes a driver may set:
    ``high_frequency_by_design`` silences the "fires more often than every 5
    minutes" warning; ``isolation`` ("thread" or "process") is the default for
    jobs of this type; ``default_max_runtime`` (seconds) applies when a job sets
    none; ``retry`` (a ``mjsched.RetryPolicy``) applies to jobs that have no
    policy of their own; ``configuration_keys`` names the top-level configuration keys
    the driver reads, so a run parameter that is none of them (a misspelt key, which
    would be merged and then ignored) is refused naming the nearest (mjsched/parameters.py);
    None (the default) declares nothing and leaves parameter keys unchecked.
    """

    high_frequency_by_design: ClassVar[bool] = False
    isolation: ClassVar[str] = "thread"
    default_max_runtime: ClassVar[float | None] = None
    retry: ClassVar[Any] = None   # a mjsched.RetryPolicy: the default of jobs without their own
    driver_name: ClassVar[str] = ""
    configuration_keys: ClassVar[frozenset[str] | None] = None

    def prepare_configuration(self, configuration: Mapping[str, Any],
                              field: str = "configuration") -> Mapping[str, Any]:
        """The configuration with the Python objects this driver takes in place of JSON values
        replaced by their JSON form (the python driver: a function by its path), or as given.
        Called where a job's configuration or a run's parameters are given, before they are
        checked and stored; an object that has no JSON form is a ConfigurationError under ``field``."""
        return configuration

    def validate_configuration(self, configuration: dict[str, Any]) -> None:
        """Raise ``ConfigurationError`` naming the key when ``configuration`` is unusable.

        Called where a job is written, which may be a process that cannot run it (the CLI
        on an operator's laptop): check the form here, not what only the engine's host has.
        """

    def check_can_run(self, configuration: dict[str, Any]) -> None:
        """Raise ``ConfigurationError`` when *this process* cannot run the job (a module it
        cannot import, say). ``execute_job`` calls it before any run is recorded, so a script
        run from the wrong directory is told so instead of recording a failed run."""

    def execute(self, context: ExecutionContext) -> JobResult:
        raise NotImplementedError

    def format_notification(self, context: ExecutionContext, result: JobResult) -> Notification:
        job, run = context.job, context.run
        state = outcome_words(getattr(run.status, "value", run.status), result.success)
        lines = [f"Job {job.name!r} ({job.id}) {state}.", f"Run: {run.id}"]
        if run.scheduled_for is not None:
            lines.append(f"Scheduled for: {run.scheduled_for.isoformat()}")
        if result.error_message:
            lines.append(f"Error: {result.error_message}")
        if result.details:
            lines.append(f"Details: {result.details}")
        return Notification(
            subject=f"[mjsched] {job.name} {state}",
            body="\n".join(lines),
            priority="Normal" if result.success else "High",
            metadata={"job_id": job.id, "run_id": run.id, "driver": job.driver},
        )


# How a notification words a run's final status ("Job 'x' was cancelled", not "failed").
_OUTCOME_WORDS = {"Completed": "succeeded", "Failed": "failed", "Timeout": "timed out",
                  "Cancelled": "was cancelled", "Abandoned": "was abandoned", "Skipped": "was skipped"}


def outcome_words(status: Any, success: bool) -> str:
    """The verb of a notification for a run that ended with ``status`` (a RunStatus value);
    a status without words of its own (a driver's run still Running) by ``success``."""
    return _OUTCOME_WORDS.get(str(status), "succeeded" if success else "failed")


_Driver = TypeVar("_Driver", bound=type[BaseScheduledJob])


def driver_named(name: str) -> Callable[[_Driver], _Driver]:
    """Class decorator of the built-in drivers: their name (``driver_name``); the registry
    registers them under it (drivers/builtin.py lists them), so no driver module imports it."""
    def decorate(cls: _Driver) -> _Driver:
        cls.driver_name = name
        return cls
    return decorate
