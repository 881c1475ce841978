-- 002_procedures, sweep: lapsed leases end, their runs Abandoned.

-- sweep_expired_leases: lapsed job locks are freed and the Running runs that held
-- them abandoned, in one step (jobs first); then lapsed runs that hold no job lock
-- (Concurrent tick runs) are abandoned; then Active jobs past end_at become Expired.
-- Rows other callers hold are skipped (the next sweep gets them). Cheap when nothing
-- is stale: each step is a partial-index scan.
CREATE OR REPLACE FUNCTION mjsched.sweep_expired_leases(p_now timestamptz DEFAULT NULL)
RETURNS TABLE (swept integer, locks_freed integer, expired_jobs integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_reason constant text := 'Abandoned: the lease expired before the run completed '
                              '(engine {engine} stopped renewing it)';
    v_ids uuid[];
    v_tokens uuid[];
    v_locked uuid[];
    v_swept integer;
    v_freed integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    -- 1. Lapsed locks, with the runs holding them.
    SELECT coalesce(array_agg(s.id), '{}'), coalesce(array_agg(s.lock_token), '{}') INTO v_ids, v_tokens
      FROM (SELECT j.id, j.lock_token FROM mjsched.scheduled_job j
             WHERE j.lock_token IS NOT NULL AND j.expected_completion_at < v_now
               FOR NO KEY UPDATE SKIP LOCKED) s;
    PERFORM mjsched.test_pause('sweep_expired_leases:lapsed_locks_locked');
    -- A lapsed run another session holds is not waited for: its job is left for a later sweep.
    v_locked := ARRAY(SELECT r.id FROM mjsched.scheduled_job_run r
                       WHERE r.lock_token = ANY (v_tokens) AND r.status = 'Running'
                         FOR NO KEY UPDATE SKIP LOCKED);
    SELECT coalesce(array_agg(j.id), '{}'), coalesce(array_agg(j.lock_token), '{}') INTO v_ids, v_tokens
      FROM mjsched.scheduled_job j
     WHERE j.id = ANY (v_ids)
       AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run h
                        WHERE h.scheduled_job_id = j.id AND h.lock_token = j.lock_token
                          AND h.status = 'Running' AND NOT (h.id = ANY (v_locked)));
    v_swept := mjsched.abandon_runs(mjsched.runs_of_tokens(v_tokens), v_now, v_reason);
    UPDATE mjsched.scheduled_job j
       SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
     WHERE j.id = ANY (v_ids);
    GET DIAGNOSTICS v_freed = ROW_COUNT;

    -- 2. Lapsed runs that hold no job lock.
    SELECT coalesce(array_agg(s.id), '{}') INTO v_ids
      FROM (SELECT j.id FROM mjsched.scheduled_job j
             WHERE j.id IN (SELECT r.scheduled_job_id FROM mjsched.scheduled_job_run r
                             WHERE r.status = 'Running' AND r.lease_expires_at < v_now)
               FOR NO KEY UPDATE SKIP LOCKED) s;
    PERFORM mjsched.test_pause('sweep_expired_leases:lapsed_runs_locked');
    -- (a lapsed run another session holds is skipped: it holds no job lock, so nothing else
    -- changes for it, and a later sweep abandons it)
    v_swept := v_swept + mjsched.abandon_runs(ARRAY(
        SELECT r.id FROM mjsched.scheduled_job_run r
          JOIN mjsched.scheduled_job j ON j.id = r.scheduled_job_id
         WHERE r.scheduled_job_id = ANY (v_ids) AND r.status = 'Running' AND r.lease_expires_at < v_now
           AND j.lock_token IS DISTINCT FROM r.lock_token
         ORDER BY r.id
           FOR NO KEY UPDATE OF r SKIP LOCKED), v_now, v_reason);

    RETURN QUERY SELECT v_swept, v_freed, mjsched.expire_ended_jobs(v_now);
END;
$$;

