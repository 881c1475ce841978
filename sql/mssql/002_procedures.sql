-- mjsched lock and lease procedures, version 2 (T-SQL).
-- The same routines, parameter names (p_x -> @p_x, same order) and result columns as
-- sql/postgres/002_procedures.sql; tests/unit/test_sql_parity.py holds the two to it.
-- Every lock decision is made here, on the database clock (SYSDATETIMEOFFSET()).
-- @p_now exists only so tests can move time on a real server; production passes NULL.
-- Errors raised on purpose use error number 50022 (PostgreSQL's SQLSTATE 22023,
-- invalid_parameter_value) and name the parameter.
--
-- House rules for this file:
-- * every procedure: SET NOCOUNT ON, SET XACT_ABORT ON, at most ONE result set, and it
--   is the procedure's last statement;
-- * several statements that must hold together run in one explicit transaction inside
--   TRY/CATCH (rollback, then THROW the original error);
-- * scheduled_job has an AFTER UPDATE trigger, so every UPDATE of it uses
--   OUTPUT ... INTO a table variable (OUTPUT straight to the client is not allowed on a
--   table with triggers, and @@ROWCOUNT after a trigger is not to be trusted);
-- * claims skip rows other engines hold (UPDLOCK, READPAST, ROWLOCK), like
--   FOR UPDATE SKIP LOCKED. Every READPAST comes with READCOMMITTEDLOCK: SQL Server
--   refuses READPAST under READ_COMMITTED_SNAPSHOT (Azure SQL's default) without it,
--   and a claim must read the latest committed row, not a version;
-- * the lock holder of a job is the only writer of its runs, so "insert unless the tick
--   has a run" is NOT EXISTS under the job's row lock, with the filtered UNIQUE index
--   uq_scheduled_job_run_tick as the last line of defence. That NOT EXISTS reads with
--   READCOMMITTEDLOCK: under READ_COMMITTED_SNAPSHOT a statement reads the versions of
--   its start, which may predate its wait for the job's row lock, so a run committed
--   meanwhile for the same tick would be invisible and the INSERT would fail with 2601
--   where PostgreSQL's ON CONFLICT DO NOTHING returns no row.
-- Requires SQL Server 2016 SP1 or later (CREATE OR ALTER, OPENJSON, DATEDIFF_BIG),
-- database compatibility level 130 or higher.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- Lease length for a job, in seconds: the engine's lease, lengthened by the job's
-- max_runtime. (PostgreSQL returns an interval; T-SQL has none, so seconds, capped at
-- 2e9 s, about 63 years, so that DATEADD(second, ...) stays within int.)
CREATE OR ALTER FUNCTION mjsched.lease_interval(@p_lease_seconds float, @p_max_runtime_seconds float)
RETURNS float
WITH SCHEMABINDING
AS
BEGIN
    DECLARE @v_seconds float = CASE WHEN @p_max_runtime_seconds > @p_lease_seconds
                                    THEN @p_max_runtime_seconds ELSE @p_lease_seconds END;
    IF @v_seconds > 2000000000
    BEGIN
        SET @v_seconds = 2000000000;
    END;
    RETURN @v_seconds;
END;
GO

CREATE OR ALTER PROCEDURE mjsched.check_lease
    @p_lease_seconds float
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_message nvarchar(200) = CONCAT(N'lease_seconds=',
        COALESCE(CONVERT(nvarchar(40), @p_lease_seconds), N'NULL'), N' must be > 0 and at most one year');
    IF @p_lease_seconds IS NULL OR @p_lease_seconds <= 0 OR @p_lease_seconds > 31536000
    BEGIN
        THROW 50022, @v_message, 1;
    END;
END;
GO

-- check_test_clock: @p_now moves the database clock for tests on a real server. Only the
-- schema owner (db_owner or sysadmin) may pass one: for an engine role a future @p_now
-- would take over live leases. IS_MEMBER and IS_SRVROLEMEMBER return NULL when they
-- cannot tell (e.g. a Windows group membership the server cannot resolve), so NULL
-- counts as "not a member": the check fails closed.
CREATE OR ALTER PROCEDURE mjsched.check_test_clock
    @p_now datetimeoffset
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    IF @p_now IS NOT NULL AND ISNULL(IS_MEMBER(N'db_owner'), 0) = 0
       AND ISNULL(IS_SRVROLEMEMBER(N'sysadmin'), 0) = 0
    BEGIN
        THROW 50042, N'now may only be passed by the schema owner (it is for tests)', 1;
    END;
END;
GO

-- acquire_job_lock: take the job's lock iff it is free or its lease expired (and,
-- with @p_require_due, only while the job is Active and due). Taking over an expired
-- lease abandons the old holder's Running runs, so its late completion changes nothing.
-- No READPAST here: racing acquirers wait for each other and re-read the row, so
-- exactly one wins.
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
    DECLARE @v_old uniqueidentifier;
    DECLARE @v_rows int = 0;
    DECLARE @v_taken TABLE (old_token uniqueidentifier NULL);
    BEGIN TRY
        EXEC mjsched.check_lease @p_lease_seconds = @p_lease_seconds;
        IF @p_token IS NULL
        BEGIN
            THROW 50022, N'token must not be NULL', 1;
        END;
        BEGIN TRANSACTION;
        UPDATE j
           SET lock_token = @p_token,
               locked_at = @v_now,
               locked_by_instance = @p_instance,
               expected_completion_at = DATEADD(millisecond, CAST((x.lease_s - FLOOR(x.lease_s)) * 1000 AS int),
                                                DATEADD(second, CAST(FLOOR(x.lease_s) AS int), @v_now))
        OUTPUT deleted.lock_token INTO @v_taken
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
         CROSS APPLY (SELECT mjsched.lease_interval(@p_lease_seconds, j.max_runtime_seconds) AS lease_s) AS x
         WHERE j.id = @p_job_id
           AND (j.lock_token IS NULL OR j.expected_completion_at < @v_now)
           AND (@p_require_due = 0 OR (j.status = N'Active' AND j.next_run_at <= @v_now));
        SET @v_rows = (SELECT COUNT(*) FROM @v_taken);
        SELECT TOP (1) @v_old = t.old_token FROM @v_taken AS t;
        IF @v_old IS NOT NULL
        BEGIN
            UPDATE r
               SET status = N'Abandoned',
                   success = 0,
                   completed_at = @v_now,
                   duration_ms = CASE WHEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) > 0
                                      THEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) ELSE 0 END,
                   error_message = N'Abandoned: the lease expired and another holder took the lock over'
              FROM mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
             WHERE r.lock_token = @v_old AND r.status = N'Running';
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

