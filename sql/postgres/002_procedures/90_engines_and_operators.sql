-- 002_procedures, engines and operators: start-up hand-back, jobs unlock, initialize, unregister.

-- release_engine_locks: hand back everything an engine instance holds -- its job locks
-- and its Running runs (Abandoned with p_reason, counted) -- fenced, so the holder's
-- late completion changes nothing. Called by an engine for itself at close/exit, and
-- at start-up for a previous engine of its host whose process is gone (or its own
-- instance name after a clean stop). Idempotent.
CREATE OR REPLACE FUNCTION mjsched.release_engine_locks(
    p_instance varchar, p_reason text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (runs_abandoned integer, locks_freed integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_ids uuid[];
    v_runs integer;
    v_freed integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    IF p_instance IS NULL OR p_instance = '' THEN
        RAISE EXCEPTION 'instance must not be empty' USING ERRCODE = '22023';
    END IF;
    SELECT coalesce(array_agg(s.id), '{}') INTO v_ids
      FROM (SELECT j.id FROM mjsched.scheduled_job j
             WHERE (j.lock_token IS NOT NULL AND j.locked_by_instance = p_instance)
                OR j.id IN (SELECT r.scheduled_job_id FROM mjsched.scheduled_job_run r
                             WHERE r.status = 'Running' AND r.executed_by_instance = p_instance)
             ORDER BY j.id
               FOR NO KEY UPDATE) s;
    PERFORM mjsched.test_pause('release_engine_locks:jobs_locked');
    v_runs := mjsched.abandon_runs(ARRAY(
        SELECT r.id FROM mjsched.scheduled_job_run r
         WHERE r.scheduled_job_id = ANY (v_ids) AND r.status = 'Running'
           AND (r.executed_by_instance = p_instance
                OR r.lock_token IN (SELECT j.lock_token FROM mjsched.scheduled_job j
                                     WHERE j.id = ANY (v_ids) AND j.locked_by_instance = p_instance))
         ORDER BY r.id), v_now, coalesce(p_reason, 'Abandoned: engine ' || p_instance || ' handed it back'));
    UPDATE mjsched.scheduled_job j
       SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
     WHERE j.id = ANY (v_ids) AND j.locked_by_instance = p_instance;
    GET DIAGNOSTICS v_freed = ROW_COUNT;
    RETURN QUERY SELECT v_runs, v_freed;
END;
$$;

-- force_unlock_job: the operator's override (`mjsched jobs unlock`): free the job's
-- lock whoever holds it, abandoning the Running run that held it (fenced: its late
-- completion is refused). Returns the old holder, or no row when the job was not locked.
CREATE OR REPLACE FUNCTION mjsched.force_unlock_job(
    p_job_id uuid, p_reason text, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (locked_by_instance varchar, runs_abandoned integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_token uuid;
    v_holder varchar;
    v_runs integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    SELECT j.lock_token, j.locked_by_instance INTO v_token, v_holder
      FROM mjsched.scheduled_job j WHERE j.id = p_job_id AND j.lock_token IS NOT NULL
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM mjsched.test_pause('force_unlock_job:job_locked');
    v_runs := mjsched.abandon_runs(mjsched.runs_of_tokens(ARRAY[v_token]), v_now,
                                   coalesce(p_reason, 'Abandoned: an operator unlocked the job'));
    UPDATE mjsched.scheduled_job j
       SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
     WHERE j.id = p_job_id;
    RETURN QUERY SELECT v_holder, v_runs;
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

-- unregister_engine: the engine's row in the table of live engines behind `mjsched status` is
-- marked stopped. register_engine is in 011_engine_reports.sql (what an engine reports of itself).
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

