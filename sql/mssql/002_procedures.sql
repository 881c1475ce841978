-- mjsched lock and lease procedures, version 3 (T-SQL).
-- The same routines, parameter names (p_x -> @p_x, same order) and result columns as
-- sql/postgres/002_procedures.sql; tests/unit/test_sql_parity.py holds the two to it.
-- Every lock decision is made here, on the database clock (SYSDATETIMEOFFSET()).
-- @p_now exists only so tests can move time on a real server; production passes NULL.
-- Errors raised on purpose use error number 50022 (PostgreSQL's SQLSTATE 22023,
-- invalid_parameter_value) and name the parameter.
--
-- THE LOCK PROTOCOL (v3)
--
-- Lease truth. A job's lock (scheduled_job.lock_token, expected_completion_at) and the
-- Running run that holds it (scheduled_job_run.lock_token, lease_expires_at) carry ONE
-- lease: every procedure that sets one sets the other to the same instant, in the same
-- transaction (claim, start_manual_run, begin_job_run, renew_tokens). A Concurrent
-- job's tick run lets the job lock go right after its claim (advance_job) and keeps only
-- its run lease; it is the one kind of Running run whose job is not locked by its token.
-- A lease is never shortened: renewal sets the greatest of the current lease and
-- now + lease, so a lease the claim lengthened to cover max_runtime survives the first
-- heartbeat.
--
-- Lock order. Job rows before run rows, always. A procedure that changes runs first
-- locks the rows of their jobs (UPDLOCK, ROWLOCK: update locks held to the end of the
-- transaction, which exclude other lockers and writers but not plain readers -- the
-- counterpart of FOR NO KEY UPDATE; a run insert's foreign-key check reads the job row
-- with a shared lock, which an update lock admits), then touches the runs. READPAST
-- (SKIP LOCKED) is used only on the first rows a statement locks (candidate jobs of a
-- claim or a sweep, the held jobs of renew_leases and complete_runs): a row skipped there
-- is handled by a later call (renew_leases answers its tokens busy, complete_runs its items
-- busy), and no READPAST on a second row can hide an inversion. The one second-row
-- READPAST: a claim or a sweep locks the lapsed runs it takes over with READPAST after
-- their jobs, and a job with a run it could not lock (an outsider's open transaction) is
-- left wholly unchanged, so the skip can never leave a run under a freed lock; a lapsed
-- Concurrent tick run (no job lock) is skipped alone. Several job rows locked without READPAST are
-- locked in id order: their ids are collected first, then locked by one statement that
-- seeks them from a table variable keyed on id (OPTION (FORCE ORDER, LOOP JOIN)). SQL
-- Server takes row locks in the order its plan reads the rows and offers no statement
-- that guarantees an order; that plan reads them in key order (uniqueidentifier order,
-- the same for every session), and a deadlock, should one still occur, is detected and
-- rolled back by the server (error 1205, which the backend retries).
--
-- Takeover. Whoever frees or takes a lapsed lock (claim, acquire_job_lock,
-- start_manual_run, sweep, release_engine_locks, force_unlock_job) abandons the Running
-- runs of the old token in the same transaction, through abandon_runs, which also counts
-- them in the job's statistics (run_count, failure_count): a run ends Abandoned exactly
-- once, and is counted exactly once, whoever ends it.
--
-- Replay safety. Calls that change state either are idempotent (renewal, sweep,
-- release, advance, enqueue, initialize, completion: replaying a committed call changes
-- nothing more and reports consistently), or take a caller-chosen id from which their
-- lock token derives (claim_due_jobs @p_claim_id, start_manual_run @p_request_id, both
-- through claim_token) so a replay answers what the lost call did. README "Replay
-- safety" lists every procedure and how the backend retries it.
--
-- Recorded spans. A run taken from a freed lock starts no earlier than the job's last_run_at
-- (claim_queued, claim_ticks, start_manual_run). @v_now is read once when the call begins,
-- but the call may find the job freed by a completion that began after it (one that held
-- the job's row while the claim waited, or under READ_COMMITTED_SNAPSHOT one that committed
-- before its statement ran); the completion that frees a job writes last_run_at (its own
-- time) in the same transaction, so the new run never seems to start before the last ended.
--
-- Test hook. test_pause(@p_point) between the statements of multi-statement procedures
-- parks the caller at that point when the schema owner asked for it on this session
-- (sp_set_session_context N'mjsched.pause_at' and N'mjsched.pause_key'): it takes and
-- releases an exclusive session applock named by the key, so a controller holding that
-- applock keeps the caller waiting there. tests/interleaving forces every interleaving
-- of statement boundaries with it. For anyone else it returns at once.
--
-- House rules for this file:
-- * every procedure: SET NOCOUNT ON, SET XACT_ABORT ON, at most ONE result set, and it
--   is the procedure's last statement;
-- * several statements that must hold together run in one explicit transaction inside
--   TRY/CATCH (rollback, then THROW the original error). claim_queued and claim_ticks
--   open one only when called outside a transaction (claim_due_jobs calls them inside
--   its own); abandon_runs and take_over refuse to run outside one, as they rely on the
--   caller holding the runs' job rows;
-- * PostgreSQL's helper functions map to T-SQL by what they do. Those that change data
--   are procedures (T-SQL functions may not): a count (abandon_runs, take_over,
--   expire_ended_jobs) is the procedure's return code, read with EXEC @n = ...; rows
--   (claim_queued, claim_ticks) go to the temporary table #mjsched_claimed when the
--   caller created one, as complete_job_runs writes to #mjsched_completed and
--   admit_by_tag_limits to #mjsched_admitted (INSERT ...
--   EXEC would forbid the callee a ROLLBACK and cannot nest). The pure ones the planner
--   inlines (claimable, claim_token, claim_replay, claim_counters) are inline
--   table-valued functions used with CROSS APPLY, which the optimizer expands into the
--   calling statement where a scalar UDF would run once per row (and may not call
--   NEWID()); a scalar result is their one column, named after the function;
-- * sets of ids pass between procedures as JSON arrays of {"id": ...} objects, as FOR
--   JSON PATH writes them (PostgreSQL: uuid[]);
-- * scheduled_job has an AFTER UPDATE trigger, so every UPDATE of it that needs its rows
--   uses OUTPUT ... INTO a table variable (OUTPUT straight to the client is not allowed
--   on a table with triggers, and @@ROWCOUNT after a trigger is not to be trusted);
-- * READPAST always comes with READCOMMITTEDLOCK: SQL Server refuses READPAST under
--   READ_COMMITTED_SNAPSHOT (Azure SQL's default) without it, and a claim must read the
--   latest committed row, not a version. (The table hints article lists ROWLOCK and
--   READCOMMITTEDLOCK in one "granularity" group; the combination is the one SQL Server
--   work queues ship, and SQL Server ignores READCOMMITTEDLOCK's locking under UPDLOCK.)
--   Reads of runs made under their job's row lock use READCOMMITTEDLOCK too: under
--   READ_COMMITTED_SNAPSHOT a statement reads the versions of its start, and the latest
--   committed row is what the lock protects;
-- * the lock holder of a job is the only writer of its runs, so "insert unless the tick
--   has a run" is NOT EXISTS under the job's row lock, with the filtered UNIQUE index
--   uq_scheduled_job_run_tick as the last line of defence (and READCOMMITTEDLOCK on that
--   NOT EXISTS: a run committed for the tick while the statement waited would otherwise
--   be invisible and the INSERT would fail with 2601 where PostgreSQL's ON CONFLICT DO
--   NOTHING returns no row).
-- Requires SQL Server 2016 SP1 or later (CREATE OR ALTER, OPENJSON, FOR JSON,
-- SESSION_CONTEXT, DATEDIFF_BIG), database compatibility level 130 or higher.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- Lease length for a job, in seconds: the engine's lease, lengthened by the job's
-- max_runtime, capped at one year (31,536,000 s): a max_runtime no datetimeoffset can
-- reach (1e13) never fails a claim, and DATEADD(second, ...) stays within int.
-- (PostgreSQL returns an interval; T-SQL has none, so seconds. T-SQL's float holds no
-- NaN, which PostgreSQL's cap also covers.)
CREATE OR ALTER FUNCTION mjsched.lease_interval(@p_lease_seconds float, @p_max_runtime_seconds float)
RETURNS float
WITH SCHEMABINDING
AS
BEGIN
    DECLARE @v_seconds float = CASE WHEN @p_max_runtime_seconds > @p_lease_seconds
                                    THEN @p_max_runtime_seconds ELSE @p_lease_seconds END;
    IF @v_seconds > 31536000
    BEGIN
        SET @v_seconds = 31536000;
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

-- test_pause: the interleaving harness's hook (see the header). When this session's
-- SESSION_CONTEXT(N'mjsched.pause_at') names @p_point and the caller is the schema owner
-- (as check_test_clock decides, failing closed), take and release an exclusive session
-- applock named by SESSION_CONTEXT(N'mjsched.pause_key') (N'0' when unset): a controller
-- that holds that applock parks the caller here until it lets go. The wait is bounded by
-- the session's LOCK_TIMEOUT; a request that fails (timeout, deadlock victim) just lets
-- the caller go on. Costs one SESSION_CONTEXT read when nobody asked for a pause.
CREATE OR ALTER PROCEDURE mjsched.test_pause
    @p_point nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_at nvarchar(4000) = CONVERT(nvarchar(4000), SESSION_CONTEXT(N'mjsched.pause_at'));
    DECLARE @v_key nvarchar(255);
    DECLARE @v_granted int;
    IF @v_at IS NULL OR @p_point IS NULL OR @v_at <> @p_point
    BEGIN
        RETURN;
    END;
    IF ISNULL(IS_MEMBER(N'db_owner'), 0) = 0 AND ISNULL(IS_SRVROLEMEMBER(N'sysadmin'), 0) = 0
    BEGIN
        RETURN;   -- only the schema owner's sessions are ever parked
    END;
    SET @v_key = COALESCE(NULLIF(CONVERT(nvarchar(255), SESSION_CONTEXT(N'mjsched.pause_key')), N''), N'0');
    EXEC @v_granted = sys.sp_getapplock @Resource = @v_key, @LockMode = 'Exclusive', @LockOwner = 'Session';
    IF @v_granted >= 0
    BEGIN
        EXEC sys.sp_releaseapplock @Resource = @v_key, @LockOwner = 'Session';
    END;
END;
GO

-- claimable: the one definition of a job a claim may lock: Active, inside its window,
-- and its lock free or its lease lapsed. One row (claimable = 1) when it is, none
-- otherwise, so CROSS APPLY keeps exactly the claimable jobs; inline, so the optimizer
-- expands it into the claim's statement and the due index still applies.
CREATE OR ALTER FUNCTION mjsched.claimable(
    @p_status nvarchar(20), @p_start_at datetimeoffset, @p_end_at datetimeoffset,
    @p_lock_token uniqueidentifier, @p_lease_until datetimeoffset, @p_now datetimeoffset)
RETURNS TABLE
AS
RETURN
    SELECT 1 AS claimable
     WHERE @p_status = N'Active'
       AND (@p_start_at IS NULL OR @p_start_at <= @p_now)
       AND (@p_end_at IS NULL OR @p_end_at > @p_now)
       AND (@p_lock_token IS NULL OR @p_lease_until < @p_now);
GO

-- claim_token: the lock token of a named claim, derived from (claim id, job id) so that a
-- replay can find it; NULL when the claim is not named, and the caller then takes
-- NEWID() (PostgreSQL returns the random token itself; a T-SQL function may not call
-- NEWID()). PostgreSQL derives it with md5, this one with SHA2_256: a token only has to
-- be unique per job and reproducible from the claim id.
CREATE OR ALTER FUNCTION mjsched.claim_token(@p_claim_id uniqueidentifier, @p_job_id uniqueidentifier)
RETURNS TABLE
AS
RETURN
    SELECT CASE WHEN @p_claim_id IS NOT NULL
                THEN CONVERT(uniqueidentifier, CONVERT(binary(16), HASHBYTES('SHA2_256',
                         CONCAT(CONVERT(nchar(36), @p_claim_id), CONVERT(nchar(36), @p_job_id)))))
           END AS claim_token;
GO

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
                   expected_completion_at = DATEADD(millisecond, CAST((x.lease_s - FLOOR(x.lease_s)) * 1000 AS int),
                                                    DATEADD(second, CAST(FLOOR(x.lease_s) AS int), @v_now)),
                   fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                                    ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
            OUTPUT inserted.id INTO @v_taken
              FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
             CROSS APPLY (SELECT mjsched.lease_interval(@p_lease_seconds, j.max_runtime_seconds) AS lease_s) AS x
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

-- claim_replay: what a committed claim with this id took and still holds (claim_due_jobs
-- with @p_replay = 1).
CREATE OR ALTER FUNCTION mjsched.claim_replay(
    @p_instance nvarchar(255), @p_claim_id uniqueidentifier, @p_now datetimeoffset)
RETURNS TABLE
AS
RETURN
    SELECT j.id AS job_id, r.id AS run_id, j.lock_token, COALESCE(r.scheduled_for, j.next_run_at) AS scheduled_for,
           CONVERT(bit, CASE WHEN r.queued_at IS NOT NULL THEN 1 ELSE 0 END) AS from_queue
      FROM mjsched.scheduled_job AS j
     CROSS APPLY mjsched.claim_token(@p_claim_id, j.id) AS t
      LEFT JOIN mjsched.scheduled_job_run AS r ON r.lock_token = j.lock_token AND r.status = N'Running'
     WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > @p_now
       AND j.locked_by_instance = @p_instance
       AND j.lock_token = t.claim_token;
GO

-- claim_queued: lock claimable jobs holding a due Queued run (a Queue-mode tick, or a retry
-- whose retry_at has come; skipping rows other engines hold), take over lapsed locks, take
-- the locks (only where a Queued run is still there) and start each job's oldest due queued
-- run (oldest tick, then lowest attempt). Skip mode: while the job's next tick is due its
-- retries wait for claim_ticks, which runs the tick and supersedes them. The checks for
-- Queued runs that choose the candidates skip locked runs (READPAST): every writer of a
-- job's Queued runs holds that job's row lock, and a job whose row is locked is skipped
-- anyway. Rows go to #mjsched_claimed when the caller created it (claim_due_jobs), else
-- to the client.
CREATE OR ALTER PROCEDURE mjsched.claim_queued
    @p_instance nvarchar(255),
    @p_max_jobs int,
    @p_lease_seconds float,
    @p_now datetimeoffset,
    @p_claim_id uniqueidentifier
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_own_transaction bit = CASE WHEN @@TRANCOUNT = 0 THEN 1 ELSE 0 END;
    DECLARE @v_old nvarchar(max);
    DECLARE @v_candidates TABLE (id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NULL,
                                 due datetimeoffset NULL);
    DECLARE @v_run_locks TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    -- tags at their limit (010_tags.sql), when a tag has one: their jobs are left out
    DECLARE @v_limited bit = 0;
    DECLARE @v_full TABLE (tag nvarchar(64) NOT NULL PRIMARY KEY);
    DECLARE @v_json nvarchar(max);
    DECLARE @v_taken TABLE (job_id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NOT NULL,
                            lease_until datetimeoffset NOT NULL, last_run_at datetimeoffset NULL,
                            fence_seq bigint NOT NULL, version int NOT NULL);
    DECLARE @v_started TABLE (job_id uniqueidentifier NOT NULL, run_id uniqueidentifier NOT NULL,
                              lock_token uniqueidentifier NULL, scheduled_for datetimeoffset NULL);
    BEGIN TRY
        IF @v_own_transaction = 1
        BEGIN
            BEGIN TRANSACTION;
        END;
        IF EXISTS (SELECT 1 FROM mjsched.tag_limit AS l WITH (READCOMMITTEDLOCK, READPAST))
        BEGIN
            SET @v_limited = 1;
            INSERT INTO @v_full (tag) SELECT f.tag FROM mjsched.tags_at_limit() AS f;
        END;
        INSERT INTO @v_candidates (id, lock_token, due)
        SELECT TOP (@p_max_jobs) j.id, j.lock_token, CAST(NULL AS datetimeoffset)
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
         -- a one-off (run_at) is Expired once its tick is served, but the retries of that tick
         -- still run: its only Queued runs are retries (one tick, never queued behind itself)
         CROSS APPLY mjsched.claimable(CASE WHEN j.status = N'Expired' AND j.run_at IS NOT NULL THEN N'Active'
                                            ELSE j.status END,
                                       j.start_at, j.end_at, j.lock_token,
                                       j.expected_completion_at, @p_now) AS c
         -- Driven by the few Queued runs (ix_scheduled_job_run_queued), never by a scan of
         -- every job: this runs at every poll. The candidates are the jobs with a due Queued
         -- run; a Skip-mode job whose own tick is due takes only a Queue-mode tick's run
         -- (attempt 1), not a retry (that retry is recorded Skipped by the tick's claim).
         WHERE j.id IN (SELECT q.scheduled_job_id FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK, READPAST)
                         WHERE q.status = N'Queued' AND (q.retry_at IS NULL OR q.retry_at <= @p_now))
           AND (NOT (j.concurrency_mode = N'Skip' AND j.next_run_at IS NOT NULL AND j.next_run_at <= @p_now)
                OR EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK, READPAST)
                            WHERE q.scheduled_job_id = j.id AND q.status = N'Queued' AND q.attempt <= 1
                              AND (q.retry_at IS NULL OR q.retry_at <= @p_now)))
           AND (@v_limited = 0
                OR NOT EXISTS (SELECT 1 FROM mjsched.job_tag AS g WITH (READCOMMITTEDLOCK, READPAST)
                                 JOIN @v_full AS f ON f.tag = g.tag
                                WHERE g.scheduled_job_id = j.id));
        IF EXISTS (SELECT 1 FROM @v_candidates)
        BEGIN
            EXEC mjsched.test_pause @p_point = N'claim_due_jobs:queued_jobs_locked';
            -- a tag's limit (010_tags.sql): only the candidates admit_by_tag_limits admits, in claim order
            IF @v_limited = 1
            BEGIN
                SET @v_json = (SELECT c.id FROM @v_candidates AS c ORDER BY c.due, c.id FOR JSON PATH);
                CREATE TABLE #mjsched_admitted (ids nvarchar(max) NULL, old nvarchar(max) NULL);
                EXEC mjsched.admit_by_tag_limits @p_ids = @v_json;
                DELETE c FROM @v_candidates AS c
                 WHERE c.id NOT IN (SELECT CONVERT(uniqueidentifier, JSON_VALUE(e.[value], N'$.id'))
                                      FROM #mjsched_admitted AS a CROSS APPLY OPENJSON(a.ids) AS e);
                DROP TABLE #mjsched_admitted;
            END;
            -- A lapsed run another session holds (an operator's open transaction) is not
            -- waited for: the runs of the lapsed tokens are locked here with READPAST (their job
            -- rows are ours, so only an outsider can hold them), and a candidate with a run that
            -- could not be locked is dropped, left as it is for a later claim. Which runs exist
            -- is read without honouring locks (a held run would block a plain read).
            INSERT INTO @v_run_locks (id)
            SELECT r.id
              FROM @v_candidates AS c
              JOIN mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                ON r.lock_token = c.lock_token
             WHERE r.status = N'Running';
            DELETE c
              FROM @v_candidates AS c
             WHERE EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS h WITH (READUNCOMMITTED)
                            WHERE h.lock_token = c.lock_token AND h.status = N'Running'
                              AND NOT EXISTS (SELECT 1 FROM @v_run_locks AS k WHERE k.id = h.id));
            SET @v_old = (SELECT c.lock_token AS id FROM @v_candidates AS c WHERE c.lock_token IS NOT NULL
                             FOR JSON PATH);
            IF @v_old IS NOT NULL
            BEGIN
                EXEC mjsched.take_over @p_old_tokens = @v_old, @p_now = @p_now;
            END;
            UPDATE j
               SET lock_token = COALESCE(t.claim_token, NEWID()),
                   locked_at = @p_now,
                   locked_by_instance = @p_instance,
                   expected_completion_at = DATEADD(millisecond, CAST((x.lease_s - FLOOR(x.lease_s)) * 1000 AS int),
                                                    DATEADD(second, CAST(FLOOR(x.lease_s) AS int), @p_now)),
                   updated_at = SYSDATETIMEOFFSET(),  -- set here: the row trigger passes it over (001_schema.sql)
                   fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                                    ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
            OUTPUT inserted.id, inserted.lock_token, inserted.expected_completion_at, inserted.last_run_at,
                   inserted.fence_seq, inserted.version INTO @v_taken
              FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
              JOIN @v_candidates AS c ON c.id = j.id
             CROSS APPLY mjsched.claim_token(@p_claim_id, j.id) AS t
             CROSS APPLY (SELECT mjsched.lease_interval(@p_lease_seconds, j.max_runtime_seconds) AS lease_s) AS x
             WHERE EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK)
                            WHERE q.scheduled_job_id = j.id AND q.status = N'Queued');
            UPDATE r
               SET status = N'Running',
                   started_at = CASE WHEN t.last_run_at > @p_now THEN t.last_run_at ELSE @p_now END,   -- "Recorded spans"
                   executed_by_instance = @p_instance,
                   lock_token = t.lock_token,
                   lease_expires_at = t.lease_until,
                   fencing_token = t.fence_seq,
                   job_version = t.version
            OUTPUT inserted.scheduled_job_id, inserted.id, inserted.lock_token, inserted.scheduled_for
              INTO @v_started
              FROM mjsched.scheduled_job_run AS r WITH (ROWLOCK)
              JOIN @v_taken AS t ON t.job_id = r.scheduled_job_id
             WHERE r.id = (SELECT TOP (1) q.id
                             FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK)
                             JOIN mjsched.scheduled_job AS qj ON qj.id = q.scheduled_job_id
                            WHERE q.scheduled_job_id = t.job_id AND q.status = N'Queued'
                              AND (q.retry_at IS NULL OR q.retry_at <= @p_now)
                              AND NOT (q.attempt > 1 AND qj.concurrency_mode = N'Skip'
                                       AND qj.next_run_at IS NOT NULL AND qj.next_run_at <= @p_now)
                            ORDER BY q.scheduled_for, q.attempt, q.queued_at);
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

    IF OBJECT_ID(N'tempdb..#mjsched_claimed') IS NOT NULL
    BEGIN
        INSERT INTO #mjsched_claimed (job_id, run_id, lock_token, scheduled_for, from_queue)
        SELECT s.job_id, s.run_id, s.lock_token, s.scheduled_for, 1 FROM @v_started AS s;
        RETURN;
    END;
    SELECT s.job_id, s.run_id, s.lock_token, s.scheduled_for, CONVERT(bit, 1) AS from_queue
      FROM @v_started AS s;
