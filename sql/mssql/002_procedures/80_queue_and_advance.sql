-- 002_procedures, queue and advance: Queue mode's kept ticks, moving the schedule on, begin_job_run.

-- enqueue_job_run (Queue mode): keep a tick that came due while the job runs as one
-- Queued run: at most one per tick, at most max_queued_runs, and only a tick later than
-- the start of the Running run that holds the job's lock and not in the future. A tick
-- refused once (queue full) is never queued later. The job's row lock (UPDLOCK, like FOR
-- NO KEY UPDATE) serialises racing enqueuers of one job. Pending retries (009_retries.sql)
-- take no queue slot.
CREATE OR ALTER PROCEDURE mjsched.enqueue_job_run
    @p_job_id uniqueidentifier,
    @p_scheduled_for datetimeoffset,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_limit int;
    DECLARE @v_token uniqueidentifier;
    DECLARE @v_started datetimeoffset;
    DECLARE @v_queued TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        IF @p_scheduled_for IS NULL
        BEGIN
            THROW 50022, N'scheduled_for must not be NULL', 1;
        END;
        BEGIN TRANSACTION;
        SELECT @v_limit = j.max_queued_runs, @v_token = j.lock_token
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
         WHERE j.id = @p_job_id AND j.concurrency_mode = N'Queue' AND j.status = N'Active';
        EXEC mjsched.test_pause @p_point = N'enqueue_job_run:job_locked';
        SELECT @v_started = r.started_at
          FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
         WHERE r.lock_token = @v_token AND r.status = N'Running' AND r.scheduled_job_id = @p_job_id;
        IF @v_limit IS NOT NULL AND @v_started IS NOT NULL
           AND @p_scheduled_for > @v_started AND @p_scheduled_for <= @v_now
           AND (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK)
                 WHERE q.scheduled_job_id = @p_job_id AND q.status = N'Queued' AND q.attempt = 1) < @v_limit
        BEGIN
            INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at)
            OUTPUT inserted.id INTO @v_queued
            SELECT @p_job_id, @p_scheduled_for, N'Queued', @v_now
             WHERE NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS o WITH (READCOMMITTEDLOCK)
                                WHERE o.scheduled_job_id = @p_job_id AND o.scheduled_for = @p_scheduled_for);
        END;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT COUNT(*) AS enqueued FROM @v_queued;
END;
GO

-- advance_job: move a held job's schedule and, with @p_release, drop its lock (for a
-- Concurrent tick run, which keeps only its run lease, and for a tick that already had
-- a run). A release is refused while any other Running run holds the token (a Skip or
-- Queue run, or a manual run of any mode): that lock ends with its run.
-- Compare-and-set: with @p_guard = 1, next_run_at is moved only while it is still
-- @p_expected_next_run_at (what the engine saw at the claim), as a completion moves it: a
-- schedule edited between a claim and its advance keeps the edit's next run (the lock is
-- still released). The engines of the previous release leave both out (the defaults): no
-- guard. Answers 1 when the token held the job, whether or not the guard let it move.
CREATE OR ALTER PROCEDURE mjsched.advance_job
    @p_job_id uniqueidentifier,
    @p_token uniqueidentifier,
    @p_next_run_at datetimeoffset,
    @p_release bit,
    @p_guard bit = 0,
    @p_expected_next_run_at datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_advanced TABLE (id uniqueidentifier NOT NULL);
    UPDATE j
       SET next_run_at = CASE WHEN COALESCE(@p_guard, 0) = 0
                                   OR (j.next_run_at IS NULL AND @p_expected_next_run_at IS NULL)
                                   OR DATEDIFF_BIG(microsecond, j.next_run_at, @p_expected_next_run_at) = 0
                              THEN @p_next_run_at ELSE j.next_run_at END,
           lock_token = CASE WHEN @p_release = 1 THEN NULL ELSE j.lock_token END,
           locked_at = CASE WHEN @p_release = 1 THEN NULL ELSE j.locked_at END,
           locked_by_instance = CASE WHEN @p_release = 1 THEN NULL ELSE j.locked_by_instance END,
           expected_completion_at = CASE WHEN @p_release = 1 THEN NULL ELSE j.expected_completion_at END
    OUTPUT inserted.id INTO @v_advanced
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
     WHERE j.id = @p_job_id AND j.lock_token = @p_token
       AND (@p_release = 0
            OR NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
                            WHERE r.lock_token = @p_token AND r.status = N'Running'
                              AND (j.concurrency_mode <> N'Concurrent' OR r.scheduled_for IS NULL)));
    SELECT COUNT(*) AS advanced FROM @v_advanced;
END;
GO

-- begin_job_run: a Running run for a job whose lock the caller holds (manual runs
-- have scheduled_for NULL), sharing the lock's lease. Returns the run id, or no row
-- when the lock is not ours (or the tick already has a run). Idempotent for its token:
-- while a Running run already holds @p_token (a replay after a lost reply), that run's
-- id is answered and no second run is made. The job row is locked first; the reads of
-- its runs then see the latest committed ones (READCOMMITTEDLOCK). Kept for engines of
-- release 2; this release uses start_manual_run.
CREATE OR ALTER PROCEDURE mjsched.begin_job_run
    @p_job_id uniqueidentifier,
    @p_token uniqueidentifier,
    @p_instance nvarchar(255),
    @p_scheduled_for datetimeoffset,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_begun TABLE (run_id uniqueidentifier NOT NULL);
    DECLARE @v_found bit = 0;
    DECLARE @v_lease datetimeoffset;
    DECLARE @v_fence bigint;
    DECLARE @v_version int;
    BEGIN TRY
        BEGIN TRANSACTION;
        SELECT @v_found = 1, @v_lease = j.expected_completion_at, @v_fence = j.fence_seq, @v_version = j.version
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
         WHERE j.id = @p_job_id AND j.lock_token = @p_token;
        IF @v_found = 1
        BEGIN
            EXEC mjsched.test_pause @p_point = N'begin_job_run:job_locked';
            INSERT INTO @v_begun (run_id)
            SELECT r.id FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
             WHERE r.lock_token = @p_token AND r.status = N'Running' AND r.scheduled_job_id = @p_job_id;
            IF NOT EXISTS (SELECT 1 FROM @v_begun)
            BEGIN
                INSERT INTO mjsched.scheduled_job_run
                       (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
                        lock_token, lease_expires_at, fencing_token, job_version)
                OUTPUT inserted.id INTO @v_begun
                SELECT @p_job_id, @p_scheduled_for, N'Running', @v_now, @p_instance, @p_token, @v_lease,
                       @v_fence, @v_version
                 WHERE @p_scheduled_for IS NULL
                    OR NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS o WITH (READCOMMITTEDLOCK)
                                    WHERE o.scheduled_job_id = @p_job_id AND o.scheduled_for = @p_scheduled_for);
            END;
        END;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT b.run_id FROM @v_begun AS b;
END;
GO

