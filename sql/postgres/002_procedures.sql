-- mjsched lock and lease procedures, version 2.
-- Every lock decision is made here, on the database clock. p_now exists only so
-- tests can move time on a real server; production callers pass NULL.
-- Errors raised on purpose use SQLSTATE 22023 (invalid_parameter_value) and name the parameter.

-- Lease length for a job: the engine's lease, lengthened by the job's max_runtime.
CREATE OR REPLACE FUNCTION mjsched.lease_interval(p_lease_seconds double precision,
                                                  p_max_runtime_seconds double precision)
RETURNS interval LANGUAGE sql IMMUTABLE AS $$
    SELECT make_interval(secs => greatest(p_lease_seconds, coalesce(p_max_runtime_seconds, 0)))
$$;

CREATE OR REPLACE FUNCTION mjsched.check_lease(p_lease_seconds double precision) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
#variable_conflict use_column
BEGIN
    IF p_lease_seconds IS NULL OR p_lease_seconds <= 0 OR p_lease_seconds > 31536000 THEN
        RAISE EXCEPTION 'lease_seconds=% must be > 0 and at most one year', p_lease_seconds
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- check_test_clock: p_now moves the database clock for tests on a real server. Only the
-- schema owner (or a member of its role) may pass one: for an engine role a future p_now
-- would take over live leases. Inside SECURITY DEFINER functions current_user is the owner.
CREATE OR REPLACE FUNCTION mjsched.check_test_clock(p_now timestamptz) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_now IS NOT NULL AND NOT pg_has_role(session_user, current_user, 'MEMBER') THEN
        RAISE EXCEPTION 'now=% may only be passed by the schema owner (it is for tests)', p_now
            USING ERRCODE = '42501';
    END IF;
END;
$$;

