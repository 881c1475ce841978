-- 002_procedures, completion: finish runs fenced by token, statistics, next run, retries.

-- complete_items: the completion complete_runs and complete_job_runs share (its one
-- definition). Finish many runs in one transaction (batched completion).
-- p_items: JSON array of {run_id, token, status, error_message, details, next_run_at,
-- guard, expected_next_run_at, retry_in}. Each run is fenced by its token and must still be
-- Running; the job's statistics follow, and the job lock is released (and next_run_at
-- set) only where the same token still holds it. With guard true, next_run_at is set
-- only while the job's next_run_at is still expected_next_run_at (what the engine saw
-- when it claimed the run): a schedule edited during the run keeps the edit's next run.
-- Returns one row per item: completed 0/1 and busy 0/1. The items' job rows are locked
-- first (lock order): with p_skip_busy SKIP LOCKED (the first rows it locks), and an item
-- whose run is still Running under its token but whose job row another session holds
-- (an operator's open transaction) is answered busy = 1: nothing of it was written, and a
-- later call completes it. Without it the job rows are locked in id order, waiting.
-- Retries (009_retries.sql): an item with retry_in (seconds, the delay the engine drew from
-- the job's policy) that ends a tick's attempt Failed or Timeout records the next attempt of
-- the same tick in this transaction: a Queued run (attempt + 1) due at now + retry_in, or,
-- when that is not before the job's end_at, a Skipped one saying so. retry_count counts them.
CREATE OR REPLACE FUNCTION mjsched.complete_items(p_items jsonb, p_now timestamptz, p_skip_busy boolean)
RETURNS TABLE (run_id uuid, completed integer, busy integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_jobs uuid[];
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    IF p_items IS NULL OR jsonb_typeof(p_items) <> 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) e
                WHERE e->>'status' IS NULL
                   OR e->>'status' NOT IN ('Completed', 'Failed', 'Timeout', 'Cancelled', 'Skipped')) THEN
        RAISE EXCEPTION 'status must be one of Completed, Failed, Timeout, Cancelled, Skipped'
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) e
                WHERE CASE jsonb_typeof(e->'retry_in')
                          WHEN 'number' THEN NOT ((e->>'retry_in')::double precision BETWEEN 0 AND 31536000)
                          ELSE jsonb_typeof(e->'retry_in') <> 'null' END) THEN
        RAISE EXCEPTION 'retry_in must be a number of seconds in [0, 31536000]' USING ERRCODE = '22023';
    END IF;

    -- The items' jobs (a run never changes job, so they can be read before the locks), each
    -- run looked up alone through its primary key: LIMIT 1 keeps it a nested loop. This
    -- statement's plan is kept for the session, and "r.id = ANY (ids)" planned while the run
    -- table was new and small (a fresh install, a bench database) kept a sequential scan of
    -- the whole history as it grew: 4 ms a completion at 15,000 runs.
    v_jobs := ARRAY(SELECT r.scheduled_job_id
                      FROM jsonb_array_elements(p_items) e
                     CROSS JOIN LATERAL (SELECT r.scheduled_job_id FROM mjsched.scheduled_job_run r
                                          WHERE r.id = (e->>'run_id')::uuid LIMIT 1) r);
    IF p_skip_busy THEN
        SELECT coalesce(array_agg(l.id), '{}') INTO v_jobs FROM (
            SELECT j.id FROM mjsched.scheduled_job j WHERE j.id = ANY (v_jobs)
               FOR NO KEY UPDATE SKIP LOCKED) l;
    ELSE
        SELECT coalesce(array_agg(l.id), '{}') INTO v_jobs FROM (
            SELECT j.id FROM mjsched.scheduled_job j WHERE j.id = ANY (v_jobs)
             ORDER BY j.id
               FOR NO KEY UPDATE) l;
    END IF;
    IF p_skip_busy THEN      -- one pause point per public procedure (the harness parks each)
        PERFORM mjsched.test_pause('complete_runs:jobs_locked');
    ELSE
        PERFORM mjsched.test_pause('complete_job_runs:jobs_locked');
    END IF;

    RETURN QUERY
    WITH items AS (
        SELECT i.run_id, i.token, i.status, i.error_message, i.details, i.next_run_at,
               coalesce(i.guard, false) AS guard, i.expected_next_run_at, i.retry_in
          FROM jsonb_to_recordset(p_items) AS i(run_id uuid, token uuid, status varchar,
                                               error_message text, details jsonb, next_run_at timestamptz,
                                               guard boolean, expected_next_run_at timestamptz,
                                               retry_in double precision)
    ), finished AS (
        UPDATE mjsched.scheduled_job_run r
           SET status = i.status,
               success = (i.status = 'Completed'),
               error_message = i.error_message,
               -- details past the JSON limits (ck_scheduled_job_run_details_limits) are replaced by a
               -- note: the run's outcome is recorded all the same, and the rest of the batch with it
               details = CASE WHEN jsonb_typeof(i.details) = 'null' THEN NULL
                              WHEN mjsched.json_nesting_exceeds(i.details, 64)
                              THEN jsonb_build_object('details_dropped', 'nesting deeper than 64 levels')
                              WHEN octet_length(i.details::text) > 1000000
                              THEN jsonb_build_object('details_dropped', format('%s bytes as JSON; at most 1000000 '
                                                                                'allowed', octet_length(i.details::text)))
                              ELSE i.details END,
               completed_at = v_now,
               duration_ms = CASE WHEN i.status = 'Skipped' THEN 0
                                  ELSE greatest(0, (extract(epoch FROM v_now - r.started_at) * 1000)::bigint) END,
               lease_expires_at = NULL
          FROM items i
         WHERE r.id = i.run_id AND r.lock_token = i.token AND r.status = 'Running'
           AND r.scheduled_job_id = ANY (v_jobs)
     RETURNING r.id, r.scheduled_job_id, r.lock_token, r.status, r.duration_ms, i.next_run_at, i.guard,
               i.expected_next_run_at, r.scheduled_for, r.attempt,
               CASE WHEN r.status IN ('Failed', 'Timeout') AND r.scheduled_for IS NOT NULL
                    THEN v_now + make_interval(secs => i.retry_in) END AS retry_at
    ), retried AS (
        INSERT INTO mjsched.scheduled_job_run AS q
               (scheduled_job_id, scheduled_for, attempt, status, queued_at, retry_at,
                success, completed_at, duration_ms, error_message)
        SELECT f.scheduled_job_id, f.scheduled_for, f.attempt + 1,
               CASE WHEN l.late THEN 'Skipped' ELSE 'Queued' END, v_now, f.retry_at,
               CASE WHEN l.late THEN false END, CASE WHEN l.late THEN v_now END, CASE WHEN l.late THEN 0 END,
               CASE WHEN l.late THEN format('retry not run: due at %s, not before the job''s end_at (%s)',
                                            f.retry_at, j.end_at) END
          FROM finished f
          JOIN mjsched.scheduled_job j ON j.id = f.scheduled_job_id
         CROSS JOIN LATERAL (SELECT coalesce(f.retry_at >= j.end_at, false) AS late) l
         WHERE f.retry_at IS NOT NULL AND f.attempt < 100
        ON CONFLICT DO NOTHING
        RETURNING q.scheduled_job_id, q.status
    ), per_job AS (
        SELECT f.scheduled_job_id,
               count(*) FILTER (WHERE f.status <> 'Skipped') AS runs,
               count(*) FILTER (WHERE f.status = 'Completed') AS ok,
               count(*) FILTER (WHERE f.status NOT IN ('Completed', 'Skipped')) AS bad,
               coalesce(sum(f.duration_ms) FILTER (WHERE f.status <> 'Skipped'), 0) AS total_ms,
               max(f.duration_ms) FILTER (WHERE f.status <> 'Skipped') AS last_ms,
               array_agg(f.lock_token) AS tokens,
               -- the item with the latest next run decides the schedule (one per job in practice)
               (array_agg(f.next_run_at ORDER BY f.next_run_at DESC NULLS LAST))[1] AS next_run_at,
               (array_agg(f.guard ORDER BY f.next_run_at DESC NULLS LAST))[1] AS guard,
               (array_agg(f.expected_next_run_at ORDER BY f.next_run_at DESC NULLS LAST))[1] AS expected
          FROM finished f
         GROUP BY f.scheduled_job_id
    ), jobs AS (
        UPDATE mjsched.scheduled_job j
           SET run_count = j.run_count + p.runs,
               retry_count = j.retry_count + (SELECT count(*) FROM retried x
                                               WHERE x.scheduled_job_id = j.id AND x.status = 'Queued'),
               success_count = j.success_count + p.ok,
               failure_count = j.failure_count + p.bad,
               total_duration_ms = j.total_duration_ms + p.total_ms,
               last_duration_ms = coalesce(p.last_ms, j.last_duration_ms),
               last_run_at = CASE WHEN p.runs > 0 THEN v_now ELSE j.last_run_at END,
               last_success_at = CASE WHEN p.ok > 0 THEN v_now ELSE j.last_success_at END,
               next_run_at = CASE WHEN j.lock_token = ANY (p.tokens)
                                   AND p.next_run_at IS NOT NULL
                                   AND (NOT p.guard OR p.expected IS NOT DISTINCT FROM j.next_run_at)
                                  THEN p.next_run_at ELSE j.next_run_at END,
               locked_at = CASE WHEN j.lock_token = ANY (p.tokens) THEN NULL ELSE j.locked_at END,
               locked_by_instance = CASE WHEN j.lock_token = ANY (p.tokens) THEN NULL ELSE j.locked_by_instance END,
               expected_completion_at = CASE WHEN j.lock_token = ANY (p.tokens) THEN NULL ELSE j.expected_completion_at END,
               lock_token = CASE WHEN j.lock_token = ANY (p.tokens) THEN NULL ELSE j.lock_token END,
               updated_at = now()     -- set here, the row trigger passes it over (001_schema.sql)
          FROM per_job p
         WHERE j.id = p.scheduled_job_id
     RETURNING j.id
    )
    -- A replayed item (its first reply was lost and the caller retried) is reported
    -- completed too: the same token already finished the run with the same status.
    -- (The statement's snapshot predates its own updates, so this sees earlier runs only.)
    -- Busy: not finished, still Running under its token, its job row held by another
    -- session (read without a lock: the next call decides).
    SELECT a.run_id, a.completed,
           CASE WHEN a.completed = 0 AND EXISTS (
                     SELECT 1 FROM mjsched.scheduled_job_run r
                      WHERE r.id = a.run_id AND r.lock_token = a.token AND r.status = 'Running'
                        AND NOT (r.scheduled_job_id = ANY (v_jobs)))
                THEN 1 ELSE 0 END
      FROM (SELECT i.run_id, i.token,
                   CASE WHEN f.id IS NOT NULL OR EXISTS (
                             SELECT 1 FROM mjsched.scheduled_job_run r
                              WHERE r.id = i.run_id AND r.lock_token = i.token AND r.status = i.status)
                        THEN 1 ELSE 0 END AS completed
              FROM items i
              LEFT JOIN finished f ON f.id = i.run_id) a;
END;
$$;

-- complete_runs: complete_items as this release calls it: it never waits on a job row
-- another session holds (an operator's open transaction); such an item comes back
-- busy = 1 and the engine retries it alone, so one locked row delays only its own job.
CREATE OR REPLACE FUNCTION mjsched.complete_runs(p_items jsonb, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (run_id uuid, completed integer, busy integer)
LANGUAGE sql AS $$
    SELECT c.run_id, c.completed, c.busy FROM mjsched.complete_items(p_items, p_now, true) c
$$;

-- complete_job_runs: the completion as release 2 calls it: one row per item (completed
-- 0/1), and it waits for a job row another session holds. Kept for engines of the
-- previous release, and for complete_job_run.
CREATE OR REPLACE FUNCTION mjsched.complete_job_runs(p_items jsonb, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (run_id uuid, completed integer)
LANGUAGE sql AS $$
    SELECT c.run_id, c.completed FROM mjsched.complete_items(p_items, p_now, false) c
$$;

-- complete_job_run: one run (finish + statistics + next run + release, fenced by token).
CREATE OR REPLACE FUNCTION mjsched.complete_job_run(
    p_run_id uuid, p_token uuid, p_status varchar, p_error_message text,
    p_details jsonb, p_next_run_at timestamptz, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (completed integer)
LANGUAGE sql AS $$
    SELECT c.completed FROM mjsched.complete_job_runs(
        jsonb_build_array(jsonb_build_object(
            'run_id', p_run_id, 'token', p_token, 'status', p_status,
            'error_message', p_error_message, 'details', p_details, 'next_run_at', p_next_run_at)),
        p_now) c
$$;

