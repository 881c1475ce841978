-- 002_procedures, takeover: whoever frees or takes a lapsed lock ends its holder's runs Abandoned,
-- counted once (docs/guide/protocol.md).

-- abandon_runs: end the given runs Abandoned (those still Running) and count them in
-- their jobs' statistics. The caller already holds their job rows (lock order).
-- {engine} in p_reason becomes the instance that executed the run.
CREATE OR REPLACE FUNCTION mjsched.abandon_runs(p_run_ids uuid[], p_now timestamptz, p_reason text)
RETURNS integer
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    IF p_run_ids IS NULL OR cardinality(p_run_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH abandoned AS (
        UPDATE mjsched.scheduled_job_run r
           SET status = 'Abandoned', success = false, completed_at = p_now, lease_expires_at = NULL,
               duration_ms = greatest(0, (extract(epoch FROM p_now - r.started_at) * 1000)::bigint),
               error_message = replace(p_reason, '{engine}', coalesce(r.executed_by_instance, '?'))
         WHERE r.id = ANY (p_run_ids) AND r.status = 'Running'
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
    SELECT count(*) INTO v_rows FROM abandoned;
    RETURN v_rows;
END;
$$;

-- runs_of_tokens: the Running runs holding any of these tokens, in id order.
CREATE OR REPLACE FUNCTION mjsched.runs_of_tokens(p_tokens uuid[]) RETURNS uuid[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(r.id ORDER BY r.id), '{}')
      FROM mjsched.scheduled_job_run r
     WHERE r.lock_token = ANY (p_tokens) AND r.status = 'Running'
$$;

-- take_over: the caller holds the job rows of these lapsed tokens; their Running runs
-- end Abandoned before the locks change hands.
CREATE OR REPLACE FUNCTION mjsched.take_over(p_old_tokens uuid[], p_now timestamptz) RETURNS integer
LANGUAGE sql AS $$
    SELECT CASE WHEN cardinality(p_old_tokens) = 0 THEN 0
                ELSE mjsched.abandon_runs(mjsched.runs_of_tokens(p_old_tokens), p_now,
                         'Abandoned: the lease expired and another holder took the lock over') END
$$;

-- take_jobs: a claim's takeover, written once (claim_queued, claim_ticks). The claim holds
-- the rows of p_ids, its candidates (locked SKIP LOCKED); p_old are their lapsed tokens. A
-- lapsed run another session holds (an operator's open transaction) is not waited for: the
-- runs of the lapsed tokens are locked here, SKIP LOCKED (only an outsider can hold them:
-- their job rows are ours), and a job with a run that could not be locked is left as it is
-- for a later claim. claim_ticks (p_from_queue false) also checks "no Queued tick" again, now
-- that the job rows are ours: the candidates were read in a snapshot taken before their rows
-- were locked, and a lapsed holder's enqueue_job_run may have committed a Queued tick in
-- between (it only locked the row: no new row version, so nothing was re-checked). Such a
-- job is left for claim_queued, which serves the queue first. Only a job with a lapsed lock
-- can have gained one (an enqueue needs a run holding the lock), hence only here; a later
-- enqueue waits for our row lock. claim_queued (p_from_queue true) takes only a job that
-- still holds a Queued run. The old holders' Running runs end Abandoned (take_over), then
-- each job's lock is taken: a new token (claim_token), one lease (lease_until), and the
-- next fencing token. Returns the ids of the jobs taken.
CREATE OR REPLACE FUNCTION mjsched.take_jobs(
    p_ids uuid[], p_old uuid[], p_instance varchar, p_lease_seconds double precision, p_now timestamptz,
    p_claim_id uuid, p_from_queue boolean)
RETURNS TABLE (job_id uuid)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_locked uuid[];
BEGIN
    IF cardinality(p_old) > 0 THEN
        v_locked := ARRAY(SELECT r.id FROM mjsched.scheduled_job_run r
                           WHERE r.lock_token = ANY (p_old) AND r.status = 'Running'
                             FOR NO KEY UPDATE SKIP LOCKED);
        SELECT coalesce(array_agg(j.id), '{}'), coalesce(array_agg(j.lock_token) FILTER (WHERE j.lock_token IS NOT NULL), '{}')
          INTO p_ids, p_old
          FROM mjsched.scheduled_job j
         WHERE j.id = ANY (p_ids)
           AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run h
                            WHERE h.scheduled_job_id = j.id AND h.lock_token = j.lock_token
                              AND h.status = 'Running' AND NOT (h.id = ANY (v_locked)))
           AND (p_from_queue OR NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                             WHERE q.scheduled_job_id = j.id AND q.status = 'Queued'
                                               AND q.attempt = 1));
        IF cardinality(p_ids) = 0 THEN
            RETURN;
        END IF;
    END IF;
    PERFORM mjsched.take_over(p_old, p_now);
    RETURN QUERY
    UPDATE mjsched.scheduled_job j
       SET lock_token = mjsched.claim_token(p_claim_id, j.id),
           locked_at = p_now, locked_by_instance = p_instance,
           expected_completion_at = mjsched.lease_until(p_now, p_lease_seconds, j.max_runtime_seconds),
           updated_at = now(),    -- set here, the row trigger passes it over (001_schema.sql)
           fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                            ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
     WHERE j.id = ANY (p_ids)
       AND (NOT p_from_queue OR EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                         WHERE q.scheduled_job_id = j.id AND q.status = 'Queued'))
    RETURNING j.id;
END;
$$;

-- expire_ended_jobs: Active jobs past end_at become Expired (a partial-index scan, so
-- every claim can afford it); their pending retries end Skipped (the window closed).
CREATE OR REPLACE FUNCTION mjsched.expire_ended_jobs(p_now timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    WITH ended AS (
        SELECT j.id FROM mjsched.scheduled_job j
         WHERE j.status = 'Active' AND j.end_at IS NOT NULL AND j.end_at <= p_now
           FOR NO KEY UPDATE SKIP LOCKED
    ), dropped AS (
        UPDATE mjsched.scheduled_job_run q
           SET status = 'Skipped', success = false, completed_at = p_now, duration_ms = 0,
               error_message = 'retry not run: the job''s window ended (end_at) before it was due'
          FROM ended e
         WHERE q.scheduled_job_id = e.id AND q.status = 'Queued' AND q.attempt > 1
    )
    UPDATE mjsched.scheduled_job j SET status = 'Expired', next_run_at = NULL
      FROM ended e
     WHERE j.id = e.id;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    -- A one-off is Expired as soon as its tick is served, so the statement above never visits
    -- it: its pending retries end Skipped here once its window closed (found from the few
    -- Queued runs; job rows locked first, as every writer of Queued runs does).
    WITH ended_one_offs AS (
        SELECT j.id FROM mjsched.scheduled_job j
         WHERE j.status = 'Expired' AND j.run_at IS NOT NULL AND j.end_at IS NOT NULL AND j.end_at <= p_now
           AND j.id IN (SELECT q.scheduled_job_id FROM mjsched.scheduled_job_run q
                         WHERE q.status = 'Queued' AND q.attempt > 1)
           FOR NO KEY UPDATE SKIP LOCKED
    )
    UPDATE mjsched.scheduled_job_run q
       SET status = 'Skipped', success = false, completed_at = p_now, duration_ms = 0,
           error_message = 'retry not run: the job''s window ended (end_at) before it was due'
      FROM ended_one_offs e
     WHERE q.scheduled_job_id = e.id AND q.status = 'Queued' AND q.attempt > 1;
    RETURN v_rows;
END;
$$;