-- acquire_job_lock: take the job's lock iff it is free or its lease expired (and,
-- with p_require_due, only while the job is Active and due). Taking over an expired
-- lease abandons the old holder's Running runs, so its late completion changes nothing.
CREATE OR REPLACE FUNCTION mjsched.acquire_job_lock(
    p_job_id uuid, p_token uuid, p_instance varchar, p_lease_seconds double precision,
    p_require_due boolean DEFAULT false, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (acquired integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_old uuid;
    v_rows integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_lease(p_lease_seconds);
    IF p_token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22023';
    END IF;
    WITH target AS (
        SELECT j.id, j.lock_token AS old_token
          FROM mjsched.scheduled_job j
         WHERE j.id = p_job_id
           AND (j.lock_token IS NULL OR j.expected_completion_at < v_now)
           AND (NOT p_require_due OR (j.status = 'Active' AND j.next_run_at <= v_now))
           FOR UPDATE
    ), taken AS (
        UPDATE mjsched.scheduled_job j
           SET lock_token = p_token, locked_at = v_now, locked_by_instance = p_instance,
               expected_completion_at = v_now + mjsched.lease_interval(p_lease_seconds, j.max_runtime_seconds)
          FROM target t
         WHERE j.id = t.id
     RETURNING t.old_token
    )
    SELECT old_token INTO v_old FROM taken;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_old IS NOT NULL THEN
        UPDATE mjsched.scheduled_job_run r
           SET status = 'Abandoned', success = false, completed_at = v_now,
               duration_ms = greatest(0, (extract(epoch FROM v_now - r.started_at) * 1000)::bigint),
               error_message = 'Abandoned: the lease expired and another holder took the lock over'
         WHERE r.id IN (SELECT o.id FROM mjsched.scheduled_job_run o
                         WHERE o.lock_token = v_old AND o.status = 'Running' FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- release_job_lock: clear the lock only when the caller still holds it.
CREATE OR REPLACE FUNCTION mjsched.release_job_lock(p_job_id uuid, p_token uuid)
RETURNS TABLE (released integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    UPDATE mjsched.scheduled_job
       SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
     WHERE id = p_job_id AND lock_token = p_token;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- extend_job_leases: one call renews every lease an engine holds. A lease is renewed
-- only while its token still matches (a run still Running, a job lock still ours).
-- Returns one row per renewed token; the engine compares with what it sent.
-- Also records that the engine is alive.
CREATE OR REPLACE FUNCTION mjsched.extend_job_leases(
    p_tokens uuid[], p_lease_seconds double precision,
    p_instance varchar DEFAULT NULL, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (lock_token uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_now timestamptz := coalesce(p_now, now());
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_lease(p_lease_seconds);
    IF p_instance IS NOT NULL THEN
        UPDATE mjsched.engine_instance SET last_seen_at = v_now WHERE instance = p_instance;
    END IF;
    IF p_tokens IS NULL OR cardinality(p_tokens) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH runs AS (
        UPDATE mjsched.scheduled_job_run r
           SET lease_expires_at = v_now + make_interval(secs => p_lease_seconds)
         WHERE r.lock_token = ANY (p_tokens) AND r.status = 'Running'
     RETURNING r.lock_token
    ), jobs AS (
        -- Through the runs' token index and the job's primary key: no index on the job's
        -- lock_token (it would cost every claim and completion an index write), no scan.
        -- A job's lock is renewed while its token's run is Running, which is every lock an
        -- engine renews (a manual run's lock too, from begin_job_run on).
        UPDATE mjsched.scheduled_job j
           SET expected_completion_at = v_now + make_interval(secs => p_lease_seconds)
          FROM mjsched.scheduled_job_run h
         WHERE h.lock_token = ANY (p_tokens) AND h.status = 'Running'
           AND j.id = h.scheduled_job_id AND j.lock_token = h.lock_token
     RETURNING j.lock_token
    )
    SELECT runs.lock_token FROM runs
    UNION
    SELECT jobs.lock_token FROM jobs;
END;
$$;

-- claim_due_jobs: in one transaction, lock up to p_max_jobs claimable jobs (jobs
-- with a Queued run first, then due ticks oldest first), skipping rows other engines
-- are claiming, and start their runs. A tick that already has a run (a zombie's,
-- say) comes back with run_id NULL: the caller only advances the schedule past it.
-- Taking over an expired lease abandons the old holder's Running runs.
-- The last row always has job_id NULL and carries db_now and next_due_at (the
-- earliest instant something may become claimable; NULL when nothing is scheduled).
--
-- Idempotent when the caller names the claim (p_claim_id, a fresh UUID per claim):
-- each lock token is then derived from (p_claim_id, job id), so a retry with the same
-- p_claim_id and p_replay = true -- the reply to the first call was lost, and it may or
-- may not have committed -- finds the claims that call made and answers them again,
-- claiming nothing new; when it finds none, the first call did not commit and this one
-- claims as usual. Without p_claim_id tokens are random and a lost reply costs those
-- jobs one lease.
DROP FUNCTION IF EXISTS mjsched.claim_due_jobs(varchar, integer, double precision, timestamptz);
CREATE OR REPLACE FUNCTION mjsched.claim_due_jobs(
    p_instance varchar, p_max_jobs integer, p_lease_seconds double precision,
    p_now timestamptz DEFAULT NULL, p_claim_id uuid DEFAULT NULL, p_replay boolean DEFAULT false)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz,
               from_queue boolean, db_now timestamptz, next_due_at timestamptz,
               due_left integer, locked_out integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_left integer := p_max_jobs;
    v_rows integer;
    v_next timestamptz;
    v_due_left integer := 0;
    v_locked_out integer := 0;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_lease(p_lease_seconds);
    IF p_max_jobs IS NULL OR p_max_jobs < 0 OR p_max_jobs > 10000 THEN
        RAISE EXCEPTION 'max_jobs=% must be between 0 and 10000', p_max_jobs USING ERRCODE = '22023';
    END IF;

    IF p_replay AND p_claim_id IS NOT NULL THEN
        -- 0. A replay: answer again what the first call with this claim id took.
        RETURN QUERY
        SELECT j.id, r.id, j.lock_token, coalesce(r.scheduled_for, j.next_run_at), r.queued_at IS NOT NULL,
               v_now, NULL::timestamptz, NULL::integer, NULL::integer
          FROM mjsched.scheduled_job j
          LEFT JOIN mjsched.scheduled_job_run r ON r.lock_token = j.lock_token AND r.status = 'Running'
         WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > v_now
           AND j.locked_by_instance = p_instance
           AND j.lock_token = md5(p_claim_id::text || j.id::text)::uuid;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows > 0 THEN
            v_left := 0;
        END IF;
    END IF;

    IF v_left > 0 THEN
        -- 1. Jobs holding a Queued run, lock free: start their oldest queued run.
        RETURN QUERY
        WITH candidates AS (
            SELECT j.id, j.lock_token AS old_token, j.max_runtime_seconds
              FROM mjsched.scheduled_job j
             WHERE j.id IN (SELECT q.scheduled_job_id FROM mjsched.scheduled_job_run q
                             WHERE q.status = 'Queued')
               AND j.status = 'Active'
               AND (j.start_at IS NULL OR j.start_at <= v_now)
               AND (j.end_at IS NULL OR j.end_at > v_now)
               AND (j.lock_token IS NULL OR j.expected_completion_at < v_now)
             LIMIT v_left
               FOR UPDATE OF j SKIP LOCKED
        ), taken AS (
            UPDATE mjsched.scheduled_job j
               SET lock_token = coalesce(md5(p_claim_id::text || j.id::text)::uuid, gen_random_uuid()),
                   locked_at = v_now, locked_by_instance = p_instance,
                   expected_completion_at = v_now + mjsched.lease_interval(p_lease_seconds, c.max_runtime_seconds)
              FROM candidates c
             WHERE j.id = c.id
         RETURNING j.id, j.lock_token, c.old_token, j.expected_completion_at AS lease_until
        ), picked AS (
            SELECT DISTINCT ON (q.scheduled_job_id) q.id, t.lock_token, t.lease_until
              FROM taken t
              JOIN mjsched.scheduled_job_run q ON q.scheduled_job_id = t.id AND q.status = 'Queued'
             ORDER BY q.scheduled_job_id, q.queued_at, q.scheduled_for
        ), started AS (
            UPDATE mjsched.scheduled_job_run r
               SET status = 'Running', started_at = v_now, executed_by_instance = p_instance,
                   lock_token = p.lock_token, lease_expires_at = p.lease_until
              FROM picked p
             WHERE r.id = p.id
         RETURNING r.scheduled_job_id, r.id, r.lock_token, r.scheduled_for
        ), abandoned AS (
            UPDATE mjsched.scheduled_job_run r
               SET status = 'Abandoned', success = false, completed_at = v_now,
                   duration_ms = greatest(0, (extract(epoch FROM v_now - r.started_at) * 1000)::bigint),
                   error_message = 'Abandoned: the lease expired and another engine took the lock over'
             WHERE r.id IN (SELECT o.id FROM mjsched.scheduled_job_run o JOIN taken t ON o.lock_token = t.old_token
                             WHERE o.status = 'Running' FOR UPDATE OF o SKIP LOCKED)
        )
        SELECT s.scheduled_job_id, s.id, s.lock_token, s.scheduled_for, true, v_now, NULL::timestamptz,
               NULL::integer, NULL::integer
          FROM started s;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        v_left := v_left - v_rows;
    END IF;

    IF v_left > 0 THEN
        -- 2. Due ticks: an index range scan on (status, next_run_at).
        RETURN QUERY
        WITH candidates AS (
            SELECT j.id, j.lock_token AS old_token, j.max_runtime_seconds
              FROM mjsched.scheduled_job j
             WHERE j.status = 'Active'
               AND j.next_run_at <= v_now
               AND (j.start_at IS NULL OR j.start_at <= v_now)
               AND (j.end_at IS NULL OR j.end_at > v_now)
               AND (j.lock_token IS NULL OR j.expected_completion_at < v_now)
               AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                WHERE q.scheduled_job_id = j.id AND q.status = 'Queued')
             ORDER BY j.next_run_at
             LIMIT v_left
               FOR UPDATE OF j SKIP LOCKED
        ), taken AS (
            UPDATE mjsched.scheduled_job j
               SET lock_token = coalesce(md5(p_claim_id::text || j.id::text)::uuid, gen_random_uuid()),
                   locked_at = v_now, locked_by_instance = p_instance,
                   expected_completion_at = v_now + mjsched.lease_interval(p_lease_seconds, c.max_runtime_seconds)
              FROM candidates c
             WHERE j.id = c.id
         RETURNING j.id, j.lock_token, c.old_token, j.next_run_at, j.expected_completion_at AS lease_until
        ), inserted AS (
            INSERT INTO mjsched.scheduled_job_run
                   (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
                    lock_token, lease_expires_at)
            SELECT t.id, t.next_run_at, 'Running', v_now, p_instance, t.lock_token, t.lease_until
              FROM taken t
            ON CONFLICT (scheduled_job_id, scheduled_for) DO NOTHING
            RETURNING id, scheduled_job_id
        ), abandoned AS (
            UPDATE mjsched.scheduled_job_run r
               SET status = 'Abandoned', success = false, completed_at = v_now,
                   duration_ms = greatest(0, (extract(epoch FROM v_now - r.started_at) * 1000)::bigint),
                   error_message = 'Abandoned: the lease expired and another engine took the lock over'
             WHERE r.id IN (SELECT o.id FROM mjsched.scheduled_job_run o JOIN taken t ON o.lock_token = t.old_token
                             WHERE o.status = 'Running' FOR UPDATE OF o SKIP LOCKED)
        )
        SELECT t.id, i.id, t.lock_token, t.next_run_at, false, v_now, NULL::timestamptz,
               NULL::integer, NULL::integer
          FROM taken t
          LEFT JOIN inserted i ON i.scheduled_job_id = t.id;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        v_left := v_left - v_rows;
    END IF;

    SELECT min(s.t) INTO v_next FROM (
        SELECT min(j.next_run_at) AS t FROM mjsched.scheduled_job j
         WHERE j.status = 'Active' AND j.next_run_at > v_now
        UNION ALL
        SELECT min(j.expected_completion_at) FROM mjsched.scheduled_job j
         WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > v_now
        UNION ALL
        SELECT min(r.lease_expires_at) FROM mjsched.scheduled_job_run r
         WHERE r.status = 'Running' AND r.lease_expires_at > v_now
    ) s;

    -- Counters for DispatchResult: due jobs left unclaimed for want of slots (counted
    -- only when the batch was full), and due jobs held by other engines' live leases.
    -- Both counts are capped at 1000: they feed a log line and must not cost O(backlog).
    IF v_left <= 0 THEN
        SELECT count(*) INTO v_due_left FROM (
            SELECT 1 FROM mjsched.scheduled_job j
             WHERE j.status = 'Active' AND j.next_run_at <= v_now
               AND (j.start_at IS NULL OR j.start_at <= v_now) AND (j.end_at IS NULL OR j.end_at > v_now)
               AND (j.lock_token IS NULL OR j.expected_completion_at < v_now)
             LIMIT 1000) d;
    END IF;
    SELECT count(*) INTO v_locked_out FROM (
        SELECT 1 FROM mjsched.scheduled_job j
         WHERE j.status = 'Active' AND j.next_run_at <= v_now
           AND j.lock_token IS NOT NULL AND j.expected_completion_at >= v_now
           AND j.locked_by_instance IS DISTINCT FROM p_instance
         LIMIT 1000) d;

    RETURN QUERY SELECT NULL::uuid, NULL::uuid, NULL::uuid, NULL::timestamptz, false, v_now, v_next,
                        v_due_left, v_locked_out;
END;
$$;

-- complete_job_runs: finish many runs in one transaction (batched completion).
-- p_items: JSON array of {run_id, token, status, error_message, details, next_run_at,
-- guard, expected_next_run_at}. Each run is fenced by its token and must still be
-- Running; the job's statistics follow, and the job lock is released (and next_run_at
-- set) only where the same token still holds it. With guard true, next_run_at is set
-- only while the job's next_run_at is still expected_next_run_at (what the engine saw
-- when it claimed the run): a schedule edited during the run keeps the edit's next run.
-- Returns one row per item: completed 0/1.
CREATE OR REPLACE FUNCTION mjsched.complete_job_runs(p_items jsonb, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (run_id uuid, completed integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_now timestamptz := coalesce(p_now, now());
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

    RETURN QUERY
    WITH items AS (
        SELECT i.run_id, i.token, i.status, i.error_message, i.details, i.next_run_at,
               coalesce(i.guard, false) AS guard, i.expected_next_run_at
          FROM jsonb_to_recordset(p_items) AS i(run_id uuid, token uuid, status varchar,
                                               error_message text, details jsonb, next_run_at timestamptz,
                                               guard boolean, expected_next_run_at timestamptz)
    ), finished AS (
        UPDATE mjsched.scheduled_job_run r
           SET status = i.status,
               success = (i.status = 'Completed'),
               error_message = i.error_message,
               details = CASE WHEN jsonb_typeof(i.details) = 'null' THEN NULL ELSE i.details END,
               completed_at = v_now,
               duration_ms = CASE WHEN i.status = 'Skipped' THEN 0
                                  ELSE greatest(0, (extract(epoch FROM v_now - r.started_at) * 1000)::bigint) END,
               lease_expires_at = NULL
          FROM items i
         WHERE r.id = i.run_id AND r.lock_token = i.token AND r.status = 'Running'
     RETURNING r.id, r.scheduled_job_id, r.lock_token, r.status, r.duration_ms, i.next_run_at, i.guard,
               i.expected_next_run_at
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
               success_count = j.success_count + p.ok,
               failure_count = j.failure_count + p.bad,
               total_duration_ms = j.total_duration_ms + p.total_ms,
               last_duration_ms = coalesce(p.last_ms, j.last_duration_ms),
               last_run_at = CASE WHEN p.runs > 0 THEN v_now ELSE j.last_run_at END,
               next_run_at = CASE WHEN j.lock_token = ANY (p.tokens)
                                   AND p.next_run_at IS NOT NULL
                                   AND (NOT p.guard OR p.expected IS NOT DISTINCT FROM j.next_run_at)
                                  THEN p.next_run_at ELSE j.next_run_at END,
               locked_at = CASE WHEN j.lock_token = ANY (p.tokens) THEN NULL ELSE j.locked_at END,
               locked_by_instance = CASE WHEN j.lock_token = ANY (p.tokens) THEN NULL ELSE j.locked_by_instance END,
               expected_completion_at = CASE WHEN j.lock_token = ANY (p.tokens) THEN NULL ELSE j.expected_completion_at END,
               lock_token = CASE WHEN j.lock_token = ANY (p.tokens) THEN NULL ELSE j.lock_token END
          FROM per_job p
         WHERE j.id = p.scheduled_job_id
     RETURNING j.id
    )
    -- A replayed item (its first reply was lost and the caller retried) is reported
    -- completed too: the same token already finished the run with the same status.
    -- (The statement's snapshot predates its own updates, so this sees earlier runs only.)
    SELECT i.run_id,
           CASE WHEN f.id IS NOT NULL OR EXISTS (
                     SELECT 1 FROM mjsched.scheduled_job_run r
                      WHERE r.id = i.run_id AND r.lock_token = i.token AND r.status = i.status)
                THEN 1 ELSE 0 END
      FROM items i
      LEFT JOIN finished f ON f.id = i.run_id;
END;
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

-- sweep_expired_leases: Running runs whose lease lapsed become Abandoned (only rows
-- still Running), expired job locks are freed, Active jobs past end_at become
-- Expired. Cheap when nothing is stale: each step is a partial-index scan.
CREATE OR REPLACE FUNCTION mjsched.sweep_expired_leases(p_now timestamptz DEFAULT NULL)
RETURNS TABLE (swept integer, locks_freed integer, expired_jobs integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_swept integer;
    v_freed integer;
    v_expired integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    WITH stale AS (
        SELECT r.id FROM mjsched.scheduled_job_run r
         WHERE r.status = 'Running' AND r.lease_expires_at < v_now
           FOR UPDATE SKIP LOCKED
    ), abandoned AS (
        UPDATE mjsched.scheduled_job_run r
           SET status = 'Abandoned', success = false, completed_at = v_now,
               duration_ms = greatest(0, (extract(epoch FROM v_now - r.started_at) * 1000)::bigint),
               error_message = 'Abandoned: the lease expired before the run completed '
                               || '(engine ' || coalesce(r.executed_by_instance, '?') || ' stopped renewing it)'
          FROM stale s
         WHERE r.id = s.id
     RETURNING r.scheduled_job_id
    ), per_job AS (
        SELECT a.scheduled_job_id, count(*) AS n FROM abandoned a GROUP BY a.scheduled_job_id
    ), counted AS (
        UPDATE mjsched.scheduled_job j
           SET run_count = j.run_count + p.n, failure_count = j.failure_count + p.n
          FROM per_job p
         WHERE j.id = p.scheduled_job_id
     RETURNING j.id
    )
    SELECT count(*) INTO v_swept FROM abandoned;

    WITH stale AS (
        SELECT j.id FROM mjsched.scheduled_job j
         WHERE j.lock_token IS NOT NULL AND j.expected_completion_at < v_now
           FOR UPDATE SKIP LOCKED
    )
    UPDATE mjsched.scheduled_job j
       SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
      FROM stale s
     WHERE j.id = s.id;
    GET DIAGNOSTICS v_freed = ROW_COUNT;

    WITH ended AS (
        SELECT j.id FROM mjsched.scheduled_job j
         WHERE j.status = 'Active' AND j.end_at IS NOT NULL AND j.end_at <= v_now
           FOR UPDATE SKIP LOCKED
    )
    UPDATE mjsched.scheduled_job j SET status = 'Expired', next_run_at = NULL
      FROM ended e
     WHERE j.id = e.id;
    GET DIAGNOSTICS v_expired = ROW_COUNT;

    RETURN QUERY SELECT v_swept, v_freed, v_expired;
END;
$$;

-- enqueue_job_run (Queue mode): keep a tick that came while the job runs as one
-- Queued run; at most one per tick (the UNIQUE index) and at most max_queued_runs.
CREATE OR REPLACE FUNCTION mjsched.enqueue_job_run(
    p_job_id uuid, p_scheduled_for timestamptz, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (enqueued integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_limit integer;
    v_rows integer := 0;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    IF p_scheduled_for IS NULL THEN
        RAISE EXCEPTION 'scheduled_for must not be NULL' USING ERRCODE = '22023';
    END IF;
    SELECT j.max_queued_runs INTO v_limit
      FROM mjsched.scheduled_job j
     WHERE j.id = p_job_id AND j.concurrency_mode = 'Queue' AND j.status = 'Active'
       FOR NO KEY UPDATE;
    IF v_limit IS NOT NULL
       AND (SELECT count(*) FROM mjsched.scheduled_job_run q
             WHERE q.scheduled_job_id = p_job_id AND q.status = 'Queued') < v_limit THEN
        INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at)
        VALUES (p_job_id, p_scheduled_for, 'Queued', v_now)
        ON CONFLICT (scheduled_job_id, scheduled_for) DO NOTHING;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- advance_job: move a held job's schedule and, with p_release, drop its lock (used
-- for Concurrent runs, which keep only their run lease, and for ticks that already
-- had a run).
CREATE OR REPLACE FUNCTION mjsched.advance_job(
    p_job_id uuid, p_token uuid, p_next_run_at timestamptz, p_release boolean)
RETURNS TABLE (advanced integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    UPDATE mjsched.scheduled_job j
       SET next_run_at = p_next_run_at,
           lock_token = CASE WHEN p_release THEN NULL ELSE j.lock_token END,
           locked_at = CASE WHEN p_release THEN NULL ELSE j.locked_at END,
           locked_by_instance = CASE WHEN p_release THEN NULL ELSE j.locked_by_instance END,
           expected_completion_at = CASE WHEN p_release THEN NULL ELSE j.expected_completion_at END
     WHERE j.id = p_job_id AND j.lock_token = p_token;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- begin_job_run: a Running run for a job whose lock the caller holds (manual runs
-- have scheduled_for NULL). Returns the run id, or no row when the lock is not ours.
CREATE OR REPLACE FUNCTION mjsched.begin_job_run(
    p_job_id uuid, p_token uuid, p_instance varchar, p_scheduled_for timestamptz,
    p_now timestamptz DEFAULT NULL)
RETURNS TABLE (run_id uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_now timestamptz := coalesce(p_now, now());
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    RETURN QUERY
    INSERT INTO mjsched.scheduled_job_run
           (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
            lock_token, lease_expires_at)
    SELECT j.id, p_scheduled_for, 'Running', v_now, p_instance, j.lock_token, j.expected_completion_at
      FROM mjsched.scheduled_job j
     WHERE j.id = p_job_id AND j.lock_token = p_token
    ON CONFLICT (scheduled_job_id, scheduled_for) DO NOTHING
    RETURNING id;
END;
$$;

-- initialize_next_run: set next_run_at of an Active job that has none (compare-and-set,
-- so several engines may race to schedule the same new job).
CREATE OR REPLACE FUNCTION mjsched.initialize_next_run(p_job_id uuid, p_next_run_at timestamptz)
RETURNS TABLE (initialized integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    UPDATE mjsched.scheduled_job
       SET next_run_at = p_next_run_at
     WHERE id = p_job_id AND next_run_at IS NULL AND status = 'Active';
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- register_engine / unregister_engine: the table of live engines behind `mjsched status`.
CREATE OR REPLACE FUNCTION mjsched.register_engine(
    p_instance varchar, p_host varchar, p_pid integer, p_version varchar)
RETURNS TABLE (registered integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO mjsched.engine_instance (instance, host, pid, version, started_at, last_seen_at, stopped_at)
    VALUES (p_instance, p_host, p_pid, p_version, now(), now(), NULL)
    ON CONFLICT (instance) DO UPDATE
       SET host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
           started_at = now(), last_seen_at = now(), stopped_at = NULL;
    RETURN QUERY SELECT 1;
END;
$$;

CREATE OR REPLACE FUNCTION mjsched.unregister_engine(p_instance varchar)
RETURNS TABLE (unregistered integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    UPDATE mjsched.engine_instance SET stopped_at = now(), last_seen_at = now()
     WHERE instance = p_instance;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- probe_permissions: which mjsched procedures the current role may not execute.
CREATE OR REPLACE FUNCTION mjsched.probe_permissions()
RETURNS TABLE (procedure_name text, can_execute integer)
LANGUAGE sql STABLE AS $$
    SELECT p.proname::text,
           CASE WHEN has_function_privilege(p.oid, 'EXECUTE') THEN 1 ELSE 0 END
      FROM pg_proc p
      JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname = 'mjsched' AND p.prokind = 'f' AND p.proname NOT LIKE 'tg\_%'
     ORDER BY 1
$$;