-- release_job_lock: clear the lock only when the caller still holds it.
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
     WHERE j.id = @p_job_id AND j.lock_token = @p_token;
    SELECT COUNT(*) AS released FROM @v_released;
END;
GO

-- extend_job_leases: one call renews every lease an engine holds. A lease is renewed
-- only while its token still matches (a run still Running, a job lock still ours).
-- @p_tokens: a JSON array of UUID strings (PostgreSQL: uuid[]).
-- Returns one row per renewed token; the engine compares with what it sent.
-- Also records that the engine is alive.
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
    DECLARE @v_until datetimeoffset;
    DECLARE @v_tokens TABLE (lock_token uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_renewed TABLE (lock_token uniqueidentifier NOT NULL);
    BEGIN TRY
        EXEC mjsched.check_lease @p_lease_seconds = @p_lease_seconds;
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
                               DATEADD(second, CAST(FLOOR(@p_lease_seconds) AS int), @v_now));
        INSERT INTO @v_tokens (lock_token)
        SELECT DISTINCT CONVERT(uniqueidentifier, e.value) FROM OPENJSON(@p_tokens) AS e;

        BEGIN TRANSACTION;
        IF @p_instance IS NOT NULL
        BEGIN
            UPDATE mjsched.engine_instance SET last_seen_at = @v_now WHERE instance = @p_instance;
        END;
        UPDATE r
           SET lease_expires_at = @v_until
        OUTPUT inserted.lock_token INTO @v_renewed
          FROM mjsched.scheduled_job_run AS r WITH (UPDLOCK, ROWLOCK)
          JOIN @v_tokens AS t ON t.lock_token = r.lock_token
         WHERE r.status = N'Running';
        -- Through the runs' filtered token index (ix_scheduled_job_run_token: its filter,
        -- status = N'Running', is stated so the optimizer may match it) and the job's
        -- primary key: only the held jobs' rows are locked, never a scan that would take,
        -- or wait for, an update lock on every job row. A job's lock is renewed while its
        -- token's run is Running, which is every lock an engine renews.
        UPDATE j
           SET expected_completion_at = @v_until
        OUTPUT inserted.lock_token INTO @v_renewed
          FROM @v_tokens AS t
          JOIN mjsched.scheduled_job_run AS h ON h.lock_token = t.lock_token
          JOIN mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
            ON j.id = h.scheduled_job_id AND j.lock_token = h.lock_token
         WHERE h.status = N'Running';
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;
    SELECT DISTINCT n.lock_token FROM @v_renewed AS n;
END;
GO

