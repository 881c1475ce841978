-- 002_procedures, claims: one poll's claim (queued runs first, then due ticks), its replay and counters.

-- claim_due_jobs: in one transaction, lock up to p_max_jobs claimable jobs (jobs
-- with a Queued run first, then due ticks oldest first), skipping rows other engines
-- are claiming, and start their runs. A tick that already has a run (a zombie's,
-- say) comes back with run_id NULL: the caller only advances the schedule past it.
-- Taking over an expired lease abandons the old holder's Running runs (take_over).
-- Ended jobs are expired first, so a job past end_at is Expired at the next poll.
-- Each claim row also carries its job's row as the claim left it (read under the claim's
-- row lock, after it) and the job type's driver, so a poll is one round trip: every
-- column of scheduled_job but lock_token, which the engine and admin roles may not read
-- (grants.sql; the claim's own token is the row's lock_token). The last row always has
-- job_id NULL, no job columns, and carries db_now and next_due_at (the earliest instant
-- something may become claimable; NULL when nothing is scheduled), and replied_at: the
-- database clock as the claim ends (clock_timestamp(); p_now under a test clock). The engine
-- sets its clock estimate from it: from db_now (the transaction's start) the estimate ran
-- behind by the claim's own duration, and the poller woke that much after the next due instant.
--
-- Idempotent when the caller names the claim (p_claim_id, a fresh UUID per claim):
-- each lock token is then derived from (p_claim_id, job id), so a retry with the same
-- p_claim_id and p_replay = true -- the reply to the first call was lost, and it may or
-- may not have committed -- finds the claims that call made and answers them again,
-- claiming nothing new (claim_replay); when it finds none, the first call did not
-- commit and this one claims as usual. Without p_claim_id tokens are random and a lost
-- reply costs those jobs one lease.
--
-- Its result type grew the job columns, which CREATE OR REPLACE cannot change: the old
-- definition is dropped, and whoever could execute it (grants.sql's engine role) may
-- execute the new one, so engines keep claiming through the upgrade before grants.sql
-- runs again.
SELECT set_config('mjsched.claim_due_jobs_grantees',
                  coalesce((SELECT string_agg(a.grantee::text, ',')
                              FROM pg_proc p, aclexplode(p.proacl) a
                             WHERE p.oid = to_regprocedure('mjsched.claim_due_jobs(varchar, integer, double precision, '
                                                           'timestamptz, uuid, boolean)')
                               AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner), ''),
                  false);
DROP FUNCTION IF EXISTS mjsched.claim_due_jobs(varchar, integer, double precision, timestamptz, uuid, boolean);
CREATE FUNCTION mjsched.claim_due_jobs(
    p_instance varchar, p_max_jobs integer, p_lease_seconds double precision,
    p_now timestamptz DEFAULT NULL, p_claim_id uuid DEFAULT NULL, p_replay boolean DEFAULT false)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz,
               from_queue boolean, db_now timestamptz, next_due_at timestamptz,
               due_left integer, locked_out integer, replied_at timestamptz,
               job_type_id uuid, driver varchar, name varchar, description text, cron_expression varchar,
               timezone varchar, start_at timestamptz, end_at timestamptz, status varchar, configuration jsonb,
               owner varchar, concurrency_mode varchar, missed_run_policy varchar,
               run_immediately_if_never_run boolean, max_runtime_seconds double precision, isolation varchar,
               max_queued_runs integer, notify_on_success boolean, notify_on_failure boolean, notify_to varchar,
               next_run_at timestamptz, last_run_at timestamptz, last_success_at timestamptz, run_count integer,
               success_count integer, failure_count integer, last_duration_ms bigint, total_duration_ms bigint,
               locked_at timestamptz, locked_by_instance varchar, expected_completion_at timestamptz,
               created_at timestamptz, updated_at timestamptz, high_frequency_ok boolean, frequency_warned varchar,
               keep_runs_days integer, keep_runs_count integer, interval_seconds integer, run_at timestamptz,
               retry_max_attempts integer, retry_initial_delay double precision, retry_factor double precision,
               retry_max_delay double precision, retry_jitter double precision,
               notify_final_attempt_only boolean, retry_count integer, tags varchar,
               paused_at timestamptz, paused_by varchar, paused_by_user varchar, pause_reason varchar,
               paused_until timestamptz, jitter_seconds integer, priority integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_left integer := p_max_jobs;
    -- the claims, in order (replayed, then queued runs, then ticks), one array per column
    v_job_ids uuid[] := '{}'::uuid[];
    v_run_ids uuid[] := '{}'::uuid[];
    v_tokens uuid[] := '{}'::uuid[];
    v_for timestamptz[] := '{}'::timestamptz[];
    v_queued boolean[] := '{}'::boolean[];
    -- the tail row's values
    v_next timestamptz;
    v_due_left integer;
    v_locked_out integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_lease(p_lease_seconds);
    IF p_max_jobs IS NULL OR p_max_jobs < 0 OR p_max_jobs > 10000 THEN
        RAISE EXCEPTION 'max_jobs=% must be between 0 and 10000', p_max_jobs USING ERRCODE = '22023';
    END IF;
    -- Every poll is the engine's heartbeat in the registry (at most one write a second, and
    -- never waited for: note_engine_seen). The engine's own row comes first, before any job
    -- row, as in renew_tokens: one order.
    PERFORM mjsched.note_engine_seen(p_instance, v_now, 1);

    IF p_replay AND p_claim_id IS NOT NULL THEN
        SELECT v_job_ids || array_agg(c.job_id), v_run_ids || array_agg(c.run_id), v_tokens || array_agg(c.lock_token),
               v_for || array_agg(c.scheduled_for), v_queued || array_agg(c.from_queue)
          INTO v_job_ids, v_run_ids, v_tokens, v_for, v_queued
          FROM mjsched.claim_replay(p_instance, p_claim_id, v_now) c;
        IF cardinality(v_job_ids) > 0 THEN
            v_left := 0;
        END IF;
    END IF;
    PERFORM mjsched.expire_ended_jobs(v_now);
    -- Maintenance windows that have passed end here (010_tags.sql); one index probe otherwise.
    IF EXISTS (SELECT 1 FROM mjsched.job_pause p WHERE p.paused_until <= v_now) THEN
        PERFORM mjsched.resume_paused_jobs(v_now);
    END IF;
    IF v_left > 0 THEN
        SELECT v_job_ids || array_agg(c.job_id), v_run_ids || array_agg(c.run_id), v_tokens || array_agg(c.lock_token),
               v_for || array_agg(c.scheduled_for), v_queued || array_agg(c.from_queue)
          INTO v_job_ids, v_run_ids, v_tokens, v_for, v_queued
          FROM mjsched.claim_queued(p_instance, v_left, p_lease_seconds, v_now, p_claim_id) c;
        v_left := p_max_jobs - cardinality(v_job_ids);
    END IF;
    IF v_left > 0 THEN
        SELECT v_job_ids || array_agg(c.job_id), v_run_ids || array_agg(c.run_id), v_tokens || array_agg(c.lock_token),
               v_for || array_agg(c.scheduled_for), v_queued || array_agg(c.from_queue)
          INTO v_job_ids, v_run_ids, v_tokens, v_for, v_queued
          FROM mjsched.claim_ticks(p_instance, v_left, p_lease_seconds, v_now, p_claim_id) c;
        -- A round's candidates held back by a tag's limit (010_tags.sql) may have hidden other due
        -- jobs: while a round claimed something, slots are left and a tag has a limit, claim again
        -- (the tags that round filled are left out of the next: each round claims or ends it).
        WHILE cardinality(v_job_ids) > p_max_jobs - v_left AND cardinality(v_job_ids) < p_max_jobs LOOP
            EXIT WHEN NOT EXISTS (SELECT 1 FROM mjsched.tag_limit);
            v_left := p_max_jobs - cardinality(v_job_ids);
            SELECT v_job_ids || array_agg(c.job_id), v_run_ids || array_agg(c.run_id),
                   v_tokens || array_agg(c.lock_token), v_for || array_agg(c.scheduled_for),
                   v_queued || array_agg(c.from_queue)
              INTO v_job_ids, v_run_ids, v_tokens, v_for, v_queued
              FROM mjsched.claim_ticks(p_instance, v_left, p_lease_seconds, v_now, p_claim_id) c;
        END LOOP;
        v_left := p_max_jobs - cardinality(v_job_ids);
    END IF;
    -- The tail row's values: db_now is v_now; the earliest instant something may become
    -- claimable, the counters, and replied_at below.
    SELECT mjsched.next_due_at(v_now), t.due_left, t.locked_out INTO v_next, v_due_left, v_locked_out
      FROM mjsched.claim_counters(p_instance, v_left <= 0, v_now) t;
    -- A statement of its own: it sees the rows the claims above wrote (and holds their locks).
    -- One column list for every row: the claims in order, then the tail row, whose job_id is
    -- NULL, so no job joins it and every job column is NULL.
    RETURN QUERY
    SELECT c.job_id, c.run_id, c.lock_token, c.scheduled_for, c.from_queue, v_now,
           CASE WHEN c.job_id IS NULL THEN v_next END, CASE WHEN c.job_id IS NULL THEN v_due_left END,
           CASE WHEN c.job_id IS NULL THEN v_locked_out END,
           CASE WHEN c.job_id IS NULL THEN CASE WHEN p_now IS NULL THEN clock_timestamp() ELSE v_now END END,
           j.job_type_id, t.driver_class, j.name, j.description, j.cron_expression,
           j.timezone, j.start_at, j.end_at, j.status, j.configuration,
           j.owner, j.concurrency_mode, j.missed_run_policy,
           j.run_immediately_if_never_run, j.max_runtime_seconds, j.isolation,
           j.max_queued_runs, j.notify_on_success, j.notify_on_failure, j.notify_to,
           j.next_run_at, j.last_run_at, j.last_success_at, j.run_count,
           j.success_count, j.failure_count, j.last_duration_ms, j.total_duration_ms,
           j.locked_at, j.locked_by_instance, j.expected_completion_at,
           j.created_at, j.updated_at, j.high_frequency_ok, j.frequency_warned,
           j.keep_runs_days, j.keep_runs_count, j.interval_seconds, j.run_at,
           j.retry_max_attempts, j.retry_initial_delay, j.retry_factor,
           j.retry_max_delay, j.retry_jitter,
           j.notify_final_attempt_only, j.retry_count,
           (SELECT string_agg(g.tag, ',' ORDER BY g.tag) FROM mjsched.job_tag g WHERE g.scheduled_job_id = j.id)::varchar,
           NULL::timestamptz, NULL::varchar, NULL::varchar, NULL::varchar, NULL::timestamptz,   -- a claimed job is not Paused
           j.jitter_seconds, j.priority
      FROM (SELECT u.job_id, u.run_id, u.lock_token, u.scheduled_for, u.from_queue, u.n
              FROM unnest(v_job_ids, v_run_ids, v_tokens, v_for, v_queued) WITH ORDINALITY
                   AS u(job_id, run_id, lock_token, scheduled_for, from_queue, n)
            UNION ALL
            SELECT NULL::uuid, NULL::uuid, NULL::uuid, NULL::timestamptz, false, cardinality(v_job_ids) + 1) c
      LEFT JOIN mjsched.scheduled_job j ON j.id = c.job_id
      LEFT JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
     ORDER BY c.n;
END;
$$;
DO $$
DECLARE
    v_grantee oid;
BEGIN
    FOREACH v_grantee IN ARRAY coalesce(string_to_array(
            nullif(current_setting('mjsched.claim_due_jobs_grantees', true), ''), ',')::oid[], '{}') LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mjsched.claim_due_jobs(varchar, integer, double precision, '
                       'timestamptz, uuid, boolean) TO %I', pg_get_userbyid(v_grantee));
    END LOOP;
    PERFORM set_config('mjsched.claim_due_jobs_grantees', '', false);
END;
$$;

-- claim_token: the lock token of a claim: derived from (claim id, job id) when the
-- claim is named (so a replay can find it), random otherwise.
CREATE OR REPLACE FUNCTION mjsched.claim_token(p_claim_id uuid, p_job_id uuid) RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(md5(p_claim_id::text || p_job_id::text)::uuid, gen_random_uuid())
$$;

-- claim_replay: what a committed claim with this id took and still holds.
CREATE OR REPLACE FUNCTION mjsched.claim_replay(p_instance varchar, p_claim_id uuid, p_now timestamptz)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz, from_queue boolean)
LANGUAGE sql STABLE AS $$
    SELECT j.id, r.id, j.lock_token, coalesce(r.scheduled_for, j.next_run_at), r.queued_at IS NOT NULL
      FROM mjsched.scheduled_job j
      LEFT JOIN mjsched.scheduled_job_run r ON r.lock_token = j.lock_token AND r.status = 'Running'
     WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > p_now
       AND j.locked_by_instance = p_instance
       AND j.lock_token = md5(p_claim_id::text || j.id::text)::uuid
