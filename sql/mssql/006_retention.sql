-- mjsched run-history retention, version 6 (T-SQL twin of sql/postgres/006_retention.sql;
-- the rules, what is never deleted and how the purge goes are written there).
-- Differences of the dialect: one purger at a time through sp_getapplock (transaction
-- owner, @LockTimeout = 0: a second purger is answered busy = 1 at once); the rows to
-- delete are collected first, then deleted WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK) (a
-- locked row is skipped, not waited for). A batch is capped at 4,000 rows, under the 5,000
-- locks on one table or index at which SQL Server tries to escalate a statement's row locks
-- to a table lock (which would hold up the claims' run inserts); ROWLOCK does not prevent
-- escalation, the cap does.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- The rules, on the table (the API and check_job_fields say the same, naming the field).
IF OBJECT_ID(N'mjsched.ck_scheduled_job_keep_runs_days', N'C') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD
        CONSTRAINT ck_scheduled_job_keep_runs_days
            CHECK (keep_runs_days IS NULL OR keep_runs_days BETWEEN 0 AND 36500);
END;
IF OBJECT_ID(N'mjsched.ck_scheduled_job_keep_runs_count', N'C') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD
        CONSTRAINT ck_scheduled_job_keep_runs_count
            CHECK (keep_runs_count IS NULL OR keep_runs_count BETWEEN 0 AND 1000000000);
END;
GO

-- A job's finished runs in completion order (see the PostgreSQL file).
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_run_job_completed'
                  AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE INDEX ix_scheduled_job_run_job_completed
        ON mjsched.scheduled_job_run (scheduled_job_id, completed_at, id) WHERE completed_at IS NOT NULL;
END;
GO

-- The jobs with a retention rule of their own (see the PostgreSQL file): one filtered index per
-- rule, since a filtered index's WHERE cannot hold OR; the purge's page queries (OPTION
-- (RECOMPILE), so @v_all_jobs = 0 folds away) read their union.
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_keep_days' AND object_id = OBJECT_ID(N'mjsched.scheduled_job'))
BEGIN
    CREATE INDEX ix_scheduled_job_keep_days ON mjsched.scheduled_job (id) WHERE keep_runs_days > 0;
END;
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_keep_count' AND object_id = OBJECT_ID(N'mjsched.scheduled_job'))
BEGIN
    CREATE INDEX ix_scheduled_job_keep_count ON mjsched.scheduled_job (id) WHERE keep_runs_count > 0;
END;
GO

-- purge_candidates: the runs of one job the rules let go, in (completed_at, id) order, at most
-- @p_limit of them (NULL: all); the twin of the PostgreSQL function. Internal: purge_runs
-- calls it once per job, so each call is one ordered range scan of
-- ix_scheduled_job_run_job_completed that stops after @p_limit rows.
CREATE OR ALTER FUNCTION mjsched.purge_candidates(
    @p_job_id uniqueidentifier, @p_cut_at datetimeoffset, @p_nth_at datetimeoffset, @p_nth_id uniqueidentifier,
    @p_after_at datetimeoffset, @p_after_id uniqueidentifier, @p_next_run_at datetimeoffset, @p_limit int)
RETURNS TABLE
AS RETURN
    SELECT TOP (COALESCE(@p_limit, 2147483647)) x.id AS run_id, x.completed_at
      FROM mjsched.scheduled_job_run AS x
     WHERE x.scheduled_job_id = @p_job_id
       AND x.completed_at IS NOT NULL
       AND x.completed_at < @p_cut_at
       AND x.completed_at <= @p_nth_at AND (x.completed_at < @p_nth_at OR x.id < @p_nth_id)
       AND x.completed_at >= @p_after_at AND (x.completed_at > @p_after_at OR x.id > @p_after_id)
       AND x.status IN (N'Completed', N'Failed', N'Timeout', N'Cancelled', N'Abandoned', N'Skipped')
       AND (x.scheduled_for IS NULL
            OR ((@p_next_run_at IS NULL OR x.scheduled_for < @p_next_run_at)
                AND x.scheduled_for < (SELECT TOP (1) n.scheduled_for FROM mjsched.scheduled_job_run AS n
                                        WHERE n.scheduled_job_id = @p_job_id AND n.scheduled_for IS NOT NULL
                                        ORDER BY n.scheduled_for DESC)))
       AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS p
                        WHERE p.scheduled_job_id = x.scheduled_job_id AND p.scheduled_for = x.scheduled_for
                          AND p.status NOT IN (N'Completed', N'Failed', N'Timeout', N'Cancelled', N'Abandoned',
                                               N'Skipped'))
     ORDER BY x.completed_at, x.id;
