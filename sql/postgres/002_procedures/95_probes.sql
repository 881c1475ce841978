-- 002_procedures, probes and helpers: JSON depth, the internal list, the permission probe.

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
                 'admit_by_tag_limits', 'alerts_of_call', 'claim_at', 'take_jobs', 'lease_until', 'due']
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
