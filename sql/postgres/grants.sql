-- mjsched least privilege: two NOLOGIN group roles per installation (one database).
-- Not a versioned script: run it as the schema owner after install() (and again after
-- every upgrade that adds procedures), in the database that holds the mjsched schema:
--     psql "$ADMIN_DSN" -f sql/postgres/grants.sql
--
-- The roles (PostgreSQL roles are cluster-wide, so the names are per database):
--   engine role  default mjsched_engine_<database>: may RUN jobs -- claim, renew, complete,
--                sweep, purge run history (purge_runs), execute_job, reschedule (initialize_next_runs), register itself,
--                release the locks of its host's dead engines, probe its permissions.
--   admin role   default mjsched_admin_<database>: may DEFINE jobs -- create_job,
--                update_job, delete_job (insert_job/update_job/delete_job, ensure_job_type,
--                check_job_fields), force_unlock_job and cancel_run, plus every future routine that
--                is neither an engine routine nor internal (deny by default for engines).
-- Other names: set them for the session before the script (or once per database with
-- ALTER DATABASE mydb SET mjsched.engine_role = '...'):
--     psql "$ADMIN_DSN" -c "SET mjsched.engine_role = 'app1_engine'" \
--                       -c "SET mjsched.admin_role = 'app1_admin'" -f sql/postgres/grants.sql
-- Give each engine (and each job author) a login role of its own in one of them:
--     CREATE ROLE engine_host1 LOGIN PASSWORD '...' IN ROLE mjsched_engine_app1;
--     CREATE ROLE deploy_bot LOGIN PASSWORD '...' IN ROLE mjsched_admin_app1;
--
-- Both roles get CONNECT on this database, USAGE on the schema and SELECT on what the
-- engine reads (jobs, job types, runs, engines, schema versions), except the lock_token
-- columns: a token is the bearer right to complete or release a run, so only the owner
-- reads it; engines learn their own tokens from the procedures that hand them out.
-- Neither may INSERT, UPDATE, DELETE or TRUNCATE any mjsched table or create anything in
-- the schema; every state change goes through a SECURITY DEFINER procedure.
--
-- Also, in this database:
--   * CONNECT is revoked from PUBLIC (a login of another installation on this server could
--     otherwise connect here). Grant CONNECT to your application's own roles, or keep the
--     PostgreSQL default with  SET mjsched.keep_public_connect = on  (which also grants it
--     back after an earlier run revoked it).
--   * The fixed-name role of earlier releases, mjsched_engine (shared by every database
--     that ran the old grants.sql), loses its rights here unless it is the configured
--     engine or admin role, or  SET mjsched.keep_legacy_role = on  (a migration window:
--     see the README, "Least privilege").
-- Safe to re-run, and from several sessions at once: one transaction, serialised per
-- database by an advisory lock (concurrent GRANTs on one object would otherwise fail
-- with "tuple concurrently updated").

BEGIN;
DO $$ BEGIN PERFORM pg_advisory_xact_lock(hashtext('mjsched grants.sql')); END; $$;

DO $$
DECLARE
    -- What the engine calls; everything else that is not internal is the admin role's.
    -- mjsched.privileges.ENGINE_ROUTINES is the same list (a unit test compares them).
    c_engine_routines CONSTANT text[] := ARRAY[
        'acquire_job_lock', 'advance_job', 'begin_job_run', 'check_fence', 'check_lease', 'check_test_clock',
        'claim_due_jobs', 'complete_job_run', 'complete_job_runs', 'complete_runs', 'engines_holding_locks',
        'enqueue_job_run', 'extend_job_leases', 'initialize_next_run', 'initialize_next_runs',
        'internal_routines', 'lease_interval', 'probe_permissions', 'register_engine',
        'release_engine_locks', 'release_job_lock', 'renew_leases', 'start_manual_run',
        'sweep_expired_leases', 'unregister_engine', 'note_frequency_warned', 'cancel_requests',
        'purge_runs', 'purge_job_changes', 'evaluate_alerts'];
    c_legacy CONSTANT text := 'mjsched_engine';
    v_db text := current_database();
    v_engine text := nullif(btrim(current_setting('mjsched.engine_role', true)), '');
    v_admin text := nullif(btrim(current_setting('mjsched.admin_role', true)), '');
    v_keep_public boolean := coalesce(nullif(current_setting('mjsched.keep_public_connect', true), '')::boolean,
                                      false);
    v_keep_legacy boolean := coalesce(nullif(current_setting('mjsched.keep_legacy_role', true), '')::boolean,
                                      false);
    v_role text;
    v_columns text;
    v_elsewhere text;
    f record;
