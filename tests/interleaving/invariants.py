"""The invariants checked on the whole database after every round.

(I1) at most one Running run per Skip/Queue job.
(I2) every Running run of a Skip/Queue job has its job locked by the same token.
(I3) at most one run per (job, tick, attempt) (scheduled_for not NULL); with retries (009)
     also: every later attempt of a tick follows a Failed or Timeout attempt of it, and a
     tick has at most one attempt pending (Queued or Running).
(I4) a job's Queued ticks (attempt 1; retries take no queue slot) are at most
     max_queued_runs, and every Queued tick is later
     than the start of each run of its job that had started before the tick was queued
     (r.started_at < q.queued_at implies q.scheduled_for > r.started_at): only ticks that
     came due while the job ran are queued, never one older than the run then in progress.
(I5) a token extend_job_leases reported renewed has, after the round, its Running runs'
     leases and (for a run of a Skip/Queue job, or whenever the job is still locked by it)
     its job lock extended to at least the call's now + lease -- unless another call of the
     same round was that token's own holder ending or freeing it (a completion, a release,
     an advance, release_engine_locks of its engine, an operator unlock) or deleted its job.
(I6) job statistics equal the counts of finished runs: run_count = runs Completed, Failed,
     Timeout, Cancelled or Abandoned; success_count = Completed; failure_count = the others
     (every job's history is created by the harness, with matching statistics).
(I7) no deadlock: SQLSTATE 40P01 (and serialization failures, 40001) are counted per call.
(I8) no tick run of a Queue job starts while a tick of it waits Queued: a Running tick run
     (attempt 1, not taken from the queue: queued_at NULL) never started after a Queued tick of
     its job was queued (q.queued_at < r.started_at) -- the queue is served first, oldest tick
     first (claim_ticks re-checks "no Queued tick" under the job's row lock).
(I10) never more runs of a tag's jobs Running at once than the tag's limit (tag_limit,
     010_tags.sql): the Running runs the claims started (scheduled_for not NULL) of the jobs
     carrying a limited tag are at most its max_running. (Manual runs are never held back, so
     they are not counted here; the claims count them.) The arena tags every other job of each
     state and sets the limit to the tag's Running tick runs, or one more, so every round starts
     at or one below the limit.
(I9) a job's ticks are served in increasing order: no tick run that a claim started (attempt 1,
     queued_at NULL) is of a tick earlier than a run of its job that existed before it started
     (queued or started earlier) -- so a next_run_at moved back over a tick whose run the purge
     deleted never runs that tick again.

The SQL is written for both dialects (CAST, CASE, no FILTER, no ::).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Sequence

from tests.interleaving.catalogue import Call
from tests.interleaving.states import LEASE, State

ID = "CAST({} AS varchar(36))"
RUN = "mjsched.scheduled_job_run"
JOB = "mjsched.scheduled_job"
LOCKING = "('Skip', 'Queue')"
ATTEMPT = "{}.attempt"

TABLE_CHECKS = f"""
SELECT 'I1' AS inv, {ID.format('r.scheduled_job_id')} AS job_id, CAST(NULL AS varchar(36)) AS run_id,
       CAST(count(*) AS bigint) AS a, CAST(NULL AS bigint) AS b
  FROM {RUN} r JOIN {JOB} j ON j.id = r.scheduled_job_id
 WHERE r.status = 'Running' AND j.concurrency_mode IN {LOCKING}
 GROUP BY r.scheduled_job_id HAVING count(*) > 1
UNION ALL
SELECT 'I2', {ID.format('j.id')}, {ID.format('r.id')}, NULL, NULL
  FROM {RUN} r JOIN {JOB} j ON j.id = r.scheduled_job_id
 WHERE r.status = 'Running' AND j.concurrency_mode IN {LOCKING}
   AND (j.lock_token IS NULL OR j.lock_token <> r.lock_token)
UNION ALL
SELECT 'I3', {ID.format('r.scheduled_job_id')}, NULL, CAST(count(*) AS bigint), NULL
  FROM {RUN} r WHERE r.scheduled_for IS NOT NULL
 GROUP BY r.scheduled_job_id, r.scheduled_for, {ATTEMPT.format('r')} HAVING count(*) > 1
