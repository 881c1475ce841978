-- 002_procedures, engines and operators: start-up hand-back, jobs unlock, initialize, unregister.

-- release_engine_locks: hand back everything an engine instance holds -- its job locks
-- and its Running runs (Abandoned with @p_reason, counted) -- fenced, so the holder's
-- late completion changes nothing. Called by an engine for itself at close/exit, and
-- at start-up for a previous engine of its host whose process is gone (or its own
-- instance name after a clean stop). The jobs are locked first, in id order. Idempotent.
CREATE OR ALTER PROCEDURE mjsched.release_engine_locks
    @p_instance nvarchar(255),
    @p_reason nvarchar(max),
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_reason nvarchar(max) = COALESCE(@p_reason, CONCAT(N'Abandoned: engine ', @p_instance, N' handed it back'));
    DECLARE @v_runs nvarchar(max);
    DECLARE @v_abandoned int = 0;
    DECLARE @v_freed int = 0;
    DECLARE @v_ids TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_locked TABLE (id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NULL,
                             locked_by_instance nvarchar(255) NULL);
    DECLARE @v_freed_ids TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        IF @p_instance IS NULL OR @p_instance = N''
        BEGIN
            THROW 50022, N'instance must not be empty', 1;
        END;
        BEGIN TRANSACTION;
        INSERT INTO @v_ids (id)
        SELECT j.id FROM mjsched.scheduled_job AS j
         WHERE j.lock_token IS NOT NULL AND j.locked_by_instance = @p_instance
        UNION
        SELECT r.scheduled_job_id FROM mjsched.scheduled_job_run AS r
         WHERE r.status = N'Running' AND r.executed_by_instance = @p_instance;
        INSERT INTO @v_locked (id, lock_token, locked_by_instance)
        SELECT j.id, j.lock_token, j.locked_by_instance
          FROM @v_ids AS i
          JOIN mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK) ON j.id = i.id
         ORDER BY i.id
        OPTION (FORCE ORDER, LOOP JOIN);
        EXEC mjsched.test_pause @p_point = N'release_engine_locks:jobs_locked';
        SET @v_runs = (SELECT r.id
                         FROM @v_locked AS l
                         JOIN mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK) ON r.scheduled_job_id = l.id
                        WHERE r.status = N'Running'
                          AND (r.executed_by_instance = @p_instance
                               OR r.lock_token IN (SELECT m.lock_token FROM @v_locked AS m
                                                    WHERE m.locked_by_instance = @p_instance))
                        ORDER BY r.id
                          FOR JSON PATH);
        IF @v_runs IS NOT NULL
        BEGIN
            EXEC @v_abandoned = mjsched.abandon_runs @p_run_ids = @v_runs, @p_now = @v_now, @p_reason = @v_reason;
        END;
        UPDATE j
           SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
        OUTPUT inserted.id INTO @v_freed_ids
          FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
          JOIN @v_locked AS l ON l.id = j.id
         WHERE j.locked_by_instance = @p_instance;
        SET @v_freed = (SELECT COUNT(*) FROM @v_freed_ids);
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT @v_abandoned AS runs_abandoned, @v_freed AS locks_freed;
END;
GO

-- force_unlock_job: the operator's override (`mjsched jobs unlock`): free the job's
-- lock whoever holds it, abandoning the Running run that held it (fenced: its late
-- completion is refused). Returns the old holder, or no row when the job was not locked.
CREATE OR ALTER PROCEDURE mjsched.force_unlock_job
    @p_job_id uniqueidentifier,
    @p_reason nvarchar(max),
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_token uniqueidentifier;
    DECLARE @v_holder nvarchar(255);
    DECLARE @v_runs nvarchar(max);
    DECLARE @v_reason nvarchar(max) = COALESCE(@p_reason, N'Abandoned: an operator unlocked the job');
    DECLARE @v_abandoned int = 0;
    DECLARE @v_freed TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        BEGIN TRANSACTION;
        SELECT @v_token = j.lock_token, @v_holder = j.locked_by_instance
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
         WHERE j.id = @p_job_id AND j.lock_token IS NOT NULL;
        IF @v_token IS NOT NULL
        BEGIN
            EXEC mjsched.test_pause @p_point = N'force_unlock_job:job_locked';
            SET @v_runs = (SELECT r.id
                             FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
                            WHERE r.lock_token = @v_token AND r.status = N'Running'
                            ORDER BY r.id
                              FOR JSON PATH);
            IF @v_runs IS NOT NULL
            BEGIN
                EXEC @v_abandoned = mjsched.abandon_runs @p_run_ids = @v_runs, @p_now = @v_now,
                     @p_reason = @v_reason;
            END;
            UPDATE j
               SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
            OUTPUT inserted.id INTO @v_freed
              FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
             WHERE j.id = @p_job_id;
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
    SELECT @v_holder AS locked_by_instance, @v_abandoned AS runs_abandoned
     WHERE @v_token IS NOT NULL;
END;
GO

-- initialize_next_run: set next_run_at of an Active job that has none (compare-and-set,
-- so several engines may race to schedule the same new job).
CREATE OR ALTER PROCEDURE mjsched.initialize_next_run
    @p_job_id uniqueidentifier,
    @p_next_run_at datetimeoffset
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_initialized TABLE (id uniqueidentifier NOT NULL);
    UPDATE j
       SET next_run_at = @p_next_run_at
    OUTPUT inserted.id INTO @v_initialized
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
     WHERE j.id = @p_job_id AND j.next_run_at IS NULL AND j.status = N'Active';
    SELECT COUNT(*) AS initialized FROM @v_initialized;
END;
GO

-- unregister_engine: the engine's row in the table of live engines behind `mjsched status` is
-- marked stopped. register_engine is in 011_engine_reports.sql (what an engine reports of itself).
CREATE OR ALTER PROCEDURE mjsched.unregister_engine
    @p_instance nvarchar(255)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_now datetimeoffset = SYSDATETIMEOFFSET();
    DECLARE @v_rows int;
    UPDATE e
       SET stopped_at = @v_now, last_seen_at = @v_now
      FROM mjsched.engine_instance AS e
     WHERE e.instance = @p_instance;
    SET @v_rows = @@ROWCOUNT;
    SELECT @v_rows AS unregistered;
END;
GO

