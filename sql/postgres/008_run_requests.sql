-- mjsched run requests, version 8 (issue 14 item 6): cancelling a run from any process.
--
-- cancel_run records an operator's request on the run row (cancel_requested_at,
-- cancel_requested_by: 001_schema.sql). A Queued run ends Cancelled at once, without
-- running. A Running run keeps running until the engine that holds it reads the request
-- through cancel_requests, which its lease keeper calls as often as it renews (and at least
-- every 5 s), so it learns of the request by its next lease renewal at the latest; it sets the run's
-- cancel_event and, after its grace period, ends it Cancelled (killing a process-isolated
-- run). The lock and lease procedures are unchanged: the engine ends the run through
-- complete_runs as for any other outcome, fenced by its token.
-- Functions here are SECURITY DEFINER with a fixed search_path themselves (003_security.sql
-- ran before this script), and grants.sql gives cancel_requests to the engine role and
-- cancel_run (an operator's action, like force_unlock_job) to the admin role.

-- cancel_run: outcome requested (a Running run: the request is recorded) | already_requested
-- (a Running run whose cancel was asked before: the first request is kept and answered) |
-- cancelled (a Queued run: ended Cancelled now, never run) | not_cancellable (any other
-- status: the run already ended; its status is answered) | not_found. The job row is locked
-- first (the lock order: docs/guide/protocol.md), so a claim of a Queued run and its cancel
-- never both win: the claim skips the locked job, or the cancel finds the run Running.
-- Replay: p_request_id (the caller's id of this request) is recorded on the run with the
-- request. A call that finds its own id there is a replay of a call whose reply was lost: it
-- answers what that call did (cancelled for a run that never started, requested otherwise),
-- whatever became of the run since, and changes nothing. Without an id (the previous
-- release's call) a replay answers as a new request would.
-- The signature without p_request_id (the previous release's) is dropped: a call with three
-- arguments would be ambiguous, and the new one answers it exactly as the old did.
DROP FUNCTION IF EXISTS mjsched.cancel_run(uuid, varchar, timestamptz);
CREATE OR REPLACE FUNCTION mjsched.cancel_run(
    p_run_id uuid, p_requested_by varchar, p_now timestamptz DEFAULT NULL, p_request_id uuid DEFAULT NULL)
RETURNS TABLE (outcome varchar, status varchar, cancel_requested_at timestamptz, cancel_requested_by varchar)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_job uuid;
    v_run mjsched.scheduled_job_run;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    IF p_run_id IS NULL THEN
        RAISE EXCEPTION 'run_id must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF p_requested_by IS NULL OR length(btrim(p_requested_by)) = 0 OR length(p_requested_by) > 255 THEN
        RAISE EXCEPTION 'requested_by=%: must be a non-empty text of at most 255 characters',
            left(p_requested_by, 300) USING ERRCODE = '22023';
    END IF;
    SELECT r.scheduled_job_id INTO v_job FROM mjsched.scheduled_job_run r WHERE r.id = p_run_id;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::varchar, NULL::varchar, NULL::timestamptz, NULL::varchar;
        RETURN;
    END IF;
    PERFORM 1 FROM mjsched.scheduled_job j WHERE j.id = v_job FOR NO KEY UPDATE;
    PERFORM mjsched.test_pause('cancel_run:job_locked');
    SELECT * INTO v_run FROM mjsched.scheduled_job_run r WHERE r.id = p_run_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN   -- deleted with its job meanwhile
        RETURN QUERY SELECT 'not_found'::varchar, NULL::varchar, NULL::timestamptz, NULL::varchar;
        RETURN;
    END IF;
    IF p_request_id IS NOT NULL AND v_run.cancel_request_id = p_request_id THEN
        -- a replay of this same request: what it did, from what it recorded
        RETURN QUERY SELECT CASE WHEN v_run.status = 'Cancelled' AND v_run.started_at IS NULL
                                 THEN 'cancelled' ELSE 'requested' END::varchar,
                            v_run.status, v_run.cancel_requested_at, v_run.cancel_requested_by;
    ELSIF v_run.status = 'Queued' THEN
        UPDATE mjsched.scheduled_job_run r
           SET status = 'Cancelled', success = false, completed_at = v_now, duration_ms = 0,
               cancel_requested_at = v_now, cancel_requested_by = p_requested_by, cancel_request_id = p_request_id,
               error_message = format('Cancelled before it ran: requested by %s at %s', p_requested_by,
                                      to_char(v_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
         WHERE r.id = p_run_id;
        -- counted as every ended run is (run_count = its Completed, Failed, Timeout, Cancelled
        -- and Abandoned runs), as a failure; no duration, no last_run_at: it never ran
        UPDATE mjsched.scheduled_job j
           SET run_count = j.run_count + 1, failure_count = j.failure_count + 1
         WHERE j.id = v_job;
        RETURN QUERY SELECT 'cancelled'::varchar, 'Cancelled'::varchar, v_now, p_requested_by;
    ELSIF v_run.status = 'Running' AND v_run.cancel_requested_at IS NOT NULL THEN
        RETURN QUERY SELECT 'already_requested'::varchar, v_run.status, v_run.cancel_requested_at,
                            v_run.cancel_requested_by;
    ELSIF v_run.status = 'Running' THEN
        UPDATE mjsched.scheduled_job_run r
           SET cancel_requested_at = v_now, cancel_requested_by = p_requested_by, cancel_request_id = p_request_id
         WHERE r.id = p_run_id;
        RETURN QUERY SELECT 'requested'::varchar, v_run.status, v_now, p_requested_by;
    ELSE
        RETURN QUERY SELECT 'not_cancellable'::varchar, v_run.status, v_run.cancel_requested_at,
                            v_run.cancel_requested_by;
    END IF;
END;
$$;

-- cancel_requests: of the given lease tokens (an engine's Running runs), the runs whose
-- cancel was requested. Read only, through the runs' token index; the engine's lease keeper
-- calls it as often as it renews the same tokens, and at least every 5 s.
CREATE OR REPLACE FUNCTION mjsched.cancel_requests(p_tokens uuid[])
RETURNS TABLE (run_id uuid, lock_token uuid, cancel_requested_at timestamptz, cancel_requested_by varchar)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
    SELECT r.id, r.lock_token, r.cancel_requested_at, r.cancel_requested_by
      FROM mjsched.scheduled_job_run r
     WHERE r.lock_token = ANY (p_tokens) AND r.status = 'Running' AND r.cancel_requested_at IS NOT NULL
$$;

REVOKE ALL ON FUNCTION mjsched.cancel_run(uuid, varchar, timestamptz, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.cancel_requests(uuid[]) FROM PUBLIC;