END;
GO

-- claim_ticks: lock claimable due jobs (oldest tick first; an index range scan on
-- (status, next_run_at)) that hold no Queued tick (a pending retry holds no tick back),
-- skipping rows other engines hold; take over lapsed locks, take the locks and start a run
-- for each tick. Skip mode: the tick supersedes the job's pending retries, recorded Skipped
-- with the reason. A tick that
-- already has a run (a zombie's, say) comes back with run_id NULL. The tick check before
-- a run is inserted does not skip: it must see every run of the tick (READCOMMITTEDLOCK),
-- and it reads only runs of jobs whose row lock this claim already holds, a lock every
-- writer of them takes first. Rows go to #mjsched_claimed when the caller created it.
CREATE OR ALTER PROCEDURE mjsched.claim_ticks
    @p_instance nvarchar(255),
    @p_max_jobs int,
    @p_lease_seconds float,
    @p_now datetimeoffset,
    @p_claim_id uniqueidentifier
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_own_transaction bit = CASE WHEN @@TRANCOUNT = 0 THEN 1 ELSE 0 END;
    DECLARE @v_old nvarchar(max);
    DECLARE @v_candidates TABLE (id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NULL,
                                 due datetimeoffset NULL);
    DECLARE @v_run_locks TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    -- tags at their limit (010_tags.sql), when a tag has one: their jobs are left out
    DECLARE @v_limited bit = 0;
    DECLARE @v_full TABLE (tag nvarchar(64) NOT NULL PRIMARY KEY);
    DECLARE @v_json nvarchar(max);
    DECLARE @v_taken TABLE (job_id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NOT NULL,
                            next_run_at datetimeoffset NULL, lease_until datetimeoffset NOT NULL,
                            last_run_at datetimeoffset NULL, fence_seq bigint NOT NULL, version int NOT NULL);
    DECLARE @v_inserted TABLE (run_id uniqueidentifier NOT NULL, job_id uniqueidentifier NOT NULL);
    DECLARE @v_backlog bit;
    BEGIN TRY
        IF @v_own_transaction = 1
        BEGIN
            BEGIN TRANSACTION;
        END;
        -- Priorities (015_priorities.sql): the order matters only when the claimable due jobs
        -- outnumber the batch (read from the due index, at most @p_max_jobs + 1 rows, skipping
        -- the rows others hold). While they fit, every one is taken through that index, as
        -- before; else the batch is the head of (status, claim_at), up to now + 100 minutes.
        -- One statement either way, compiled for the case at hand (RECOMPILE: @v_backlog folds
        -- away, so its ORDER BY is one index's order; as in 006_retention.sql).
        SELECT @v_backlog = CASE WHEN COUNT(*) > @p_max_jobs THEN 1 ELSE 0 END
          FROM (SELECT TOP (@p_max_jobs + 1) d.id
                  FROM mjsched.scheduled_job AS d WITH (READCOMMITTEDLOCK, READPAST)
                 CROSS APPLY mjsched.claimable(d.status, d.start_at, d.end_at, d.lock_token,
                                               d.expected_completion_at, @p_now) AS c
                 WHERE d.status = N'Active' AND d.next_run_at <= @p_now
                 ORDER BY d.next_run_at) AS b;     -- the due index's head
        IF EXISTS (SELECT 1 FROM mjsched.tag_limit AS l WITH (READCOMMITTEDLOCK, READPAST))
        BEGIN
            SET @v_limited = 1;
            INSERT INTO @v_full (tag) SELECT f.tag FROM mjsched.tags_at_limit() AS f;
        END;
        INSERT INTO @v_candidates (id, lock_token, due)
        SELECT TOP (@p_max_jobs) j.id, j.lock_token,     -- due: the claim's order (admit_by_tag_limits keeps it)
               CASE WHEN @v_backlog = 1 THEN j.claim_at ELSE j.next_run_at END
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
         CROSS APPLY mjsched.claimable(j.status, j.start_at, j.end_at, j.lock_token,
                                       j.expected_completion_at, @p_now) AS c
         WHERE j.status = N'Active' AND j.next_run_at <= @p_now
           AND (@v_backlog = 0 OR j.claim_at <= DATEADD(minute, 100, @p_now))
           AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK, READPAST)
                            WHERE q.scheduled_job_id = j.id AND q.status = N'Queued' AND q.attempt = 1)
           AND (@v_limited = 0
                OR NOT EXISTS (SELECT 1 FROM mjsched.job_tag AS g WITH (READCOMMITTEDLOCK, READPAST)
                                 JOIN @v_full AS f ON f.tag = g.tag
                                WHERE g.scheduled_job_id = j.id))
         ORDER BY CASE WHEN @v_backlog = 1 THEN j.claim_at ELSE j.next_run_at END
        OPTION (RECOMPILE);
        IF EXISTS (SELECT 1 FROM @v_candidates)
        BEGIN
            EXEC mjsched.test_pause @p_point = N'claim_due_jobs:due_jobs_locked';
            -- a tag's limit (010_tags.sql): only the candidates admit_by_tag_limits admits, in claim order
            IF @v_limited = 1
            BEGIN
                SET @v_json = (SELECT c.id FROM @v_candidates AS c ORDER BY c.due, c.id FOR JSON PATH);
                CREATE TABLE #mjsched_admitted (ids nvarchar(max) NULL, old nvarchar(max) NULL);
                EXEC mjsched.admit_by_tag_limits @p_ids = @v_json;
                DELETE c FROM @v_candidates AS c
                 WHERE c.id NOT IN (SELECT CONVERT(uniqueidentifier, JSON_VALUE(e.[value], N'$.id'))
                                      FROM #mjsched_admitted AS a CROSS APPLY OPENJSON(a.ids) AS e);
                DROP TABLE #mjsched_admitted;
            END;
            -- A lapsed run another session holds (an operator's open transaction) is not
            -- waited for: the runs of the lapsed tokens are locked here with READPAST (their job
            -- rows are ours, so only an outsider can hold them), and a candidate with a run that
            -- could not be locked is dropped, left as it is for a later claim. Which runs exist
            -- is read without honouring locks (a held run would block a plain read).
            -- "No Queued tick", again, now that the job rows are ours: the candidates' runs may
            -- have been read before their job rows were locked (the plan decides), and a lapsed
            -- holder's enqueue_job_run may have committed a Queued tick in between. Such a job
            -- is dropped, left for claim_queued, which serves the queue first. Only a job with a
            -- lapsed lock can have gained one (an enqueue needs a run holding the lock); a later
            -- enqueue waits for our row lock.
            INSERT INTO @v_run_locks (id)
            SELECT r.id
              FROM @v_candidates AS c
              JOIN mjsched.scheduled_job_run AS r WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
                ON r.lock_token = c.lock_token
             WHERE r.status = N'Running';
            DELETE c
              FROM @v_candidates AS c
             WHERE EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS h WITH (READUNCOMMITTED)
                            WHERE h.lock_token = c.lock_token AND h.status = N'Running'
                              AND NOT EXISTS (SELECT 1 FROM @v_run_locks AS k WHERE k.id = h.id))
                OR (c.lock_token IS NOT NULL
                    AND EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS q WITH (READUNCOMMITTED)
                                 WHERE q.scheduled_job_id = c.id AND q.status = N'Queued' AND q.attempt = 1));
            SET @v_old = (SELECT c.lock_token AS id FROM @v_candidates AS c WHERE c.lock_token IS NOT NULL
                             FOR JSON PATH);
            IF @v_old IS NOT NULL
            BEGIN
                EXEC mjsched.take_over @p_old_tokens = @v_old, @p_now = @p_now;
            END;
            UPDATE j
               SET lock_token = COALESCE(t.claim_token, NEWID()),
                   locked_at = @p_now,
                   locked_by_instance = @p_instance,
                   expected_completion_at = DATEADD(millisecond, CAST((x.lease_s - FLOOR(x.lease_s)) * 1000 AS int),
                                                    DATEADD(second, CAST(FLOOR(x.lease_s) AS int), @p_now)),
                   updated_at = SYSDATETIMEOFFSET(),  -- set here: the row trigger passes it over (001_schema.sql)
                   fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                                    ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
            OUTPUT inserted.id, inserted.lock_token, inserted.next_run_at, inserted.expected_completion_at,
                   inserted.last_run_at, inserted.fence_seq, inserted.version
              INTO @v_taken
              FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
              JOIN @v_candidates AS c ON c.id = j.id
             CROSS APPLY mjsched.claim_token(@p_claim_id, j.id) AS t
             CROSS APPLY (SELECT mjsched.lease_interval(@p_lease_seconds, j.max_runtime_seconds) AS lease_s) AS x;
            UPDATE q
               SET status = N'Skipped', success = 0, completed_at = @p_now, duration_ms = 0,
                   error_message = CONCAT(N'retry not run: the next tick (', CONVERT(nvarchar(40), t.next_run_at, 127),
                                          N') came due first (concurrency_mode Skip)')
              FROM mjsched.scheduled_job_run AS q WITH (ROWLOCK)
              JOIN @v_taken AS t ON t.job_id = q.scheduled_job_id
              JOIN mjsched.scheduled_job AS j ON j.id = t.job_id
             WHERE q.status = N'Queued' AND q.attempt > 1 AND j.concurrency_mode = N'Skip'
               AND q.scheduled_for < t.next_run_at;   -- retries of earlier ticks only
            -- ON CONFLICT DO NOTHING: we hold these jobs' row locks, and every writer of a
            -- tick's run takes the job's row lock first.
            INSERT INTO mjsched.scheduled_job_run
                   (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance,
                    lock_token, lease_expires_at, fencing_token, job_version)
            OUTPUT inserted.id, inserted.scheduled_job_id INTO @v_inserted
            SELECT t.job_id, t.next_run_at, N'Running',
                   CASE WHEN t.last_run_at > @p_now THEN t.last_run_at ELSE @p_now END,   -- "Recorded spans"
                   @p_instance, t.lock_token, t.lease_until, t.fence_seq, t.version
              FROM @v_taken AS t
             -- A job's ticks are served in increasing order: a tick at or before the newest tick
             -- the job has a run of counts as served (no run; the engine moves the schedule on),
             -- so a next_run_at moved back over a tick whose run the purge deleted
             -- (006_retention.sql keeps the newest) never runs it again.
             WHERE NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS o WITH (READCOMMITTEDLOCK)
                                WHERE o.scheduled_job_id = t.job_id AND o.scheduled_for >= t.next_run_at);
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

    IF OBJECT_ID(N'tempdb..#mjsched_claimed') IS NOT NULL
    BEGIN
        INSERT INTO #mjsched_claimed (job_id, run_id, lock_token, scheduled_for, from_queue)
        SELECT t.job_id, i.run_id, t.lock_token, t.next_run_at, 0
          FROM @v_taken AS t
          LEFT JOIN @v_inserted AS i ON i.job_id = t.job_id;
        RETURN;
    END;
    SELECT t.job_id, i.run_id, t.lock_token, t.next_run_at AS scheduled_for, CONVERT(bit, 0) AS from_queue
      FROM @v_taken AS t
      LEFT JOIN @v_inserted AS i ON i.job_id = t.job_id;
