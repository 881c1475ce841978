"""Which mjsched routines belong to which database role (sql/<dialect>/grants.sql).

The engine role may run jobs: claim, renew, complete, sweep, purge run history, execute_job, reschedule,
register itself, release its host's dead engines' locks, probe its permissions. The admin
role may define jobs: every other routine that is not internal (create/update/delete a job,
job types, force_unlock_job, cancel_run). grants.sql holds the same list (tests/unit/test_privileges.py
compares them), so the start-up probe can tell "may not define jobs" (expected for an
engine) from "may not run jobs" (dispatch will fail).
"""
from __future__ import annotations

from typing import Iterable

ENGINE_ROUTINES = frozenset({
    "acquire_job_lock", "advance_job", "begin_job_run", "check_fence", "check_lease", "check_test_clock",
    "claim_due_jobs", "complete_job_run", "complete_job_runs", "complete_runs", "engines_holding_locks",
    "enqueue_job_run", "extend_job_leases", "initialize_next_run", "initialize_next_runs",
    "internal_routines", "lease_interval", "probe_permissions", "register_engine",
    "release_engine_locks", "release_job_lock", "renew_leases", "start_manual_run",
    "sweep_expired_leases", "unregister_engine", "note_frequency_warned", "cancel_requests", "purge_runs", "purge_job_changes",
    "evaluate_alerts",
})

# What the admin role gets today (grants.sql grants it every non-internal routine outside
# ENGINE_ROUTINES, so a routine added later is an admin one until it is listed above).
ADMIN_ROUTINES = frozenset({
    "cancel_run", "check_job_fields", "delete_job", "ensure_job_type", "force_unlock_job", "insert_job",
    "set_job_alerts", "update_job", "pause_jobs", "resume_jobs", "set_tag_limit",
})


def split_missing(missing: Iterable[str]) -> tuple[list[str], list[str]]:
    """(engine routines, other routines) among those the role may not execute, sorted."""
    names = sorted(set(missing))
    return [n for n in names if n in ENGINE_ROUTINES], [n for n in names if n not in ENGINE_ROUTINES]
