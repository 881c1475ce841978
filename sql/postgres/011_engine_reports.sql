-- mjsched engine reports, version 11 (issue 36): what an engine reports of itself when it
-- registers, so that `mjsched jobs why` (engine.why, sql/postgres/queries.sql why_facts) can
-- tell from the database alone why a job does not run: besides its poll bound
-- (heartbeat_seconds) and its cap (max_concurrent_jobs, 001_schema.sql), its driver allow-list.
-- Its runs in flight need no column: they are its Running runs (executed_by_instance).
--
-- * engine_instance.allowed_drivers: the drivers the engine may run, as their names sorted and
--   joined by commas ('http,python'); NULL when it runs every driver, and for an engine of an
--   earlier release, which reports nothing (why counts such an engine as allowing every driver:
--   it cannot say otherwise). A job whose driver no live engine allows is still claimed, and
--   each of its runs ends Failed (mjsched/execution.py run_driver): why names the engines.
-- * register_engine (moved here from 002_procedures) takes it as p_allowed_drivers, last
--   and optional: the previous release's call, with six arguments, is answered by this one
--   (the six-parameter form is dropped: it would make that call ambiguous), and whoever could
--   execute that form (grants.sql's engine role) may execute this one, so engines of the
--   previous release still register through the upgrade, before grants.sql runs again.
-- Functions here are SECURITY DEFINER with a fixed search_path themselves (003_security.sql
-- ran before this script). Safe to re-run.

ALTER TABLE mjsched.engine_instance ADD COLUMN IF NOT EXISTS allowed_drivers varchar(4000);

DROP FUNCTION IF EXISTS mjsched.register_engine(varchar, varchar, integer, varchar);
SELECT set_config('mjsched.register_engine_grantees',
                  coalesce((SELECT string_agg(a.grantee::text, ',')
                              FROM pg_proc p, aclexplode(p.proacl) a
                             WHERE p.oid = to_regprocedure('mjsched.register_engine(varchar, varchar, integer, '
                                                           'varchar, double precision, integer)')
                               AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner), ''),
                  false);
DROP FUNCTION IF EXISTS mjsched.register_engine(varchar, varchar, integer, varchar, double precision, integer);

-- register_engine: the table of live engines behind `mjsched status` and `mjsched jobs why`.
-- p_heartbeat_seconds is the engine's poll bound: every claim_due_jobs refreshes
-- last_seen_at, so a live engine is seen at least that often and status can call it stale
-- after a few of them. p_max_concurrent_jobs is its cap, p_allowed_drivers its allow-list
-- (NULL: every driver). The trailing parameters are optional: earlier releases call the
-- four- and six-parameter forms, which these defaults still answer.
CREATE OR REPLACE FUNCTION mjsched.register_engine(
    p_instance varchar, p_host varchar, p_pid integer, p_version varchar,
    p_heartbeat_seconds double precision DEFAULT NULL, p_max_concurrent_jobs integer DEFAULT NULL,
    p_allowed_drivers varchar DEFAULT NULL)
RETURNS TABLE (registered integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
BEGIN
    IF p_heartbeat_seconds IS NOT NULL AND NOT (p_heartbeat_seconds > 0 AND p_heartbeat_seconds <= 86400) THEN
        RAISE EXCEPTION 'heartbeat_seconds=% must be in (0, 86400]', p_heartbeat_seconds USING ERRCODE = '22023';
    END IF;
    IF p_allowed_drivers IS NOT NULL AND (length(btrim(p_allowed_drivers)) = 0 OR length(p_allowed_drivers) > 4000) THEN
        RAISE EXCEPTION 'allowed_drivers=%: must be NULL (every driver) or driver names joined by commas, '
                        'at most 4000 characters', left(p_allowed_drivers, 100) USING ERRCODE = '22023';
    END IF;
    INSERT INTO mjsched.engine_instance (instance, host, pid, version, started_at, last_seen_at, stopped_at,
                                         heartbeat_seconds, max_concurrent_jobs, allowed_drivers)
    VALUES (p_instance, p_host, p_pid, p_version, now(), now(), NULL, p_heartbeat_seconds, p_max_concurrent_jobs,
            p_allowed_drivers)
    ON CONFLICT (instance) DO UPDATE
       SET host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
           started_at = now(), last_seen_at = now(), stopped_at = NULL,
           heartbeat_seconds = EXCLUDED.heartbeat_seconds, max_concurrent_jobs = EXCLUDED.max_concurrent_jobs,
           allowed_drivers = EXCLUDED.allowed_drivers;
    RETURN QUERY SELECT 1;
END;
$$;
REVOKE ALL ON FUNCTION mjsched.register_engine(varchar, varchar, integer, varchar, double precision, integer, varchar)
    FROM PUBLIC;

DO $$
DECLARE
    v_grantee oid;
BEGIN
    FOREACH v_grantee IN ARRAY coalesce(string_to_array(
            nullif(current_setting('mjsched.register_engine_grantees', true), ''), ',')::oid[], '{}') LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mjsched.register_engine(varchar, varchar, integer, varchar, '
                       'double precision, integer, varchar) TO %I', pg_get_userbyid(v_grantee));
    END LOOP;
    PERFORM set_config('mjsched.register_engine_grantees', '', false);
END;
$$;
