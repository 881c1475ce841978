-- 002_procedures, manual runs: execute_job's run under the job's lock, and the sql driver's fence.

-- start_manual_run: take the job's lock and start a manual run in one replay-safe call.
-- The lock token derives from (@p_request_id, job id) as a named claim's does
-- (claim_token): a retry with @p_replay = 1 after a lost reply answers the run the lost
-- call started (while it is still Running under that lock) instead of being refused by
-- its own lock. Outcomes: started | locked (a live lease holds the job) | not_active
-- (status is not Active and @p_force is 0) | not_found.
-- @p_parameters (a JSON object, or NULL) is stored on the run: what the caller merged over
-- the job's configuration for this run only (execute_job(parameters=...)).
CREATE OR ALTER PROCEDURE mjsched.start_manual_run
    @p_job_id uniqueidentifier,
    @p_request_id uniqueidentifier,
    @p_instance nvarchar(255),
    @p_lease_seconds float,
    @p_force bit = 0,
    @p_replay bit = 0,
    @p_now datetimeoffset = NULL,
    @p_parameters nvarchar(max) = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_outcome nvarchar(20) = N'not_found';
    DECLARE @v_token uniqueidentifier;
    DECLARE @v_found bit = 0;
    DECLARE @v_busy bit = 0;
    DECLARE @v_status nvarchar(20);
    DECLARE @v_old uniqueidentifier;
    DECLARE @v_old_until datetimeoffset;
    DECLARE @v_old_json nvarchar(max);
    DECLARE @v_run uniqueidentifier;
    DECLARE @v_taken TABLE (lease_until datetimeoffset NOT NULL, last_run_at datetimeoffset NULL,
                            fence_seq bigint NOT NULL, version int NOT NULL);
    DECLARE @v_begun TABLE (run_id uniqueidentifier NOT NULL);
    DECLARE @v_run_locks TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_bad nvarchar(2048);
    BEGIN TRY
        EXEC mjsched.check_lease @p_lease_seconds = @p_lease_seconds;
        IF @p_request_id IS NULL
        BEGIN
            THROW 50022, N'request_id must not be NULL', 1;
        END;
        SET @v_bad = CONCAT(N'parameters=', LEFT(@p_parameters, 200), N': must be a JSON object');
        IF @p_parameters IS NOT NULL AND (ISJSON(@p_parameters) = 0 OR LEFT(LTRIM(@p_parameters), 1) <> N'{')
        BEGIN
            THROW 50022, @v_bad, 1;
        END;
        SET @v_bad = CONCAT(N'parameters=<', LEN(@p_parameters), N' characters of JSON>: must nest at most 64 ',
                            N'levels of objects and arrays and be at most 1000000 characters');
        IF mjsched.json_nesting_exceeds(@p_parameters, 64) = 1 OR LEN(@p_parameters) > 1000000
        BEGIN
            THROW 50022, @v_bad, 1;
        END;
        SELECT @v_token = t.claim_token FROM mjsched.claim_token(@p_request_id, @p_job_id) AS t;
        BEGIN TRANSACTION;
        -- READPAST: a job row another session holds (an operator's open transaction, a claim
        -- under way) answers 'locked' at once instead of making the caller wait. Whether the
        -- row exists is then read without taking or honouring locks (a held row would block a
        -- plain read without READ_COMMITTED_SNAPSHOT); it only chooses locked over not_found.
        SELECT @v_found = 1, @v_status = j.status, @v_old = j.lock_token, @v_old_until = j.expected_completion_at
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
         WHERE j.id = @p_job_id;
        IF @v_found = 0 AND EXISTS (SELECT 1 FROM mjsched.scheduled_job AS h WITH (READUNCOMMITTED)
                                     WHERE h.id = @p_job_id)
        BEGIN
            SET @v_busy = 1;
        END;
        IF @v_found = 1 AND @p_replay = 1 AND @v_old = @v_token
        BEGIN
            SELECT TOP (1) @v_run = r.id
              FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
             WHERE r.lock_token = @v_token AND r.scheduled_job_id = @p_job_id AND r.status = N'Running'
             ORDER BY r.started_at DESC;
        END;
        SET @v_outcome = CASE WHEN @v_busy = 1 THEN N'locked'
                              WHEN @v_found = 0 THEN N'not_found'
                              WHEN @v_run IS NOT NULL THEN N'started'
                              WHEN @v_status <> N'Active' AND ISNULL(@p_force, 0) = 0 THEN N'not_active'
                              WHEN @v_old IS NOT NULL AND @v_old_until >= @v_now THEN N'locked'
                              ELSE N'start' END;
        IF @v_outcome = N'start'
        BEGIN
            EXEC mjsched.test_pause @p_point = N'start_manual_run:job_locked';
            IF @v_old IS NOT NULL
            BEGIN
                -- the lapsed holder's runs, READPAST: one another session holds (an operator's
                -- open transaction) answers 'locked' at once; nothing is changed. Which runs
                -- exist is read without honouring locks (a held run would block a plain read).
                INSERT INTO @v_run_locks (id)
                SELECT r.id
                  FROM mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                 WHERE r.lock_token = @v_old AND r.status = N'Running';
                IF EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS h WITH (READUNCOMMITTED)
                            WHERE h.lock_token = @v_old AND h.status = N'Running'
                              AND NOT EXISTS (SELECT 1 FROM @v_run_locks AS k WHERE k.id = h.id))
                BEGIN
                    SET @v_outcome = N'locked';
                END;
            END;
        END;
        IF @v_outcome = N'start'
        BEGIN
            IF @v_old IS NOT NULL
            BEGIN
                SET @v_old_json = (SELECT @v_old AS id FOR JSON PATH);
                EXEC mjsched.take_over @p_old_tokens = @v_old_json, @p_now = @v_now;
            END;
            UPDATE j
               SET lock_token = @v_token,
                   locked_at = @v_now,
                   locked_by_instance = @p_instance,
                   expected_completion_at = mjsched.lease_until(@v_now, @p_lease_seconds, j.max_runtime_seconds),
                   fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                                    ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
            OUTPUT inserted.expected_completion_at, inserted.last_run_at, inserted.fence_seq, inserted.version
              INTO @v_taken
              FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
             WHERE j.id = @p_job_id;
            INSERT INTO mjsched.scheduled_job_run
                   (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
                    lock_token, lease_expires_at, parameters, fencing_token, job_version)
            OUTPUT inserted.id INTO @v_begun
            SELECT @p_job_id, NULL, N'Running',
                   CASE WHEN t.last_run_at > @v_now THEN t.last_run_at ELSE @v_now END,   -- "Recorded spans"
                   @p_instance, @v_token, t.lease_until, @p_parameters, t.fence_seq, t.version
              FROM @v_taken AS t;
            SELECT @v_run = b.run_id FROM @v_begun AS b;
            SET @v_outcome = N'started';
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
    SELECT @v_outcome AS outcome, @v_run AS run_id,
           CASE WHEN @v_outcome = N'started' THEN @v_token END AS lock_token;
