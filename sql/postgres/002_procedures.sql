-- mjsched lock and lease procedures, version 3.
-- Every lock decision is made here, on the database clock. p_now exists only so
-- tests can move time on a real server; production callers pass NULL.
-- Errors raised on purpose use SQLSTATE 22023 (invalid_parameter_value) and name the parameter.
--
-- THE LOCK PROTOCOL (v3)
--
-- Lease truth. A job's lock (scheduled_job.lock_token, expected_completion_at) and the
-- Running run that holds it (scheduled_job_run.lock_token, lease_expires_at) carry ONE
-- lease: every statement that sets one sets the other to the same instant (claim,
-- start_manual_run, begin_job_run, extend_job_leases). A Concurrent job's tick run lets
-- the job lock go right after its claim (advance_job) and keeps only its run lease; it
-- is the one kind of Running run whose job is not locked by its token.
-- A lease is never shortened: renewal sets greatest(current lease, now + lease), so a
-- lease the claim lengthened to cover max_runtime survives the first heartbeat.
--
-- Lock order. Job rows before run rows, always. A procedure that changes runs first
-- locks the rows of their jobs (FOR NO KEY UPDATE: run inserts, whose foreign-key
-- check takes KEY SHARE, are not blocked), then touches the runs. SKIP LOCKED is used
-- only on the first rows a statement locks (candidate jobs of a claim or a sweep, the
-- held jobs of renew_leases and complete_runs): a row skipped there is handled by a later
-- call, and no SKIP LOCKED on a second row can hide an inversion. The one second-row SKIP
-- LOCKED: a claim or a sweep locks the lapsed runs it takes over SKIP LOCKED after their
-- jobs, and a job with a run it could not lock (an outsider's open transaction) is left
-- wholly unchanged, so the skip can never leave a run under a freed lock; a lapsed
-- Concurrent tick run (no job lock) is skipped alone. Several job rows locked without
-- SKIP LOCKED are locked in id order.
--
-- Takeover. Whoever frees or takes a lapsed lock (claim, acquire, start_manual_run,
-- sweep, release_engine_locks, force_unlock_job) abandons the Running runs of the old
-- token in the same transaction, through abandon_runs, which also counts them in the
-- job's statistics (run_count, failure_count): a run ends Abandoned exactly once, and
-- is counted exactly once, whoever ends it.
--
-- Replay safety. Calls that change state either are idempotent (renewal, sweep,
-- release, advance, enqueue, initialize, completion: replaying a committed call
-- changes nothing more and reports consistently), or take a caller-chosen id from
-- which their lock token derives (claim_due_jobs p_claim_id, start_manual_run
-- p_request_id) so a replay answers what the lost call did. README "Replay safety"
-- lists every procedure and how the backend retries it.
--
-- Recorded spans. A run taken from a freed lock starts no earlier than the job's last_run_at
-- (claim_queued, claim_ticks, start_manual_run: greatest(now, last_run_at)). The call's clock
-- is fixed when its transaction begins, but each statement sees what committed before it: a
-- claim held up on the way (a lock, a slow server) could find the job freed by a completion
-- that began after it, and would record its run as started before the previous one ended.
-- The completion that frees a job writes last_run_at (its own time) in the same transaction.
--
-- Test hook. test_pause(point) between the statements of multi-statement procedures
-- parks the caller at that point when the schema owner asked for it on this session
-- (SET mjsched.pause_at / mjsched.pause_key): tests/interleaving forces every
-- interleaving of statement boundaries with it. For anyone else it returns at once.

-- Signatures retired by earlier releases (no engine of the previous release calls them).
DROP FUNCTION IF EXISTS mjsched.claim_due_jobs(varchar, integer, double precision, timestamptz);
-- start_manual_run gained p_parameters (last, with a default): the old signature would make a
-- call with seven arguments ambiguous; the new one answers it exactly as the old did.
DROP FUNCTION IF EXISTS mjsched.start_manual_run(uuid, uuid, varchar, double precision, boolean, boolean, timestamptz);

-- Lease length for a job: the engine's lease, lengthened by the job's max_runtime.
CREATE OR REPLACE FUNCTION mjsched.lease_interval(p_lease_seconds double precision,
                                                  p_max_runtime_seconds double precision)
RETURNS interval LANGUAGE sql IMMUTABLE AS $$
    -- capped at one year: a max_runtime no interval can hold (1e13, NaN) never fails a claim
    SELECT make_interval(secs => least(greatest(p_lease_seconds, coalesce(p_max_runtime_seconds, 0)), 31536000))
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

-- test_pause: the interleaving harness's hook (see the header). Costs one
-- current_setting() when nobody asked for a pause.
CREATE OR REPLACE FUNCTION mjsched.test_pause(p_point text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE v_key bigint;
BEGIN
    IF current_setting('mjsched.pause_at', true) IS DISTINCT FROM p_point THEN
        RETURN;
    END IF;
    IF NOT pg_has_role(session_user, current_user, 'MEMBER') THEN
        RETURN;   -- only the schema owner's sessions are ever parked
    END IF;
    v_key := coalesce(nullif(current_setting('mjsched.pause_key', true), ''), '0')::bigint;
    PERFORM pg_advisory_lock(v_key);
    PERFORM pg_advisory_unlock(v_key);
END;
$$;

-- claimable: the one definition of a job a claim may lock: Active, inside its window,
-- and its lock free or its lease lapsed. Inlined by the planner (plain SQL, no
-- SECURITY DEFINER: 003_security.sql leaves it so), so the due index still applies.
CREATE OR REPLACE FUNCTION mjsched.claimable(
    p_status varchar, p_start_at timestamptz, p_end_at timestamptz,
    p_lock_token uuid, p_lease_until timestamptz, p_now timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_status = 'Active'
       AND (p_start_at IS NULL OR p_start_at <= p_now)
       AND (p_end_at IS NULL OR p_end_at > p_now)
       AND (p_lock_token IS NULL OR p_lease_until < p_now)
$$;

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
           expected_completion_at = v_now + mjsched.lease_interval(p_lease_seconds, j.max_runtime_seconds),
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

-- claim_due_jobs: in one transaction, lock up to p_max_jobs claimable jobs (jobs
-- with a Queued run first, then due ticks oldest first), skipping rows other engines
-- are claiming, and start their runs. A tick that already has a run (a zombie's,
-- say) comes back with run_id NULL: the caller only advances the schedule past it.
-- Taking over an expired lease abandons the old holder's Running runs (take_over).
-- Ended jobs are expired first, so a job past end_at is Expired at the next poll.
-- Each claim row also carries its job's row as the claim left it (read under the claim's
-- row lock, after it) and the job type's driver, so a poll is one round trip: every
-- column of scheduled_job but lock_token, which the engine and admin roles may not read
-- (grants.sql; the claim's own token is the row's lock_token). The last row always has
-- job_id NULL, no job columns, and carries db_now and next_due_at (the earliest instant
-- something may become claimable; NULL when nothing is scheduled), and replied_at: the
-- database clock as the claim ends (clock_timestamp(); p_now under a test clock). The engine
-- sets its clock estimate from it: from db_now (the transaction's start) the estimate ran
-- behind by the claim's own duration, and the poller woke that much after the next due instant.
--
-- Idempotent when the caller names the claim (p_claim_id, a fresh UUID per claim):
-- each lock token is then derived from (p_claim_id, job id), so a retry with the same
-- p_claim_id and p_replay = true -- the reply to the first call was lost, and it may or
-- may not have committed -- finds the claims that call made and answers them again,
-- claiming nothing new (claim_replay); when it finds none, the first call did not
-- commit and this one claims as usual. Without p_claim_id tokens are random and a lost
-- reply costs those jobs one lease.
--
-- Its result type grew the job columns, which CREATE OR REPLACE cannot change: the old
-- definition is dropped, and whoever could execute it (grants.sql's engine role) may
-- execute the new one, so engines keep claiming through the upgrade before grants.sql
-- runs again.
SELECT set_config('mjsched.claim_due_jobs_grantees',
                  coalesce((SELECT string_agg(a.grantee::text, ',')
                              FROM pg_proc p, aclexplode(p.proacl) a
                             WHERE p.oid = to_regprocedure('mjsched.claim_due_jobs(varchar, integer, double precision, '
                                                           'timestamptz, uuid, boolean)')
                               AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner), ''),
                  false);
DROP FUNCTION IF EXISTS mjsched.claim_due_jobs(varchar, integer, double precision, timestamptz, uuid, boolean);
CREATE FUNCTION mjsched.claim_due_jobs(
    p_instance varchar, p_max_jobs integer, p_lease_seconds double precision,
    p_now timestamptz DEFAULT NULL, p_claim_id uuid DEFAULT NULL, p_replay boolean DEFAULT false)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz,
               from_queue boolean, db_now timestamptz, next_due_at timestamptz,
               due_left integer, locked_out integer, replied_at timestamptz,
               job_type_id uuid, driver varchar, name varchar, description text, cron_expression varchar,
               timezone varchar, start_at timestamptz, end_at timestamptz, status varchar, configuration jsonb,
               owner varchar, concurrency_mode varchar, missed_run_policy varchar,
               run_immediately_if_never_run boolean, max_runtime_seconds double precision, isolation varchar,
               max_queued_runs integer, notify_on_success boolean, notify_on_failure boolean, notify_to varchar,
               next_run_at timestamptz, last_run_at timestamptz, last_success_at timestamptz, run_count integer,
               success_count integer, failure_count integer, last_duration_ms bigint, total_duration_ms bigint,
               locked_at timestamptz, locked_by_instance varchar, expected_completion_at timestamptz,
               created_at timestamptz, updated_at timestamptz, high_frequency_ok boolean, frequency_warned varchar,
               keep_runs_days integer, keep_runs_count integer, interval_seconds integer, run_at timestamptz,
               retry_max_attempts integer, retry_initial_delay double precision, retry_factor double precision,
               retry_max_delay double precision, retry_jitter double precision,
               notify_final_attempt_only boolean, retry_count integer, tags varchar,
               paused_at timestamptz, paused_by varchar, paused_by_user varchar, pause_reason varchar,
               paused_until timestamptz, jitter_seconds integer, priority integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_left integer := p_max_jobs;
    -- the claims, in order (replayed, then queued runs, then ticks), one array per column
    v_job_ids uuid[] := '{}'::uuid[];
    v_run_ids uuid[] := '{}'::uuid[];
    v_tokens uuid[] := '{}'::uuid[];
    v_for timestamptz[] := '{}'::timestamptz[];
    v_queued boolean[] := '{}'::boolean[];
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_lease(p_lease_seconds);
    IF p_max_jobs IS NULL OR p_max_jobs < 0 OR p_max_jobs > 10000 THEN
        RAISE EXCEPTION 'max_jobs=% must be between 0 and 10000', p_max_jobs USING ERRCODE = '22023';
    END IF;
    -- Every poll is the engine's heartbeat in the registry (at most one write a second, and
    -- never waited for: note_engine_seen). The engine's own row comes first, before any job
    -- row, as in renew_tokens: one order.
    PERFORM mjsched.note_engine_seen(p_instance, v_now, 1);

    IF p_replay AND p_claim_id IS NOT NULL THEN
        SELECT v_job_ids || array_agg(c.job_id), v_run_ids || array_agg(c.run_id), v_tokens || array_agg(c.lock_token),
               v_for || array_agg(c.scheduled_for), v_queued || array_agg(c.from_queue)
          INTO v_job_ids, v_run_ids, v_tokens, v_for, v_queued
          FROM mjsched.claim_replay(p_instance, p_claim_id, v_now) c;
        IF cardinality(v_job_ids) > 0 THEN
            v_left := 0;
        END IF;
    END IF;
    PERFORM mjsched.expire_ended_jobs(v_now);
    -- Maintenance windows that have passed end here (010_tags.sql); one index probe otherwise.
    IF EXISTS (SELECT 1 FROM mjsched.job_pause p WHERE p.paused_until <= v_now) THEN
        PERFORM mjsched.resume_paused_jobs(v_now);
    END IF;
    IF v_left > 0 THEN
        SELECT v_job_ids || array_agg(c.job_id), v_run_ids || array_agg(c.run_id), v_tokens || array_agg(c.lock_token),
               v_for || array_agg(c.scheduled_for), v_queued || array_agg(c.from_queue)
          INTO v_job_ids, v_run_ids, v_tokens, v_for, v_queued
          FROM mjsched.claim_queued(p_instance, v_left, p_lease_seconds, v_now, p_claim_id) c;
        v_left := p_max_jobs - cardinality(v_job_ids);
    END IF;
    IF v_left > 0 THEN
        SELECT v_job_ids || array_agg(c.job_id), v_run_ids || array_agg(c.run_id), v_tokens || array_agg(c.lock_token),
               v_for || array_agg(c.scheduled_for), v_queued || array_agg(c.from_queue)
          INTO v_job_ids, v_run_ids, v_tokens, v_for, v_queued
          FROM mjsched.claim_ticks(p_instance, v_left, p_lease_seconds, v_now, p_claim_id) c;
        -- A round's candidates held back by a tag's limit (010_tags.sql) may have hidden other due
        -- jobs: while a round claimed something, slots are left and a tag has a limit, claim again
        -- (the tags that round filled are left out of the next: each round claims or ends it).
        WHILE cardinality(v_job_ids) > p_max_jobs - v_left AND cardinality(v_job_ids) < p_max_jobs LOOP
            EXIT WHEN NOT EXISTS (SELECT 1 FROM mjsched.tag_limit);
            v_left := p_max_jobs - cardinality(v_job_ids);
            SELECT v_job_ids || array_agg(c.job_id), v_run_ids || array_agg(c.run_id),
                   v_tokens || array_agg(c.lock_token), v_for || array_agg(c.scheduled_for),
                   v_queued || array_agg(c.from_queue)
              INTO v_job_ids, v_run_ids, v_tokens, v_for, v_queued
              FROM mjsched.claim_ticks(p_instance, v_left, p_lease_seconds, v_now, p_claim_id) c;
        END LOOP;
        v_left := p_max_jobs - cardinality(v_job_ids);
    END IF;
    -- A statement of its own: it sees the rows the claims above wrote (and holds their locks).
    RETURN QUERY
    SELECT c.job_id, c.run_id, c.lock_token, c.scheduled_for, c.from_queue, v_now, NULL::timestamptz,
           NULL::integer, NULL::integer, NULL::timestamptz,
           j.job_type_id, t.driver_class, j.name, j.description, j.cron_expression,
           j.timezone, j.start_at, j.end_at, j.status, j.configuration,
           j.owner, j.concurrency_mode, j.missed_run_policy,
           j.run_immediately_if_never_run, j.max_runtime_seconds, j.isolation,
           j.max_queued_runs, j.notify_on_success, j.notify_on_failure, j.notify_to,
           j.next_run_at, j.last_run_at, j.last_success_at, j.run_count,
           j.success_count, j.failure_count, j.last_duration_ms, j.total_duration_ms,
           j.locked_at, j.locked_by_instance, j.expected_completion_at,
           j.created_at, j.updated_at, j.high_frequency_ok, j.frequency_warned,
           j.keep_runs_days, j.keep_runs_count, j.interval_seconds, j.run_at,
           j.retry_max_attempts, j.retry_initial_delay, j.retry_factor,
           j.retry_max_delay, j.retry_jitter,
           j.notify_final_attempt_only, j.retry_count,
           (SELECT string_agg(g.tag, ',' ORDER BY g.tag) FROM mjsched.job_tag g WHERE g.scheduled_job_id = j.id)::varchar,
           NULL::timestamptz, NULL::varchar, NULL::varchar, NULL::varchar, NULL::timestamptz,   -- a claimed job is not Paused
           j.jitter_seconds, j.priority
      FROM unnest(v_job_ids, v_run_ids, v_tokens, v_for, v_queued) WITH ORDINALITY
           AS c(job_id, run_id, lock_token, scheduled_for, from_queue, n)
      JOIN mjsched.scheduled_job j ON j.id = c.job_id
      JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
     ORDER BY c.n;
    RETURN QUERY SELECT NULL::uuid, NULL::uuid, NULL::uuid, NULL::timestamptz, false, v_now,
                        mjsched.next_due_at(v_now), t.due_left, t.locked_out,
                        CASE WHEN p_now IS NULL THEN clock_timestamp() ELSE v_now END,
                        NULL::uuid, NULL::varchar, NULL::varchar, NULL::text, NULL::varchar,
                        NULL::varchar, NULL::timestamptz, NULL::timestamptz, NULL::varchar, NULL::jsonb,
                        NULL::varchar, NULL::varchar, NULL::varchar,
                        NULL::boolean, NULL::double precision, NULL::varchar,
                        NULL::integer, NULL::boolean, NULL::boolean, NULL::varchar,
                        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::integer,
                        NULL::integer, NULL::integer, NULL::bigint, NULL::bigint,
                        NULL::timestamptz, NULL::varchar, NULL::timestamptz,
                        NULL::timestamptz, NULL::timestamptz, NULL::boolean, NULL::varchar,
                        NULL::integer, NULL::integer, NULL::integer, NULL::timestamptz,
                        NULL::integer, NULL::double precision, NULL::double precision,
                        NULL::double precision, NULL::double precision,
                        NULL::boolean, NULL::integer, NULL::varchar,
                        NULL::timestamptz, NULL::varchar, NULL::varchar, NULL::varchar, NULL::timestamptz,
                        NULL::integer, NULL::integer
                   FROM mjsched.claim_counters(p_instance, v_left <= 0, v_now) t;
END;
$$;
DO $$
DECLARE
    v_grantee oid;
BEGIN
    FOREACH v_grantee IN ARRAY coalesce(string_to_array(
            nullif(current_setting('mjsched.claim_due_jobs_grantees', true), ''), ',')::oid[], '{}') LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mjsched.claim_due_jobs(varchar, integer, double precision, '
                       'timestamptz, uuid, boolean) TO %I', pg_get_userbyid(v_grantee));
    END LOOP;
    PERFORM set_config('mjsched.claim_due_jobs_grantees', '', false);
END;
$$;

-- claim_token: the lock token of a claim: derived from (claim id, job id) when the
-- claim is named (so a replay can find it), random otherwise.
CREATE OR REPLACE FUNCTION mjsched.claim_token(p_claim_id uuid, p_job_id uuid) RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(md5(p_claim_id::text || p_job_id::text)::uuid, gen_random_uuid())
$$;

-- claim_replay: what a committed claim with this id took and still holds.
CREATE OR REPLACE FUNCTION mjsched.claim_replay(p_instance varchar, p_claim_id uuid, p_now timestamptz)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz, from_queue boolean)
LANGUAGE sql STABLE AS $$
    SELECT j.id, r.id, j.lock_token, coalesce(r.scheduled_for, j.next_run_at), r.queued_at IS NOT NULL
      FROM mjsched.scheduled_job j
      LEFT JOIN mjsched.scheduled_job_run r ON r.lock_token = j.lock_token AND r.status = 'Running'
     WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > p_now
       AND j.locked_by_instance = p_instance
       AND j.lock_token = md5(p_claim_id::text || j.id::text)::uuid
$$;

-- claim_queued: lock claimable jobs holding a due Queued run (a Queue-mode tick, or a retry
-- whose retry_at has come) and start their oldest one (oldest tick, then lowest attempt).
-- Skip mode: while the job's next tick is due its retries wait for claim_ticks, which runs
-- the tick and supersedes them.
CREATE OR REPLACE FUNCTION mjsched.claim_queued(
    p_instance varchar, p_max_jobs integer, p_lease_seconds double precision, p_now timestamptz,
    p_claim_id uuid)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz, from_queue boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_old uuid[];
    v_locked uuid[];
    v_full varchar[];    -- tags at their limit (010_tags.sql): NULL when no tag has a limit
BEGIN
    IF EXISTS (SELECT 1 FROM mjsched.tag_limit) THEN
        v_full := ARRAY(SELECT t.tag FROM mjsched.tags_at_limit() t);
    END IF;
    SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.lock_token) FILTER (WHERE c.lock_token IS NOT NULL), '{}')
      INTO v_ids, v_old
      FROM (SELECT j.id, j.lock_token FROM mjsched.scheduled_job j
             -- Driven by the few Queued runs (ix_scheduled_job_run_queued), never by a scan of
             -- every job: this runs at every poll. The candidates are the jobs with a due
             -- Queued run; a Skip-mode job whose own tick is due takes only a Queue-mode tick's
             -- run (attempt 1), not a retry (that retry is recorded Skipped by the tick's claim).
             WHERE j.id IN (SELECT q.scheduled_job_id FROM mjsched.scheduled_job_run q
                             WHERE q.status = 'Queued' AND (q.retry_at IS NULL OR q.retry_at <= p_now))
               AND (NOT (j.concurrency_mode = 'Skip' AND j.next_run_at IS NOT NULL AND j.next_run_at <= p_now)
                    OR EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                WHERE q.scheduled_job_id = j.id AND q.status = 'Queued' AND q.attempt <= 1
                                  AND (q.retry_at IS NULL OR q.retry_at <= p_now)))
               -- a one-off (run_at) is Expired once its tick is served, but the retries of that
               -- tick still run: its only Queued runs are retries (one tick, never queued behind itself)
               AND mjsched.claimable(CASE WHEN j.status = 'Expired' AND j.run_at IS NOT NULL THEN 'Active'
                                          ELSE j.status END,
                                     j.start_at, j.end_at, j.lock_token, j.expected_completion_at, p_now)
               AND (v_full IS NULL OR NOT EXISTS (SELECT 1 FROM mjsched.job_tag g
                                                   WHERE g.scheduled_job_id = j.id AND g.tag = ANY (v_full)))
             LIMIT p_max_jobs
               FOR NO KEY UPDATE OF j SKIP LOCKED) c;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    PERFORM mjsched.test_pause('claim_due_jobs:queued_jobs_locked');
    IF v_full IS NOT NULL THEN
        SELECT a.ids, a.old INTO v_ids, v_old FROM mjsched.admit_by_tag_limits(v_ids) a;
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    END IF;
    -- A lapsed run another session holds (an operator's open transaction) is not waited
    -- for: the runs of the lapsed tokens are locked here, SKIP LOCKED (only an outsider can
    -- hold them: their job rows are ours), and a job with a run that could not be locked is
    -- left as it is for a later claim.
    IF cardinality(v_old) > 0 THEN
        v_locked := ARRAY(SELECT r.id FROM mjsched.scheduled_job_run r
                           WHERE r.lock_token = ANY (v_old) AND r.status = 'Running'
                             FOR NO KEY UPDATE SKIP LOCKED);
        SELECT coalesce(array_agg(j.id), '{}'), coalesce(array_agg(j.lock_token) FILTER (WHERE j.lock_token IS NOT NULL), '{}')
          INTO v_ids, v_old
          FROM mjsched.scheduled_job j
         WHERE j.id = ANY (v_ids)
           AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run h
                            WHERE h.scheduled_job_id = j.id AND h.lock_token = j.lock_token
                              AND h.status = 'Running' AND NOT (h.id = ANY (v_locked)));
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    END IF;
    PERFORM mjsched.take_over(v_old, p_now);
    RETURN QUERY
    WITH taken AS (
        UPDATE mjsched.scheduled_job j
           SET lock_token = mjsched.claim_token(p_claim_id, j.id),
               locked_at = p_now, locked_by_instance = p_instance,
               expected_completion_at = p_now + mjsched.lease_interval(p_lease_seconds, j.max_runtime_seconds),
               updated_at = now(),    -- set here, the row trigger passes it over (001_schema.sql)
               fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                                ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
         WHERE j.id = ANY (v_ids)
           AND EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                        WHERE q.scheduled_job_id = j.id AND q.status = 'Queued')
     RETURNING j.id, j.lock_token, j.expected_completion_at AS lease_until, j.concurrency_mode, j.next_run_at,
               j.last_run_at, j.fence_seq, j.version
    ), picked AS (
        SELECT DISTINCT ON (q.scheduled_job_id) q.id, t.lock_token, t.lease_until, t.last_run_at, t.fence_seq,
               t.version
          FROM taken t
          JOIN mjsched.scheduled_job_run q ON q.scheduled_job_id = t.id AND q.status = 'Queued'
         WHERE (q.retry_at IS NULL OR q.retry_at <= p_now)
           AND NOT (q.attempt > 1 AND t.concurrency_mode = 'Skip'
                                       AND t.next_run_at IS NOT NULL AND t.next_run_at <= p_now)
         ORDER BY q.scheduled_job_id, q.scheduled_for, q.attempt, q.queued_at
    ), started AS (
        UPDATE mjsched.scheduled_job_run r
           SET status = 'Running', started_at = greatest(p_now, p.last_run_at), executed_by_instance = p_instance,
               lock_token = p.lock_token, lease_expires_at = p.lease_until,
               fencing_token = p.fence_seq, job_version = p.version
          FROM picked p
         WHERE r.id = p.id
     RETURNING r.scheduled_job_id, r.id, r.lock_token, r.scheduled_for
    )
    SELECT s.scheduled_job_id, s.id, s.lock_token, s.scheduled_for, true FROM started s;
