"""The built-in drivers, by name. The registry registers them at its first use; the driver
modules themselves never import the registry (no import cycle)."""
from __future__ import annotations

from .base import BaseScheduledJob
from .celery import CeleryJob
from .http import HttpJob
from .python import PythonJob
from .shell import ShellJob
from .sql import SqlJob

BUILTIN: dict[str, type[BaseScheduledJob]] = {
    "celery": CeleryJob,
    "http": HttpJob,
    "python": PythonJob,
    "shell": ShellJob,
    "sql": SqlJob,
}
