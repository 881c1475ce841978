-- mjsched run requests, version 8 (T-SQL twin of sql/postgres/008_run_requests.sql, issue 14
-- item 6): cancelling a run from any process.
--
-- cancel_run records an operator's request on the run row (cancel_requested_at,
-- cancel_requested_by: 001_schema.sql). A Queued run ends Cancelled at once, without
-- running. A Running run keeps running until the engine that holds it reads the request
-- through cancel_requests, which its lease keeper calls as often as it renews (and at least
-- every 5 s), so it learns of the request by its next lease renewal at the latest; it sets the run's
-- cancel_event and, after its grace period, ends it Cancelled (killing a process-isolated
-- run). The lock and lease procedures are unchanged: the engine ends the run through
-- complete_runs as for any other outcome, fenced by its token.
-- grants.sql gives cancel_requests to mjsched_engine and cancel_run (an operator's action,
-- like force_unlock_job) to mjsched_admin.
--
-- A procedure keeps the SET options it was created with, and scheduled_job_run has filtered
-- indexes, which fail every write made under QUOTED_IDENTIFIER OFF (error 1934): the first
-- batch sets them, as 001, 002 and 004 do, for this file applied by hand (sqlcmd).

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- (@p_requested_by is nvarchar(4000), not (255): a longer text is refused by name, never cut.)
-- cancel_run: outcome requested (a Running run: the request is recorded) | already_requested
-- (a Running run whose cancel was asked before: the first request is kept and answered) |
-- cancelled (a Queued run: ended Cancelled now, never run) | not_cancellable (any other
-- status: the run already ended; its status is answered) | not_found. The job row is locked
-- first (the lock order: docs/guide/protocol.md), so a claim of a Queued run and its cancel
-- never both win: the claim passes over the locked job (READPAST), or the cancel finds the
-- run Running.
-- Replay: @p_request_id (the caller's id of this request) is recorded on the run with the
-- request. A call that finds its own id there is a replay of a call whose reply was lost: it
-- answers what that call did (cancelled for a run that never started, requested otherwise),
-- whatever became of the run since, and changes nothing. Without an id (the previous
-- release's call) a replay answers as a new request would.
CREATE OR ALTER PROCEDURE mjsched.cancel_run
    @p_run_id uniqueidentifier,
    @p_requested_by nvarchar(4000),
    @p_now datetimeoffset = NULL,
    @p_request_id uniqueidentifier = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_job uniqueidentifier;
    DECLARE @v_locked uniqueidentifier;
    DECLARE @v_found bit = 0;
    DECLARE @v_status nvarchar(20);
    DECLARE @v_requested_at datetimeoffset;
    DECLARE @v_requested_by nvarchar(255);
    DECLARE @v_request_id uniqueidentifier;
    DECLARE @v_started_at datetimeoffset;
    DECLARE @v_outcome nvarchar(20) = N'not_found';
    DECLARE @v_message nvarchar(2048);
    BEGIN TRY
        IF @p_run_id IS NULL
        BEGIN
            THROW 50022, N'run_id must not be NULL', 1;
        END;
        SET @v_message = CONCAT(N'requested_by=', LEFT(@p_requested_by, 300),
                                N': must be a non-empty text of at most 255 characters');
        IF @p_requested_by IS NULL OR LEN(@p_requested_by) = 0 OR LEN(@p_requested_by) > 255
        BEGIN
            THROW 50022, @v_message, 1;
        END;
        SELECT @v_job = r.scheduled_job_id
          FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
         WHERE r.id = @p_run_id;
        IF @v_job IS NOT NULL
        BEGIN
            BEGIN TRANSACTION;
            SELECT @v_locked = j.id
              FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
             WHERE j.id = @v_job;
            EXEC mjsched.test_pause @p_point = N'cancel_run:job_locked';
            SELECT @v_found = 1, @v_status = r.status, @v_requested_at = r.cancel_requested_at,
                   @v_requested_by = r.cancel_requested_by, @v_request_id = r.cancel_request_id,
                   @v_started_at = r.started_at
              FROM mjsched.scheduled_job_run AS r WITH (UPDLOCK, ROWLOCK)
             WHERE r.id = @p_run_id;
            SET @v_outcome = CASE WHEN @v_found = 0 THEN N'not_found'
                                  -- a replay of this same request: what it did, from what it recorded
                                  WHEN @p_request_id IS NOT NULL AND @v_request_id = @p_request_id
                                       AND @v_status = N'Cancelled' AND @v_started_at IS NULL
                                      THEN N'replayed_cancelled'
                                  WHEN @p_request_id IS NOT NULL AND @v_request_id = @p_request_id
                                      THEN N'replayed_requested'
                                  WHEN @v_status = N'Queued' THEN N'cancelled'
                                  WHEN @v_status = N'Running' AND @v_requested_at IS NOT NULL
                                      THEN N'already_requested'
                                  WHEN @v_status = N'Running' THEN N'requested'
                                  ELSE N'not_cancellable' END;
            IF @v_outcome = N'cancelled'
            BEGIN
                SET @v_requested_at = @v_now;
                SET @v_requested_by = @p_requested_by;
                SET @v_status = N'Cancelled';
                UPDATE r
                   SET status = N'Cancelled', success = 0, completed_at = @v_now, duration_ms = 0,
                       cancel_requested_at = @v_now, cancel_requested_by = @p_requested_by,
                       cancel_request_id = @p_request_id,
                       error_message = CONCAT(N'Cancelled before it ran: requested by ', @p_requested_by, N' at ',
                                              CONVERT(nvarchar(19), SWITCHOFFSET(@v_now, 0), 126), N'Z')
                  FROM mjsched.scheduled_job_run AS r WITH (ROWLOCK)
                 WHERE r.id = @p_run_id;
                -- counted as every ended run is (run_count = its Completed, Failed, Timeout,
                -- Cancelled and Abandoned runs), as a failure; no duration, no last_run_at
                UPDATE j
                   SET run_count = j.run_count + 1, failure_count = j.failure_count + 1
                  FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
                 WHERE j.id = @v_job;
            END;
            IF @v_outcome = N'requested'
            BEGIN
                SET @v_requested_at = @v_now;
                SET @v_requested_by = @p_requested_by;
                UPDATE r
                   SET cancel_requested_at = @v_now, cancel_requested_by = @p_requested_by,
                       cancel_request_id = @p_request_id
                  FROM mjsched.scheduled_job_run AS r WITH (ROWLOCK)
                 WHERE r.id = @p_run_id;
            END;
            -- a replay changed nothing; it answers as the call it replays did
            IF @v_outcome = N'replayed_cancelled'
            BEGIN
                SET @v_outcome = N'cancelled';
            END;
            IF @v_outcome = N'replayed_requested'
            BEGIN
                SET @v_outcome = N'requested';
            END;
            COMMIT TRANSACTION;
        END;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT @v_outcome AS outcome, @v_status AS status, @v_requested_at AS cancel_requested_at,
           @v_requested_by AS cancel_requested_by;
END;
GO

-- cancel_requests: of the given lease tokens (a JSON array of UUID strings: an engine's
-- Running runs), the runs whose cancel was requested. Read only, through the runs' token
-- index; the engine's lease keeper calls it as often as it renews the same tokens, and at
-- least every 5 s.
CREATE OR ALTER PROCEDURE mjsched.cancel_requests
    @p_tokens nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    DECLARE @v_tokens TABLE (lock_token uniqueidentifier NOT NULL PRIMARY KEY);
    IF @p_tokens IS NOT NULL AND (ISJSON(@p_tokens) = 0 OR LEFT(LTRIM(@p_tokens), 1) <> N'[')
    BEGIN
        THROW 50022, N'tokens must be a JSON array of UUID strings', 1;
    END;
    IF EXISTS (SELECT 1 FROM OPENJSON(@p_tokens) AS e
                WHERE e.type <> 1 OR TRY_CONVERT(uniqueidentifier, e.value) IS NULL)
    BEGIN
        THROW 50022, N'tokens must be a JSON array of UUID strings', 1;
    END;
    INSERT INTO @v_tokens (lock_token)
    SELECT DISTINCT CONVERT(uniqueidentifier, e.value) FROM OPENJSON(@p_tokens) AS e;
    SELECT r.id AS run_id, r.lock_token, r.cancel_requested_at, r.cancel_requested_by
      FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
      JOIN @v_tokens AS t ON t.lock_token = r.lock_token
     WHERE r.status = N'Running' AND r.cancel_requested_at IS NOT NULL;
END;
GO