-- claim_due_jobs: in one transaction, lock up to @p_max_jobs claimable jobs (jobs
-- with a Queued run first, then due ticks oldest first), skipping rows other engines
-- are claiming, and start their runs. A tick that already has a run (a zombie's,
-- say) comes back with run_id NULL: the caller only advances the schedule past it.
-- Taking over an expired lease abandons the old holder's Running runs.
-- The last row always has job_id NULL and carries db_now and next_due_at (the
-- earliest instant something may become claimable; NULL when nothing is scheduled).
-- The reads that choose what to claim skip rows other engines are writing at that
-- instant (READPAST), so choosing never waits on, or deadlocks with, another claim:
-- the jobs themselves; the checks for Queued runs (safe to skip: every writer of a
-- job's Queued runs holds that job's row lock, and a job whose row is locked is
-- skipped anyway); and the reads behind next_due_at and the two counters, which are
-- advisory. The tick check before a run is inserted does not skip: it must see every
-- run of the tick (READCOMMITTEDLOCK, see the house rules), and it reads only runs of
-- jobs whose row lock this claim already holds, a lock every writer of them takes first.
--
-- Idempotent when the caller names the claim (@p_claim_id, a fresh GUID per claim):
-- each lock token is then derived from (@p_claim_id, job id), so a retry with the same
-- @p_claim_id and @p_replay = 1 -- the reply to the first call was lost, and it may or
-- may not have committed -- finds the claims that call made and answers them again,
-- claiming nothing new; when it finds none, the first call did not commit and this one
-- claims as usual. Without @p_claim_id tokens are random and a lost reply costs those
-- jobs one lease. (The PostgreSQL twin derives tokens with md5, this one with SHA2_256:
-- a token only has to be unique per job and reproducible from the claim id.)
CREATE OR ALTER PROCEDURE mjsched.claim_due_jobs
    @p_instance nvarchar(255),
    @p_max_jobs int,
    @p_lease_seconds float,
    @p_now datetimeoffset = NULL,
    @p_claim_id uniqueidentifier = NULL,
    @p_replay bit = 0
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_left int = @p_max_jobs;
    DECLARE @v_next datetimeoffset;
    DECLARE @v_due_left int = 0;
    DECLARE @v_locked_out int = 0;
    DECLARE @v_message nvarchar(200);
    DECLARE @v_taken TABLE (job_id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NOT NULL,
                            old_token uniqueidentifier NULL, next_run_at datetimeoffset NULL,
                            lease_until datetimeoffset NOT NULL);
    DECLARE @v_started TABLE (job_id uniqueidentifier NOT NULL, run_id uniqueidentifier NOT NULL,
                              lock_token uniqueidentifier NULL, scheduled_for datetimeoffset NULL);
    DECLARE @v_inserted TABLE (run_id uniqueidentifier NOT NULL, job_id uniqueidentifier NOT NULL);
    DECLARE @v_out TABLE (seq int IDENTITY(1, 1) NOT NULL PRIMARY KEY, job_id uniqueidentifier NULL,
                          run_id uniqueidentifier NULL, lock_token uniqueidentifier NULL,
                          scheduled_for datetimeoffset NULL, from_queue bit NOT NULL,
                          db_now datetimeoffset NOT NULL, next_due_at datetimeoffset NULL,
                          due_left int NULL, locked_out int NULL);
    BEGIN TRY
        EXEC mjsched.check_lease @p_lease_seconds = @p_lease_seconds;
        SET @v_message = CONCAT(N'max_jobs=', COALESCE(CONVERT(nvarchar(20), @p_max_jobs), N'NULL'),
                                N' must be between 0 and 10000');
        IF @p_max_jobs IS NULL OR @p_max_jobs < 0 OR @p_max_jobs > 10000
        BEGIN
            THROW 50022, @v_message, 1;
        END;

        BEGIN TRANSACTION;
        IF @p_replay = 1 AND @p_claim_id IS NOT NULL
        BEGIN
            -- 0. A replay: answer again what the first call with this claim id took.
            INSERT INTO @v_out (job_id, run_id, lock_token, scheduled_for, from_queue, db_now)
            SELECT j.id, r.id, j.lock_token, COALESCE(r.scheduled_for, j.next_run_at),
                   CASE WHEN r.queued_at IS NOT NULL THEN 1 ELSE 0 END, @v_now
              FROM mjsched.scheduled_job AS j
              LEFT JOIN mjsched.scheduled_job_run AS r ON r.lock_token = j.lock_token AND r.status = N'Running'
             WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > @v_now
               AND j.locked_by_instance = @p_instance
               AND j.lock_token = CONVERT(uniqueidentifier, CONVERT(binary(16), HASHBYTES('SHA2_256',
                       CONCAT(CONVERT(nchar(36), @p_claim_id), CONVERT(nchar(36), j.id)))));
            IF @@ROWCOUNT > 0
            BEGIN
                SET @v_left = 0;
            END;
        END;

        IF @v_left > 0
        BEGIN
            -- 1. Jobs holding a Queued run, lock free: start their oldest queued run.
            UPDATE TOP (@v_left) j
               SET lock_token = CASE WHEN @p_claim_id IS NULL THEN NEWID() ELSE CONVERT(uniqueidentifier,
                       CONVERT(binary(16), HASHBYTES('SHA2_256',
                           CONCAT(CONVERT(nchar(36), @p_claim_id), CONVERT(nchar(36), j.id))))) END,
                   locked_at = @v_now,
                   locked_by_instance = @p_instance,
                   expected_completion_at = DATEADD(millisecond, CAST((x.lease_s - FLOOR(x.lease_s)) * 1000 AS int),
                                                    DATEADD(second, CAST(FLOOR(x.lease_s) AS int), @v_now))
            OUTPUT inserted.id, inserted.lock_token, deleted.lock_token, inserted.next_run_at,
                   inserted.expected_completion_at
              INTO @v_taken
              FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
             CROSS APPLY (SELECT mjsched.lease_interval(@p_lease_seconds, j.max_runtime_seconds) AS lease_s) AS x
             WHERE j.status = N'Active'
               AND (j.start_at IS NULL OR j.start_at <= @v_now)
               AND (j.end_at IS NULL OR j.end_at > @v_now)
               AND (j.lock_token IS NULL OR j.expected_completion_at < @v_now)
               AND EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK, READPAST)
                            WHERE q.scheduled_job_id = j.id AND q.status = N'Queued');

            UPDATE r
               SET status = N'Running',
                   started_at = @v_now,
                   executed_by_instance = @p_instance,
                   lock_token = t.lock_token,
                   lease_expires_at = t.lease_until
            OUTPUT inserted.scheduled_job_id, inserted.id, inserted.lock_token, inserted.scheduled_for
              INTO @v_started
              FROM mjsched.scheduled_job_run AS r
              JOIN @v_taken AS t ON t.job_id = r.scheduled_job_id
             WHERE r.id = (SELECT TOP (1) q.id FROM mjsched.scheduled_job_run AS q
                            WHERE q.scheduled_job_id = t.job_id AND q.status = N'Queued'
                            ORDER BY q.queued_at, q.scheduled_for);

            UPDATE r
               SET status = N'Abandoned',
                   success = 0,
                   completed_at = @v_now,
                   duration_ms = CASE WHEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) > 0
                                      THEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) ELSE 0 END,
                   error_message = N'Abandoned: the lease expired and another engine took the lock over'
              FROM mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
              JOIN @v_taken AS t ON t.old_token = r.lock_token
             WHERE r.status = N'Running'
               -- not the run just started: a fresh claim under a replayed claim id derives the
               -- same token as the lapsed one it takes over (PostgreSQL's CTEs read the snapshot
               -- from before the start, so there the exclusion is implicit)
               AND r.id NOT IN (SELECT s.run_id FROM @v_started AS s);

            INSERT INTO @v_out (job_id, run_id, lock_token, scheduled_for, from_queue, db_now)
            SELECT s.job_id, s.run_id, s.lock_token, s.scheduled_for, 1, @v_now FROM @v_started AS s;
            SET @v_left = @v_left - (SELECT COUNT(*) FROM @v_started);
        END;

        IF @v_left > 0
        BEGIN
            -- 2. Due ticks, oldest first: an index range scan on (status, next_run_at).
            DELETE FROM @v_taken;
            WITH candidates AS (
                SELECT TOP (@v_left) j.id, j.lock_token, j.locked_at, j.locked_by_instance,
                       j.expected_completion_at, j.next_run_at,
                       mjsched.lease_interval(@p_lease_seconds, j.max_runtime_seconds) AS lease_s
                  FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                 WHERE j.status = N'Active'
                   AND j.next_run_at <= @v_now
                   AND (j.start_at IS NULL OR j.start_at <= @v_now)
                   AND (j.end_at IS NULL OR j.end_at > @v_now)
                   AND (j.lock_token IS NULL OR j.expected_completion_at < @v_now)
                   AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK, READPAST)
                                    WHERE q.scheduled_job_id = j.id AND q.status = N'Queued')
                 ORDER BY j.next_run_at
            )
            UPDATE candidates
               SET lock_token = CASE WHEN @p_claim_id IS NULL THEN NEWID() ELSE CONVERT(uniqueidentifier,
                       CONVERT(binary(16), HASHBYTES('SHA2_256',
                           CONCAT(CONVERT(nchar(36), @p_claim_id), CONVERT(nchar(36), id))))) END,
                   locked_at = @v_now,
                   locked_by_instance = @p_instance,
                   expected_completion_at = DATEADD(millisecond, CAST((lease_s - FLOOR(lease_s)) * 1000 AS int),
                                                    DATEADD(second, CAST(FLOOR(lease_s) AS int), @v_now))
            OUTPUT inserted.id, inserted.lock_token, deleted.lock_token, inserted.next_run_at,
                   inserted.expected_completion_at
              INTO @v_taken;

            -- ON CONFLICT DO NOTHING: we hold these jobs' row locks, and every writer of
            -- a tick's run takes the job's row lock first. READCOMMITTEDLOCK: the latest
            -- committed runs, not a snapshot's (see the house rules above).
            INSERT INTO mjsched.scheduled_job_run
                   (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
                    lock_token, lease_expires_at)
            OUTPUT inserted.id, inserted.scheduled_job_id INTO @v_inserted
            SELECT t.job_id, t.next_run_at, N'Running', @v_now, @p_instance, t.lock_token, t.lease_until
              FROM @v_taken AS t
             WHERE NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS o WITH (READCOMMITTEDLOCK)
                                WHERE o.scheduled_job_id = t.job_id AND o.scheduled_for = t.next_run_at);

            UPDATE r
               SET status = N'Abandoned',
                   success = 0,
                   completed_at = @v_now,
                   duration_ms = CASE WHEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) > 0
                                      THEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) ELSE 0 END,
                   error_message = N'Abandoned: the lease expired and another engine took the lock over'
              FROM mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
              JOIN @v_taken AS t ON t.old_token = r.lock_token
             WHERE r.status = N'Running'
               AND r.id NOT IN (SELECT i.run_id FROM @v_inserted AS i);   -- not the run just inserted

            INSERT INTO @v_out (job_id, run_id, lock_token, scheduled_for, from_queue, db_now)
            SELECT t.job_id, i.run_id, t.lock_token, t.next_run_at, 0, @v_now
              FROM @v_taken AS t
              LEFT JOIN @v_inserted AS i ON i.job_id = t.job_id;
            SET @v_left = @v_left - (SELECT COUNT(*) FROM @v_taken);
        END;

        SELECT @v_next = MIN(s.t) FROM (
            SELECT MIN(j.next_run_at) AS t FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK, READPAST)
             WHERE j.status = N'Active' AND j.next_run_at > @v_now
            UNION ALL
            SELECT MIN(j.expected_completion_at) FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK, READPAST)
             WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > @v_now
            UNION ALL
            SELECT MIN(r.lease_expires_at) FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK, READPAST)
             WHERE r.status = N'Running' AND r.lease_expires_at > @v_now
        ) AS s
         WHERE s.t IS NOT NULL;

        -- Counters for DispatchResult: due jobs left unclaimed for want of slots (counted
        -- only when the batch was full), and due jobs held by other engines' live leases.
        IF @v_left <= 0
        BEGIN
            -- capped at 1000: the count is for a log line and must not cost O(backlog)
            SELECT @v_due_left = COUNT(*) FROM (
                SELECT TOP (1000) j.id FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK, READPAST)
                 WHERE j.status = N'Active' AND j.next_run_at <= @v_now
                   AND (j.start_at IS NULL OR j.start_at <= @v_now) AND (j.end_at IS NULL OR j.end_at > @v_now)
                   AND (j.lock_token IS NULL OR j.expected_completion_at < @v_now)) AS d;
        END;
        SELECT @v_locked_out = COUNT(*) FROM (
            SELECT TOP (1000) j.id FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK, READPAST)
             WHERE j.status = N'Active' AND j.next_run_at <= @v_now
               AND j.lock_token IS NOT NULL AND j.expected_completion_at >= @v_now
               AND EXISTS (SELECT j.locked_by_instance EXCEPT SELECT @p_instance)) AS d;
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;

    INSERT INTO @v_out (job_id, run_id, lock_token, scheduled_for, from_queue, db_now, next_due_at,
                        due_left, locked_out)
    VALUES (NULL, NULL, NULL, NULL, 0, @v_now, @v_next, @v_due_left, @v_locked_out);
    SELECT o.job_id, o.run_id, o.lock_token, o.scheduled_for, o.from_queue, o.db_now, o.next_due_at,
           o.due_left, o.locked_out
      FROM @v_out AS o
     ORDER BY o.seq;
