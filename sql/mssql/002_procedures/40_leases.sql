-- 002_procedures, leases: the engine's liveness write and the renewal of every lease it holds.

-- note_engine_seen: the engine's liveness write (last_seen_at), made only when it can be made
-- now. The engine's own registry row is a row an outsider can hold (an operator's open
-- transaction, a HOLDLOCK report): a renewal or a claim that waited for it let the engine's
-- leases lapse while its runs still ran. So the row is passed over (READPAST) when someone
-- else holds it, and this beat's liveness write is skipped -- the next one tries again.
-- @p_min_age_seconds: skip it also when the row was written less than this long ago (the
-- claim writes at most once a second); NULL: write whatever the row holds (a renewal).
CREATE OR ALTER PROCEDURE mjsched.note_engine_seen
    @p_instance nvarchar(255),
    @p_now datetimeoffset,
    @p_min_age_seconds float
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    UPDATE e SET last_seen_at = @p_now
      FROM mjsched.engine_instance AS e WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
     WHERE e.instance = @p_instance
       AND (@p_min_age_seconds IS NULL
            OR e.last_seen_at < DATEADD(millisecond, -CAST(@p_min_age_seconds * 1000 AS int), @p_now));
END;
GO

-- renew_tokens: the renewal renew_leases and extend_job_leases share (its one definition).
-- A token is renewed only when its run is still Running AND, unless it is a Concurrent
-- tick run (which holds no job lock), its job is still locked by the same token; then the
-- run's lease and the job's lock move together to the greatest of their current lease and
-- @p_now + lease. Jobs first: their ids are found through the runs' filtered token index
-- (ix_scheduled_job_run_token: its filter, status = N'Running', is stated so the optimizer
-- may match it) and locked through the job's primary key, never by a scan that would take,
-- or wait for, an update lock on every job row; then the runs. With @p_skip_busy = 1 the
-- job rows are locked with READPAST (the first rows it locks: SKIP LOCKED) and a token
-- whose run is Running but whose job row another session holds is answered renewed = 0
-- (busy: neither renewed nor lost); otherwise they are locked in id order, waiting.
-- Tokens it does not answer are lost. @p_tokens: a JSON array of UUID strings
-- (PostgreSQL: uuid[]). Rows (lock_token, renewed) go to #mjsched_renewed when the caller
-- created it (renew_leases, extend_job_leases), else to the client; it runs inside the
-- caller's transaction, or in its own when called outside one.
CREATE OR ALTER PROCEDURE mjsched.renew_tokens
    @p_tokens nvarchar(max),
    @p_lease_seconds float,
    @p_instance nvarchar(255),
    @p_now datetimeoffset,
    @p_skip_busy bit
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_own_transaction bit = CASE WHEN @@TRANCOUNT = 0 THEN 1 ELSE 0 END;
    DECLARE @v_skip_busy bit = ISNULL(@p_skip_busy, 0);
    DECLARE @v_until datetimeoffset;
    DECLARE @v_tokens TABLE (lock_token uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_ids TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_jobs TABLE (id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NULL,
                           expected_completion_at datetimeoffset NULL, concurrency_mode nvarchar(20) NOT NULL);
    DECLARE @v_renewable TABLE (run_id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NOT NULL,
                                job_id uniqueidentifier NOT NULL, holds_lock bit NOT NULL,
                                lease_until datetimeoffset NOT NULL);
    DECLARE @v_touched TABLE (id uniqueidentifier NOT NULL);
    DECLARE @v_answer TABLE (lock_token uniqueidentifier NOT NULL, renewed bit NOT NULL);
    BEGIN TRY
        IF @p_tokens IS NOT NULL AND (ISJSON(@p_tokens) = 0 OR LEFT(LTRIM(@p_tokens), 1) <> N'[')
        BEGIN
            THROW 50022, N'tokens must be a JSON array of UUID strings', 1;
        END;
        IF EXISTS (SELECT 1 FROM OPENJSON(@p_tokens) AS e
                    WHERE e.type <> 1 OR TRY_CONVERT(uniqueidentifier, e.value) IS NULL)
        BEGIN
            THROW 50022, N'tokens must be a JSON array of UUID strings', 1;
        END;
        SET @v_until = DATEADD(millisecond, CAST((@p_lease_seconds - FLOOR(@p_lease_seconds)) * 1000 AS int),
                               DATEADD(second, CAST(FLOOR(@p_lease_seconds) AS int), @p_now));
        INSERT INTO @v_tokens (lock_token)
        SELECT DISTINCT CONVERT(uniqueidentifier, e.value) FROM OPENJSON(@p_tokens) AS e;

        IF @v_own_transaction = 1
        BEGIN
            BEGIN TRANSACTION;
        END;
        IF @p_instance IS NOT NULL
        BEGIN
            EXEC mjsched.note_engine_seen @p_instance = @p_instance, @p_now = @p_now, @p_min_age_seconds = NULL;
        END;
        -- 1. Jobs first: the held jobs, through the runs' token index, then their rows.
        INSERT INTO @v_ids (id)
        SELECT DISTINCT h.scheduled_job_id
          FROM @v_tokens AS t
          JOIN mjsched.scheduled_job_run AS h ON h.lock_token = t.lock_token
         WHERE h.status = N'Running';
        IF @v_skip_busy = 1
        BEGIN
            -- skipping, so in no particular order: a row another session holds is not waited for
            INSERT INTO @v_jobs (id, lock_token, expected_completion_at, concurrency_mode)
            SELECT j.id, j.lock_token, j.expected_completion_at, j.concurrency_mode
              FROM @v_ids AS i
              JOIN mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK) ON j.id = i.id
            OPTION (FORCE ORDER, LOOP JOIN);
        END;
        IF @v_skip_busy = 0
        BEGIN
            INSERT INTO @v_jobs (id, lock_token, expected_completion_at, concurrency_mode)
            SELECT j.id, j.lock_token, j.expected_completion_at, j.concurrency_mode
              FROM @v_ids AS i
              JOIN mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK) ON j.id = i.id
             ORDER BY i.id
            OPTION (FORCE ORDER, LOOP JOIN);
        END;
        -- one pause point per public procedure (the harness parks each)
        IF @v_skip_busy = 1
        BEGIN
            EXEC mjsched.test_pause @p_point = N'renew_leases:jobs_locked';
        END;
        IF @v_skip_busy = 0
        BEGIN
            EXEC mjsched.test_pause @p_point = N'extend_job_leases:jobs_locked';
        END;
        -- 2. What may be renewed, read under the jobs' row locks.
        INSERT INTO @v_renewable (run_id, lock_token, job_id, holds_lock, lease_until)
        SELECT r.id, r.lock_token, j.id,
               CASE WHEN j.lock_token = r.lock_token THEN 1 ELSE 0 END,
               (SELECT MAX(g.v)
                  FROM (VALUES (COALESCE(r.lease_expires_at, @v_until)),
                               (CASE WHEN j.lock_token = r.lock_token
                                     THEN COALESCE(j.expected_completion_at, @v_until) ELSE @v_until END),
                               (@v_until)) AS g (v))
          FROM @v_tokens AS t
          JOIN mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK) ON r.lock_token = t.lock_token
          JOIN @v_jobs AS j ON j.id = r.scheduled_job_id
         WHERE r.status = N'Running'
           AND (j.lock_token = r.lock_token
                OR (j.concurrency_mode = N'Concurrent' AND r.scheduled_for IS NOT NULL));
        -- 3. The run's lease and the job's lock, to the same instant.
        UPDATE r
           SET lease_expires_at = n.lease_until
          FROM mjsched.scheduled_job_run AS r WITH (ROWLOCK)
          JOIN @v_renewable AS n ON n.run_id = r.id;
        UPDATE j
           SET expected_completion_at = n.lease_until
        OUTPUT inserted.id INTO @v_touched
          FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
          JOIN @v_renewable AS n ON n.job_id = j.id AND n.lock_token = j.lock_token
         WHERE n.holds_lock = 1;
        INSERT INTO @v_answer (lock_token, renewed)
        SELECT DISTINCT n.lock_token, 1 FROM @v_renewable AS n;
        IF @v_skip_busy = 1
        BEGIN
            -- 4. Busy: still Running, but its job row was held by another session. Read as
            -- committed, not under a job lock (so no READCOMMITTEDLOCK, and no READPAST: a
            -- skipped run would read as lost); the next renewal decides renewed or lost.
            INSERT INTO @v_answer (lock_token, renewed)
            SELECT DISTINCT h.lock_token, 0
              FROM @v_tokens AS t
              JOIN mjsched.scheduled_job_run AS h ON h.lock_token = t.lock_token
             WHERE h.status = N'Running'
               AND NOT EXISTS (SELECT 1 FROM @v_jobs AS b WHERE b.id = h.scheduled_job_id);
        END;
        IF @v_own_transaction = 1
        BEGIN
            COMMIT TRANSACTION;
        END;
    END TRY
    BEGIN CATCH
        IF @v_own_transaction = 1 AND @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;

    IF OBJECT_ID(N'tempdb..#mjsched_renewed') IS NOT NULL
    BEGIN
        INSERT INTO #mjsched_renewed (lock_token, renewed)
        SELECT a.lock_token, a.renewed FROM @v_answer AS a;
        RETURN;
    END;
    SELECT a.lock_token, a.renewed FROM @v_answer AS a;
