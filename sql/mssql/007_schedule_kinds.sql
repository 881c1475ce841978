-- mjsched schedule kinds, version 7 (T-SQL twin of sql/postgres/007_schedule_kinds.sql): a
-- job's schedule is exactly one of a cron expression (cron_expression), an interval
-- (interval_seconds: ticks start_at, else created_at, plus k * interval, in absolute time)
-- and one run (run_at: the job becomes Expired once that tick is served; the trigger of
-- 001_schema.sql does it). The columns themselves are added by 001_schema.sql, before the
-- procedures of 004_job_admin.sql that write them (a procedure cannot be created over a
-- column its table does not have yet). Every statement is idempotent: the script runs again
-- whenever an earlier one changed.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- cron_expression becomes NULL-able for the other two kinds. ALTER COLUMN refuses a column
-- that a CHECK constraint or an index uses: the CHECK constraints that name it (001's
-- ck_scheduled_job_cron_expression, this file's ck_scheduled_job_schedule_kind, any other)
-- are dropped, the column altered, and each is added again with its own definition, checked
-- (WITH CHECK). No index or CREATE STATISTICS of the schema uses the column; should one (made
-- by hand) do, the script stops and says so instead of dropping it (statistics SQL Server
-- creates by itself do not stand in the way). Nothing happens once the column is NULL-able.
DECLARE @v_checks TABLE (name sysname NOT NULL PRIMARY KEY, rule_text nvarchar(4000) NOT NULL);
DECLARE @v_done TABLE (name sysname NOT NULL PRIMARY KEY);
DECLARE @v_index sysname, @v_name sysname, @v_rule nvarchar(4000), @v_sql nvarchar(max);
SELECT TOP (1) @v_index = u.name
  FROM (SELECT i.name, ic.object_id, ic.column_id
          FROM sys.index_columns AS ic
          JOIN sys.indexes AS i ON i.object_id = ic.object_id AND i.index_id = ic.index_id
        UNION ALL
        SELECT st.name, sc.object_id, sc.column_id
          FROM sys.stats_columns AS sc
          JOIN sys.stats AS st ON st.object_id = sc.object_id AND st.stats_id = sc.stats_id
         WHERE st.user_created = 1) AS u
  JOIN sys.columns AS c ON c.object_id = u.object_id AND c.column_id = u.column_id
 WHERE u.object_id = OBJECT_ID(N'mjsched.scheduled_job') AND c.name = N'cron_expression' AND c.is_nullable = 0
 ORDER BY u.name;
IF @v_index IS NOT NULL
BEGIN
    THROW 50022, N'mjsched upgrade: an index or CREATE STATISTICS on mjsched.scheduled_job (made by hand) uses cron_expression, which must become NULL-able: drop it and install again', 1;
END;
IF EXISTS (SELECT 1 FROM sys.columns
            WHERE object_id = OBJECT_ID(N'mjsched.scheduled_job') AND name = N'cron_expression'
              AND is_nullable = 0)
BEGIN
    INSERT INTO @v_checks (name, rule_text)
    SELECT cc.name, cc.[definition]
      FROM sys.check_constraints AS cc
     WHERE cc.parent_object_id = OBJECT_ID(N'mjsched.scheduled_job')
       AND cc.[definition] LIKE N'%cron[_]expression%';
    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @v_name = c.name FROM @v_checks AS c
         WHERE NOT EXISTS (SELECT 1 FROM @v_done AS d WHERE d.name = c.name) ORDER BY c.name;
        IF @@ROWCOUNT = 0
        BEGIN
            BREAK;
        END;
        INSERT INTO @v_done (name) VALUES (@v_name);
        SET @v_sql = N'ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT ' + QUOTENAME(@v_name) + N';';
        EXEC sys.sp_executesql @v_sql;
    END;
    ALTER TABLE mjsched.scheduled_job ALTER COLUMN cron_expression nvarchar(255) NULL;
    DELETE FROM @v_done;
    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @v_name = c.name, @v_rule = c.rule_text FROM @v_checks AS c
         WHERE NOT EXISTS (SELECT 1 FROM @v_done AS d WHERE d.name = c.name) ORDER BY c.name;
        IF @@ROWCOUNT = 0
        BEGIN
            BREAK;
        END;
        INSERT INTO @v_done (name) VALUES (@v_name);
        SET @v_sql = N'ALTER TABLE mjsched.scheduled_job WITH CHECK ADD CONSTRAINT ' + QUOTENAME(@v_name)
                   + N' CHECK ' + @v_rule + N';';
        EXEC sys.sp_executesql @v_sql;
    END;
END;
GO

-- What a row may hold (the rules of mjsched/validation.py and mjsched/schedules.py, as in the
-- same section of 001_schema.sql): exactly one schedule kind; an interval of 1 s to 366 days;
-- a run_at in [1900-01-01, 9999-12-30] UTC (below the largest next_run_at, so the engine's
-- "served" marker is always later). Rows of an older release hold a cron and neither new
-- column, so every rule holds for them: the rules are added checked (WITH CHECK), dropped and
-- added again with their present text at each run.
IF OBJECT_ID(N'mjsched.ck_scheduled_job_schedule_kind', N'C') IS NOT NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT ck_scheduled_job_schedule_kind;
END;
IF OBJECT_ID(N'mjsched.ck_scheduled_job_interval_seconds', N'C') IS NOT NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT ck_scheduled_job_interval_seconds;
END;
IF OBJECT_ID(N'mjsched.ck_scheduled_job_run_at', N'C') IS NOT NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT ck_scheduled_job_run_at;
END;
GO

ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_schedule_kind
        CHECK (CASE WHEN cron_expression IS NULL THEN 0 ELSE 1 END
               + CASE WHEN interval_seconds IS NULL THEN 0 ELSE 1 END
               + CASE WHEN run_at IS NULL THEN 0 ELSE 1 END = 1);
ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_interval_seconds
        CHECK (interval_seconds IS NULL OR interval_seconds BETWEEN 1 AND 31622400);
ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_run_at
        CHECK (run_at IS NULL OR run_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-30T00:00:00+00:00' AS datetimeoffset));
GO
