-- 002_procedures, completion: finish runs fenced by token, statistics, next run, retries.

-- complete_items: the completion complete_runs and complete_job_runs share (its one
-- definition). Finish many runs in one transaction (batched completion).
-- @p_items: JSON array of {run_id, token, status, error_message, details, next_run_at,
-- guard, expected_next_run_at, retry_in}. Each run is fenced by its token and must still be
-- Running; the job's statistics follow, and the job lock is released (and next_run_at
-- set) only where the same token still holds it. With guard true, next_run_at is set
-- only while the job's next_run_at is still expected_next_run_at (what the engine saw
-- when it claimed the run): a schedule edited during the run keeps the edit's next run.
-- The comparison is to the microsecond (the engine's clock resolution; the column
-- holds 100 ns). Returns one row per item: completed 0/1 and busy 0/1. The items' job
-- rows are locked first (lock order): with @p_skip_busy = 1 with READPAST (the first rows
-- it locks: SKIP LOCKED), and an item whose run is still Running under its token but
-- whose job row another session holds is answered busy = 1 (nothing of it written; a
-- later call completes it); otherwise in id order, waiting.
-- Retries (009_retries.sql): an item with retry_in (seconds, the delay the engine drew from
-- the job's policy) that ends a tick's attempt Failed or Timeout records the next attempt of
-- the same tick in this transaction: a Queued run (attempt + 1) due at now + retry_in, or,
-- when that is not before the job's end_at, a Skipped one saying so. retry_count counts them.
-- With a temporary table #mjsched_completed (run_id, completed, busy) in scope, the rows
-- go there instead of to the client: that is how complete_runs, complete_job_runs and
-- complete_job_run reuse this procedure.
CREATE OR ALTER PROCEDURE mjsched.complete_items
    @p_items nvarchar(max),
    @p_now datetimeoffset,
    @p_skip_busy bit
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_skip_busy bit = ISNULL(@p_skip_busy, 0);
    DECLARE @v_items TABLE (run_id uniqueidentifier NULL, token uniqueidentifier NULL, status nvarchar(20) NULL,
                            error_message nvarchar(max) NULL, details nvarchar(max) NULL,
                            next_run_at datetimeoffset NULL, guard bit NOT NULL,
                            expected_next_run_at datetimeoffset NULL, retry_in float NULL);
    DECLARE @v_finished TABLE (run_id uniqueidentifier NOT NULL PRIMARY KEY, scheduled_job_id uniqueidentifier NOT NULL,
                               lock_token uniqueidentifier NULL, status nvarchar(20) NOT NULL,
                               duration_ms bigint NULL, next_run_at datetimeoffset NULL, guard bit NOT NULL,
                               expected_next_run_at datetimeoffset NULL, scheduled_for datetimeoffset NULL,
                               attempt int NOT NULL, retry_at datetimeoffset NULL);
    DECLARE @v_retried TABLE (scheduled_job_id uniqueidentifier NOT NULL, status nvarchar(20) NOT NULL);
    DECLARE @v_jobs TABLE (id uniqueidentifier NOT NULL);
    DECLARE @v_job_ids TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_locked TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        IF @p_items IS NULL OR ISJSON(@p_items) = 0 OR LEFT(LTRIM(@p_items), 1) <> N'['
        BEGIN
            THROW 50022, N'items must be a JSON array', 1;
        END;
        IF EXISTS (SELECT 1 FROM OPENJSON(@p_items) AS e
                    CROSS APPLY OPENJSON(CASE WHEN e.[type] = 5 THEN e.[value] END) AS x
                    WHERE x.[key] COLLATE Latin1_General_BIN2 = N'retry_in' AND x.[type] <> 0
                      AND (x.[type] <> 2 OR NOT (TRY_CONVERT(float, x.[value]) BETWEEN 0 AND 31536000)))
        BEGIN
            THROW 50022, N'retry_in must be a number of seconds in [0, 31536000]', 1;
        END;
        INSERT INTO @v_items (run_id, token, status, error_message, details, next_run_at, guard,
                              expected_next_run_at, retry_in)
        SELECT i.run_id, i.token, i.status, i.error_message, i.details, i.next_run_at, COALESCE(i.guard, 0),
               i.expected_next_run_at, i.retry_in
          FROM OPENJSON(@p_items)
               WITH (run_id uniqueidentifier '$.run_id',
                     token uniqueidentifier '$.token',
                     status nvarchar(20) '$.status',
                     error_message nvarchar(max) '$.error_message',
                     details nvarchar(max) '$.details' AS JSON,
                     next_run_at datetimeoffset '$.next_run_at',
                     guard bit '$.guard',
                     expected_next_run_at datetimeoffset '$.expected_next_run_at',
                     retry_in float '$.retry_in') AS i;
        IF EXISTS (SELECT 1 FROM @v_items AS e
                    WHERE e.status IS NULL
                       OR e.status NOT IN (N'Completed', N'Failed', N'Timeout', N'Cancelled', N'Skipped'))
        BEGIN
            THROW 50022, N'status must be one of Completed, Failed, Timeout, Cancelled, Skipped', 1;
        END;

        BEGIN TRANSACTION;
        -- Jobs first: the items' job rows, in id order, before any run is touched.
        INSERT INTO @v_job_ids (id)
        SELECT DISTINCT r.scheduled_job_id
          FROM @v_items AS i
          JOIN mjsched.scheduled_job_run AS r ON r.id = i.run_id;
        IF @v_skip_busy = 1
        BEGIN
            -- skipping, so in no particular order: a row another session holds is not waited for
            INSERT INTO @v_locked (id)
            SELECT j.id
              FROM @v_job_ids AS k
              JOIN mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) ON j.id = k.id
            OPTION (FORCE ORDER, LOOP JOIN);
        END;
        IF @v_skip_busy = 0
        BEGIN
            INSERT INTO @v_locked (id)
            SELECT j.id
              FROM @v_job_ids AS k
              JOIN mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK) ON j.id = k.id
             ORDER BY k.id
            OPTION (FORCE ORDER, LOOP JOIN);
        END;
        -- one pause point per public procedure (the harness parks each)
        IF @v_skip_busy = 1
        BEGIN
            EXEC mjsched.test_pause @p_point = N'complete_runs:jobs_locked';
        END;
        IF @v_skip_busy = 0
        BEGIN
            EXEC mjsched.test_pause @p_point = N'complete_job_runs:jobs_locked';
        END;

        UPDATE r
           SET status = i.status,
               success = CASE WHEN i.status = N'Completed' THEN 1 ELSE 0 END,
               error_message = i.error_message,
               -- details past the JSON limits (ck_scheduled_job_run_details_limits) are replaced by a
               -- note: the run's outcome is recorded all the same, and the rest of the batch with it
               details = CASE WHEN mjsched.json_nesting_exceeds(i.details, 64) = 1
                              THEN N'{"details_dropped": "nesting deeper than 64 levels"}'
                              WHEN LEN(i.details) > 1000000
                              THEN CONCAT(N'{"details_dropped": "', LEN(i.details),
                                          N' characters as JSON; at most 1000000 allowed"}')
                              ELSE i.details END,
               completed_at = @v_now,
               duration_ms = CASE WHEN i.status = N'Skipped' THEN 0
                                  WHEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) > 0
                                  THEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) ELSE 0 END,
               lease_expires_at = NULL
        OUTPUT inserted.id, inserted.scheduled_job_id, inserted.lock_token, inserted.status,
               inserted.duration_ms, i.next_run_at, i.guard, i.expected_next_run_at, inserted.scheduled_for,
               inserted.attempt,
               CASE WHEN inserted.status IN (N'Failed', N'Timeout') AND inserted.scheduled_for IS NOT NULL
                    THEN DATEADD(millisecond, CAST((i.retry_in - FLOOR(i.retry_in)) * 1000 AS int),
                                 DATEADD(second, CAST(FLOOR(i.retry_in) AS int), @v_now)) END
          INTO @v_finished
          FROM mjsched.scheduled_job_run AS r WITH (ROWLOCK)
          JOIN @v_items AS i ON i.run_id = r.id
         WHERE r.lock_token = i.token AND r.status = N'Running'
           AND EXISTS (SELECT 1 FROM @v_locked AS l WHERE l.id = r.scheduled_job_id);

        -- Retries (009_retries.sql): an item with retry_in that ended a tick's attempt Failed or
        -- Timeout records the next attempt of the same tick here: Queued, due at retry_at, or
        -- Skipped when that is not before the job's end_at. The job rows are ours (locked above).
        INSERT INTO mjsched.scheduled_job_run
               (scheduled_job_id, scheduled_for, attempt, status, queued_at, retry_at,
                success, completed_at, duration_ms, error_message)
        OUTPUT inserted.scheduled_job_id, inserted.status INTO @v_retried
        SELECT f.scheduled_job_id, f.scheduled_for, f.attempt + 1,
               CASE WHEN l.late = 1 THEN N'Skipped' ELSE N'Queued' END, @v_now, f.retry_at,
               CASE WHEN l.late = 1 THEN 0 END, CASE WHEN l.late = 1 THEN @v_now END,
               CASE WHEN l.late = 1 THEN 0 END,
               CASE WHEN l.late = 1
                    THEN CONCAT(N'retry not run: due at ', CONVERT(nvarchar(40), f.retry_at, 127),
                                N', not before the job''s end_at (', CONVERT(nvarchar(40), j.end_at, 127), N')') END
          FROM @v_finished AS f
          JOIN mjsched.scheduled_job AS j WITH (ROWLOCK) ON j.id = f.scheduled_job_id
         CROSS APPLY (SELECT CASE WHEN j.end_at IS NOT NULL AND f.retry_at >= j.end_at THEN 1 ELSE 0 END AS late) AS l
         WHERE f.retry_at IS NOT NULL AND f.attempt < 100
           AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS o WITH (READCOMMITTEDLOCK)
                            WHERE o.scheduled_job_id = f.scheduled_job_id AND o.scheduled_for = f.scheduled_for
                              AND o.attempt = f.attempt + 1);

        -- last_ms: duration_ms is never negative, so -1 stands for "no run" without a NULL
        -- in the aggregate (which would raise an ANSI warning).
        UPDATE j
           SET run_count = j.run_count + p.runs,
               retry_count = j.retry_count + (SELECT COUNT(*) FROM @v_retried AS x
                                               WHERE x.scheduled_job_id = j.id AND x.status = N'Queued'),
               success_count = j.success_count + p.ok,
               failure_count = j.failure_count + p.bad,
               total_duration_ms = j.total_duration_ms + p.total_ms,
               last_duration_ms = COALESCE(NULLIF(p.last_ms, -1), j.last_duration_ms),
               last_run_at = CASE WHEN p.runs > 0 THEN @v_now ELSE j.last_run_at END,
               last_success_at = CASE WHEN p.ok > 0 THEN @v_now ELSE j.last_success_at END,
               next_run_at = CASE WHEN h.holds = 1 THEN COALESCE(h.next_run_at, j.next_run_at)
                                  ELSE j.next_run_at END,
               locked_at = CASE WHEN h.holds = 1 THEN NULL ELSE j.locked_at END,
               locked_by_instance = CASE WHEN h.holds = 1 THEN NULL ELSE j.locked_by_instance END,
               expected_completion_at = CASE WHEN h.holds = 1 THEN NULL ELSE j.expected_completion_at END,
               lock_token = CASE WHEN h.holds = 1 THEN NULL ELSE j.lock_token END,
               updated_at = SYSDATETIMEOFFSET()   -- set here: the row trigger passes it over (001_schema.sql)
        OUTPUT inserted.id INTO @v_jobs
          FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
          JOIN (SELECT f.scheduled_job_id,
                       SUM(CASE WHEN f.status <> N'Skipped' THEN 1 ELSE 0 END) AS runs,
                       SUM(CASE WHEN f.status = N'Completed' THEN 1 ELSE 0 END) AS ok,
                       SUM(CASE WHEN f.status NOT IN (N'Completed', N'Skipped') THEN 1 ELSE 0 END) AS bad,
                       SUM(CASE WHEN f.status <> N'Skipped' THEN f.duration_ms ELSE 0 END) AS total_ms,
                       MAX(CASE WHEN f.status <> N'Skipped' THEN f.duration_ms ELSE -1 END) AS last_ms
                  FROM @v_finished AS f
                 GROUP BY f.scheduled_job_id) AS p ON p.scheduled_job_id = j.id
         CROSS APPLY (SELECT CASE WHEN EXISTS (SELECT 1 FROM @v_finished AS o
                                                WHERE o.scheduled_job_id = j.id AND o.lock_token = j.lock_token)
                                  THEN 1 ELSE 0 END AS holds,
                             (SELECT MAX(n.next_run_at) FROM @v_finished AS n
                               WHERE n.scheduled_job_id = j.id AND n.next_run_at IS NOT NULL
                                 AND (n.guard = 0
                                      OR (n.expected_next_run_at IS NULL AND j.next_run_at IS NULL)
                                      OR DATEDIFF_BIG(microsecond, j.next_run_at, n.expected_next_run_at) = 0))
                             AS next_run_at) AS h;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;

    -- A replayed item is reported completed too (the same token already finished the run
    -- with the same status). Busy: not finished, still Running under its token, its job
    -- row held by another session (read as committed, not under a lock, and without
    -- READPAST: the next call decides).
    DECLARE @v_answer TABLE (run_id uniqueidentifier NULL, completed int NOT NULL, busy int NOT NULL);
    INSERT INTO @v_answer (run_id, completed, busy)
    SELECT a.run_id, a.completed,
           CASE WHEN a.completed = 0 AND EXISTS (
                     SELECT 1 FROM mjsched.scheduled_job_run AS r
                      WHERE r.id = a.run_id AND r.lock_token = a.token AND r.status = N'Running'
                        AND NOT EXISTS (SELECT 1 FROM @v_locked AS l WHERE l.id = r.scheduled_job_id))
                THEN 1 ELSE 0 END
      FROM (SELECT i.run_id, i.token,
                   CASE WHEN f.run_id IS NOT NULL OR EXISTS (
                             SELECT 1 FROM mjsched.scheduled_job_run AS r
                              WHERE r.id = i.run_id AND r.lock_token = i.token AND r.status = i.status)
                        THEN 1 ELSE 0 END AS completed
              FROM @v_items AS i
              LEFT JOIN @v_finished AS f ON f.run_id = i.run_id) AS a;
    IF OBJECT_ID(N'tempdb..#mjsched_completed') IS NOT NULL
    BEGIN
        INSERT INTO #mjsched_completed (run_id, completed, busy)
        SELECT a.run_id, a.completed, a.busy FROM @v_answer AS a;
        RETURN;
    END;
    SELECT a.run_id, a.completed, a.busy FROM @v_answer AS a;
