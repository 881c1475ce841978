-- 002_procedures, manual runs: execute_job's run under the job's lock, and the sql driver's fence.

-- start_manual_run: take the job's lock and start a manual run in one replay-safe call.
-- The lock token derives from (p_request_id, job id): a retry with p_replay = true
-- after a lost reply answers the run the lost call started (while it is still Running
-- under that lock) instead of being refused by its own lock. Outcomes: started | locked (a live lease holds the
-- job, or another session holds its row: never waited for) |
-- not_active (status is not Active and p_force is false) | not_found.
-- p_parameters (a JSON object, or NULL) is stored on the run: what the caller merged over
-- the job's configuration for this run only (execute_job(parameters=...)).
CREATE OR REPLACE FUNCTION mjsched.start_manual_run(
    p_job_id uuid, p_request_id uuid, p_instance varchar, p_lease_seconds double precision,
    p_force boolean DEFAULT false, p_replay boolean DEFAULT false, p_now timestamptz DEFAULT NULL,
    p_parameters jsonb DEFAULT NULL)
RETURNS TABLE (outcome varchar, run_id uuid, lock_token uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_token uuid;
    v_job mjsched.scheduled_job;
    v_run uuid;
    v_locked uuid[];
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_lease(p_lease_seconds);
    IF p_request_id IS NULL THEN
        RAISE EXCEPTION 'request_id must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF p_parameters IS NOT NULL AND jsonb_typeof(p_parameters) <> 'object' THEN
        RAISE EXCEPTION 'parameters=%: must be a JSON object', left(p_parameters::text, 200) USING ERRCODE = '22023';
    END IF;
    IF mjsched.json_nesting_exceeds(p_parameters, 64) OR octet_length(p_parameters::text) > 1000000 THEN
        RAISE EXCEPTION 'parameters=<% bytes of JSON>: must nest at most 64 levels of objects and arrays and be at '
                        'most 1000000 bytes', octet_length(p_parameters::text) USING ERRCODE = '22023';
    END IF;
    v_token := md5(p_request_id::text || p_job_id::text)::uuid;
    -- SKIP LOCKED: a job row another session holds (an operator's open transaction, a
    -- claim under way) answers 'locked' at once instead of making the caller wait.
    SELECT * INTO v_job FROM mjsched.scheduled_job j WHERE j.id = p_job_id FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM mjsched.scheduled_job j WHERE j.id = p_job_id) THEN
            RETURN QUERY SELECT 'locked'::varchar, NULL::uuid, NULL::uuid;
        ELSE
            RETURN QUERY SELECT 'not_found'::varchar, NULL::uuid, NULL::uuid;
        END IF;
        RETURN;
    END IF;
    IF p_replay AND v_job.lock_token = v_token THEN
        SELECT r.id INTO v_run FROM mjsched.scheduled_job_run r
         WHERE r.lock_token = v_token AND r.scheduled_job_id = p_job_id AND r.status = 'Running';
        IF v_run IS NOT NULL THEN
            RETURN QUERY SELECT 'started'::varchar, v_run, v_token;
            RETURN;
        END IF;
    END IF;
    IF v_job.status <> 'Active' AND NOT coalesce(p_force, false) THEN
        RETURN QUERY SELECT 'not_active'::varchar, NULL::uuid, NULL::uuid;
        RETURN;
    END IF;
    IF v_job.lock_token IS NOT NULL AND v_job.expected_completion_at >= v_now THEN
        RETURN QUERY SELECT 'locked'::varchar, NULL::uuid, NULL::uuid;
        RETURN;
    END IF;
    PERFORM mjsched.test_pause('start_manual_run:job_locked');
    IF v_job.lock_token IS NOT NULL THEN
        -- the lapsed holder's runs, SKIP LOCKED: one another session holds (an operator's
        -- open transaction) answers 'locked' at once; nothing is changed
        v_locked := ARRAY(SELECT r.id FROM mjsched.scheduled_job_run r
                           WHERE r.lock_token = v_job.lock_token AND r.status = 'Running'
                             FOR NO KEY UPDATE SKIP LOCKED);
        IF EXISTS (SELECT 1 FROM mjsched.scheduled_job_run h
                    WHERE h.lock_token = v_job.lock_token AND h.status = 'Running'
                      AND NOT (h.id = ANY (v_locked))) THEN
            RETURN QUERY SELECT 'locked'::varchar, NULL::uuid, NULL::uuid;
            RETURN;
        END IF;
        PERFORM mjsched.take_over(ARRAY[v_job.lock_token], v_now);
    END IF;
    UPDATE mjsched.scheduled_job j
       SET lock_token = v_token, locked_at = v_now, locked_by_instance = p_instance,
           expected_completion_at = mjsched.lease_until(v_now, p_lease_seconds, j.max_runtime_seconds),
           fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                            ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
     WHERE j.id = p_job_id;
    INSERT INTO mjsched.scheduled_job_run
           (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance, lock_token, lease_expires_at,
            parameters, fencing_token, job_version)
    SELECT j.id, NULL, 'Running', greatest(v_now, j.last_run_at), p_instance, v_token, j.expected_completion_at,
           CASE WHEN jsonb_typeof(p_parameters) = 'object' THEN p_parameters END, j.fence_seq, j.version
      FROM mjsched.scheduled_job j WHERE j.id = p_job_id
    RETURNING id INTO v_run;
    RETURN QUERY SELECT 'started'::varchar, v_run, v_token;
END;
$$;

-- check_fence: called by a job inside its own transaction on the scheduler's database, last
-- before its COMMIT (the sql driver's fence, docs/guide/reliability.md "Fencing tokens"):
-- raises unless the run is still Running under p_token with its lease unexpired, and holds
-- the run's row FOR SHARE until that transaction ends, so a take-over (which must update the
-- run row) waits for the job's commit, or skips the job until then. Answers the run's fencing
-- token. Changes nothing: a lost reply leaves the job's transaction to roll back.
CREATE OR REPLACE FUNCTION mjsched.check_fence(p_run_id uuid, p_token uuid, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (fencing_token bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_status varchar;
    v_token uuid;
    v_lease timestamptz;
    v_fence bigint;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    SELECT r.status, r.lock_token, r.lease_expires_at, r.fencing_token INTO v_status, v_token, v_lease, v_fence
      FROM mjsched.scheduled_job_run r WHERE r.id = p_run_id
       FOR SHARE;
    IF v_status IS DISTINCT FROM 'Running' OR v_token IS DISTINCT FROM p_token OR NOT (v_lease > v_now) THEN
        RAISE EXCEPTION 'mjsched fence: run % no longer holds its lease (status %, lease until %, lock %): '
                        'its writes are not committed', p_run_id, coalesce(v_status, 'gone'), v_lease,
                        CASE WHEN v_token IS NOT DISTINCT FROM p_token THEN 'still its own' ELSE 'taken over' END
              USING ERRCODE = 'MJF01';
    END IF;
    RETURN QUERY SELECT v_fence;
END;
$$;

