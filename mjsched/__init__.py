"""mjsched: cron-scheduled jobs out of a SQL database, safely, on one server or many.

Public names only; see README.md for the API.
"""
from .cron import next_run_times
from .drivers import BaseScheduledJob, ExecutionContext, JobResult, Notification, register_driver
from .engine import SchedulingEngine
from .errors import (ConfigurationError, DatabaseError, InvalidCronExpression, JobNotActive, JobNotFound, LockNotAcquired,
                     SchedulerError, SchemaNotInstalled, UnknownDriver, UnknownTimezone)
from .models import (ConcurrencyMode, DispatchResult, Isolation, Job, JobRun, JobStatus, MissedRunPolicy,
                     RunStatus)
from .notify import CompositeNotifier, LoggingNotifier, Notifier, SmtpNotifier, WebhookNotifier
from .version import __version__

__all__ = [
    "BaseScheduledJob", "CompositeNotifier", "ConcurrencyMode", "ConfigurationError", "DatabaseError",
    "DispatchResult", "ExecutionContext", "InvalidCronExpression", "Isolation", "Job", "JobNotActive", "JobNotFound",
    "JobResult", "JobRun", "JobStatus", "LockNotAcquired", "LoggingNotifier", "MissedRunPolicy",
    "Notification", "Notifier", "RunStatus", "SchedulerError", "SchedulingEngine", "SchemaNotInstalled",
    "SmtpNotifier", "UnknownDriver", "UnknownTimezone", "WebhookNotifier", "__version__",
    "next_run_times", "register_driver",
]