GO

-- purge_runs: one batch of the purge; parameters, cursor and answer as in PostgreSQL. The jobs
-- of the page are walked in id order; cutoffs are computed in days plus milliseconds (DATEADD
-- takes an int, and 100 years of seconds do not fit one).
CREATE OR ALTER PROCEDURE mjsched.purge_runs
    @p_keep_seconds float,
    @p_keep_count int,
    @p_per_job bit = 1,
    @p_job_id uniqueidentifier = NULL,
    @p_from_job_id uniqueidentifier = NULL,
    @p_after_completed_at datetimeoffset = NULL,
    @p_after_run_id uniqueidentifier = NULL,
    @p_batch_size int = 1000,
    @p_max_jobs int = 500,
    @p_dry_run bit = 0,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_per_job bit = COALESCE(@p_per_job, 1);
    DECLARE @v_dry_run bit = COALESCE(@p_dry_run, 0);
    DECLARE @v_message nvarchar(2048) = CASE
        WHEN @p_keep_seconds IS NOT NULL AND NOT (@p_keep_seconds >= 0 AND @p_keep_seconds <= 3153600000)
            THEN CONCAT(N'keep_seconds=', CONVERT(nvarchar(40), @p_keep_seconds),
                        N' must be a number of seconds in [0, 3153600000] (100 years)')
        WHEN @p_keep_count IS NOT NULL AND NOT (@p_keep_count BETWEEN 0 AND 1000000000)
            THEN CONCAT(N'keep_count=', @p_keep_count, N' must be between 0 and 1000000000')
        WHEN @p_batch_size IS NULL OR NOT (@p_batch_size BETWEEN 1 AND 4000)
            THEN CONCAT(N'batch_size=', COALESCE(CONVERT(nvarchar(20), @p_batch_size), N'NULL'),
                        N' must be between 1 and 4000')
        WHEN @p_max_jobs IS NULL OR NOT (@p_max_jobs BETWEEN 1 AND 10000)
            THEN CONCAT(N'max_jobs=', COALESCE(CONVERT(nvarchar(20), @p_max_jobs), N'NULL'),
                        N' must be between 1 and 10000')
    END;
    IF @v_message IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    DECLARE @v_to uniqueidentifier, @v_found int = 0, @v_purged int = 0, @v_lock int = 0, @v_busy int = 0;
    DECLARE @v_left int = @p_batch_size, @v_full bit = 0, @v_job uniqueidentifier, @v_next_run_at datetimeoffset;
    DECLARE @v_keep_seconds float, @v_keep_count int, @v_cut datetimeoffset;
    DECLARE @v_nth_at datetimeoffset, @v_nth_id uniqueidentifier, @v_after_at datetimeoffset,
            @v_after_id uniqueidentifier;
    DECLARE @v_next_job uniqueidentifier, @v_next_at datetimeoffset, @v_next_run uniqueidentifier;
    DECLARE @v_jobs TABLE (id uniqueidentifier NOT NULL PRIMARY KEY, next_run_at datetimeoffset NULL,
                           keep_seconds float NULL, keep_count int NULL);
    DECLARE @v_candidates TABLE (run_id uniqueidentifier NOT NULL PRIMARY KEY,
                                 completed_at datetimeoffset NOT NULL);
    -- Without a default rule only the jobs with a rule of their own can lose runs, and only
    -- they are paged through (an idle engine over 100,000 jobs without rules walked them all).
    DECLARE @v_all_jobs bit = CASE WHEN NULLIF(@p_keep_seconds, 0) IS NOT NULL OR NULLIF(@p_keep_count, 0) IS NOT NULL
                                   THEN 1 ELSE 0 END;
    IF @p_job_id IS NULL
    BEGIN
        SELECT @v_to = j.id FROM mjsched.scheduled_job AS j
         WHERE (@p_from_job_id IS NULL OR j.id >= @p_from_job_id)
           AND (@v_all_jobs = 1 OR j.keep_runs_days > 0 OR j.keep_runs_count > 0)
         ORDER BY j.id OFFSET (@p_max_jobs - 1) ROWS FETCH NEXT 1 ROWS ONLY
        OPTION (RECOMPILE);
    END;
    INSERT INTO @v_jobs (id, next_run_at, keep_seconds, keep_count)
    SELECT r.id, r.next_run_at, r.keep_seconds, r.keep_count
      -- a served one-off (Expired, next_run_at NULL) keeps the runs of its run_at tick: they
      -- are what stops that tick running again if the job is made Active
      FROM (SELECT j.id, COALESCE(j.next_run_at, j.run_at) AS next_run_at,
                   CASE WHEN @v_per_job = 1 AND j.keep_runs_days IS NOT NULL
                        THEN NULLIF(j.keep_runs_days, 0) * 86400.0 ELSE NULLIF(@p_keep_seconds, 0) END AS keep_seconds,
                   CASE WHEN @v_per_job = 1 AND j.keep_runs_count IS NOT NULL
                        THEN NULLIF(j.keep_runs_count, 0) ELSE NULLIF(@p_keep_count, 0) END AS keep_count
              FROM mjsched.scheduled_job AS j
             WHERE (@p_job_id IS NULL OR j.id = @p_job_id)
               AND (@p_from_job_id IS NULL OR j.id >= @p_from_job_id)
               AND (@v_to IS NULL OR j.id <= @v_to)
               AND (@v_all_jobs = 1 OR j.keep_runs_days > 0 OR j.keep_runs_count > 0)) AS r
     WHERE r.keep_seconds IS NOT NULL OR r.keep_count IS NOT NULL
    OPTION (RECOMPILE);
    BEGIN TRY
        BEGIN TRANSACTION;
        IF @v_dry_run = 0
        BEGIN
            EXEC @v_lock = sys.sp_getapplock @Resource = N'mjsched.purge_runs', @LockMode = 'Exclusive',
                                             @LockOwner = 'Transaction', @LockTimeout = 0;
        END;
        IF @v_lock < 0
        BEGIN
            SET @v_busy = 1;
            DELETE FROM @v_jobs;
        END;
        WHILE @v_full = 0 AND EXISTS (SELECT 1 FROM @v_jobs)
        BEGIN
            SELECT TOP (1) @v_job = v.id, @v_next_run_at = v.next_run_at, @v_keep_seconds = v.keep_seconds,
                   @v_keep_count = v.keep_count
              FROM @v_jobs AS v
             ORDER BY v.id;
            DELETE FROM @v_jobs WHERE id = @v_job;
            SET @v_cut = CASE WHEN @v_keep_seconds IS NULL
                              THEN CAST(N'9999-12-31T23:59:59.9999999+00:00' AS datetimeoffset)
                              ELSE DATEADD(millisecond,
                                           -CAST(ROUND((@v_keep_seconds - FLOOR(@v_keep_seconds / 86400.0) * 86400.0)
                                                       * 1000.0, 0) AS int),
                                           DATEADD(day, -CAST(FLOOR(@v_keep_seconds / 86400.0) AS int), @v_now))
                         END;
            SET @v_nth_at = CAST(N'9999-12-31T23:59:59.9999999+00:00' AS datetimeoffset);
            SET @v_nth_id = CAST(N'FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF' AS uniqueidentifier);
            IF @v_keep_count IS NOT NULL
            BEGIN
                SET @v_nth_at = NULL;
                SELECT @v_nth_at = x.completed_at, @v_nth_id = x.id
                  FROM mjsched.scheduled_job_run AS x
                 WHERE x.scheduled_job_id = @v_job AND x.completed_at IS NOT NULL
                 ORDER BY x.completed_at DESC, x.id DESC
                OFFSET (@v_keep_count - 1) ROWS FETCH NEXT 1 ROWS ONLY;
            END;
            SET @v_after_at = CAST(N'0001-01-01T00:00:00+00:00' AS datetimeoffset);
            SET @v_after_id = CAST(N'00000000-0000-0000-0000-000000000000' AS uniqueidentifier);
            IF @v_job = @p_from_job_id AND @p_after_completed_at IS NOT NULL
            BEGIN
                SET @v_after_at = @p_after_completed_at;
                SET @v_after_id = COALESCE(@p_after_run_id, @v_after_id);
            END;
            IF @v_nth_at IS NOT NULL AND @v_dry_run = 1
            BEGIN
                SELECT @v_found = COUNT(*)
                  FROM mjsched.purge_candidates(@v_job, @v_cut, @v_nth_at, @v_nth_id, @v_after_at, @v_after_id,
                                                @v_next_run_at, NULL) AS c;
                SET @v_purged = @v_purged + @v_found;
            END;
            IF @v_nth_at IS NOT NULL AND @v_dry_run = 0
            BEGIN
                DELETE FROM @v_candidates;
                INSERT INTO @v_candidates (run_id, completed_at)
                SELECT c.run_id, c.completed_at
                  FROM mjsched.purge_candidates(@v_job, @v_cut, @v_nth_at, @v_nth_id, @v_after_at, @v_after_id,
                                                @v_next_run_at, @v_left) AS c;
                SET @v_found = @@ROWCOUNT;
                DELETE r
                  FROM mjsched.scheduled_job_run AS r WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
                  JOIN @v_candidates AS c ON c.run_id = r.id
                 WHERE r.status IN (N'Completed', N'Failed', N'Timeout', N'Cancelled', N'Abandoned', N'Skipped');
                SET @v_purged = @v_purged + @@ROWCOUNT;
                SET @v_left = @v_left - @v_found;
                IF @v_left <= 0
                BEGIN
                    SET @v_full = 1;
                    SELECT TOP (1) @v_next_job = @v_job, @v_next_at = c.completed_at, @v_next_run = c.run_id
                      FROM @v_candidates AS c
                     ORDER BY c.completed_at DESC, c.run_id DESC;
                END;
            END;
        END;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF XACT_STATE() <> 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    -- the cursor: handed back unchanged when busy; the last candidate when the batch filled
    -- (more may be left in that job); else the next page of jobs (NULL: the pass is done)
    IF @v_busy = 1
    BEGIN
        SELECT @v_next_job = @p_from_job_id, @v_next_at = @p_after_completed_at, @v_next_run = @p_after_run_id;
    END;
    IF @v_busy = 0 AND @v_full = 0 AND @p_job_id IS NULL AND @v_to IS NOT NULL
    BEGIN
        SELECT TOP (1) @v_next_job = j.id FROM mjsched.scheduled_job AS j
         WHERE j.id > @v_to AND (@v_all_jobs = 1 OR j.keep_runs_days > 0 OR j.keep_runs_count > 0)
         ORDER BY j.id
        OPTION (RECOMPILE);
    END;
    SELECT @v_purged AS purged, @v_next_job AS next_job_id, @v_next_at AS next_completed_at,
           @v_next_run AS next_run_id, @v_busy AS busy;
END;
GO