$$;

-- claim_queued: lock claimable jobs holding a due Queued run (a Queue-mode tick, or a retry
-- whose retry_at has come) and start their oldest one (oldest tick, then lowest attempt).
-- Skip mode: while the job's next tick is due its retries wait for claim_ticks, which runs
-- the tick and supersedes them.
CREATE OR REPLACE FUNCTION mjsched.claim_queued(
    p_instance varchar, p_max_jobs integer, p_lease_seconds double precision, p_now timestamptz,
    p_claim_id uuid)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz, from_queue boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_old uuid[];
    v_full varchar[];    -- tags at their limit (010_tags.sql): NULL when no tag has a limit
BEGIN
    IF EXISTS (SELECT 1 FROM mjsched.tag_limit) THEN
        v_full := ARRAY(SELECT t.tag FROM mjsched.tags_at_limit() t);
    END IF;
    SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.lock_token) FILTER (WHERE c.lock_token IS NOT NULL), '{}')
      INTO v_ids, v_old
      FROM (SELECT j.id, j.lock_token FROM mjsched.scheduled_job j
             -- Driven by the few Queued runs (ix_scheduled_job_run_queued), never by a scan of
             -- every job: this runs at every poll. The candidates are the jobs with a due
             -- Queued run; a Skip-mode job whose own tick is due takes only a Queue-mode tick's
             -- run (attempt 1), not a retry (that retry is recorded Skipped by the tick's claim).
             WHERE j.id IN (SELECT q.scheduled_job_id FROM mjsched.scheduled_job_run q
                             WHERE q.status = 'Queued' AND (q.retry_at IS NULL OR q.retry_at <= p_now))
               AND (NOT (j.concurrency_mode = 'Skip' AND j.next_run_at IS NOT NULL AND j.next_run_at <= p_now)
                    OR EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                WHERE q.scheduled_job_id = j.id AND q.status = 'Queued' AND q.attempt <= 1
                                  AND (q.retry_at IS NULL OR q.retry_at <= p_now)))
               -- a one-off (run_at) is Expired once its tick is served, but the retries of that
               -- tick still run: its only Queued runs are retries (one tick, never queued behind itself)
               AND mjsched.claimable(CASE WHEN j.status = 'Expired' AND j.run_at IS NOT NULL THEN 'Active'
                                          ELSE j.status END,
                                     j.start_at, j.end_at, j.lock_token, j.expected_completion_at, p_now)
               AND (v_full IS NULL OR NOT EXISTS (SELECT 1 FROM mjsched.job_tag g
                                                   WHERE g.scheduled_job_id = j.id AND g.tag = ANY (v_full)))
             LIMIT p_max_jobs
               FOR NO KEY UPDATE OF j SKIP LOCKED) c;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    PERFORM mjsched.test_pause('claim_due_jobs:queued_jobs_locked');
    IF v_full IS NOT NULL THEN
        SELECT a.ids, a.old INTO v_ids, v_old FROM mjsched.admit_by_tag_limits(v_ids) a;
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    END IF;
    v_ids := ARRAY(SELECT t.job_id
                     FROM mjsched.take_jobs(v_ids, v_old, p_instance, p_lease_seconds, p_now, p_claim_id, true) t);
    RETURN QUERY
    WITH taken AS (
        SELECT j.id, j.lock_token, j.expected_completion_at AS lease_until, j.concurrency_mode, j.next_run_at,
               j.last_run_at, j.fence_seq, j.version
          FROM mjsched.scheduled_job j
         WHERE j.id = ANY (v_ids)
    ), picked AS (
        SELECT DISTINCT ON (q.scheduled_job_id) q.id, t.lock_token, t.lease_until, t.last_run_at, t.fence_seq,
               t.version
          FROM taken t
          JOIN mjsched.scheduled_job_run q ON q.scheduled_job_id = t.id AND q.status = 'Queued'
         WHERE (q.retry_at IS NULL OR q.retry_at <= p_now)
           AND NOT (q.attempt > 1 AND t.concurrency_mode = 'Skip'
                                       AND t.next_run_at IS NOT NULL AND t.next_run_at <= p_now)
         ORDER BY q.scheduled_job_id, q.scheduled_for, q.attempt, q.queued_at
    ), started AS (
        UPDATE mjsched.scheduled_job_run r
           SET status = 'Running', started_at = greatest(p_now, p.last_run_at), executed_by_instance = p_instance,
               lock_token = p.lock_token, lease_expires_at = p.lease_until,
               fencing_token = p.fence_seq, job_version = p.version
          FROM picked p
         WHERE r.id = p.id
     RETURNING r.scheduled_job_id, r.id, r.lock_token, r.scheduled_for
    )
    SELECT s.scheduled_job_id, s.id, s.lock_token, s.scheduled_for, true FROM started s;