END;
GO

-- next_due_at: the earliest instant something may become claimable (a tick, a retry, a
-- lapsing lock or run lease); NULL when nothing is scheduled. Advisory, so rows other engines
-- are writing at that instant are skipped (READPAST) rather than waited for. Each branch is
-- the head of the index on its column (TOP (1) .. ORDER BY), as in the PostgreSQL twin: the
-- runs' lease and token indexes share one filter, and a MIN() planned over the wrong one
-- reads every Running run at each claim.
CREATE OR ALTER FUNCTION mjsched.next_due_at(@p_now datetimeoffset)
RETURNS datetimeoffset
AS
BEGIN
    DECLARE @v_next datetimeoffset;
    SELECT @v_next = MIN(s.t) FROM (
        SELECT a.t FROM (SELECT TOP (1) j.next_run_at AS t
                           FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK, READPAST)
                          WHERE j.status = N'Active' AND j.next_run_at > @p_now
                          ORDER BY j.next_run_at) AS a
        UNION ALL
        SELECT b.t FROM (SELECT TOP (1) j.expected_completion_at AS t
                           FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK, READPAST)
                          WHERE j.lock_token IS NOT NULL AND j.expected_completion_at > @p_now
                          ORDER BY j.expected_completion_at) AS b
        UNION ALL
        SELECT c.t FROM (SELECT TOP (1) r.lease_expires_at AS t
                           FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK, READPAST)
                          WHERE r.status = N'Running' AND r.lease_expires_at > @p_now
                          ORDER BY r.lease_expires_at) AS c
        UNION ALL
        SELECT d.t FROM (SELECT TOP (1) r.retry_at AS t
                           FROM mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK, READPAST)
                          WHERE r.status = N'Queued' AND r.retry_at IS NOT NULL AND r.retry_at > @p_now
                          ORDER BY r.retry_at) AS d
        UNION ALL
        -- the end of a maintenance window (010_tags.sql)
        SELECT e.t FROM (SELECT TOP (1) p.paused_until AS t
                           FROM mjsched.job_pause AS p WITH (READCOMMITTEDLOCK, READPAST)
                          WHERE p.paused_until IS NOT NULL AND p.paused_until > @p_now
                          ORDER BY p.paused_until) AS e
    ) AS s
     WHERE s.t IS NOT NULL;
    RETURN @v_next;
