-- mjsched security, version 3: every procedure runs with a fixed search_path, and the
-- ones the engine calls run as their owner (SECURITY DEFINER), so an engine role needs
-- EXECUTE on them and no write privilege on any table (see grants.sql).
--
-- * search_path = mjsched, pg_temp on every function a role may call: no caller can shadow a table,
--   an operator or a function through its own search_path (pg_catalog is searched
--   first implicitly; pg_temp last, as the PostgreSQL manual recommends).
-- * SECURITY DEFINER on every function except trigger functions (they run as the
--   writer), probe_permissions (it must answer for the caller's role, not the owner's)
--   and the pure SQL helpers the planner inlines into the procedures (claimable,
--   claim_token, lease_interval): SECURITY DEFINER or a SET clause would stop the
--   inlining, and they read no table.
-- * The internal routines (internal_routines(): the procedures' building blocks) have
--   neither: no role but the owner may execute them (grants.sql), so they only ever run
--   inside a procedure, as the owner and under its search_path. Entering a function with a
--   SET clause costs a GUC save and restore (about 40 us); a claim entered ten of them:
--   claim_due_jobs(5) took 1.14 ms, 0.86 ms without.
-- * EXECUTE is revoked from PUBLIC on every function, now and for functions this role
--   creates in the schema later; grants.sql grants it back to the engine role only.
--
-- CREATE OR REPLACE FUNCTION resets SECURITY DEFINER and SET, so this script must run
-- again whenever an earlier one is re-applied: install() re-applies every later script
-- after a changed one (test_least_privilege.py checks it). Later scripts declare their
-- own functions SECURITY DEFINER with this search_path (e.g. 004_job_admin.sql).
-- Safe to re-run.

DO $$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure AS signature, p.proname,
               p.prorettype = 'trigger'::regtype AS is_trigger
          FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'mjsched' AND p.prokind = 'f'
    LOOP
        IF f.proname = 'lease_interval' OR f.proname = ANY (mjsched.internal_routines()) THEN
            -- the inlined helpers (claimable and claim_token are internal too) and the building
            -- blocks only the owner may execute: they run inside the procedures, as the owner
            EXECUTE format('ALTER FUNCTION %s SECURITY INVOKER RESET ALL', f.signature);
        ELSIF f.is_trigger OR f.proname = 'probe_permissions' THEN
            EXECUTE format('ALTER FUNCTION %s SECURITY INVOKER SET search_path = mjsched, pg_temp', f.signature);
        ELSE
            EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = mjsched, pg_temp', f.signature);
        END IF;
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.signature);
    END LOOP;
END;
$$;

ALTER DEFAULT PRIVILEGES IN SCHEMA mjsched REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
REVOKE ALL ON SCHEMA mjsched FROM PUBLIC;
