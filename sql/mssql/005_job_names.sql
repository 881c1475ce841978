-- mjsched job names, version 5 (T-SQL twin of sql/postgres/005_job_names.sql): a job's name is
-- unique (constraint uq_scheduled_job_name), so an application can declare its jobs by name
-- (engine.ensure_job, engine.sync_jobs, `mjsched jobs apply`) and every API call and CLI verb
-- can take a name where it takes an id.
--
-- A database of an earlier release may hold several jobs of one name. The upgrade resolves
-- them before it adds the constraint, the same way every time: in each group of jobs of one
-- name, the oldest (created_at, then id) keeps the name; every other is renamed
-- '<name> (duplicate <first 8 hex digits of its id>)' (the name cut to fit 200 characters; the
-- whole id if even that name is taken). Nothing else of a renamed job changes (id, status,
-- schedule, configuration, statistics, run history). Each rename is recorded as a Skipped run
-- of the renamed job whose error_message says what was done (executed_by_instance
-- 'mjsched install'), and engine.install() logs it as a WARNING.
-- Names are compared as the constraint compares them: under the column's collation, which is
-- the database default (case-insensitive in most installations, and SQL Server ignores
-- trailing spaces when it compares strings), so 'Report' and 'report ' are one name here.
-- Safe to re-run: with the constraint in place there is nothing to resolve.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

IF OBJECT_ID(N'mjsched.uq_scheduled_job_name', N'UQ') IS NULL
BEGIN
    DECLARE @v_renames TABLE (
        id uniqueidentifier NOT NULL PRIMARY KEY,
        old_name nvarchar(200) NOT NULL,
        new_name nvarchar(200) NULL,
        kept_id uniqueidentifier NOT NULL,
        n int NOT NULL,
        created_at datetimeoffset NOT NULL
    );
    INSERT INTO @v_renames (id, old_name, kept_id, n, created_at)
    SELECT g.id, g.name, g.kept_id, g.n, g.created_at
      FROM (SELECT j.id, j.name, j.created_at,
                   FIRST_VALUE(j.id) OVER (PARTITION BY j.name ORDER BY j.created_at, j.id
                                           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS kept_id,
                   ROW_NUMBER() OVER (PARTITION BY j.name ORDER BY j.created_at, j.id) AS rn,
                   COUNT(*) OVER (PARTITION BY j.name) AS n
              FROM mjsched.scheduled_job AS j) AS g
     WHERE g.rn > 1;
    DECLARE @v_id uniqueidentifier, @v_name nvarchar(200), @v_new nvarchar(200);
    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @v_id = r.id, @v_name = r.old_name
          FROM @v_renames AS r
         WHERE r.new_name IS NULL
         ORDER BY r.old_name, r.created_at, r.id;
        IF @@ROWCOUNT = 0
        BEGIN
            BREAK;
        END;
        SET @v_new = CONCAT(LEFT(@v_name, 179), N' (duplicate ',
                            LEFT(LOWER(CONVERT(nvarchar(36), @v_id)), 8), N')');
        IF EXISTS (SELECT 1 FROM mjsched.scheduled_job AS j WHERE j.name = @v_new)
        BEGIN
            SET @v_new = CONCAT(LEFT(@v_name, 151), N' (duplicate ', LOWER(CONVERT(nvarchar(36), @v_id)), N')');
        END;
        UPDATE mjsched.scheduled_job SET name = @v_new WHERE id = @v_id;
        UPDATE @v_renames SET new_name = @v_new WHERE id = @v_id;
    END;
    INSERT INTO mjsched.scheduled_job_run
           (scheduled_job_id, status, error_message, started_at, completed_at, duration_ms,
            executed_by_instance)
    SELECT r.id, N'Skipped',
           CONCAT(N'renamed by the schema upgrade: job names are now unique, and ', r.n, N' jobs were named ''',
                  r.old_name, N'''; the oldest (', LOWER(CONVERT(nvarchar(36), r.kept_id)),
                  N') keeps the name and this one is now ''', r.new_name, N'''. Its status, schedule, ',
                  N'statistics and history are unchanged: pause or delete it if it was a copy of that job, ',
                  N'or give it a name of its own.'),
           SYSDATETIMEOFFSET(), SYSDATETIMEOFFSET(), 0, N'mjsched install'
      FROM @v_renames AS r;
    ALTER TABLE mjsched.scheduled_job ADD CONSTRAINT uq_scheduled_job_name UNIQUE (name);
END;
GO