END;
$$;

-- claim_ticks: lock claimable due jobs (oldest tick first; an index range scan on
-- (status, next_run_at); when more are due than the batch holds, in the priorities' order:
-- lowest claim_at(next_run_at, priority) first, 015_priorities.sql, an index range scan on
-- (status, claim_at)) that hold no Queued tick (a pending retry holds no tick back), and
-- start a run for each tick that is later than every tick the job has a run of (else the
-- claim is run-less: the tick counts as served). Skip mode: the tick supersedes the job's pending retries,
-- recorded Skipped with the reason.
CREATE OR REPLACE FUNCTION mjsched.claim_ticks(
    p_instance varchar, p_max_jobs integer, p_lease_seconds double precision, p_now timestamptz,
    p_claim_id uuid)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz, from_queue boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_old uuid[];
    v_backlog boolean;
    v_full varchar[];    -- tags at their limit (010_tags.sql): NULL when no tag has a limit
BEGIN
    IF EXISTS (SELECT 1 FROM mjsched.tag_limit) THEN
        v_full := ARRAY(SELECT t.tag FROM mjsched.tags_at_limit() t);
    END IF;
    -- Priorities (015_priorities.sql): the order matters only when the claimable due jobs
    -- outnumber the batch. Whether they do is read from the due index (at most p_max_jobs + 1
    -- rows); while they fit, every one is taken through that index, as before; else the batch is
    -- the head of (status, claim_at), up to now + 100 minutes (claim_at of a due job of priority
    -- -100): its scan passes over no due job, only the not-yet-due jobs of a higher priority
    -- whose claim_at is before the batch's last.
    SELECT count(*) > p_max_jobs INTO v_backlog
      FROM (SELECT 1 FROM mjsched.scheduled_job j
             WHERE mjsched.due(j.status, j.next_run_at, j.start_at, j.end_at, j.lock_token, j.expected_completion_at,
                               p_now)
             ORDER BY j.next_run_at     -- the due index's head, never a scan past jobs not due (a kept plan)
             LIMIT p_max_jobs + 1) d;
    IF v_backlog THEN
        SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.lock_token) FILTER (WHERE c.lock_token IS NOT NULL), '{}')
          INTO v_ids, v_old
          FROM (SELECT j.id, j.lock_token FROM mjsched.scheduled_job j
                 WHERE j.status = 'Active' AND mjsched.claim_at(j.next_run_at, j.priority) <= p_now + interval '100 minutes'
                   AND mjsched.due(j.status, j.next_run_at, j.start_at, j.end_at, j.lock_token, j.expected_completion_at,
                                   p_now)
                   AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                    WHERE q.scheduled_job_id = j.id AND q.status = 'Queued' AND q.attempt = 1)
                   AND (v_full IS NULL OR NOT EXISTS (SELECT 1 FROM mjsched.job_tag g
                                                       WHERE g.scheduled_job_id = j.id AND g.tag = ANY (v_full)))
                 ORDER BY mjsched.claim_at(j.next_run_at, j.priority)
                 LIMIT p_max_jobs
                   FOR NO KEY UPDATE OF j SKIP LOCKED) c;
    ELSE
    SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.lock_token) FILTER (WHERE c.lock_token IS NOT NULL), '{}')
      INTO v_ids, v_old
      FROM (SELECT j.id, j.lock_token FROM mjsched.scheduled_job j
             WHERE mjsched.due(j.status, j.next_run_at, j.start_at, j.end_at, j.lock_token, j.expected_completion_at,
                               p_now)
               AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                WHERE q.scheduled_job_id = j.id AND q.status = 'Queued' AND q.attempt = 1)
               AND (v_full IS NULL OR NOT EXISTS (SELECT 1 FROM mjsched.job_tag g
                                                   WHERE g.scheduled_job_id = j.id AND g.tag = ANY (v_full)))
             ORDER BY j.next_run_at
             LIMIT p_max_jobs
               FOR NO KEY UPDATE OF j SKIP LOCKED) c;
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    PERFORM mjsched.test_pause('claim_due_jobs:due_jobs_locked');
    IF v_full IS NOT NULL THEN
        SELECT a.ids, a.old INTO v_ids, v_old FROM mjsched.admit_by_tag_limits(v_ids) a;
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    END IF;
    v_ids := ARRAY(SELECT t.job_id
                     FROM mjsched.take_jobs(v_ids, v_old, p_instance, p_lease_seconds, p_now, p_claim_id, false) t);
    RETURN QUERY
    WITH taken AS (
        SELECT j.id, j.lock_token, j.next_run_at, j.expected_completion_at AS lease_until, j.concurrency_mode,
               j.last_run_at, j.fence_seq, j.version
          FROM mjsched.scheduled_job j
         WHERE j.id = ANY (v_ids)
    ), superseded AS (
        UPDATE mjsched.scheduled_job_run q
           SET status = 'Skipped', success = false, completed_at = p_now, duration_ms = 0,
               error_message = format('retry not run: the next tick (%s) came due first (concurrency_mode Skip)',
                                      t.next_run_at)
          FROM taken t
         WHERE q.scheduled_job_id = t.id AND q.status = 'Queued' AND q.attempt > 1
           AND t.concurrency_mode = 'Skip' AND q.scheduled_for < t.next_run_at   -- retries of earlier ticks only
    ), inserted AS (
        -- A job's ticks are served in increasing order: a tick at or before the newest tick the
        -- job has a run of counts as served (no run; the engine moves the schedule on), so a
        -- next_run_at moved back over a tick whose run the purge deleted (006_retention.sql
        -- keeps the newest) never runs it again. We hold the job row: no tick run of it is
        -- being written by anyone else.
        INSERT INTO mjsched.scheduled_job_run
               (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
                lock_token, lease_expires_at, fencing_token, job_version)
        SELECT t.id, t.next_run_at, 'Running', greatest(p_now, t.last_run_at), p_instance, t.lock_token, t.lease_until,
               t.fence_seq, t.version
          FROM taken t
         -- (the newest tick by max(): a backward probe of uq_scheduled_job_run_tick per job, never
         -- an anti-join the planner may hash over the whole history under stale statistics)
         WHERE coalesce((SELECT max(s.scheduled_for) FROM mjsched.scheduled_job_run s
                          WHERE s.scheduled_job_id = t.id), '-infinity') < t.next_run_at
        ON CONFLICT DO NOTHING
        RETURNING id, scheduled_job_id
    )
    SELECT t.id, i.id, t.lock_token, t.next_run_at, false
      FROM taken t
      LEFT JOIN inserted i ON i.scheduled_job_id = t.id;
