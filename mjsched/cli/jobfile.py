"""The declared-jobs file of ``mjsched jobs apply``: TOML, one table per job, keyed by its name.

    [jobs.nightly-report]
    driver = "shell"
    cron = "0 2 * * *"
    timezone = "Europe/Berlin"
    configuration = { command = ["./report.sh"], timeout = 600 }

Each table holds create_job's keywords (``name`` comes from the key; TOML refuses a key given
twice, so a name is declared once). Instants (start_at, end_at) are TOML date-times or ISO
8601 strings; one without an offset is read in the job's timezone, as ``jobs add`` reads them.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError
from . import tomlfile

INSTANT_FIELDS = ("start_at", "end_at", "run_at")


def load(path: str | Path) -> list[dict[str, Any]]:
    """The job declarations of the file at ``path``, in file order (ConfigurationError naming
    the file, and the job and key where there is one, when it cannot be used)."""
    where = str(path)
    data = tomlfile.read(path)
    unknown = sorted(set(data) - {"jobs"})
    if unknown:
        raise ConfigurationError(unknown[0], data[unknown[0]], f"{where}: unknown top-level key; the jobs go in "
                                                               "[jobs.NAME] tables")
    jobs = data.get("jobs", {})
    if not isinstance(jobs, dict):
        raise ConfigurationError("jobs", jobs, f"{where}: must be tables [jobs.NAME], one per job")
    out = []
    for name, table in jobs.items():
        if not isinstance(table, dict):
            raise ConfigurationError(f"jobs.{name}", table, f"{where}: must be a table of the job's fields")
        if "name" in table:
            raise ConfigurationError(f"jobs.{name}.name", table["name"],
                                     f"{where}: the table's key is the job's name; remove this key")
        out.append({"name": name, **_instants(name, table, where)})
    return out


def _instants(name: str, table: dict[str, Any], where: str) -> dict[str, Any]:
    fields = dict(table)
    zone = fields.get("timezone", "UTC")
    for key in INSTANT_FIELDS:
        value = fields.get(key)
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            except ValueError:
                raise ConfigurationError(f"jobs.{name}.{key}", fields[key],
                                         f"{where}: must be a date-time, e.g. 2030-01-31T09:00:00+01:00") from None
        if isinstance(value, datetime) and value.tzinfo is None and isinstance(zone, str):
            from ..cron import resolve_timezone

            value = value.replace(tzinfo=resolve_timezone(zone))
        if key in fields:
            fields[key] = value
    return fields