END;
$$;

-- claim_ticks: lock claimable due jobs (oldest tick first; an index range scan on
-- (status, next_run_at); when more are due than the batch holds, in the priorities' order:
-- lowest claim_at(next_run_at, priority) first, 015_priorities.sql, an index range scan on
-- (status, claim_at)) that hold no Queued tick (a pending retry holds no tick back), and
-- start a run for each tick that is later than every tick the job has a run of (else the
-- claim is run-less: the tick counts as served). Skip mode: the tick supersedes the job's pending retries,
-- recorded Skipped with the reason.
CREATE OR REPLACE FUNCTION mjsched.claim_ticks(
    p_instance varchar, p_max_jobs integer, p_lease_seconds double precision, p_now timestamptz,
    p_claim_id uuid)
RETURNS TABLE (job_id uuid, run_id uuid, lock_token uuid, scheduled_for timestamptz, from_queue boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_old uuid[];
    v_locked uuid[];
    v_backlog boolean;
    v_full varchar[];    -- tags at their limit (010_tags.sql): NULL when no tag has a limit
BEGIN
    IF EXISTS (SELECT 1 FROM mjsched.tag_limit) THEN
        v_full := ARRAY(SELECT t.tag FROM mjsched.tags_at_limit() t);
    END IF;
    -- Priorities (015_priorities.sql): the order matters only when the claimable due jobs
    -- outnumber the batch. Whether they do is read from the due index (at most p_max_jobs + 1
    -- rows); while they fit, every one is taken through that index, as before; else the batch is
    -- the head of (status, claim_at), up to now + 100 minutes (claim_at of a due job of priority
    -- -100): its scan passes over no due job, only the not-yet-due jobs of a higher priority
    -- whose claim_at is before the batch's last.
    SELECT count(*) > p_max_jobs INTO v_backlog
      FROM (SELECT 1 FROM mjsched.scheduled_job j
             WHERE j.status = 'Active' AND j.next_run_at <= p_now
               AND mjsched.claimable(j.status, j.start_at, j.end_at, j.lock_token, j.expected_completion_at, p_now)
             ORDER BY j.next_run_at     -- the due index's head, never a scan past jobs not due (a kept plan)
             LIMIT p_max_jobs + 1) d;
    IF v_backlog THEN
        SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.lock_token) FILTER (WHERE c.lock_token IS NOT NULL), '{}')
          INTO v_ids, v_old
          FROM (SELECT j.id, j.lock_token FROM mjsched.scheduled_job j
                 WHERE j.status = 'Active' AND mjsched.claim_at(j.next_run_at, j.priority) <= p_now + interval '100 minutes'
                   AND j.next_run_at <= p_now
                   AND mjsched.claimable(j.status, j.start_at, j.end_at, j.lock_token, j.expected_completion_at, p_now)
                   AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                    WHERE q.scheduled_job_id = j.id AND q.status = 'Queued' AND q.attempt = 1)
                   AND (v_full IS NULL OR NOT EXISTS (SELECT 1 FROM mjsched.job_tag g
                                                       WHERE g.scheduled_job_id = j.id AND g.tag = ANY (v_full)))
                 ORDER BY mjsched.claim_at(j.next_run_at, j.priority)
                 LIMIT p_max_jobs
                   FOR NO KEY UPDATE OF j SKIP LOCKED) c;
    ELSE
    SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.lock_token) FILTER (WHERE c.lock_token IS NOT NULL), '{}')
      INTO v_ids, v_old
      FROM (SELECT j.id, j.lock_token FROM mjsched.scheduled_job j
             WHERE j.status = 'Active' AND j.next_run_at <= p_now
               AND mjsched.claimable(j.status, j.start_at, j.end_at, j.lock_token, j.expected_completion_at, p_now)
               AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                WHERE q.scheduled_job_id = j.id AND q.status = 'Queued' AND q.attempt = 1)
               AND (v_full IS NULL OR NOT EXISTS (SELECT 1 FROM mjsched.job_tag g
                                                   WHERE g.scheduled_job_id = j.id AND g.tag = ANY (v_full)))
             ORDER BY j.next_run_at
             LIMIT p_max_jobs
               FOR NO KEY UPDATE OF j SKIP LOCKED) c;
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    PERFORM mjsched.test_pause('claim_due_jobs:due_jobs_locked');
    IF v_full IS NOT NULL THEN
        SELECT a.ids, a.old INTO v_ids, v_old FROM mjsched.admit_by_tag_limits(v_ids) a;
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    END IF;
    -- A lapsed run another session holds (an operator's open transaction) is not waited
    -- for: the runs of the lapsed tokens are locked here, SKIP LOCKED (only an outsider can
    -- hold them: their job rows are ours), and a job with a run that could not be locked is
    -- left as it is for a later claim.
    -- "No Queued tick", again, now that the job rows are ours: the candidates were read in a
    -- snapshot taken before their rows were locked, and a lapsed holder's enqueue_job_run may
    -- have committed a Queued tick in between (it only locked the row: no new row version, so
    -- nothing was re-checked). Such a job is left for claim_queued, which serves the queue
    -- first. Only a job with a lapsed lock can have gained one (an enqueue needs a run holding
    -- the lock), hence only here; a later enqueue waits for our row lock.
    IF cardinality(v_old) > 0 THEN
        v_locked := ARRAY(SELECT r.id FROM mjsched.scheduled_job_run r
                           WHERE r.lock_token = ANY (v_old) AND r.status = 'Running'
                             FOR NO KEY UPDATE SKIP LOCKED);
        SELECT coalesce(array_agg(j.id), '{}'), coalesce(array_agg(j.lock_token) FILTER (WHERE j.lock_token IS NOT NULL), '{}')
          INTO v_ids, v_old
          FROM mjsched.scheduled_job j
         WHERE j.id = ANY (v_ids)
           AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run h
                            WHERE h.scheduled_job_id = j.id AND h.lock_token = j.lock_token
                              AND h.status = 'Running' AND NOT (h.id = ANY (v_locked)))
           AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                            WHERE q.scheduled_job_id = j.id AND q.status = 'Queued' AND q.attempt = 1);
        IF cardinality(v_ids) = 0 THEN
            RETURN;
        END IF;
    END IF;
    PERFORM mjsched.take_over(v_old, p_now);
    RETURN QUERY
    WITH taken AS (
        UPDATE mjsched.scheduled_job j
           SET lock_token = mjsched.claim_token(p_claim_id, j.id),
               locked_at = p_now, locked_by_instance = p_instance,
               expected_completion_at = p_now + mjsched.lease_interval(p_lease_seconds, j.max_runtime_seconds),
               updated_at = now(),    -- set here, the row trigger passes it over (001_schema.sql)
               fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                                ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
         WHERE j.id = ANY (v_ids)
     RETURNING j.id, j.lock_token, j.next_run_at, j.expected_completion_at AS lease_until, j.concurrency_mode,
               j.last_run_at, j.fence_seq, j.version
    ), superseded AS (
        UPDATE mjsched.scheduled_job_run q
           SET status = 'Skipped', success = false, completed_at = p_now, duration_ms = 0,
               error_message = format('retry not run: the next tick (%s) came due first (concurrency_mode Skip)',
                                      t.next_run_at)
          FROM taken t
         WHERE q.scheduled_job_id = t.id AND q.status = 'Queued' AND q.attempt > 1
           AND t.concurrency_mode = 'Skip' AND q.scheduled_for < t.next_run_at   -- retries of earlier ticks only
    ), inserted AS (
        -- A job's ticks are served in increasing order: a tick at or before the newest tick the
        -- job has a run of counts as served (no run; the engine moves the schedule on), so a
        -- next_run_at moved back over a tick whose run the purge deleted (006_retention.sql
        -- keeps the newest) never runs it again. We hold the job row: no tick run of it is
        -- being written by anyone else.
        INSERT INTO mjsched.scheduled_job_run
               (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
                lock_token, lease_expires_at, fencing_token, job_version)
        SELECT t.id, t.next_run_at, 'Running', greatest(p_now, t.last_run_at), p_instance, t.lock_token, t.lease_until,
               t.fence_seq, t.version
          FROM taken t
         -- (the newest tick by max(): a backward probe of uq_scheduled_job_run_tick per job, never
         -- an anti-join the planner may hash over the whole history under stale statistics)
         WHERE coalesce((SELECT max(s.scheduled_for) FROM mjsched.scheduled_job_run s
                          WHERE s.scheduled_job_id = t.id), '-infinity') < t.next_run_at
        ON CONFLICT DO NOTHING
        RETURNING id, scheduled_job_id
    )
    SELECT t.id, i.id, t.lock_token, t.next_run_at, false
      FROM taken t
      LEFT JOIN inserted i ON i.scheduled_job_id = t.id;
