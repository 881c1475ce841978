-- 002_procedures, queue and advance: Queue mode's kept ticks, moving the schedule on, begin_job_run.

-- enqueue_job_run (Queue mode): keep a tick that came due while the job runs as one
-- Queued run: at most one per tick (the UNIQUE index), at most max_queued_runs, and
-- only a tick later than the start of the Running run that holds the job's lock and
-- not in the future. A tick refused once (queue full) is never queued later. Pending
-- retries (009_retries.sql) take no queue slot.
CREATE OR REPLACE FUNCTION mjsched.enqueue_job_run(
    p_job_id uuid, p_scheduled_for timestamptz, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (enqueued integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_limit integer;
    v_token uuid;
    v_started timestamptz;
    v_rows integer := 0;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    IF p_scheduled_for IS NULL THEN
        RAISE EXCEPTION 'scheduled_for must not be NULL' USING ERRCODE = '22023';
    END IF;
    SELECT j.max_queued_runs, j.lock_token INTO v_limit, v_token
      FROM mjsched.scheduled_job j
     WHERE j.id = p_job_id AND j.concurrency_mode = 'Queue' AND j.status = 'Active'
       FOR NO KEY UPDATE;
    PERFORM mjsched.test_pause('enqueue_job_run:job_locked');
    SELECT r.started_at INTO v_started
      FROM mjsched.scheduled_job_run r
     WHERE r.lock_token = v_token AND r.status = 'Running' AND r.scheduled_job_id = p_job_id;
    IF v_limit IS NOT NULL AND v_started IS NOT NULL
       AND p_scheduled_for > v_started AND p_scheduled_for <= v_now
       AND (SELECT count(*) FROM mjsched.scheduled_job_run q
             WHERE q.scheduled_job_id = p_job_id AND q.status = 'Queued' AND q.attempt = 1) < v_limit THEN
        INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at)
        VALUES (p_job_id, p_scheduled_for, 'Queued', v_now)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- advance_job: move a held job's schedule and, with p_release, drop its lock (for a
-- Concurrent tick run, which keeps only its run lease, and for a tick that already had
-- a run). A release is refused while any other Running run holds the token (a Skip or
-- Queue run, or a manual run of any mode): that lock ends with its run.
-- The form of the previous release: no compare-and-set (it moves next_run_at whatever it
-- is now). Kept for its engines; this release calls the six-parameter form below.
CREATE OR REPLACE FUNCTION mjsched.advance_job(
    p_job_id uuid, p_token uuid, p_next_run_at timestamptz, p_release boolean)
RETURNS TABLE (advanced integer)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY SELECT a.advanced FROM mjsched.advance_job(p_job_id, p_token, p_next_run_at, p_release,
                                                            false, NULL::timestamptz) a;
END;
$$;

-- advance_job, with compare-and-set: with p_guard, next_run_at is moved only while it is
-- still p_expected_next_run_at (what the engine saw at the claim), as a completion moves
-- it: a schedule edited between a claim and its advance keeps the edit's next run (the lock
-- is still released). Answers 1 when the token held the job (and the release, if asked,
-- was made), whether or not the guard let next_run_at move.
CREATE OR REPLACE FUNCTION mjsched.advance_job(
    p_job_id uuid, p_token uuid, p_next_run_at timestamptz, p_release boolean,
    p_guard boolean, p_expected_next_run_at timestamptz)
RETURNS TABLE (advanced integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    UPDATE mjsched.scheduled_job j
       SET next_run_at = CASE WHEN NOT coalesce(p_guard, false)
                                   OR j.next_run_at IS NOT DISTINCT FROM p_expected_next_run_at
                              THEN p_next_run_at ELSE j.next_run_at END,
           lock_token = CASE WHEN p_release THEN NULL ELSE j.lock_token END,
           locked_at = CASE WHEN p_release THEN NULL ELSE j.locked_at END,
           locked_by_instance = CASE WHEN p_release THEN NULL ELSE j.locked_by_instance END,
           expected_completion_at = CASE WHEN p_release THEN NULL ELSE j.expected_completion_at END
     WHERE j.id = p_job_id AND j.lock_token = p_token
       AND (NOT p_release
            OR NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run r
                            WHERE r.lock_token = p_token AND r.status = 'Running'
                              AND (j.concurrency_mode <> 'Concurrent' OR r.scheduled_for IS NULL)));
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- begin_job_run: a Running run for a job whose lock the caller holds (manual runs
-- have scheduled_for NULL), sharing the lock's lease. Returns the run id, or no row
-- when the lock is not ours. Idempotent for its token: while a Running run already
-- holds p_token (a replay after a lost reply), that run's id is answered and no second
-- run is made. Kept for engines of release 2; this release uses start_manual_run.
CREATE OR REPLACE FUNCTION mjsched.begin_job_run(
    p_job_id uuid, p_token uuid, p_instance varchar, p_scheduled_for timestamptz,
    p_now timestamptz DEFAULT NULL)
RETURNS TABLE (run_id uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_lease timestamptz;
    v_fence bigint;
    v_version integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    SELECT j.expected_completion_at, j.fence_seq, j.version INTO v_lease, v_fence, v_version
      FROM mjsched.scheduled_job j
     WHERE j.id = p_job_id AND j.lock_token = p_token
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM mjsched.test_pause('begin_job_run:job_locked');
    RETURN QUERY SELECT r.id FROM mjsched.scheduled_job_run r
                  WHERE r.lock_token = p_token AND r.status = 'Running' AND r.scheduled_job_id = p_job_id;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO mjsched.scheduled_job_run
           (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
            lock_token, lease_expires_at, fencing_token, job_version)
    VALUES (p_job_id, p_scheduled_for, 'Running', v_now, p_instance, p_token, v_lease, v_fence, v_version)
    ON CONFLICT DO NOTHING
    RETURNING id;
END;
$$;

