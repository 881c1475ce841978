"""mjsched: cron-scheduled jobs out of a SQL database, safely, on one server or many.

Public names only; see README.md for the API and its "Architecture" section for the layout:
the core modules here (models, errors, cron, scheduling, validation, execution, isolation,
results, notify, metrics, ...), the engine (``mjsched.engine``), the gateways
(``mjsched.backends``), the drivers (``mjsched.drivers``), and the operator tooling the core
never imports (``mjsched.cli``, ``mjsched.web``). No import cycles at any level
(tests/unit/test_import_graph.py).
"""
from .audit import changes_by
from .drivers import BaseScheduledJob, ExecutionContext, JobResult, Notification, register_driver
from .engine import SchedulingEngine
from .errors import (AmbiguousRunId, CannotConnect, ConfigurationError, DatabaseError, EngineForked, EngineStopped,
                     InvalidCronExpression, JobNameTaken, JobNotActive, JobNotFound, LockNotAcquired,
                     RunNotCancellable, RunNotFound, SchedulerError, SchemaNotInstalled, UnknownDriver,
                     UnknownParameter, UnknownTimezone)
from .models import (ConcurrencyMode, DispatchResult, FieldChange, Isolation, Job, JobChange, JobRun, JobStatus,
                     MissedRunPolicy, RunStatus, SyncResult)
from .notify import CompositeNotifier, LoggingNotifier, Notifier, SmtpNotifier, WebhookNotifier
from .schedules import next_run_times
from .retry import RetryPolicy
from .version import __version__
from .why import REASON_CODES, Reason, WhyReport

__all__ = [
    "AmbiguousRunId", "BaseScheduledJob", "CannotConnect", "CompositeNotifier", "ConcurrencyMode",
    "ConfigurationError", "DatabaseError", "DispatchResult", "EngineForked", "EngineStopped", "ExecutionContext",
    "FieldChange", "InvalidCronExpression", "Isolation", "Job", "JobChange", "JobNameTaken", "JobNotActive",
    "JobNotFound",
    "JobResult", "JobRun", "JobStatus", "LockNotAcquired", "LoggingNotifier", "MissedRunPolicy",
    "Notification", "Notifier", "RetryPolicy", "RunNotCancellable", "RunNotFound", "RunStatus", "SchedulerError",
    "SchedulingEngine", "SchemaNotInstalled", "SmtpNotifier", "SyncResult", "UnknownDriver", "UnknownParameter",
    "UnknownTimezone", "WebhookNotifier", "__version__", "changes_by", "next_run_times", "register_driver",
    "REASON_CODES", "Reason", "WhyReport",
]