END;
GO

-- complete_runs: complete_items as this release calls it (@p_skip_busy = 1): it never
-- waits on a job row another session holds (an operator's open transaction); such an
-- item comes back busy = 1 and the engine retries it alone, so one locked row delays
-- only its own job.
CREATE OR ALTER PROCEDURE mjsched.complete_runs
    @p_items nvarchar(max),
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    CREATE TABLE #mjsched_completed (run_id uniqueidentifier NULL, completed int NOT NULL, busy int NOT NULL);
    EXEC mjsched.complete_items @p_items = @p_items, @p_now = @p_now, @p_skip_busy = 1;
    SELECT c.run_id, c.completed, c.busy FROM #mjsched_completed AS c;
END;
GO

-- complete_job_runs: the completion as release 2 calls it (complete_items with
-- @p_skip_busy = 0: it waits for a job row another session holds). One row per item:
-- completed 0/1. Kept for engines of the previous release.
CREATE OR ALTER PROCEDURE mjsched.complete_job_runs
    @p_items nvarchar(max),
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    CREATE TABLE #mjsched_completed (run_id uniqueidentifier NULL, completed int NOT NULL, busy int NOT NULL);
    EXEC mjsched.complete_items @p_items = @p_items, @p_now = @p_now, @p_skip_busy = 0;
    SELECT c.run_id, c.completed FROM #mjsched_completed AS c;
END;
GO

-- complete_job_run: one run (finish + statistics + next run + release, fenced by token).
CREATE OR ALTER PROCEDURE mjsched.complete_job_run
    @p_run_id uniqueidentifier,
    @p_token uniqueidentifier,
    @p_status nvarchar(20),
    @p_error_message nvarchar(max),
    @p_details nvarchar(max),
    @p_next_run_at datetimeoffset,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_items nvarchar(max) = (
        SELECT @p_run_id AS run_id, @p_token AS token, @p_status AS status,
               @p_error_message AS error_message, JSON_QUERY(@p_details) AS details,
               @p_next_run_at AS next_run_at
           FOR JSON PATH, INCLUDE_NULL_VALUES);
    CREATE TABLE #mjsched_completed (run_id uniqueidentifier NULL, completed int NOT NULL, busy int NOT NULL);
    EXEC mjsched.complete_items @p_items = @v_items, @p_now = @p_now, @p_skip_busy = 0;
    SELECT c.completed FROM #mjsched_completed AS c;
END;
GO