UNION ALL
SELECT 'I3', {ID.format('r.scheduled_job_id')}, {ID.format('r.id')}, CAST({ATTEMPT.format('r')} AS bigint), NULL
  FROM {RUN} r
 WHERE {ATTEMPT.format('r')} > 1
   AND NOT EXISTS (SELECT 1 FROM {RUN} p
                    WHERE p.scheduled_job_id = r.scheduled_job_id AND p.scheduled_for = r.scheduled_for
                      AND {ATTEMPT.format('p')} = {ATTEMPT.format('r')} - 1 AND p.status IN ('Failed', 'Timeout'))
UNION ALL
SELECT 'I3', {ID.format('r.scheduled_job_id')}, NULL, CAST(count(*) AS bigint), NULL
  FROM {RUN} r WHERE r.scheduled_for IS NOT NULL AND r.status IN ('Queued', 'Running')
 GROUP BY r.scheduled_job_id, r.scheduled_for HAVING count(*) > 1
UNION ALL
SELECT 'I4', {ID.format('j.id')}, NULL, CAST(count(*) AS bigint), CAST(j.max_queued_runs AS bigint)
  FROM {RUN} q JOIN {JOB} j ON j.id = q.scheduled_job_id
 WHERE q.status = 'Queued' AND {ATTEMPT.format('q')} = 1
 GROUP BY j.id, j.max_queued_runs HAVING count(*) > j.max_queued_runs
UNION ALL
SELECT 'I4', {ID.format('q.scheduled_job_id')}, {ID.format('q.id')}, NULL, NULL
  FROM {RUN} q
 WHERE q.status = 'Queued' AND {ATTEMPT.format('q')} = 1
   AND EXISTS (SELECT 1 FROM {RUN} r
                WHERE r.scheduled_job_id = q.scheduled_job_id AND r.status <> 'Queued'
                  AND r.started_at < q.queued_at AND q.scheduled_for <= r.started_at)
UNION ALL
SELECT 'I8', {ID.format('r.scheduled_job_id')}, {ID.format('r.id')}, NULL, NULL
  FROM {RUN} r JOIN {JOB} j ON j.id = r.scheduled_job_id
 WHERE j.concurrency_mode = 'Queue' AND r.status = 'Running' AND r.queued_at IS NULL
   AND r.scheduled_for IS NOT NULL AND {ATTEMPT.format('r')} = 1
   AND EXISTS (SELECT 1 FROM {RUN} q
                WHERE q.scheduled_job_id = r.scheduled_job_id AND q.status = 'Queued'
                  AND {ATTEMPT.format('q')} = 1 AND q.queued_at < r.started_at)
UNION ALL
SELECT 'I9', {ID.format('r.scheduled_job_id')}, {ID.format('r.id')}, NULL, NULL
  FROM {RUN} r
 WHERE r.queued_at IS NULL AND r.scheduled_for IS NOT NULL AND r.started_at IS NOT NULL
   AND {ATTEMPT.format('r')} = 1
   AND EXISTS (SELECT 1 FROM {RUN} e
                WHERE e.scheduled_job_id = r.scheduled_job_id AND e.scheduled_for > r.scheduled_for
                  AND coalesce(e.queued_at, e.started_at) < r.started_at)
UNION ALL
SELECT 'I6', {ID.format('j.id')}, NULL, CAST(j.run_count AS bigint), CAST(coalesce(c.n, 0) AS bigint)
  FROM {JOB} j LEFT JOIN (
        SELECT r.scheduled_job_id,
               sum(CASE WHEN r.status IN ('Completed', 'Failed', 'Timeout', 'Cancelled', 'Abandoned')
                        THEN 1 ELSE 0 END) AS n,
               sum(CASE WHEN r.status = 'Completed' THEN 1 ELSE 0 END) AS ok
          FROM {RUN} r GROUP BY r.scheduled_job_id) c ON c.scheduled_job_id = j.id
 WHERE j.run_count <> coalesce(c.n, 0) OR j.success_count <> coalesce(c.ok, 0)
    OR j.failure_count <> coalesce(c.n, 0) - coalesce(c.ok, 0)
"""
TAG_CHECK = f"""
UNION ALL
SELECT 'I10', CAST(NULL AS varchar(36)), CAST(NULL AS varchar(36)), CAST(count(*) AS bigint),
       CAST(l.max_running AS bigint)
  FROM mjsched.tag_limit l
  JOIN mjsched.job_tag g ON g.tag = l.tag
  JOIN {RUN} r ON r.scheduled_job_id = g.scheduled_job_id
 WHERE r.status = 'Running' AND r.scheduled_for IS NOT NULL
 GROUP BY l.tag, l.max_running HAVING count(*) > l.max_running
