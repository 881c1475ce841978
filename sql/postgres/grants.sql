-- mjsched least privilege: the EXECUTE-only engine role. Not a versioned script:
-- run it as the schema owner after install() (and again after every upgrade that adds
-- procedures), e.g.  psql "$ADMIN_DSN" -f sql/postgres/grants.sql
--
-- mjsched_engine is a NOLOGIN group role. Give each engine a login role of its own
-- that is a member, so that passwords and audit trails stay per engine:
--     CREATE ROLE engine_host1 LOGIN PASSWORD '...' IN ROLE mjsched_engine;
--
-- What the role may do:
--   USAGE on schema mjsched; SELECT on the tables the engine reads (jobs, job types,
--   runs, engines, schema versions); EXECUTE on every mjsched procedure (they are
--   SECURITY DEFINER with a fixed search_path, see 003_security.sql).
-- What it may not do: INSERT, UPDATE, DELETE or TRUNCATE on any mjsched table, or
-- create anything in the schema. Every state change an engine makes goes through a
-- procedure, job management (create_job/update_job/delete_job: 004_job_admin.sql) and the
-- page-wise reschedule (initialize_next_runs, same file) included; see the README,
-- "Least privilege".
-- Safe to re-run, and from several sessions at once: one transaction, serialised per
-- database by an advisory lock (concurrent GRANTs on one object would otherwise fail
-- with "tuple concurrently updated").

BEGIN;
DO $$ BEGIN PERFORM pg_advisory_xact_lock(hashtext('mjsched grants.sql')); END; $$;

DO $$
BEGIN
    CREATE ROLE mjsched_engine NOLOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- roles are cluster-wide: another database (or session) created it
END;
$$;

DO $$
DECLARE
    f record;
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO mjsched_engine', current_database());
    FOR f IN
        SELECT p.oid::regprocedure AS signature, p.proname = ANY (mjsched.internal_routines()) AS internal
          FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'mjsched' AND p.prokind = 'f'
           AND p.prorettype <> 'trigger'::regtype
    LOOP
        IF f.internal THEN   -- called by the procedures as their owner, never by an engine
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM mjsched_engine', f.signature);
        ELSE
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO mjsched_engine', f.signature);
        END IF;
    END LOOP;
END;
$$;

REVOKE ALL ON ALL TABLES IN SCHEMA mjsched FROM mjsched_engine;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA mjsched FROM mjsched_engine;
REVOKE CREATE ON SCHEMA mjsched FROM mjsched_engine;
GRANT USAGE ON SCHEMA mjsched TO mjsched_engine;
GRANT SELECT ON mjsched.scheduled_job, mjsched.scheduled_job_type, mjsched.scheduled_job_run,
                mjsched.engine_instance, mjsched.schema_version
   TO mjsched_engine;

COMMIT;
