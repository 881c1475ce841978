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

-- Set-based, so a database of tens of thousands of copies upgrades in about a second.
IF OBJECT_ID(N'mjsched.uq_scheduled_job_name', N'UQ') IS NULL
BEGIN
    DECLARE @v_renames TABLE (
        id uniqueidentifier NOT NULL PRIMARY KEY,
        old_name nvarchar(200) NOT NULL,
        new_name nvarchar(200) NOT NULL,
        kept_id uniqueidentifier NOT NULL,
        n int NOT NULL
    );
    INSERT INTO @v_renames (id, old_name, new_name, kept_id, n)
    SELECT g.id, g.name,
           CONCAT(LEFT(g.name, 179), N' (duplicate ', LEFT(LOWER(CONVERT(nvarchar(36), g.id)), 8), N')'),
           g.kept_id, g.n
      FROM (SELECT j.id, j.name,
                   FIRST_VALUE(j.id) OVER (PARTITION BY j.name ORDER BY j.created_at, j.id
                                           ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS kept_id,
                   ROW_NUMBER() OVER (PARTITION BY j.name ORDER BY j.created_at, j.id) AS rn,
                   COUNT(*) OVER (PARTITION BY j.name) AS n
              FROM mjsched.scheduled_job AS j) AS g
     WHERE g.rn > 1;
    -- a new name some job has already, or two copies would get: the whole id instead
    DECLARE @v_taken TABLE (name nvarchar(200) NOT NULL);
    INSERT INTO @v_taken (name)
    SELECT x.new_name FROM @v_renames AS x GROUP BY x.new_name HAVING COUNT(*) > 1
    UNION
    SELECT j.name FROM mjsched.scheduled_job AS j WHERE j.name IN (SELECT x.new_name FROM @v_renames AS x);
    UPDATE r
       SET new_name = CONCAT(LEFT(r.old_name, 151), N' (duplicate ', LOWER(CONVERT(nvarchar(36), r.id)), N')')
      FROM @v_renames AS r
     WHERE r.new_name IN (SELECT t.name FROM @v_taken AS t);
    UPDATE j
       SET name = r.new_name
      FROM mjsched.scheduled_job AS j
      JOIN @v_renames AS r ON r.id = j.id;
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