END;
$$;

-- next_due_at: the earliest instant something may become claimable (a tick, a retry, a
-- lapsing lock or run lease); NULL when nothing is scheduled. (plpgsql: its columns are
-- resolved when it runs, not when this script creates it.) Each branch is the head of the
-- index on its column (ORDER BY .. LIMIT 1), not min() over the rows its filter matches: the
-- runs' lease and token indexes share one predicate (status = 'Running'), and a min() was
-- seen planned over the token index, reading every Running run's heap tuple, and the dead
-- ones the last completions left, at each claim (1.6 ms a claim in the throughput bench).
CREATE OR REPLACE FUNCTION mjsched.next_due_at(p_now timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN least(
        (SELECT j.next_run_at FROM mjsched.scheduled_job j
          WHERE j.status = 'Active' AND j.next_run_at > p_now
          ORDER BY j.status, j.next_run_at LIMIT 1),
        (SELECT j.expected_completion_at FROM mjsched.scheduled_job j
          WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > p_now
          ORDER BY j.expected_completion_at LIMIT 1),
        (SELECT r.lease_expires_at FROM mjsched.scheduled_job_run r
          WHERE r.status = 'Running' AND r.lease_expires_at > p_now
          ORDER BY r.lease_expires_at LIMIT 1),
        (SELECT r.retry_at FROM mjsched.scheduled_job_run r
          WHERE r.status = 'Queued' AND r.retry_at IS NOT NULL AND r.retry_at > p_now
          ORDER BY r.retry_at LIMIT 1),
        (SELECT p.paused_until FROM mjsched.job_pause p      -- the end of a maintenance window (010_tags.sql)
          WHERE p.paused_until IS NOT NULL AND p.paused_until > p_now
          ORDER BY p.paused_until LIMIT 1));
END;
$$;

-- claim_counters: for DispatchResult, due jobs left unclaimed for want of slots (counted
-- only when the batch was full) and due jobs held by other engines' live leases. Both
-- are capped at 1000: they feed a log line and must not cost O(backlog).
CREATE OR REPLACE FUNCTION mjsched.claim_counters(p_instance varchar, p_batch_full boolean, p_now timestamptz)
RETURNS TABLE (due_left integer, locked_out integer)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_batch_full THEN (
               SELECT count(*)::integer FROM (
                   SELECT 1 FROM mjsched.scheduled_job j
                    WHERE j.status = 'Active' AND j.next_run_at <= p_now
                      AND mjsched.claimable(j.status, j.start_at, j.end_at, j.lock_token,
                                            j.expected_completion_at, p_now)
                    ORDER BY j.next_run_at      -- the due index's head, not a scan past served jobs
                    LIMIT 1000) d)
           ELSE 0 END,
           (SELECT count(*)::integer FROM (
               SELECT 1 FROM mjsched.scheduled_job j
                WHERE j.status = 'Active' AND j.next_run_at <= p_now
                  AND j.lock_token IS NOT NULL AND j.expected_completion_at >= p_now
                  AND j.locked_by_instance IS DISTINCT FROM p_instance
                LIMIT 1000) d)
$$;
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
           expected_completion_at = v_now + mjsched.lease_interval(p_lease_seconds, j.max_runtime_seconds),
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

-- json_nesting_exceeds: whether a JSON value's objects and arrays nest deeper than p_limit
-- levels ({} is one level): a container p_limit levels below the root is one level too many.
-- The walk stops at that level, however deep the value goes. (The table rules of
-- 001_schema.sql spell the same path out for 64: a rule calling a function would need EXECUTE
-- on it for every role that writes a row.)
CREATE OR REPLACE FUNCTION mjsched.json_nesting_exceeds(p_json jsonb, p_limit integer) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_path_exists(
        p_json, format('strict $.**{%s} ? (@.type() == "object" || @.type() == "array")', p_limit)::jsonpath), false)
