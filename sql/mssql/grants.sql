-- mjsched least privilege on SQL Server: an engine role and an admin role. Not a versioned
-- script: run it in the mjsched database as the schema owner (or a db_owner) after
-- install(), and again after every upgrade, e.g.
--     sqlcmd -S host,1433 -d mydb -U admin -i sql/mssql/grants.sql
-- Safe to re-run.
--
-- Database roles are per database, so each installation has its own (a user of database A
-- is nobody in database B): the fixed names are not shared across installations.
--   mjsched_engine  may RUN jobs: claim, renew, complete, sweep, purge run history, execute_job, reschedule
--                   (initialize_next_runs), register itself, release the locks of its host's
--                   dead engines, probe its permissions (the list below; the same as
--                   sql/postgres/grants.sql and mjsched.privileges.ENGINE_ROUTINES).
--   mjsched_admin   may DEFINE jobs: every other routine that is not internal (insert_job,
--                   update_job, delete_job, ensure_job_type, check_job_fields,
--                   force_unlock_job, cancel_run, and routines added later until listed as an
--                   engine's).
-- Give each engine, and each job author, a user of its own in one of them:
--     CREATE LOGIN engine_host1 WITH PASSWORD = N'...';        -- in master
--     CREATE USER engine_host1 FOR LOGIN engine_host1;         -- in the mjsched database
--     ALTER ROLE mjsched_engine ADD MEMBER engine_host1;
--     ALTER ROLE mjsched_admin ADD MEMBER deploy_bot;          -- likewise, for job authors
--
-- Both roles SELECT the tables the engine reads (jobs, job types, runs, engines, schema
-- versions) except the lock_token columns (DENY on the column: a token is the right to
-- complete or release a run; an engine learns its own from the procedures that hand them
-- out). Neither may INSERT, UPDATE or DELETE any mjsched table, ALTER the schema, or call
-- the procedures' building blocks (the routines mjsched.internal_routines() names: they
-- take @p_now without check_test_clock, or change rows unfenced), denied below.
-- Earlier releases granted EXECUTE on the whole schema to mjsched_engine (job
-- administration included); this script revokes that and grants each routine to one role.
-- The procedures still change the tables: they and the tables have one owner (the
-- schema's), so SQL Server's ownership chaining skips the permission check on the
-- tables -- the counterpart of SECURITY DEFINER in sql/postgres. None of the
-- procedures uses dynamic SQL, which would break the chain.

IF DATABASE_PRINCIPAL_ID(N'mjsched_engine') IS NULL
BEGIN
    CREATE ROLE mjsched_engine;
END;
GO

IF DATABASE_PRINCIPAL_ID(N'mjsched_admin') IS NULL
BEGIN
    CREATE ROLE mjsched_admin;
END;
GO

REVOKE INSERT, UPDATE, DELETE, ALTER, CONTROL, TAKE OWNERSHIP ON SCHEMA::mjsched FROM mjsched_engine;
REVOKE INSERT, UPDATE, DELETE, ALTER, CONTROL, TAKE OWNERSHIP ON SCHEMA::mjsched FROM mjsched_admin;
REVOKE EXECUTE ON SCHEMA::mjsched FROM mjsched_engine;
REVOKE EXECUTE ON SCHEMA::mjsched FROM mjsched_admin;
GO

GRANT SELECT ON OBJECT::mjsched.scheduled_job TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.scheduled_job_type TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.scheduled_job_run TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.engine_instance TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.schema_version TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.job_change TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.job_alert TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.job_alert_rule TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.scheduled_job TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.scheduled_job_type TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.scheduled_job_run TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.engine_instance TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.schema_version TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.job_tag TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.job_pause TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.job_tag TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.job_pause TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.tag_limit TO mjsched_engine;
GRANT SELECT ON OBJECT::mjsched.tag_limit TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.job_change TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.job_alert TO mjsched_admin;
GRANT SELECT ON OBJECT::mjsched.job_alert_rule TO mjsched_admin;
GO

-- The tokens stay the owner's: a column DENY overrides the table GRANT above for that
-- column (a SELECT * by a member fails with error 230; the engine names its columns).
-- Sent through sp_executesql only because the static checks' T-SQL parser has no DENY
-- statement; the text is the documented DENY Object Permissions form.
EXEC sys.sp_executesql N'DENY SELECT (lock_token) ON OBJECT::mjsched.scheduled_job TO mjsched_engine, mjsched_admin;';
EXEC sys.sp_executesql N'DENY SELECT (lock_token) ON OBJECT::mjsched.scheduled_job_run TO mjsched_engine, mjsched_admin;';
GO

-- The one inline table-valued function an engine may read (probe_permissions asks for
-- SELECT on it): the names of the internal routines.
GRANT SELECT ON OBJECT::mjsched.internal_routines TO mjsched_engine;
GO

-- Each routine to one role: the engine's (this list) to mjsched_engine, every other one
-- that is not internal to mjsched_admin, and revoked from the other role (a re-run after a
-- routine moved between the lists). EXECUTE for procedures and scalar functions, SELECT
-- for the one inline table-valued function granted (internal_routines, an engine's).
-- A listed name this release does not define is skipped (the list spans releases).
DECLARE @v_engine TABLE (name sysname NOT NULL PRIMARY KEY);
DECLARE @v_routines TABLE (name sysname NOT NULL PRIMARY KEY, permission nvarchar(10) NOT NULL,
                           grantee sysname NOT NULL, other sysname NOT NULL);
DECLARE @v_routine sysname;
DECLARE @v_sql nvarchar(4000);
INSERT INTO @v_engine (name)
VALUES (N'acquire_job_lock'), (N'advance_job'), (N'begin_job_run'), (N'check_fence'), (N'check_lease'), (N'check_test_clock'),
       (N'claim_due_jobs'), (N'complete_job_run'), (N'complete_job_runs'), (N'complete_runs'),
       (N'engines_holding_locks'), (N'enqueue_job_run'), (N'extend_job_leases'), (N'initialize_next_run'),
       (N'initialize_next_runs'), (N'internal_routines'), (N'lease_interval'), (N'probe_permissions'),
       (N'register_engine'), (N'release_engine_locks'), (N'release_job_lock'), (N'renew_leases'),
       (N'start_manual_run'), (N'sweep_expired_leases'), (N'unregister_engine'), (N'note_frequency_warned'),
       (N'cancel_requests'), (N'purge_runs'), (N'purge_job_changes'), (N'evaluate_alerts');
INSERT INTO @v_routines (name, permission, grantee, other)
SELECT o.name, CASE WHEN o.type = 'IF' THEN N'SELECT' ELSE N'EXECUTE' END,
       CASE WHEN e.name IS NULL THEN N'mjsched_admin' ELSE N'mjsched_engine' END,
       CASE WHEN e.name IS NULL THEN N'mjsched_engine' ELSE N'mjsched_admin' END
  FROM sys.objects AS o
  LEFT JOIN @v_engine AS e ON e.name = o.name
 WHERE o.schema_id = SCHEMA_ID(N'mjsched') AND o.type IN ('P', 'FN', 'IF')
   AND (o.type <> 'IF' OR e.name IS NOT NULL)
   AND NOT EXISTS (SELECT 1 FROM mjsched.internal_routines() AS i WHERE i.internal_routines = o.name);
WHILE EXISTS (SELECT 1 FROM @v_routines)
BEGIN
    SELECT TOP (1) @v_routine = r.name,
           @v_sql = CONCAT(N'REVOKE ', r.permission, N' ON OBJECT::mjsched.', QUOTENAME(r.name), N' FROM ',
                           QUOTENAME(r.other), N'; GRANT ', r.permission, N' ON OBJECT::mjsched.',
                           QUOTENAME(r.name), N' TO ', QUOTENAME(r.grantee), N';')
      FROM @v_routines AS r
     ORDER BY r.name;
    EXEC sys.sp_executesql @v_sql;
    DELETE FROM @v_routines WHERE name = @v_routine;
END;
GO

-- The internal routines, read from mjsched.internal_routines() (their one definition, so a
-- routine added to it is denied without an edit here): DENY EXECUTE on each procedure and
-- scalar function, DENY SELECT on each inline table-valued function (the permissions GRANT
-- Object Permissions lists for those kinds of object:
-- https://learn.microsoft.com/en-us/sql/t-sql/statements/grant-object-permissions-transact-sql).
-- Neither role holds EXECUTE on the schema (earlier releases granted it to mjsched_engine;
-- revoked at the top of this script), and the per-routine grants above skip these routines;
-- the DENY also outlasts a schema-wide GRANT EXECUTE someone adds by hand later, since a DENY
-- on the object overrides a GRANT on its schema. A listed name that is no routine of the
-- schema stops the script (THROW), as a stale list would leave a building block callable.
-- The procedures still call them for the engine: a procedure and the routines it calls have
-- one owner (the schema's), so the ownership chain is unbroken and SQL Server does not
-- evaluate the caller's permissions on the routines it references, a DENY included (Ownership
-- Chains, "How Permissions Are Checked in a Chain":
-- https://learn.microsoft.com/en-us/previous-versions/sql/sql-server-2008-r2/ms188676(v=sql.105);
-- stored procedures work over denied objects of the same owner, dynamic SQL breaks the chain:
-- https://learn.microsoft.com/dotnet/framework/data/adonet/sql/customizing-permissions-with-impersonation-in-sql-server).
-- The dynamic SQL below is this admin script's own; the procedures use none.
DECLARE @v_internal TABLE (name sysname NOT NULL PRIMARY KEY, permission nvarchar(10) NOT NULL);
DECLARE @v_name sysname;
DECLARE @v_statement nvarchar(4000);
IF EXISTS (SELECT 1 FROM mjsched.internal_routines() AS i
            WHERE NOT EXISTS (SELECT 1 FROM sys.objects AS o
                               WHERE o.schema_id = SCHEMA_ID(N'mjsched') AND o.name = i.internal_routines
                                 AND o.type IN ('P', 'FN', 'IF')))
BEGIN
    THROW 50022, N'mjsched.internal_routines() names a routine mjsched does not define', 1;
END;
INSERT INTO @v_internal (name, permission)
SELECT o.name, CASE WHEN o.type = 'IF' THEN N'SELECT' ELSE N'EXECUTE' END
  FROM mjsched.internal_routines() AS i
  JOIN sys.objects AS o ON o.schema_id = SCHEMA_ID(N'mjsched') AND o.name = i.internal_routines
 WHERE o.type IN ('P', 'FN', 'IF');
WHILE EXISTS (SELECT 1 FROM @v_internal)
BEGIN
    SELECT TOP (1) @v_name = v.name,
           @v_statement = CONCAT(N'DENY ', v.permission, N' ON OBJECT::mjsched.', QUOTENAME(v.name),
                                 N' TO mjsched_engine;')
      FROM @v_internal AS v
     ORDER BY v.name;
    EXEC sys.sp_executesql @v_statement;
    DELETE FROM @v_internal WHERE name = @v_name;
END;
GO

-- Check (as a member of a role):
--     EXEC mjsched.probe_permissions;          -- engine: can_execute = 1 but for the admin routines
--     EXEC mjsched.take_over @p_old_tokens = NULL, @p_now = NULL;   -- error 229: permission denied
--     SELECT lock_token FROM mjsched.scheduled_job;                 -- error 230: permission denied
--     SELECT * FROM sys.fn_my_permissions(N'mjsched.insert_job', N'OBJECT');