END;
GO

-- complete_job_runs: finish many runs in one transaction (batched completion).
-- @p_items: JSON array of {run_id, token, status, error_message, details, next_run_at,
-- guard, expected_next_run_at}. Each run is fenced by its token and must still be
-- Running; the job's statistics follow, and the job lock is released (and next_run_at
-- set) only where the same token still holds it. With guard true, next_run_at is set
-- only while the job's next_run_at is still expected_next_run_at (what the engine saw
-- when it claimed the run): a schedule edited during the run keeps the edit's next run.
-- The comparison is to the microsecond (the engine's clock resolution; the column
-- holds 100 ns). Returns one row per item: completed 0/1.
-- With a temporary table #mjsched_completed (run_id, completed) in scope, the rows go
-- there instead of to the client: that is how complete_job_run reuses this procedure.
CREATE OR ALTER PROCEDURE mjsched.complete_job_runs
    @p_items nvarchar(max),
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_items TABLE (run_id uniqueidentifier NULL, token uniqueidentifier NULL, status nvarchar(20) NULL,
                            error_message nvarchar(max) NULL, details nvarchar(max) NULL,
                            next_run_at datetimeoffset NULL, guard bit NOT NULL,
                            expected_next_run_at datetimeoffset NULL);
    DECLARE @v_finished TABLE (run_id uniqueidentifier NOT NULL PRIMARY KEY, scheduled_job_id uniqueidentifier NOT NULL,
                               lock_token uniqueidentifier NULL, status nvarchar(20) NOT NULL,
                               duration_ms bigint NULL, next_run_at datetimeoffset NULL, guard bit NOT NULL,
                               expected_next_run_at datetimeoffset NULL);
    DECLARE @v_jobs TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        IF @p_items IS NULL OR ISJSON(@p_items) = 0 OR LEFT(LTRIM(@p_items), 1) <> N'['
        BEGIN
            THROW 50022, N'items must be a JSON array', 1;
        END;
        INSERT INTO @v_items (run_id, token, status, error_message, details, next_run_at, guard,
                              expected_next_run_at)
        SELECT i.run_id, i.token, i.status, i.error_message, i.details, i.next_run_at, COALESCE(i.guard, 0),
               i.expected_next_run_at
          FROM OPENJSON(@p_items)
               WITH (run_id uniqueidentifier '$.run_id',
                     token uniqueidentifier '$.token',
                     status nvarchar(20) '$.status',
                     error_message nvarchar(max) '$.error_message',
                     details nvarchar(max) '$.details' AS JSON,
                     next_run_at datetimeoffset '$.next_run_at',
                     guard bit '$.guard',
                     expected_next_run_at datetimeoffset '$.expected_next_run_at') AS i;
        IF EXISTS (SELECT 1 FROM @v_items AS e
                    WHERE e.status IS NULL
                       OR e.status NOT IN (N'Completed', N'Failed', N'Timeout', N'Cancelled', N'Skipped'))
        BEGIN
            THROW 50022, N'status must be one of Completed, Failed, Timeout, Cancelled, Skipped', 1;
        END;

        BEGIN TRANSACTION;
        UPDATE r
           SET status = i.status,
               success = CASE WHEN i.status = N'Completed' THEN 1 ELSE 0 END,
               error_message = i.error_message,
               details = i.details,
               completed_at = @v_now,
               duration_ms = CASE WHEN i.status = N'Skipped' THEN 0
                                  WHEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) > 0
                                  THEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) ELSE 0 END,
               lease_expires_at = NULL
        OUTPUT inserted.id, inserted.scheduled_job_id, inserted.lock_token, inserted.status,
               inserted.duration_ms, i.next_run_at, i.guard, i.expected_next_run_at
          INTO @v_finished
          FROM mjsched.scheduled_job_run AS r WITH (UPDLOCK, ROWLOCK)
          JOIN @v_items AS i ON i.run_id = r.id
         WHERE r.lock_token = i.token AND r.status = N'Running';

        -- last_ms: duration_ms is never negative, so -1 stands for "no run" without a NULL
        -- in the aggregate (which would raise an ANSI warning).
        UPDATE j
           SET run_count = j.run_count + p.runs,
               success_count = j.success_count + p.ok,
               failure_count = j.failure_count + p.bad,
               total_duration_ms = j.total_duration_ms + p.total_ms,
               last_duration_ms = COALESCE(NULLIF(p.last_ms, -1), j.last_duration_ms),
               last_run_at = CASE WHEN p.runs > 0 THEN @v_now ELSE j.last_run_at END,
               next_run_at = CASE WHEN h.holds = 1 THEN COALESCE(h.next_run_at, j.next_run_at)
                                  ELSE j.next_run_at END,
               locked_at = CASE WHEN h.holds = 1 THEN NULL ELSE j.locked_at END,
               locked_by_instance = CASE WHEN h.holds = 1 THEN NULL ELSE j.locked_by_instance END,
               expected_completion_at = CASE WHEN h.holds = 1 THEN NULL ELSE j.expected_completion_at END,
               lock_token = CASE WHEN h.holds = 1 THEN NULL ELSE j.lock_token END
        OUTPUT inserted.id INTO @v_jobs
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
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

    IF OBJECT_ID(N'tempdb..#mjsched_completed') IS NOT NULL
    BEGIN
        INSERT INTO #mjsched_completed (run_id, completed)
        SELECT i.run_id, CASE WHEN f.run_id IS NOT NULL OR EXISTS (
                         SELECT 1 FROM mjsched.scheduled_job_run AS r
                          WHERE r.id = i.run_id AND r.lock_token = i.token AND r.status = i.status)
                    THEN 1 ELSE 0 END
          FROM @v_items AS i
          LEFT JOIN @v_finished AS f ON f.run_id = i.run_id;
        RETURN;
    END;
    SELECT i.run_id, CASE WHEN f.run_id IS NOT NULL OR EXISTS (
                         SELECT 1 FROM mjsched.scheduled_job_run AS r
                          WHERE r.id = i.run_id AND r.lock_token = i.token AND r.status = i.status)
                    THEN 1 ELSE 0 END AS completed
      FROM @v_items AS i
      LEFT JOIN @v_finished AS f ON f.run_id = i.run_id;
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
    CREATE TABLE #mjsched_completed (run_id uniqueidentifier NULL, completed int NOT NULL);
    EXEC mjsched.complete_job_runs @p_items = @v_items, @p_now = @p_now;
    SELECT c.completed FROM #mjsched_completed AS c;
