-- 002_procedures, job locks: an operator's or a previous release's lock and release of one job.

-- acquire_job_lock: take the job's lock iff it is free or its lease expired (and,
-- with @p_require_due, only while the job is Active and due). Taking over an expired
-- lease abandons the old holder's Running runs, so its late completion changes nothing.
-- No READPAST here: racing acquirers wait for each other and re-read the row, so
-- exactly one wins. Idempotent for its token: a replay after a lost reply finds the lock
-- already held by @p_token and answers 1. The engine of this release starts manual runs
-- with start_manual_run; kept for engines of release 2.
CREATE OR ALTER PROCEDURE mjsched.acquire_job_lock
    @p_job_id uniqueidentifier,
    @p_token uniqueidentifier,
    @p_instance nvarchar(255),
    @p_lease_seconds float,
    @p_require_due bit = 0,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_found bit = 0;
    DECLARE @v_old uniqueidentifier;
    DECLARE @v_old_json nvarchar(max);
    DECLARE @v_rows int = 0;
    DECLARE @v_taken TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        EXEC mjsched.check_lease @p_lease_seconds = @p_lease_seconds;
        IF @p_token IS NULL
        BEGIN
            THROW 50022, N'token must not be NULL', 1;
        END;
        BEGIN TRANSACTION;
        SELECT @v_found = 1, @v_old = j.lock_token
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
         WHERE j.id = @p_job_id
           AND (j.lock_token IS NULL OR j.expected_completion_at < @v_now OR j.lock_token = @p_token)
           AND (@p_require_due = 0 OR (j.status = N'Active' AND j.next_run_at <= @v_now));
        IF @v_found = 1 AND @v_old = @p_token
        BEGIN
            SET @v_rows = 1;   -- a replay: the lost call took it
        END;
        IF @v_found = 1 AND @v_rows = 0
        BEGIN
            EXEC mjsched.test_pause @p_point = N'acquire_job_lock:job_locked';
            IF @v_old IS NOT NULL
            BEGIN
                SET @v_old_json = (SELECT @v_old AS id FOR JSON PATH);
                EXEC mjsched.take_over @p_old_tokens = @v_old_json, @p_now = @v_now;
            END;
            UPDATE j
               SET lock_token = @p_token,
                   locked_at = @v_now,
                   locked_by_instance = @p_instance,
                   expected_completion_at = mjsched.lease_until(@v_now, @p_lease_seconds, j.max_runtime_seconds),
                   fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                                    ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
            OUTPUT inserted.id INTO @v_taken
              FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
             WHERE j.id = @p_job_id;
            SET @v_rows = (SELECT COUNT(*) FROM @v_taken);
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
    SELECT @v_rows AS acquired;
END;
GO

-- release_job_lock: clear the lock only when the caller still holds it and no Running
-- run holds it (a run's lock ends with the run: its completion releases it).
CREATE OR ALTER PROCEDURE mjsched.release_job_lock
    @p_job_id uniqueidentifier,
    @p_token uniqueidentifier
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_released TABLE (id uniqueidentifier NOT NULL);
    UPDATE j
       SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
    OUTPUT inserted.id INTO @v_released
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
     WHERE j.id = @p_job_id AND j.lock_token = @p_token
       AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
                        WHERE r.lock_token = @p_token AND r.status = N'Running');
    SELECT COUNT(*) AS released FROM @v_released;
END;
GO

