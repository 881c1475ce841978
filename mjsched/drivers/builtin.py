"""Imports the built-in drivers so that their ``@register_driver`` decorators run."""
from __future__ import annotations

from . import celery, http, python, shell, sql  # noqa: F401  (celery imports Celery lazily)

__all__ = ["celery", "http", "python", "shell", "sql"]