END;
GO

-- sweep_expired_leases: Running runs whose lease lapsed become Abandoned (only rows
-- still Running), expired job locks are freed, Active jobs past end_at become
-- Expired. Cheap when nothing is stale: each step is a filtered-index seek.
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
    DECLARE @v_swept int = 0;
    DECLARE @v_freed int = 0;
    DECLARE @v_expired int = 0;
    DECLARE @v_abandoned TABLE (scheduled_job_id uniqueidentifier NOT NULL);
    DECLARE @v_counted TABLE (id uniqueidentifier NOT NULL);
    DECLARE @v_freed_ids TABLE (id uniqueidentifier NOT NULL);
    DECLARE @v_expired_ids TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        BEGIN TRANSACTION;
        UPDATE r
           SET status = N'Abandoned',
               success = 0,
               completed_at = @v_now,
               duration_ms = CASE WHEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) > 0
                                  THEN DATEDIFF_BIG(millisecond, r.started_at, @v_now) ELSE 0 END,
               error_message = CONCAT(N'Abandoned: the lease expired before the run completed ',
                                      N'(engine ', COALESCE(r.executed_by_instance, N'?'),
                                      N' stopped renewing it)')
        OUTPUT inserted.scheduled_job_id INTO @v_abandoned
          FROM mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
         WHERE r.status = N'Running' AND r.lease_expires_at < @v_now;
        SET @v_swept = (SELECT COUNT(*) FROM @v_abandoned);

        IF @v_swept > 0
        BEGIN
            UPDATE j
               SET run_count = j.run_count + p.n, failure_count = j.failure_count + p.n
            OUTPUT inserted.id INTO @v_counted
              FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
              JOIN (SELECT a.scheduled_job_id, COUNT(*) AS n FROM @v_abandoned AS a
                     GROUP BY a.scheduled_job_id) AS p ON p.scheduled_job_id = j.id;
        END;

        UPDATE j
           SET lock_token = NULL, locked_at = NULL, locked_by_instance = NULL, expected_completion_at = NULL
        OUTPUT inserted.id INTO @v_freed_ids
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
         WHERE j.lock_token IS NOT NULL AND j.expected_completion_at < @v_now;
        SET @v_freed = (SELECT COUNT(*) FROM @v_freed_ids);

        UPDATE j
           SET status = N'Expired', next_run_at = NULL
        OUTPUT inserted.id INTO @v_expired_ids
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
         WHERE j.status = N'Active' AND j.end_at IS NOT NULL AND j.end_at <= @v_now;
        SET @v_expired = (SELECT COUNT(*) FROM @v_expired_ids);
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

