-- 002_procedures, job locks: an operator's or a previous release's lock and release of one job.

-- acquire_job_lock: take the job's lock iff it is free or its lease expired (and,
-- with p_require_due, only while the job is Active and due). Taking over an expired
-- lease abandons the old holder's Running runs, so its late completion changes nothing.
-- Idempotent for its token: a replay after a lost reply finds the lock already held by
-- p_token and answers 1. The engine of this release starts manual runs with
-- start_manual_run; kept for engines of release 2.
CREATE OR REPLACE FUNCTION mjsched.acquire_job_lock(
    p_job_id uuid, p_token uuid, p_instance varchar, p_lease_seconds double precision,
    p_require_due boolean DEFAULT false, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (acquired integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_old uuid;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_lease(p_lease_seconds);
    IF p_token IS NULL THEN
        RAISE EXCEPTION 'token must not be NULL' USING ERRCODE = '22023';
    END IF;
    SELECT j.lock_token INTO v_old
      FROM mjsched.scheduled_job j
     WHERE j.id = p_job_id
       AND (j.lock_token IS NULL OR j.expected_completion_at < v_now OR j.lock_token = p_token)
       AND (NOT p_require_due OR (j.status = 'Active' AND j.next_run_at <= v_now))
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0;
        RETURN;
    END IF;
    IF v_old = p_token THEN        -- a replay: the lost call took it
        RETURN QUERY SELECT 1;
        RETURN;
    END IF;
    PERFORM mjsched.test_pause('acquire_job_lock:job_locked');
    IF v_old IS NOT NULL THEN
        PERFORM mjsched.take_over(ARRAY[v_old], v_now);
    END IF;
    UPDATE mjsched.scheduled_job j
       SET lock_token = p_token, locked_at = v_now, locked_by_instance = p_instance,
           expected_completion_at = mjsched.lease_until(v_now, p_lease_seconds, j.max_runtime_seconds),
           fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                            ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
     WHERE j.id = p_job_id;
    RETURN QUERY SELECT 1;
END;
$$;

-- release_job_lock: clear the lock only when the caller still holds it and no Running
-- run holds it (a run's lock ends with the run: its completion releases it).
CREATE OR REPLACE FUNCTION mjsched.release_job_lock(p_job_id uuid, p_token uuid)
RETURNS TABLE (released integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    UPDATE mjsched.scheduled_job j
       SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
     WHERE j.id = p_job_id AND j.lock_token = p_token
       AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run r
                        WHERE r.lock_token = p_token AND r.status = 'Running');
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

