-- 002_procedures, leases: the engine's liveness write and the renewal of every lease it holds.

-- note_engine_seen: the engine's liveness write (last_seen_at), made only when it can be made
-- now. The engine's own registry row is a row an outsider can hold (an operator's open
-- transaction, a FOR SHARE report): a renewal or a claim that waited for it let the engine's
-- leases lapse while its runs still ran. So the row is taken SKIP LOCKED and, when someone
-- else holds it, this beat's liveness write is skipped -- the next one tries again; a
-- skipped write costs nothing but a staler last_seen_at. p_min_age_seconds: skip it also when the
-- row was written less than this long ago (the claim writes at most once a second); NULL:
-- write whatever the row holds (a renewal).
CREATE OR REPLACE FUNCTION mjsched.note_engine_seen(p_instance varchar, p_now timestamptz,
                                                    p_min_age_seconds double precision)
RETURNS void
LANGUAGE sql AS $$
    UPDATE mjsched.engine_instance e SET last_seen_at = p_now
     WHERE e.instance = (SELECT i.instance FROM mjsched.engine_instance i
                          WHERE i.instance = p_instance AND (p_min_age_seconds IS NULL
                               OR i.last_seen_at < p_now - make_interval(secs => p_min_age_seconds))
                            FOR NO KEY UPDATE SKIP LOCKED)
$$;

-- renew_tokens: the renewal both procedures below share. A token is renewed only when its
-- run is still Running AND, unless it is a Concurrent tick run (which holds no job lock),
-- its job is still locked by the same token; then the run's lease and the job's lock move
-- together to greatest(current lease, now + lease). Jobs first: with p_skip_busy the job
-- rows are locked SKIP LOCKED (the first rows it locks) and a token whose job row another
-- session holds is answered renewed = false (busy: neither renewed nor lost); without it
-- they are locked in id order, waiting. Tokens it does not answer are lost. Also records
-- that the engine is alive, unless another session holds its registry row (note_engine_seen).
CREATE OR REPLACE FUNCTION mjsched.renew_tokens(
    p_tokens uuid[], p_lease_seconds double precision, p_instance varchar, p_now timestamptz,
    p_skip_busy boolean)
RETURNS TABLE (lock_token uuid, renewed boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_jobs uuid[];
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_lease(p_lease_seconds);
    IF p_instance IS NOT NULL THEN
        PERFORM mjsched.note_engine_seen(p_instance, v_now, NULL);
    END IF;
    IF p_tokens IS NULL OR cardinality(p_tokens) = 0 THEN
        RETURN;
    END IF;
    -- Through the runs' token index and the job's primary key.
    IF p_skip_busy THEN
        SELECT coalesce(array_agg(l.id), '{}') INTO v_jobs FROM (
            SELECT j.id FROM mjsched.scheduled_job j
             WHERE j.id IN (SELECT h.scheduled_job_id FROM mjsched.scheduled_job_run h
                             WHERE h.lock_token = ANY (p_tokens) AND h.status = 'Running')
               FOR NO KEY UPDATE SKIP LOCKED) l;
    ELSE
        SELECT coalesce(array_agg(l.id), '{}') INTO v_jobs FROM (
            SELECT j.id FROM mjsched.scheduled_job j
             WHERE j.id IN (SELECT h.scheduled_job_id FROM mjsched.scheduled_job_run h
                             WHERE h.lock_token = ANY (p_tokens) AND h.status = 'Running')
             ORDER BY j.id
               FOR NO KEY UPDATE) l;
    END IF;
    IF p_skip_busy THEN      -- one pause point per public procedure (the harness parks each)
        PERFORM mjsched.test_pause('renew_leases:jobs_locked');
    ELSE
        PERFORM mjsched.test_pause('extend_job_leases:jobs_locked');
    END IF;
    RETURN QUERY
    WITH renewable AS (
        SELECT r.id AS run_id, r.lock_token, j.id AS job_id, j.lock_token = r.lock_token AS holds_lock,
               greatest(r.lease_expires_at,
                        CASE WHEN j.lock_token = r.lock_token THEN j.expected_completion_at END,
                        v_now + make_interval(secs => p_lease_seconds)) AS lease_until
          FROM mjsched.scheduled_job_run r
          JOIN mjsched.scheduled_job j ON j.id = r.scheduled_job_id
         WHERE r.lock_token = ANY (p_tokens) AND r.status = 'Running' AND j.id = ANY (v_jobs)
           AND (j.lock_token = r.lock_token
                OR (j.concurrency_mode = 'Concurrent' AND r.scheduled_for IS NOT NULL))
    ), runs AS (
        UPDATE mjsched.scheduled_job_run r SET lease_expires_at = n.lease_until
          FROM renewable n
         WHERE r.id = n.run_id
     RETURNING r.id
    ), jobs AS (
        UPDATE mjsched.scheduled_job j SET expected_completion_at = n.lease_until
          FROM renewable n
         WHERE j.id = n.job_id AND n.holds_lock
     RETURNING j.id
    )
    SELECT DISTINCT n.lock_token, true FROM renewable n
    UNION ALL
    -- busy: still Running, but its job row was held by another session (not read under a
    -- lock: the next renewal decides whether it is renewed or lost)
    SELECT DISTINCT h.lock_token, false FROM mjsched.scheduled_job_run h
     WHERE p_skip_busy AND h.lock_token = ANY (p_tokens) AND h.status = 'Running'
       AND NOT (h.scheduled_job_id = ANY (v_jobs));
END;
$$;

-- renew_leases: one call renews every lease an engine holds, without waiting on a job row
-- another session holds (an operator's open transaction): such a token comes back with
-- renewed = false and is renewed by a later call, so one locked row delays only its own
-- job. Tokens not answered are lost (taken over, swept, or finished).
CREATE OR REPLACE FUNCTION mjsched.renew_leases(
    p_tokens uuid[], p_lease_seconds double precision,
    p_instance varchar DEFAULT NULL, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (lock_token uuid, renewed boolean)
LANGUAGE sql AS $$
    SELECT t.lock_token, t.renewed FROM mjsched.renew_tokens(p_tokens, p_lease_seconds, p_instance, p_now, true) t
$$;

-- extend_job_leases: the renewal as release 2 calls it: one row per renewed token, and it
-- waits for a job row another session holds. Kept for engines of the previous release.
CREATE OR REPLACE FUNCTION mjsched.extend_job_leases(
    p_tokens uuid[], p_lease_seconds double precision,
    p_instance varchar DEFAULT NULL, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (lock_token uuid)
LANGUAGE sql AS $$
    SELECT t.lock_token FROM mjsched.renew_tokens(p_tokens, p_lease_seconds, p_instance, p_now, false) t
$$;

