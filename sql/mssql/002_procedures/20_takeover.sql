-- abandon_runs: end the given runs Abandoned (those still Running) and count them in
-- their jobs' statistics; returns how many (the return code). @p_run_ids: a JSON array of
-- {"id": run id} objects. The caller already holds their job rows (lock order), so this
-- runs only inside the caller's transaction. {engine} in @p_reason becomes the instance
-- that executed the run.
CREATE OR ALTER PROCEDURE mjsched.abandon_runs
    @p_run_ids nvarchar(max),
    @p_now datetimeoffset,
    @p_reason nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_abandoned TABLE (scheduled_job_id uniqueidentifier NOT NULL);
    DECLARE @v_counted TABLE (id uniqueidentifier NOT NULL);
    DECLARE @v_rows int = 0;
    IF @@TRANCOUNT = 0
    BEGIN
        THROW 50022, N'abandon_runs runs inside the transaction that holds the runs'' job rows', 1;
    END;
    IF @p_run_ids IS NULL
    BEGIN
        RETURN 0;
    END;
    UPDATE r
       SET status = N'Abandoned',
           success = 0,
           completed_at = @p_now,
           lease_expires_at = NULL,
           duration_ms = CASE WHEN DATEDIFF_BIG(millisecond, r.started_at, @p_now) > 0
                              THEN DATEDIFF_BIG(millisecond, r.started_at, @p_now) ELSE 0 END,
           error_message = REPLACE(@p_reason, N'{engine}', COALESCE(r.executed_by_instance, N'?'))
    OUTPUT inserted.scheduled_job_id INTO @v_abandoned
      FROM mjsched.scheduled_job_run AS r WITH (ROWLOCK)
      JOIN (SELECT DISTINCT i.id FROM OPENJSON(@p_run_ids) WITH (id uniqueidentifier '$.id') AS i) AS k
        ON k.id = r.id
     WHERE r.status = N'Running';
    SET @v_rows = (SELECT COUNT(*) FROM @v_abandoned);
    IF @v_rows > 0
    BEGIN
        UPDATE j
           SET run_count = j.run_count + p.n, failure_count = j.failure_count + p.n
        OUTPUT inserted.id INTO @v_counted
          FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
          JOIN (SELECT a.scheduled_job_id, COUNT(*) AS n FROM @v_abandoned AS a
                 GROUP BY a.scheduled_job_id) AS p ON p.scheduled_job_id = j.id;
    END;
    RETURN @v_rows;
END;
GO

-- take_over: the caller holds the job rows of these lapsed tokens (@p_old_tokens: a JSON
-- array of {"id": token} objects); their Running runs end Abandoned before the locks
-- change hands. Returns how many (the return code). PostgreSQL's runs_of_tokens (the
-- Running runs of a uuid[]) is the SELECT here: T-SQL has no arrays.
CREATE OR ALTER PROCEDURE mjsched.take_over
    @p_old_tokens nvarchar(max),
    @p_now datetimeoffset
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_runs nvarchar(max);
    DECLARE @v_abandoned int = 0;
    IF @@TRANCOUNT = 0
    BEGIN
        THROW 50022, N'take_over runs inside the transaction that holds the tokens'' job rows', 1;
    END;
    SET @v_runs = (SELECT r.id
                     FROM (SELECT DISTINCT o.id FROM OPENJSON(@p_old_tokens) WITH (id uniqueidentifier '$.id') AS o) AS t
                     JOIN mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK) ON r.lock_token = t.id
                    WHERE r.status = N'Running'
                    ORDER BY r.id
                      FOR JSON PATH);
    IF @v_runs IS NOT NULL
    BEGIN
        EXEC @v_abandoned = mjsched.abandon_runs @p_run_ids = @v_runs, @p_now = @p_now,
             @p_reason = N'Abandoned: the lease expired and another holder took the lock over';
    END;
    RETURN @v_abandoned;
END;
GO

-- expire_ended_jobs: Active jobs past end_at become Expired (a filtered-index seek, so
-- every claim can afford it); their pending retries end Skipped (the window closed). Rows
-- other callers hold are skipped. Returns how many (the return code).
CREATE OR ALTER PROCEDURE mjsched.expire_ended_jobs
    @p_now datetimeoffset
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_expired TABLE (id uniqueidentifier NOT NULL);
    DECLARE @v_rows int;
    UPDATE j
       SET status = N'Expired', next_run_at = NULL
    OUTPUT inserted.id INTO @v_expired
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
     WHERE j.status = N'Active' AND j.end_at IS NOT NULL AND j.end_at <= @p_now;
    -- The pending retries of the jobs expired above end Skipped, and so do those of a one-off:
    -- it is Expired as soon as its tick is served, so the statement above never visits it, and
    -- its retries end once its window closed (found from the few Queued runs). Every job row
    -- is locked before any run row, as every writer of Queued runs does.
    DECLARE @v_retries_end TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    INSERT INTO @v_retries_end (id) SELECT e.id FROM @v_expired AS e;
    INSERT INTO @v_retries_end (id)
    SELECT j.id
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
     WHERE j.status = N'Expired' AND j.run_at IS NOT NULL AND j.end_at IS NOT NULL AND j.end_at <= @p_now
       AND j.id IN (SELECT q.scheduled_job_id FROM mjsched.scheduled_job_run AS q
                     WHERE q.status = N'Queued' AND q.attempt > 1)
       AND NOT EXISTS (SELECT 1 FROM @v_expired AS e WHERE e.id = j.id);   -- just expired: listed above
    UPDATE q
       SET status = N'Skipped', success = 0, completed_at = @p_now, duration_ms = 0,
           error_message = N'retry not run: the job''s window ended (end_at) before it was due'
      FROM mjsched.scheduled_job_run AS q WITH (ROWLOCK)
      JOIN @v_retries_end AS e ON e.id = q.scheduled_job_id
     WHERE q.status = N'Queued' AND q.attempt > 1;
    SET @v_rows = (SELECT COUNT(*) FROM @v_expired);
    RETURN @v_rows;
END;
GO