"""
TABLE_INVARIANTS = ("I1", "I2", "I3", "I4", "I6", "I8", "I9")
TAG_INVARIANTS = ("I10",)


def table_checks(retries: bool, tags: bool = False) -> str:
    """TABLE_CHECKS for a schema with retries (009), or for an older one (every run attempt 1);
    with ``tags`` (010) also the per-tag limit (I10)."""
    checks = TABLE_CHECKS + (TAG_CHECK if tags else "")
    return checks if retries else re.sub(r"\b[rpq]\.attempt\b", "1", checks)

WHAT = {
    "I1": "two Running runs of one Skip/Queue job",
    "I2": "a Running run of a Skip/Queue job whose job is not locked by its token",
    "I3": "two runs of one tick and attempt, a retry without a failed attempt before it, or two attempts "
          "of one tick pending at once",
    "I4": "Queued runs beyond max_queued_runs, or a queued tick older than a run then in progress",
    "I5": "a token reported renewed whose job lock or run lease was not extended",
    "I6": "job statistics differ from its finished runs",
    "I8": "a tick run of a Queue job started while a tick of it waited Queued",
    "I9": "a tick run started behind a later tick of its job that had a run already",
    "I10": "more runs of a tag's jobs Running than the tag's limit",
}


@dataclass(frozen=True)
class Violation:
    inv: str
    detail: str


@dataclass
class Outcome:
    """What one call did: its rows, or the SQLSTATE and message of its error."""
    rows: list[dict[str, Any]]
    sqlstate: str | None = None
    error: str | None = None
    seconds: float = 0.0
    timed_out: bool = False


def table_violations(rows: Sequence[dict[str, Any]], state: State) -> list[Violation]:
    kinds = {j.id: f"{j.kind}/{j.mode}" for j in state.jobs}
    return [Violation(r["inv"], f"{WHAT[r['inv']]}: job {kinds.get(str(r['job_id']), r['job_id'])} "
                                f"{'run ' + str(r['run_id'])[:8] + ' ' if r['run_id'] else ''}"
                                f"({r['a']}, {r['b']})") for r in rows]


def renewal_violations(calls: Sequence[Call], outcomes: Sequence[Outcome], state: State,
                       runs: dict[str, list[dict[str, Any]]], jobs: dict[str, dict[str, Any]]) -> list[Violation]:
    """I5, from the rows of the tokens' runs (by token) and their jobs (by id) read after the round."""
    excused = {t for c in calls for t in c.moves}
    freed = {c.frees_instance for c in calls if c.frees_instance}
    deleted = {c.params[0] for c in calls if c.op == "delete"}
    found: list[Violation] = []
    for call, outcome in zip(calls, outcomes):
        if call.op not in ("renew", "renew_skip") or outcome.sqlstate:
            continue
        deadline = call.params[3] + timedelta(seconds=LEASE)
        for row in outcome.rows:
            token = str(row["lock_token"]).lower()
            job = state.job_of_token(token)
            if token in excused or job is None or job.id in deleted:
                continue
            held = [r for r in job.running() if r.token == token]
            if any(r.instance in freed for r in held) or (job.token == token and job.locked_by in freed):
                continue
            db_job = jobs.get(job.id)
            for run in runs.get(token, []):
                if run["status"] != "Running":
                    found.append(Violation("I5", f"{job.kind}/{job.mode}: token {token[:8]} reported renewed "
                                                 f"but its run is {run['status']}"))
                elif run["lease_expires_at"] < deadline:
                    found.append(Violation("I5", f"{job.kind}/{job.mode}: token {token[:8]} reported renewed "
                                                 f"but its run lease ends {run['lease_expires_at']:%H:%M:%S.%f}"))
            must_hold = job.mode != "Concurrent" and bool(held)
            db_token = str(db_job["lock_token"]).lower() if db_job and db_job["lock_token"] else None
            if db_job is None:
                continue
            if must_hold and db_token != token:
                found.append(Violation("I5", f"{job.kind}/{job.mode}: token {token[:8]} reported renewed "
                                             f"but its job lock is {db_token and db_token[:8]}"))
            elif db_token == token and db_job["expected_completion_at"] < deadline:
                found.append(Violation("I5", f"{job.kind}/{job.mode}: token {token[:8]} reported renewed "
                                             f"but its job lock ends {db_job['expected_completion_at']:%H:%M:%S.%f}"))
    return found