$$;

-- internal_routines: the building blocks the procedures call as their owner. They take
-- p_now without check_test_clock, or change rows unfenced (abandon_runs), so the engine
-- role may not call them directly: grants.sql revokes them, and the probe skips them
-- (this list itself stays callable: probe_permissions reads it as the caller).
CREATE OR REPLACE FUNCTION mjsched.internal_routines() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['test_pause', 'claimable', 'claim_token', 'abandon_runs', 'renew_tokens', 'complete_items',
                 'runs_of_tokens', 'take_over', 'expire_ended_jobs', 'claim_replay', 'claim_queued',
                 'claim_ticks', 'next_due_at', 'claim_counters', 'purge_candidates', 'note_engine_seen',
                 'json_nesting_exceeds', 'tag_problem', 'check_tag', 'resume_paused_jobs', 'tags_at_limit',
                 'admit_by_tag_limits', 'alerts_of_call', 'claim_at']
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
       AND p.proname <> ALL (mjsched.internal_routines())
     ORDER BY 1
$$;

-- engines_holding_locks: the engines of a host that still hold a job lock or a Running
-- run, with their pid and whether they stopped cleanly. A starting engine releases what
-- such an engine holds when its process is gone (release_engine_locks).
CREATE OR REPLACE FUNCTION mjsched.engines_holding_locks(p_host varchar)
RETURNS TABLE (instance varchar, pid integer, stopped_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT e.instance, e.pid, e.stopped_at
      FROM mjsched.engine_instance e
     WHERE e.host = p_host
       AND e.instance IN (SELECT j.locked_by_instance FROM mjsched.scheduled_job j WHERE j.lock_token IS NOT NULL
                          UNION
                          SELECT r.executed_by_instance FROM mjsched.scheduled_job_run r WHERE r.status = 'Running')
     ORDER BY e.instance
$$;