END;
GO

-- check_fence: called by a job inside its own transaction on the scheduler's database, last
-- before its COMMIT (the sql driver's fence, docs/guide/reliability.md "Fencing tokens"):
-- throws unless the run is still Running under @p_token with its lease unexpired, and holds
-- a shared lock on the run's row until that transaction ends (HOLDLOCK), so a take-over
-- (which must update the run row) waits for the job's commit, or skips the job until then
-- (READPAST). Answers the run's fencing token. Joins the caller's transaction, and changes
-- nothing: a lost reply leaves the job's transaction to roll back.
CREATE OR ALTER PROCEDURE mjsched.check_fence
    @p_run_id uniqueidentifier,
    @p_token uniqueidentifier,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_status nvarchar(20);
    DECLARE @v_token uniqueidentifier;
    DECLARE @v_lease datetimeoffset;
    DECLARE @v_fence bigint;
    DECLARE @v_message nvarchar(2048);
    SELECT @v_status = r.status, @v_token = r.lock_token, @v_lease = r.lease_expires_at,
           @v_fence = r.fencing_token
      FROM mjsched.scheduled_job_run AS r WITH (HOLDLOCK, ROWLOCK)
     WHERE r.id = @p_run_id;
    DECLARE @v_held bit = CASE WHEN @v_status = N'Running' AND @v_token = @p_token AND @v_lease > @v_now
                               THEN 1 ELSE 0 END;
    DECLARE @v_lock nvarchar(20) = CASE WHEN @v_token = @p_token THEN N'still its own' ELSE N'taken over' END;
    SET @v_message = CONCAT(N'mjsched fence: run ', CONVERT(nvarchar(36), @p_run_id),
                            N' no longer holds its lease (status ', COALESCE(@v_status, N'gone'),
                            N', lease until ', COALESCE(CONVERT(nvarchar(40), @v_lease, 127), N'NULL'),
                            N', lock ', @v_lock, N'): its writes are not committed');
    IF @v_held = 0
    BEGIN
        THROW 50090, @v_message, 1;
    END;
    SELECT @v_fence AS fencing_token;
END;
GO