-- enqueue_job_run (Queue mode): keep a tick that came while the job runs as one
-- Queued run; at most one per tick and at most max_queued_runs. The job's row lock
-- (UPDLOCK, like FOR NO KEY UPDATE) serialises racing enqueuers of one job.
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
    DECLARE @v_queued TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRY
        IF @p_scheduled_for IS NULL
        BEGIN
            THROW 50022, N'scheduled_for must not be NULL', 1;
        END;
        BEGIN TRANSACTION;
        SELECT @v_limit = j.max_queued_runs
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
         WHERE j.id = @p_job_id AND j.concurrency_mode = N'Queue' AND j.status = N'Active';
        IF @v_limit IS NOT NULL
           AND (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS q
                 WHERE q.scheduled_job_id = @p_job_id AND q.status = N'Queued') < @v_limit
        BEGIN
            INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, queued_at)
            OUTPUT inserted.id INTO @v_queued
            SELECT @p_job_id, @p_scheduled_for, N'Queued', @v_now
             WHERE NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS o
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

-- advance_job: move a held job's schedule and, with @p_release, drop its lock (used
-- for Concurrent runs, which keep only their run lease, and for ticks that already
-- had a run).
CREATE OR ALTER PROCEDURE mjsched.advance_job
    @p_job_id uniqueidentifier,
    @p_token uniqueidentifier,
    @p_next_run_at datetimeoffset,
    @p_release bit
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_advanced TABLE (id uniqueidentifier NOT NULL);
    UPDATE j
       SET next_run_at = @p_next_run_at,
           lock_token = CASE WHEN @p_release = 1 THEN NULL ELSE j.lock_token END,
           locked_at = CASE WHEN @p_release = 1 THEN NULL ELSE j.locked_at END,
           locked_by_instance = CASE WHEN @p_release = 1 THEN NULL ELSE j.locked_by_instance END,
           expected_completion_at = CASE WHEN @p_release = 1 THEN NULL ELSE j.expected_completion_at END
    OUTPUT inserted.id INTO @v_advanced
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
     WHERE j.id = @p_job_id AND j.lock_token = @p_token;
    SELECT COUNT(*) AS advanced FROM @v_advanced;
