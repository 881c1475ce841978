"""Job drivers: the contract, the registry and the built-in drivers.

  base.py      BaseScheduledJob, ExecutionContext, JobResult, Notification (the contract)
  registry.py  register_driver / get_driver; registers the built-ins at its first lookup
               (or when an engine starts polling)
  builtin.py   the built-in drivers by name; shell, python, sql, http, celery: one module each

May import: models, errors (and the libraries a driver speaks to, lazily where optional).
Never the engine, the backends, the CLI or the dashboard; a driver module never imports the
registry (tests/unit/test_import_graph.py).
"""
from .base import BaseScheduledJob, ExecutionContext, JobResult, Notification
from .registry import get_driver, register_driver, registered_drivers

__all__ = [
    "BaseScheduledJob", "ExecutionContext", "JobResult", "Notification",
    "get_driver", "register_driver", "registered_drivers",
]
