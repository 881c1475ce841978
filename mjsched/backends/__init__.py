"""Database gateways, one per dialect, behind the ``Backend`` contract."""
from .base import Backend, Completion, Listener, SweepResult, open_backend, redact

__all__ = ["Backend", "Completion", "Listener", "SweepResult", "open_backend", "redact"]