END;
GO

-- claim_counters: for DispatchResult, due jobs left unclaimed for want of slots (counted
-- only when the batch was full) and due jobs held by other engines' live leases. Both
-- are capped at 1000: they feed a log line and must not cost O(backlog). Advisory, so
-- locked rows are skipped (READPAST).
CREATE OR ALTER FUNCTION mjsched.claim_counters(
    @p_instance nvarchar(255), @p_batch_full bit, @p_now datetimeoffset)
RETURNS TABLE
AS
RETURN
    SELECT (SELECT COUNT(*) FROM (
                SELECT TOP (1000) j.id
                  FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK, READPAST)
                 CROSS APPLY mjsched.claimable(j.status, j.start_at, j.end_at, j.lock_token,
                                               j.expected_completion_at, @p_now) AS c
                 WHERE @p_batch_full = 1 AND j.status = N'Active' AND j.next_run_at <= @p_now
                 ORDER BY j.next_run_at) AS d) AS due_left,     -- the due index's head, not a scan past served jobs
           (SELECT COUNT(*) FROM (
                SELECT TOP (1000) j.id
                  FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK, READPAST)
                 WHERE j.status = N'Active' AND j.next_run_at <= @p_now
                   AND j.lock_token IS NOT NULL AND j.expected_completion_at >= @p_now
                   AND EXISTS (SELECT j.locked_by_instance EXCEPT SELECT @p_instance)) AS d) AS locked_out;
