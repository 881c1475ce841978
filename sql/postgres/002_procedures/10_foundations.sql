-- mjsched lock and lease procedures: the versioned script 002_procedures, PostgreSQL.
-- The lock protocol (version 3) these routines follow -- one lease, jobs before runs, whoever
-- ends a lease abandons its runs, replay safety, recorded spans, the conventions (p_now, error
-- codes, the test_pause hook) -- is written once, in docs/guide/protocol.md; its table "Where
-- each rule lives" names the routine and the file of each rule. The files of this directory
-- are applied in name order as one script (mjsched/sqlfiles.py), one concern each:
--   10_foundations  the shared rules: lease_interval, lease_until, claimable, due, checks, test hook
--   20_takeover     abandon_runs, take_over, take_jobs (a claim's takeover), expire_ended_jobs
--   30_job_locks    acquire_job_lock, release_job_lock
--   40_leases       note_engine_seen, renew_tokens (renew_leases, extend_job_leases)
--   50_claims       claim_due_jobs and its steps
--   60_completion   complete_items (complete_runs, complete_job_runs, complete_job_run)
--   70_sweep        sweep_expired_leases
--   80_queue_and_advance  enqueue_job_run, advance_job, begin_job_run
--   85_manual_runs  start_manual_run, check_fence
--   90_engines_and_operators  release_engine_locks, force_unlock_job, initialize_next_run, unregister_engine
--   95_probes       json_nesting_exceeds, internal_routines, probe_permissions, engines_holding_locks

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

