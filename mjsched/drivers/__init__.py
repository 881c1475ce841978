"""Job drivers: the contract, the registry and the built-in drivers."""
from .base import BaseScheduledJob, ExecutionContext, JobResult, Notification
from .registry import get_driver, register_driver, registered_drivers

__all__ = [
    "BaseScheduledJob", "ExecutionContext", "JobResult", "Notification",
    "get_driver", "register_driver", "registered_drivers",
]
