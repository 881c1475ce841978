-- 002_procedures, sweep: lapsed leases end, their runs Abandoned.

-- sweep_expired_leases: lapsed job locks are freed and the Running runs that held them
-- abandoned, in one step (jobs first); then lapsed runs that hold no job lock
-- (Concurrent tick runs) are abandoned, their jobs locked first; then Active jobs past
-- end_at become Expired (expire_ended_jobs). Job rows other callers hold are skipped
-- (READPAST on the first rows of each step; the next sweep gets them); run rows are never
-- skipped, as every writer of a run holds its job's row first. Cheap when nothing is
-- stale: each step is a filtered-index seek.
-- Known limit (not handled): ROWLOCK asks for row locks but does not prevent lock
-- escalation. A statement holding about 5,000 locks on one table may escalate to a
-- table lock, so a sweep after a long outage that touches thousands of rows can lock
-- a whole table until it commits; READPAST does not skip a table lock, so the
-- engines' claims wait (they do not fail) for that one transaction.
CREATE OR ALTER PROCEDURE mjsched.sweep_expired_leases
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_reason nvarchar(200) = N'Abandoned: the lease expired before the run completed (engine {engine} stopped renewing it)';
    DECLARE @v_swept int = 0;
    DECLARE @v_more int = 0;
    DECLARE @v_freed int = 0;
    DECLARE @v_expired int = 0;
    DECLARE @v_runs nvarchar(max);
    DECLARE @v_lapsed TABLE (id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NOT NULL);
    DECLARE @v_run_locks TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_ids TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_freed_ids TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        BEGIN TRANSACTION;
        -- 1. Lapsed locks, with the runs holding them.
        INSERT INTO @v_lapsed (id, lock_token)
        SELECT j.id, j.lock_token
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
         WHERE j.lock_token IS NOT NULL AND j.expected_completion_at < @v_now;
        EXEC mjsched.test_pause @p_point = N'sweep_expired_leases:lapsed_locks_locked';
        -- A lapsed run another session holds is not waited for: the runs of the lapsed tokens
        -- are locked with READPAST (their job rows are ours, so only an outsider can hold
        -- them), and a job with a run that could not be locked is left for a later sweep.
        INSERT INTO @v_run_locks (id)
        SELECT r.id
          FROM @v_lapsed AS l
          JOIN mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
            ON r.lock_token = l.lock_token
         WHERE r.status = N'Running';
        DELETE l
          FROM @v_lapsed AS l
         WHERE EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS h WITH (READUNCOMMITTED)
                        WHERE h.lock_token = l.lock_token AND h.status = N'Running'
                          AND NOT EXISTS (SELECT 1 FROM @v_run_locks AS k WHERE k.id = h.id));
        SET @v_runs = (SELECT r.id
                         FROM @v_lapsed AS l
                         JOIN mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK) ON r.lock_token = l.lock_token
                        WHERE r.status = N'Running'
                        ORDER BY r.id
                          FOR JSON PATH);
        IF @v_runs IS NOT NULL
        BEGIN
            EXEC @v_swept = mjsched.abandon_runs @p_run_ids = @v_runs, @p_now = @v_now, @p_reason = @v_reason;
        END;
        UPDATE j
           SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
        OUTPUT inserted.id INTO @v_freed_ids
          FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
          JOIN @v_lapsed AS l ON l.id = j.id;
        SET @v_freed = (SELECT COUNT(*) FROM @v_freed_ids);

        -- 2. Lapsed runs that hold no job lock: their jobs first.
        INSERT INTO @v_ids (id)
        SELECT j.id
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
         WHERE j.id IN (SELECT r.scheduled_job_id FROM mjsched.scheduled_job_run AS r
                         WHERE r.status = N'Running' AND r.lease_expires_at < @v_now);
        EXEC mjsched.test_pause @p_point = N'sweep_expired_leases:lapsed_runs_locked';
        -- (READPAST: a lapsed run another session holds is skipped; it holds no job lock, so
        -- nothing else changes for it, and a later sweep abandons it)
        SET @v_runs = (SELECT r.id
                         FROM @v_ids AS i
                         JOIN mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                           ON r.scheduled_job_id = i.id
                         JOIN mjsched.scheduled_job AS j ON j.id = r.scheduled_job_id
                        WHERE r.status = N'Running' AND r.lease_expires_at < @v_now
                          AND EXISTS (SELECT j.lock_token EXCEPT SELECT r.lock_token)
                        ORDER BY r.id
                          FOR JSON PATH);
        IF @v_runs IS NOT NULL
        BEGIN
            EXEC @v_more = mjsched.abandon_runs @p_run_ids = @v_runs, @p_now = @v_now, @p_reason = @v_reason;
            SET @v_swept = @v_swept + @v_more;
        END;

        -- 3. Ended jobs.
        EXEC @v_expired = mjsched.expire_ended_jobs @p_now = @v_now;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT @v_swept AS swept, @v_freed AS locks_freed, @v_expired AS expired_jobs;
END;
GO

