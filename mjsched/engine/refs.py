"""How a caller names a job: by id or by name, one rule for the API and the CLI.

A value that parses as a UUID (any form ``uuid.UUID`` reads: with or without hyphens or
braces, any case) is a job id; any other string is a job name, compared as the database
compares names (exactly in PostgreSQL; under the column's collation in SQL Server). A job
cannot be given a UUID-shaped name (validation refuses it), so the rule never hides a job.
An unknown id or name, or a value that is no string, raises JobNotFound naming the value.
"""
from __future__ import annotations

import uuid
from typing import Any

from .. import validation
from ..backends import Backend
from ..errors import ConfigurationError, JobNotFound
from ..models import Job


def as_job_id(value: Any) -> str | None:
    """The canonical id ``value`` stands for, or None when it is to be read as a name."""
    if not isinstance(value, (str, uuid.UUID)):
        raise JobNotFound(value)
    return validation.canonical_uuid(value)


def resolve_job(backend: Backend, ref: Any) -> Job:
    """The job ``ref`` (an id or a name) names; JobNotFound naming ``ref`` otherwise."""
    job_id = as_job_id(ref)
    if job_id is not None:
        job = backend.get_job(job_id)
        if job is None:
            raise JobNotFound(ref)
        return job
    return _by_name(backend, ref)


def resolve_job_id(backend: Backend, ref: Any) -> str:
    """The id ``ref`` names, without a read when it is an id already (a missing id is left to
    the call that uses it, as before names were accepted); a name is looked up."""
    job_id = as_job_id(ref)
    return job_id if job_id is not None else _by_name(backend, ref).id


def _by_name(backend: Backend, name: str) -> Job:
    jobs = backend.jobs_named(name)
    if not jobs:
        raise JobNotFound(name, by="name")
    if len(jobs) > 1:   # only on a schema older than 005_job_names, whose upgrade renames the copies
        raise ConfigurationError("job", name, f"{len(jobs)} jobs have this name (the schema is older than "
                                              f"005_job_names: run install() to resolve them); give the id "
                                              f"({', '.join(j.id for j in jobs[:5])})")
    return jobs[0]