GO

-- claim_due_jobs: in one transaction, lock up to @p_max_jobs claimable jobs (jobs with a
-- Queued run first: claim_queued; then due ticks oldest first: claim_ticks), skipping rows
-- other engines are claiming, and start their runs. A tick that already has a run (a
-- zombie's, say) comes back with run_id NULL: the caller only advances the schedule past
-- it. Taking over an expired lease abandons the old holder's Running runs (take_over).
-- Ended jobs are expired first, so a job past end_at is Expired at the next poll.
-- Each claim row also carries its job's row as the claim left it (read under the claim's
-- row locks, before the commit) and the job type's driver, so a poll is one round trip:
-- every column of scheduled_job but lock_token, which the engine and admin roles may not
-- read (grants.sql; the claim's own token is the row's lock_token). The last row always has
-- job_id NULL, no job columns, and carries db_now and next_due_at (the earliest instant
-- something may become claimable; NULL when nothing is scheduled), and replied_at (the
-- database clock as the claim ends).
--
-- Idempotent when the caller names the claim (@p_claim_id, a fresh GUID per claim): each
-- lock token is then derived from (@p_claim_id, job id) (claim_token), so a retry with
-- the same @p_claim_id and @p_replay = 1 -- the reply to the first call was lost, and it
-- may or may not have committed -- finds the claims that call made and answers them again,
-- claiming nothing new (claim_replay); when it finds none, the first call did not commit
-- and this one claims as usual. Without @p_claim_id tokens are random and a lost reply
-- costs those jobs one lease.
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
    DECLARE @v_before int;
    DECLARE @v_batch_full bit;
    DECLARE @v_next datetimeoffset;
    DECLARE @v_due_left int = 0;
    DECLARE @v_locked_out int = 0;
    DECLARE @v_message nvarchar(200);
    DECLARE @v_out TABLE (seq int IDENTITY(1, 1) NOT NULL PRIMARY KEY, job_id uniqueidentifier NULL,
                          run_id uniqueidentifier NULL, lock_token uniqueidentifier NULL,
                          scheduled_for datetimeoffset NULL, from_queue bit NOT NULL,
                          db_now datetimeoffset NOT NULL, next_due_at datetimeoffset NULL,
                          due_left int NULL, locked_out int NULL, replied_at datetimeoffset NULL);
    CREATE TABLE #mjsched_claimed (seq int IDENTITY(1, 1) NOT NULL PRIMARY KEY, job_id uniqueidentifier NOT NULL,
                                   run_id uniqueidentifier NULL, lock_token uniqueidentifier NULL,
                                   scheduled_for datetimeoffset NULL, from_queue bit NOT NULL);
    -- the claimed jobs' rows (scheduled_job's column types; lock_token left out)
    CREATE TABLE #mjsched_claimed_jobs (
        id uniqueidentifier NOT NULL PRIMARY KEY, job_type_id uniqueidentifier NOT NULL,
        driver nvarchar(255) NOT NULL, name nvarchar(200) NOT NULL, description nvarchar(max) NULL,
        cron_expression nvarchar(255) NULL, timezone nvarchar(64) NOT NULL, start_at datetimeoffset NULL,
        end_at datetimeoffset NULL, status nvarchar(20) NOT NULL, configuration nvarchar(max) NULL,
        owner nvarchar(255) NULL, concurrency_mode nvarchar(20) NOT NULL, missed_run_policy nvarchar(20) NOT NULL,
        run_immediately_if_never_run bit NOT NULL, max_runtime_seconds float NULL, isolation nvarchar(10) NULL,
        max_queued_runs int NOT NULL, notify_on_success bit NOT NULL, notify_on_failure bit NOT NULL,
        notify_to nvarchar(1000) NULL, next_run_at datetimeoffset NULL, last_run_at datetimeoffset NULL,
        last_success_at datetimeoffset NULL, run_count int NOT NULL, success_count int NOT NULL,
        failure_count int NOT NULL, last_duration_ms bigint NULL, total_duration_ms bigint NOT NULL,
        locked_at datetimeoffset NULL, locked_by_instance nvarchar(255) NULL,
        expected_completion_at datetimeoffset NULL, created_at datetimeoffset NOT NULL,
        updated_at datetimeoffset NOT NULL, high_frequency_ok bit NOT NULL, frequency_warned nvarchar(322) NULL,
        keep_runs_days int NULL, keep_runs_count int NULL, interval_seconds int NULL, run_at datetimeoffset NULL,
        retry_max_attempts int NULL, retry_initial_delay float NULL, retry_factor float NULL,
        retry_max_delay float NULL, retry_jitter float NULL, notify_final_attempt_only bit NOT NULL,
        retry_count int NOT NULL, tags nvarchar(2100) NULL, jitter_seconds int NULL,
        priority int NOT NULL);
    BEGIN TRY
        EXEC mjsched.check_lease @p_lease_seconds = @p_lease_seconds;
        SET @v_message = CONCAT(N'max_jobs=', COALESCE(CONVERT(nvarchar(20), @p_max_jobs), N'NULL'),
                                N' must be between 0 and 10000');
        IF @p_max_jobs IS NULL OR @p_max_jobs < 0 OR @p_max_jobs > 10000
        BEGIN
            THROW 50022, @v_message, 1;
        END;

        BEGIN TRANSACTION;
        -- Every poll is the engine's heartbeat in the registry (at most one write a second, and
        -- never waited for: note_engine_seen). The engine's own row comes first, before any job
        -- row, as in renew_tokens: one order.
        EXEC mjsched.note_engine_seen @p_instance = @p_instance, @p_now = @v_now, @p_min_age_seconds = 1;
        IF @p_replay = 1 AND @p_claim_id IS NOT NULL
        BEGIN
            INSERT INTO #mjsched_claimed (job_id, run_id, lock_token, scheduled_for, from_queue)
            SELECT c.job_id, c.run_id, c.lock_token, c.scheduled_for, c.from_queue
              FROM mjsched.claim_replay(@p_instance, @p_claim_id, @v_now) AS c;
            IF @@ROWCOUNT > 0
            BEGIN
                SET @v_left = 0;
            END;
        END;
        EXEC mjsched.expire_ended_jobs @p_now = @v_now;
        -- Maintenance windows that have passed end here (010_tags.sql); one index probe otherwise.
        IF EXISTS (SELECT 1 FROM mjsched.job_pause AS p WHERE p.paused_until <= @v_now)
        BEGIN
            EXEC mjsched.resume_paused_jobs @p_now = @v_now;
        END;
        IF @v_left > 0
        BEGIN
            SET @v_before = (SELECT COUNT(*) FROM #mjsched_claimed);
            EXEC mjsched.claim_queued @p_instance = @p_instance, @p_max_jobs = @v_left,
                 @p_lease_seconds = @p_lease_seconds, @p_now = @v_now, @p_claim_id = @p_claim_id;
            SET @v_left = @v_left - ((SELECT COUNT(*) FROM #mjsched_claimed) - @v_before);
        END;
        IF @v_left > 0
        BEGIN
            SET @v_before = (SELECT COUNT(*) FROM #mjsched_claimed);
            EXEC mjsched.claim_ticks @p_instance = @p_instance, @p_max_jobs = @v_left,
                 @p_lease_seconds = @p_lease_seconds, @p_now = @v_now, @p_claim_id = @p_claim_id;
            SET @v_left = @v_left - ((SELECT COUNT(*) FROM #mjsched_claimed) - @v_before);
            -- Held back by a tag's limit (010_tags.sql), a round's candidates may have hidden other
            -- due jobs: while a round claimed something, slots are left and a tag has a limit, claim again.
            WHILE @v_left > 0 AND (SELECT COUNT(*) FROM #mjsched_claimed) > @v_before
                  AND EXISTS (SELECT 1 FROM mjsched.tag_limit AS l WITH (READCOMMITTEDLOCK, READPAST))
            BEGIN
                SET @v_before = (SELECT COUNT(*) FROM #mjsched_claimed);
                EXEC mjsched.claim_ticks @p_instance = @p_instance, @p_max_jobs = @v_left,
                     @p_lease_seconds = @p_lease_seconds, @p_now = @v_now, @p_claim_id = @p_claim_id;
                SET @v_left = @v_left - ((SELECT COUNT(*) FROM #mjsched_claimed) - @v_before);
            END;
        END;
        SET @v_next = mjsched.next_due_at(@v_now);
        SET @v_batch_full = CASE WHEN @v_left <= 0 THEN 1 ELSE 0 END;
        SELECT @v_due_left = c.due_left, @v_locked_out = c.locked_out
          FROM mjsched.claim_counters(@p_instance, @v_batch_full, @v_now) AS c;
        -- The claimed jobs' rows as the claims left them: this transaction holds their locks.
        INSERT INTO #mjsched_claimed_jobs (
            id, job_type_id, driver, name, description, cron_expression, timezone, start_at,
            end_at, status, configuration, owner, concurrency_mode, missed_run_policy,
            run_immediately_if_never_run, max_runtime_seconds, isolation, max_queued_runs,
            notify_on_success, notify_on_failure, notify_to, next_run_at, last_run_at,
            last_success_at, run_count, success_count, failure_count, last_duration_ms,
            total_duration_ms, locked_at, locked_by_instance, expected_completion_at, created_at,
            updated_at, high_frequency_ok, frequency_warned, keep_runs_days, keep_runs_count,
            interval_seconds, run_at, retry_max_attempts, retry_initial_delay, retry_factor,
            retry_max_delay, retry_jitter, notify_final_attempt_only, retry_count, tags, jitter_seconds,
            priority)
        SELECT j.id, j.job_type_id, t.driver_class, j.name, j.description, j.cron_expression,
               j.timezone, j.start_at, j.end_at, j.status, j.configuration, j.owner,
               j.concurrency_mode, j.missed_run_policy, j.run_immediately_if_never_run,
               j.max_runtime_seconds, j.isolation, j.max_queued_runs, j.notify_on_success,
               j.notify_on_failure, j.notify_to, j.next_run_at, j.last_run_at, j.last_success_at,
               j.run_count, j.success_count, j.failure_count, j.last_duration_ms,
               j.total_duration_ms, j.locked_at, j.locked_by_instance, j.expected_completion_at,
               j.created_at, j.updated_at, j.high_frequency_ok, j.frequency_warned,
               j.keep_runs_days, j.keep_runs_count, j.interval_seconds, j.run_at,
               j.retry_max_attempts, j.retry_initial_delay, j.retry_factor, j.retry_max_delay,
               j.retry_jitter, j.notify_final_attempt_only, j.retry_count,
               -- the job's tags, comma-joined (no STRING_AGG before SQL Server 2017; a tag holds
               -- no character FOR XML would escape)
               STUFF((SELECT N',' + g.tag FROM mjsched.job_tag AS g WHERE g.scheduled_job_id = j.id
                       ORDER BY g.tag FOR XML PATH('')), 1, 1, N''),
               j.jitter_seconds, j.priority
          FROM mjsched.scheduled_job AS j
          JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
         WHERE j.id IN (SELECT c.job_id FROM #mjsched_claimed AS c);
        COMMIT TRANSACTION;
    END TRY
    BEGIN CATCH
        IF @@TRANCOUNT > 0
        BEGIN
            ROLLBACK TRANSACTION;
        END;
        THROW;
    END CATCH;

    INSERT INTO @v_out (job_id, run_id, lock_token, scheduled_for, from_queue, db_now)
    SELECT c.job_id, c.run_id, c.lock_token, c.scheduled_for, c.from_queue, @v_now
      FROM #mjsched_claimed AS c
     ORDER BY c.seq;
    -- replied_at: the database clock as the claim ends (after its commit; @p_now under a test
    -- clock), for the engine's clock estimate (see the PostgreSQL twin).
    INSERT INTO @v_out (job_id, run_id, lock_token, scheduled_for, from_queue, db_now, next_due_at,
                        due_left, locked_out, replied_at)
    VALUES (NULL, NULL, NULL, NULL, 0, @v_now, @v_next, @v_due_left, @v_locked_out,
            CASE WHEN @p_now IS NULL THEN SYSDATETIMEOFFSET() ELSE @v_now END);
    SELECT o.job_id, o.run_id, o.lock_token, o.scheduled_for, o.from_queue, o.db_now, o.next_due_at,
           o.due_left, o.locked_out, o.replied_at,
           j.job_type_id, j.driver, j.name, j.description, j.cron_expression, j.timezone,
           j.start_at, j.end_at, j.status, j.configuration, j.owner, j.concurrency_mode,
           j.missed_run_policy, j.run_immediately_if_never_run, j.max_runtime_seconds, j.isolation,
           j.max_queued_runs, j.notify_on_success, j.notify_on_failure, j.notify_to, j.next_run_at,
           j.last_run_at, j.last_success_at, j.run_count, j.success_count, j.failure_count,
           j.last_duration_ms, j.total_duration_ms, j.locked_at, j.locked_by_instance,
           j.expected_completion_at, j.created_at, j.updated_at, j.high_frequency_ok,
           j.frequency_warned, j.keep_runs_days, j.keep_runs_count, j.interval_seconds, j.run_at,
           j.retry_max_attempts, j.retry_initial_delay, j.retry_factor, j.retry_max_delay,
           j.retry_jitter, j.notify_final_attempt_only, j.retry_count, j.tags,
           -- a claimed job is not Paused: no pause record
           CAST(NULL AS datetimeoffset) AS paused_at, CAST(NULL AS nvarchar(255)) AS paused_by,
           CAST(NULL AS nvarchar(255)) AS paused_by_user, CAST(NULL AS nvarchar(1000)) AS pause_reason,
           CAST(NULL AS datetimeoffset) AS paused_until,
           j.jitter_seconds, j.priority
      FROM @v_out AS o
      LEFT JOIN #mjsched_claimed_jobs AS j ON j.id = o.job_id
     ORDER BY o.seq;
END;
GO

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
                   expected_completion_at = DATEADD(millisecond, CAST((x.lease_s - FLOOR(x.lease_s)) * 1000 AS int),
                                                    DATEADD(second, CAST(FLOOR(x.lease_s) AS int), @v_now)),
                   fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                                    ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
            OUTPUT inserted.expected_completion_at, inserted.last_run_at, inserted.fence_seq, inserted.version
              INTO @v_taken
              FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
             CROSS APPLY (SELECT mjsched.lease_interval(@p_lease_seconds, j.max_runtime_seconds) AS lease_s) AS x
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

-- engines_holding_locks: the engines of a host that still hold a job lock or a Running
-- run, with their pid and whether they stopped cleanly. A starting engine releases what
-- such an engine holds when its process is gone (release_engine_locks).
CREATE OR ALTER PROCEDURE mjsched.engines_holding_locks
    @p_host nvarchar(255)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SELECT e.instance, e.pid, e.stopped_at
      FROM mjsched.engine_instance AS e
     WHERE e.host = @p_host
       AND e.instance IN (SELECT j.locked_by_instance FROM mjsched.scheduled_job AS j
                           WHERE j.lock_token IS NOT NULL
                          UNION
                          SELECT r.executed_by_instance FROM mjsched.scheduled_job_run AS r
                           WHERE r.status = N'Running')
     ORDER BY e.instance;
END;
GO

-- internal_routines: the building blocks the procedures call as their owner. They take
-- @p_now without check_test_clock, or change rows unfenced (abandon_runs), so the engine
-- role may not call them directly: grants.sql denies them to it, and the probe skips
-- them. One row per name (PostgreSQL returns a text[]; its runs_of_tokens has no T-SQL
-- twin). This list itself stays readable by the role (grants.sql grants SELECT on it).
CREATE OR ALTER FUNCTION mjsched.internal_routines()
RETURNS TABLE
AS
RETURN
    SELECT r.internal_routines
      FROM (VALUES (N'test_pause'), (N'claimable'), (N'claim_token'), (N'abandon_runs'), (N'renew_tokens'),
                   (N'complete_items'), (N'take_over'), (N'expire_ended_jobs'), (N'claim_replay'), (N'claim_queued'), (N'claim_ticks'),
                   (N'next_due_at'), (N'claim_counters'), (N'purge_candidates'), (N'note_engine_seen'),
                   (N'json_nesting_exceeds'), (N'tag_problem'), (N'check_tag'),
                   (N'resume_paused_jobs'), (N'tags_at_limit'), (N'admit_by_tag_limits'), (N'alerts_of_call')) AS r (internal_routines);
GO

-- probe_permissions: which mjsched routines the current user may execute, the internal
-- ones (internal_routines) left out: they run only inside the procedures.
-- The names are listed here, not read from sys.objects: metadata visibility hides the
-- very routines a user has no permission on. The parity test checks that this list is
-- exactly the set of routines in this file, 004_job_admin.sql and 006_retention.sql. An inline
-- table-valued function is used with SELECT, not EXECUTE: internal_routines is the one
-- the probe asks about (grants.sql grants it).
CREATE OR ALTER PROCEDURE mjsched.probe_permissions
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    SELECT r.name AS procedure_name,
           CASE WHEN HAS_PERMS_BY_NAME(CONCAT(N'mjsched.', r.name), N'OBJECT',
                                       CASE WHEN r.name = N'internal_routines' THEN N'SELECT'
                                            ELSE N'EXECUTE' END) = 1
                THEN 1 ELSE 0 END AS can_execute
      FROM (VALUES (N'abandon_runs'), (N'acquire_job_lock'), (N'admit_by_tag_limits'), (N'advance_job'), (N'alerts_of_call'), (N'begin_job_run'),
                   (N'cancel_requests'), (N'cancel_run'), (N'check_fence'), (N'check_job_fields'), (N'check_lease'), (N'check_tag'), (N'check_test_clock'), (N'claim_counters'),
                   (N'claim_due_jobs'), (N'claim_queued'), (N'claim_replay'), (N'claim_ticks'),
                   (N'claim_token'), (N'claimable'), (N'complete_items'), (N'complete_job_run'),
                   (N'complete_job_runs'), (N'complete_runs'), (N'delete_job'), (N'engines_holding_locks'), (N'enqueue_job_run'), (N'ensure_job_type'),
                   (N'evaluate_alerts'), (N'expire_ended_jobs'), (N'extend_job_leases'), (N'force_unlock_job'),
                   (N'initialize_next_run'), (N'initialize_next_runs'), (N'insert_job'), (N'internal_routines'),
                   (N'json_nesting_exceeds'), (N'lease_interval'), (N'next_due_at'), (N'note_engine_seen'), (N'note_frequency_warned'),
                   (N'pause_jobs'), (N'probe_permissions'),
                   (N'purge_candidates'), (N'purge_job_changes'), (N'purge_runs'), (N'register_engine'),
                   (N'release_engine_locks'), (N'release_job_lock'), (N'renew_leases'), (N'renew_tokens'),
                   (N'resume_jobs'), (N'resume_paused_jobs'), (N'set_job_alerts'), (N'set_tag_limit'),
                   (N'start_manual_run'), (N'sweep_expired_leases'), (N'tag_problem'), (N'tags_at_limit'),
                   (N'take_over'), (N'test_pause'),
                   (N'unregister_engine'), (N'update_job')) AS r (name)
     WHERE NOT EXISTS (SELECT 1 FROM mjsched.internal_routines() AS i WHERE i.internal_routines = r.name)
     ORDER BY r.name;
END;
GO
