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

-- lease_until: when a lease taken at p_now ends. The one computation of the lease every lock is
-- taken with (take_jobs, acquire_job_lock, start_manual_run); renewal only lengthens it
-- (renew_tokens). Plain SQL, inlined by the planner.
CREATE OR REPLACE FUNCTION mjsched.lease_until(p_now timestamptz, p_lease_seconds double precision,
                                               p_max_runtime_seconds double precision)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT p_now + mjsched.lease_interval(p_lease_seconds, p_max_runtime_seconds)
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

-- due: the one definition of a job whose tick a claim may take now: claimable, and its next
-- run has come. Inlined like claimable (plain SQL, no SECURITY DEFINER), so a scan of it is
-- an index range scan of the due index (status, next_run_at).
CREATE OR REPLACE FUNCTION mjsched.due(
    p_status varchar, p_next_run_at timestamptz, p_start_at timestamptz, p_end_at timestamptz,
    p_lock_token uuid, p_lease_until timestamptz, p_now timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_next_run_at <= p_now
       AND mjsched.claimable(p_status, p_start_at, p_end_at, p_lock_token, p_lease_until, p_now)
$$;