END;
$$;

-- next_due_at: the earliest instant something may become claimable (a tick, a retry, a
-- lapsing lock or run lease); NULL when nothing is scheduled. (plpgsql: its columns are
-- resolved when it runs, not when this script creates it.) Each branch is the head of the
-- index on its column (ORDER BY .. LIMIT 1), not min() over the rows its filter matches: the
-- runs' lease and token indexes share one predicate (status = 'Running'), and a min() was
-- seen planned over the token index, reading every Running run's heap tuple, and the dead
-- ones the last completions left, at each claim (1.6 ms a claim in the throughput bench).
CREATE OR REPLACE FUNCTION mjsched.next_due_at(p_now timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN least(
        (SELECT j.next_run_at FROM mjsched.scheduled_job j
          WHERE j.status = 'Active' AND j.next_run_at > p_now
          ORDER BY j.status, j.next_run_at LIMIT 1),
        (SELECT j.expected_completion_at FROM mjsched.scheduled_job j
          WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > p_now
          ORDER BY j.expected_completion_at LIMIT 1),
        (SELECT r.lease_expires_at FROM mjsched.scheduled_job_run r
          WHERE r.status = 'Running' AND r.lease_expires_at > p_now
          ORDER BY r.lease_expires_at LIMIT 1),
        (SELECT r.retry_at FROM mjsched.scheduled_job_run r
          WHERE r.status = 'Queued' AND r.retry_at IS NOT NULL AND r.retry_at > p_now
          ORDER BY r.retry_at LIMIT 1),
        (SELECT p.paused_until FROM mjsched.job_pause p      -- the end of a maintenance window (010_tags.sql)
          WHERE p.paused_until IS NOT NULL AND p.paused_until > p_now
          ORDER BY p.paused_until LIMIT 1));
END;
$$;

-- claim_counters: for DispatchResult, due jobs left unclaimed for want of slots (counted
-- only when the batch was full) and due jobs held by other engines' live leases. Both
-- are capped at 1000: they feed a log line and must not cost O(backlog).
CREATE OR REPLACE FUNCTION mjsched.claim_counters(p_instance varchar, p_batch_full boolean, p_now timestamptz)
RETURNS TABLE (due_left integer, locked_out integer)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_batch_full THEN (
               SELECT count(*)::integer FROM (
                   SELECT 1 FROM mjsched.scheduled_job j
                    WHERE mjsched.due(j.status, j.next_run_at, j.start_at, j.end_at, j.lock_token,
                                      j.expected_completion_at, p_now)
                    ORDER BY j.next_run_at      -- the due index's head, not a scan past served jobs
                    LIMIT 1000) d)
           ELSE 0 END,
           (SELECT count(*)::integer FROM (
               SELECT 1 FROM mjsched.scheduled_job j
                WHERE j.status = 'Active' AND j.next_run_at <= p_now
                  AND j.lock_token IS NOT NULL AND j.expected_completion_at >= p_now
                  AND j.locked_by_instance IS DISTINCT FROM p_instance
                LIMIT 1000) d)
$$;
