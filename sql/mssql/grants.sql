-- mjsched least privilege on SQL Server: the EXECUTE-only engine role. Not a versioned
-- script: run it in the mjsched database as the schema owner (or a db_owner) after
-- install(), e.g.
--     sqlcmd -S host,1433 -d mydb -U admin -i sql/mssql/grants.sql
-- Safe to re-run.
--
-- mjsched_engine is a database role. Give each engine a user of its own that is a
-- member, so that passwords and audit trails stay per engine:
--     CREATE LOGIN engine_host1 WITH PASSWORD = N'...';        -- in master
--     CREATE USER engine_host1 FOR LOGIN engine_host1;         -- in the mjsched database
--     ALTER ROLE mjsched_engine ADD MEMBER engine_host1;
--
-- What the role may do: EXECUTE every mjsched procedure and scalar function (granted on
-- the schema, so procedures added by later versions are covered: start_manual_run,
-- release_engine_locks, force_unlock_job, engines_holding_locks ...), SELECT on the inline
-- table-valued functions (the permission T-SQL checks for them; the PostgreSQL role has
-- EXECUTE on their twins), and SELECT the tables the engine reads (jobs, job types, runs,
-- engines, schema versions).
-- What it may not do: INSERT, UPDATE or DELETE any mjsched table, or ALTER the schema.
-- The procedures still change the tables: they and the tables have one owner (the
-- schema's), so SQL Server's ownership chaining skips the permission check on the
-- tables -- the counterpart of SECURITY DEFINER in sql/postgres. None of the
-- procedures uses dynamic SQL, which would break the chain.
-- Job management (create_job / update_job / delete_job) is done with an administrative
-- user, as on PostgreSQL.

IF DATABASE_PRINCIPAL_ID(N'mjsched_engine') IS NULL
BEGIN
    CREATE ROLE mjsched_engine;
END;
GO

REVOKE INSERT, UPDATE, DELETE, ALTER, CONTROL, TAKE OWNERSHIP ON SCHEMA::mjsched FROM mjsched_engine;
GO

GRANT EXECUTE ON SCHEMA::mjsched TO mjsched_engine;
GO

GRANT SELECT ON OBJECT::mjsched.scheduled_job TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.scheduled_job_type TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.scheduled_job_run TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.engine_instance TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.schema_version TO mjsched_engine;
GO

-- The inline table-valued functions of 002_procedures.sql (probe_permissions asks for
-- SELECT on these). They read no table the role cannot read already.
GRANT SELECT ON OBJECT::mjsched.claimable TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.claim_token TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.claim_replay TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.claim_counters TO mjsched_engine;
GO

-- Check (as a member of the role):
--     EXEC mjsched.probe_permissions;          -- every row can_execute = 1
--     SELECT * FROM sys.fn_my_permissions(N'mjsched', N'SCHEMA');
