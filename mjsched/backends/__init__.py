"""Database gateways, one per dialect, behind the ``Backend`` contract, and ``open_backend``,
which picks the gateway for a DSN.

  base.py      the Backend contract (docstrings are the spec the SQL meets), shared row parsing
  postgres.py  PostgreSQL through psycopg2 (the only psycopg2 import)
  mssql.py, odbc.py  SQL Server through pyodbc (the only pyodbc imports)
  queries.py   the read queries by name, from sql/<dialect>/queries.sql (both dialects name the
               same ones: tests/unit/test_read_queries.py); the procedures are the lock rules
  pool.py, watchdog.py  connection pool, bounded calls

May import: models, errors, sqlfiles. ``base`` never imports the gateways (they import it).
"""
from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError
from ..extras import install_command
from ..redaction import redact_dsn as redact
from .base import Backend, Completion, Listener, SweepResult


def open_backend(dsn: str, **options: Any) -> Backend:
    """The backend for ``dsn``: ``postgresql://`` / ``postgres://`` or ``mssql://`` / ODBC."""
    if not isinstance(dsn, str) or not dsn.strip():
        raise ConfigurationError("dsn", dsn, "a database URL is required (postgresql://... or mssql://...)")
    lowered = dsn.strip().lower()
    if lowered.startswith(("postgresql://", "postgres://")) or (
            "=" in lowered and "driver=" not in lowered and ("dbname=" in lowered or "host=" in lowered)):
        from .postgres import PostgresBackend

        return PostgresBackend(dsn, **options)
    if lowered.startswith("mssql://") or "driver=" in lowered:
        try:
            from .mssql import MssqlBackend  # type: ignore[import-not-found]
        except ImportError as exc:
            hint = f" ({install_command('mssql')})" if getattr(exc, "name", None) == "pyodbc" else ""
            raise ConfigurationError("dsn", "mssql://...", "the SQL Server backend is not available: "
                                     f"{exc}{hint}") from exc
        return MssqlBackend(dsn, **options)
    raise ConfigurationError("dsn", redact(dsn), "unsupported scheme; use postgresql:// or mssql://")


__all__ = ["Backend", "Completion", "Listener", "SweepResult", "open_backend", "redact"]
