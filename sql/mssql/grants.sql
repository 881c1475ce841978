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
-- release_engine_locks, force_unlock_job, engines_holding_locks ...) except the internal
-- ones, SELECT on mjsched.internal_routines (an inline table-valued function: SELECT is
-- the permission T-SQL checks for those), and SELECT the tables the engine reads (jobs,
-- job types, runs, engines, schema versions).
-- What it may not do: INSERT, UPDATE or DELETE any mjsched table, ALTER the schema, or
-- call the procedures' building blocks (the routines mjsched.internal_routines() names:
-- they take @p_now without check_test_clock, or change rows unfenced), which are denied
-- to it below.
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

-- The one inline table-valued function an engine may read (probe_permissions asks for
-- SELECT on it): the names of the internal routines.
GRANT SELECT ON OBJECT::mjsched.internal_routines TO mjsched_engine;
GO

-- The internal routines, read from mjsched.internal_routines() (their one definition, so a
-- routine added to it is denied without an edit here): DENY EXECUTE on each procedure and
-- scalar function, DENY SELECT on each inline table-valued function (the permissions GRANT
-- Object Permissions lists for those kinds of object:
-- https://learn.microsoft.com/en-us/sql/t-sql/statements/grant-object-permissions-transact-sql).
-- It comes after the schema-wide GRANT EXECUTE: a DENY on the object overrides a GRANT on its
-- schema. A listed name that is no routine of the schema stops the script (THROW), as a stale
-- list would leave a building block callable.
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

-- Check (as a member of the role):
--     EXEC mjsched.probe_permissions;          -- every row can_execute = 1
--     EXEC mjsched.take_over @p_old_tokens = NULL, @p_now = NULL;   -- error 229: permission denied
--     SELECT * FROM sys.fn_my_permissions(N'mjsched', N'SCHEMA');