END;
GO

-- begin_job_run: a Running run for a job whose lock the caller holds (manual runs
-- have scheduled_for NULL). Returns the run id, or no row when the lock is not ours
-- (or the tick already has a run). The statement may wait for the job's row lock, so
-- the tick check reads with READCOMMITTEDLOCK: under READ_COMMITTED_SNAPSHOT a run
-- committed for the tick during that wait is then seen (no row), not missed (2601).
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
    INSERT INTO mjsched.scheduled_job_run
           (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
            lock_token, lease_expires_at)
    OUTPUT inserted.id INTO @v_begun
    SELECT j.id, @p_scheduled_for, N'Running', @v_now, @p_instance, j.lock_token, j.expected_completion_at
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
     WHERE j.id = @p_job_id AND j.lock_token = @p_token
       AND (@p_scheduled_for IS NULL
            OR NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS o WITH (READCOMMITTEDLOCK)
                            WHERE o.scheduled_job_id = j.id AND o.scheduled_for = @p_scheduled_for));
    SELECT b.run_id FROM @v_begun AS b;
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

-- register_engine / unregister_engine: the table of live engines behind `mjsched status`.
-- The upsert holds a key-range lock (SERIALIZABLE) so two registrations of one name
-- cannot both insert.
CREATE OR ALTER PROCEDURE mjsched.register_engine
    @p_instance nvarchar(255),
    @p_host nvarchar(255),
    @p_pid int,
    @p_version nvarchar(50)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_now datetimeoffset = SYSDATETIMEOFFSET();
    DECLARE @v_rows int;
    BEGIN TRY
        BEGIN TRANSACTION;
        UPDATE e
           SET host = @p_host, pid = @p_pid, version = @p_version,
               started_at = @v_now, last_seen_at = @v_now, stopped_at = NULL
          FROM mjsched.engine_instance AS e WITH (UPDLOCK, SERIALIZABLE)
         WHERE e.instance = @p_instance;
        SET @v_rows = @@ROWCOUNT;
        IF @v_rows = 0
        BEGIN
            INSERT INTO mjsched.engine_instance (instance, host, pid, version, started_at, last_seen_at, stopped_at)
            VALUES (@p_instance, @p_host, @p_pid, @p_version, @v_now, @v_now, NULL);
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
    SELECT 1 AS registered;
