"""How a caller names a job (by id or by name) and a run (by id, a prefix, or its short id):
one rule for the API, the CLI and the dashboard.

A value that parses as a UUID (any form ``uuid.UUID`` reads: with or without hyphens or
braces, any case) is a job id; any other string is a job name, compared as the database
compares names (exactly in PostgreSQL; under the column's collation in SQL Server). A job
cannot be given a UUID-shaped name (validation refuses it), so the rule never hides a job.
An unknown id or name, or a value that is no string, raises JobNotFound naming the value.

A run is named by its id, by any prefix of it (hex digits; hyphens optional), or by the short
id listings show (``short_run_id``): the part of the id that differs from run to run. A run id
made by PostgreSQL is a UUID version 7, its first 12 hex digits the time it was made (the first
8 are the same for every run within about 65 s) and the rest random, so its short id is its last
12 hex digits; any other id (SQL Server's sequential ids, whose first 8 digits change at each
run and whose last 12 are the same on one server; random ids of installs before version 7) shows
its first 8. The database finds the runs a shortened id matches (query ``runs_by_ref``): one is
the run, none is RunNotFound and several are AmbiguousRunId listing them.
"""
from __future__ import annotations

import re
import uuid
from typing import Any

from .. import validation
from ..backends import Backend
from ..errors import AmbiguousRunId, ConfigurationError, JobNotFound, RunNotFound
from ..models import Job, JobRun

SHORT_TAIL = 12          # hex digits of a version-7 id's short id: its last group, all random
SHORT_HEAD = 8           # hex digits of any other id's short id: its first group
AMBIGUOUS_LISTED = 10    # candidates an AmbiguousRunId names
_HEX = re.compile(r"[0-9a-f]{1,32}")


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


def short_run_id(run_id: Any) -> str:
    """The part of a run id listings show (module doc): a version-7 id's last 12 hex digits, any
    other id's first 8. Unique among any listing in practice; either form is taken back
    wherever a run id is (``resolve_run``)."""
    text = str(run_id).lower()
    if len(text) == 36 and text[14] == "7" and text[19] in "89ab":
        return text[-SHORT_TAIL:]
    return text[:SHORT_HEAD]


def run_ref(value: Any) -> tuple[str, str | None]:
    """A shortened run id as the database looks it up: its hex digits (a prefix of the id
    without hyphens) and, for 12 digits, the same digits as a short id (the id's last 12).
    RunNotFound naming ``value`` when it is no hex text at all."""
    digits = value.strip().lower().replace("-", "") if isinstance(value, str) else ""
    if not _HEX.fullmatch(digits):
        raise RunNotFound(value)
    return digits, digits if len(digits) == SHORT_TAIL else None


def resolve_run(backend: Backend, ref: Any) -> JobRun:
    """The run ``ref`` (an id, a prefix of one, or a short id) names: RunNotFound naming ``ref``
    when none does, AmbiguousRunId listing the candidates when several do."""
    exact = validation.canonical_uuid(ref)
    if exact is not None:
        run = backend.get_run(exact)
        if run is None:
            raise RunNotFound(ref)
        return run
    digits, tail = run_ref(ref)
    runs = backend.runs_by_ref(digits, tail, limit=AMBIGUOUS_LISTED + 1)
    if not runs:
        raise RunNotFound(ref)
    if len(runs) > 1:
        raise AmbiguousRunId(ref, [r.id for r in runs[:AMBIGUOUS_LISTED]], more=len(runs) > AMBIGUOUS_LISTED)
    return runs[0]
