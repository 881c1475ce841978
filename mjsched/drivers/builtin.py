"""Imports the built-in drivers so that their ``@register_driver`` decorators run."""
from __future__ import annotations

from . import http, python, shell, sql  # noqa: F401

__all__ = ["http", "python", "shell", "sql"]