END;
GO

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

-- probe_permissions: which mjsched routines the current user may execute.
-- The names are listed here, not read from sys.objects: metadata visibility hides the
-- very routines a user has no permission on. The parity test checks that this list is
-- exactly the set of routines in this file.
CREATE OR ALTER PROCEDURE mjsched.probe_permissions
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SELECT r.name AS procedure_name,
           CASE WHEN HAS_PERMS_BY_NAME(CONCAT(N'mjsched.', r.name), N'OBJECT', N'EXECUTE') = 1
                THEN 1 ELSE 0 END AS can_execute
      FROM (VALUES (N'acquire_job_lock'), (N'advance_job'), (N'begin_job_run'), (N'check_job_fields'),
                   (N'check_lease'), (N'check_test_clock'), (N'claim_due_jobs'), (N'complete_job_run'),
                   (N'complete_job_runs'), (N'delete_job'), (N'enqueue_job_run'),
                   (N'ensure_job_type'), (N'extend_job_leases'), (N'initialize_next_run'),
                   (N'initialize_next_runs'),
                   (N'insert_job'), (N'lease_interval'), (N'probe_permissions'), (N'register_engine'),
                   (N'release_job_lock'), (N'sweep_expired_leases'),
                   (N'unregister_engine'), (N'update_job')) AS r (name)
     ORDER BY r.name;
END;
GO
