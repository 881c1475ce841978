-- mjsched retries, version 9: the twin of sql/postgres/009_retries.sql (the reasons are there).
-- A Failed or Timeout run of a tick schedules the next attempt of the SAME tick, with backoff.
-- The columns are added in 001_schema.sql (the procedures of 002 read them, and SQL Server
-- resolves the columns of an existing table when it creates a procedure); their rules and the
-- per-attempt UNIQUE index are here. Safe to re-run.
--
-- A procedure keeps the SET options it was created with, and the run table has filtered
-- indexes, which fail every write made under QUOTED_IDENTIFIER OFF (error 1934): the first
-- batch sets them, as the other scripts do, for this file applied by hand (sqlcmd).

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- The rules of the new columns. A policy is all five values or none.
DECLARE @v_drop TABLE (table_name sysname NOT NULL, constraint_name sysname NOT NULL PRIMARY KEY);
INSERT INTO @v_drop (table_name, constraint_name) VALUES
        (N'scheduled_job', N'ck_scheduled_job_retry_max_attempts'),
        (N'scheduled_job', N'ck_scheduled_job_retry_initial_delay'),
        (N'scheduled_job', N'ck_scheduled_job_retry_factor'),
        (N'scheduled_job', N'ck_scheduled_job_retry_max_delay'),
        (N'scheduled_job', N'ck_scheduled_job_retry_jitter'),
        (N'scheduled_job', N'ck_scheduled_job_retry_count'),
        (N'scheduled_job', N'ck_scheduled_job_retry_policy'),
        (N'scheduled_job_run', N'ck_scheduled_job_run_attempt'),
        (N'scheduled_job_run', N'ck_scheduled_job_run_retry_at');
DECLARE @v_table sysname, @v_name sysname, @v_sql nvarchar(max);
WHILE 1 = 1
BEGIN
    SELECT TOP (1) @v_table = d.table_name, @v_name = d.constraint_name
      FROM @v_drop AS d
     WHERE OBJECT_ID(N'mjsched.' + QUOTENAME(d.constraint_name), N'C') IS NOT NULL
     ORDER BY d.constraint_name;
    IF @@ROWCOUNT = 0
    BEGIN
        BREAK;
    END;
    SET @v_sql = N'ALTER TABLE mjsched.' + QUOTENAME(@v_table) + N' DROP CONSTRAINT ' + QUOTENAME(@v_name) + N';';
    EXEC sys.sp_executesql @v_sql;
END;
GO

ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_retry_max_attempts
        CHECK (retry_max_attempts IS NULL OR retry_max_attempts BETWEEN 1 AND 100);
ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_retry_initial_delay
        CHECK (retry_initial_delay IS NULL OR (retry_initial_delay >= 0 AND retry_initial_delay <= 31536000));
ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_retry_factor
        CHECK (retry_factor IS NULL OR (retry_factor >= 1 AND retry_factor <= 100));
ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_retry_max_delay
        CHECK (retry_max_delay IS NULL OR (retry_max_delay >= 0 AND retry_max_delay <= 31536000));
ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_retry_jitter
        CHECK (retry_jitter IS NULL OR (retry_jitter >= 0 AND retry_jitter <= 1));
ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_retry_count CHECK (retry_count BETWEEN 0 AND 2000000000);
ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_retry_policy
        CHECK ((retry_max_attempts IS NULL AND retry_initial_delay IS NULL AND retry_factor IS NULL
                AND retry_max_delay IS NULL AND retry_jitter IS NULL)
               OR (retry_max_attempts IS NOT NULL AND retry_initial_delay IS NOT NULL AND retry_factor IS NOT NULL
                   AND retry_max_delay IS NOT NULL AND retry_jitter IS NOT NULL
                   AND retry_max_delay >= retry_initial_delay));
ALTER TABLE mjsched.scheduled_job_run WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_run_attempt CHECK (attempt BETWEEN 1 AND 100);
ALTER TABLE mjsched.scheduled_job_run WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_run_retry_at
        CHECK (retry_at IS NULL OR retry_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
GO

-- One run per (job, tick, attempt). The index of earlier releases, on (job, tick), is
-- replaced under the same name (001_schema.sql's IF NOT EXISTS then leaves it). Filtered
-- as before: manual runs (scheduled_for NULL) never collide.
-- In the same transaction as the procedures, unlike PostgreSQL's twin (its
-- "-- mjsched:after-drain" part, issue 32): a call of the previous release that began before
-- the install runs its old body to the end, and that body inserts with NOT EXISTS on (job,
-- tick) and never names an index, so it runs as well against the per-attempt one.
IF EXISTS (SELECT 1 FROM sys.indexes AS i
            WHERE i.name = N'uq_scheduled_job_run_tick' AND i.object_id = OBJECT_ID(N'mjsched.scheduled_job_run')
              AND NOT EXISTS (SELECT 1 FROM sys.index_columns AS c
                               JOIN sys.columns AS col ON col.object_id = c.object_id AND col.column_id = c.column_id
                              WHERE c.object_id = i.object_id AND c.index_id = i.index_id AND col.name = N'attempt'))
BEGIN
    DROP INDEX uq_scheduled_job_run_tick ON mjsched.scheduled_job_run;
END;
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'uq_scheduled_job_run_tick' AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE UNIQUE INDEX uq_scheduled_job_run_tick
        ON mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, attempt) WHERE scheduled_for IS NOT NULL;
END;
GO
-- Retries waiting for their time, for next_due_at.
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_run_retry' AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE INDEX ix_scheduled_job_run_retry
        ON mjsched.scheduled_job_run (retry_at) WHERE status = N'Queued' AND retry_at IS NOT NULL;
END;
GO