BEGIN
    -- Defaults derived from the database name (63 bytes at most: a long name is hashed).
    IF v_engine IS NULL THEN
        v_engine := CASE WHEN octet_length('mjsched_engine_' || v_db) <= 63 THEN 'mjsched_engine_' || v_db
                         ELSE 'mjsched_engine_' || md5(v_db) END;
    END IF;
    IF v_admin IS NULL THEN
        v_admin := CASE WHEN octet_length('mjsched_admin_' || v_db) <= 63 THEN 'mjsched_admin_' || v_db
                        ELSE 'mjsched_admin_' || md5(v_db) END;
    END IF;
    IF octet_length(v_engine) > 63 OR octet_length(v_admin) > 63 THEN
        RAISE EXCEPTION 'mjsched.engine_role/admin_role: a role name has at most 63 bytes (%, %)', v_engine, v_admin
              USING ERRCODE = '22023';
    END IF;
    IF v_engine = v_admin THEN
        RAISE EXCEPTION 'mjsched.engine_role and mjsched.admin_role must differ (both %)', v_engine
              USING ERRCODE = '22023';
    END IF;

    FOREACH v_role IN ARRAY ARRAY[v_engine, v_admin] LOOP
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', v_role);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created by an earlier run (or a concurrent session: roles are cluster-wide)
        END;
        IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = v_role AND (rolsuper OR rolbypassrls OR rolcreaterole)) THEN
            RAISE EXCEPTION 'mjsched: role % is privileged (SUPERUSER, BYPASSRLS or CREATEROLE); '
                            'name a plain group role', v_role USING ERRCODE = '42501';
        END IF;
        -- A name shared with another database's installation would let its logins in here.
        SELECT string_agg(d.datname, ', ' ORDER BY d.datname) INTO v_elsewhere
          FROM pg_database d, aclexplode(d.datacl) a
         WHERE a.grantee = (SELECT oid FROM pg_roles WHERE rolname = v_role)
           AND a.privilege_type = 'CONNECT' AND d.datname <> v_db;
        IF v_elsewhere IS NOT NULL THEN
            RAISE WARNING 'mjsched: role % may also connect to database(s) %: its members reach every one of them. '
                          'Give each installation roles of its own (mjsched.engine_role / mjsched.admin_role)',
                          v_role, v_elsewhere;
        END IF;

        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA mjsched FROM %I', v_role);
        EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA mjsched FROM %I', v_role);
        EXECUTE format('REVOKE CREATE ON SCHEMA mjsched FROM %I', v_role);
        EXECUTE format('GRANT USAGE ON SCHEMA mjsched TO %I', v_role);
        EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', v_db, v_role);
        EXECUTE format('GRANT SELECT ON mjsched.scheduled_job_type, mjsched.engine_instance, '
                       'mjsched.schema_version, mjsched.job_tag, mjsched.job_pause, mjsched.tag_limit, '
                       'mjsched.job_change, mjsched.job_alert, mjsched.job_alert_rule TO %I', v_role);
        -- Every column but lock_token (read from the catalog: columns added later are covered).
        FOR f IN SELECT c.relname AS tbl FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'mjsched' AND c.relname IN ('scheduled_job', 'scheduled_job_run') LOOP
            SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO v_columns
              FROM pg_attribute a
             WHERE a.attrelid = format('mjsched.%I', f.tbl)::regclass AND a.attnum > 0 AND NOT a.attisdropped
               AND a.attname <> 'lock_token';
            EXECUTE format('GRANT SELECT (%s) ON mjsched.%I TO %I', v_columns, f.tbl, v_role);
        END LOOP;
    END LOOP;

    FOR f IN
        SELECT p.oid::regprocedure AS signature, p.proname,
               p.proname = ANY (mjsched.internal_routines()) AS internal
          FROM pg_proc p
          JOIN pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname = 'mjsched' AND p.prokind = 'f'
           AND p.prorettype <> 'trigger'::regtype
    LOOP
        IF f.internal THEN   -- called by the procedures as their owner, never by a client
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %I, %I', f.signature, v_engine, v_admin);
        ELSIF f.proname = ANY (c_engine_routines) THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.signature, v_engine);
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %I', f.signature, v_admin);
        ELSE
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.signature, v_admin);
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %I', f.signature, v_engine);
        END IF;
    END LOOP;

    IF v_keep_public THEN   -- declarative: on gives the PostgreSQL default back
        EXECUTE format('GRANT CONNECT ON DATABASE %I TO PUBLIC', v_db);
    ELSE
        EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC', v_db);
    END IF;

    IF c_legacy NOT IN (v_engine, v_admin) AND NOT v_keep_legacy
       AND EXISTS (SELECT 1 FROM pg_roles WHERE rolname = c_legacy) THEN
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA mjsched FROM %I', c_legacy);
        EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA mjsched FROM %I', c_legacy);
        EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA mjsched FROM %I', c_legacy);
        EXECUTE format('REVOKE ALL ON SCHEMA mjsched FROM %I', c_legacy);
        EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM %I', v_db, c_legacy);
    END IF;

    RAISE NOTICE 'mjsched grants for database %: engine role %, admin role %', v_db, v_engine, v_admin;
END;
$$;

COMMIT;