END;
GO

-- renew_leases: one call renews every lease an engine holds (renew_tokens with
-- @p_skip_busy = 1), without waiting on a job row another session holds (an operator's
-- open transaction): such a token comes back with renewed = 0 and is renewed by a later
-- call, so one locked row delays only its own job. Tokens not answered are lost (taken
-- over, swept, or finished). Also records that the engine is alive.
CREATE OR ALTER PROCEDURE mjsched.renew_leases
    @p_tokens nvarchar(max),
    @p_lease_seconds float,
    @p_instance nvarchar(255) = NULL,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    CREATE TABLE #mjsched_renewed (lock_token uniqueidentifier NOT NULL, renewed bit NOT NULL);
    BEGIN TRY
        EXEC mjsched.check_lease @p_lease_seconds = @p_lease_seconds;
        BEGIN TRANSACTION;
        EXEC mjsched.renew_tokens @p_tokens = @p_tokens, @p_lease_seconds = @p_lease_seconds,
             @p_instance = @p_instance, @p_now = @v_now, @p_skip_busy = 1;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT n.lock_token, n.renewed FROM #mjsched_renewed AS n;
END;
GO

-- extend_job_leases: renew_leases as release 2 calls it (renew_tokens with
-- @p_skip_busy = 0: it waits for a job row another session holds). Returns one row per
-- renewed token: the engine treats a token it sent and did not get back as lost. Kept
-- for engines of the previous release.
CREATE OR ALTER PROCEDURE mjsched.extend_job_leases
    @p_tokens nvarchar(max),
    @p_lease_seconds float,
    @p_instance nvarchar(255) = NULL,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    CREATE TABLE #mjsched_renewed (lock_token uniqueidentifier NOT NULL, renewed bit NOT NULL);
    BEGIN TRY
        EXEC mjsched.check_lease @p_lease_seconds = @p_lease_seconds;
        BEGIN TRANSACTION;
        EXEC mjsched.renew_tokens @p_tokens = @p_tokens, @p_lease_seconds = @p_lease_seconds,
             @p_instance = @p_instance, @p_now = @v_now, @p_skip_busy = 0;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT n.lock_token FROM #mjsched_renewed AS n WHERE n.renewed = 1;
END;
GO

