-- mjsched lock and lease procedures: the versioned script 002_procedures, T-SQL.
-- The same routines, parameter names (p_x -> @p_x, same order) and result columns as
-- sql/postgres/002_procedures/ (the same files, one concern each; its 10_foundations.sql lists
-- them); tests/unit/test_sql_parity.py holds the two to it. The lock protocol (version 3) they
-- follow is written once, in docs/guide/protocol.md ("Where each rule lives": each rule's
-- routine and file).
-- Every lock decision is made here, on the database clock (SYSDATETIMEOFFSET()).
-- @p_now exists only so tests can move time on a real server; production passes NULL.
-- Errors raised on purpose use error number 50022 (PostgreSQL's SQLSTATE 22023,
-- invalid_parameter_value) and name the parameter.
--
-- How T-SQL keeps the protocol's lock order: job rows are locked with UPDLOCK, ROWLOCK
-- (update locks held to the end of the transaction, which exclude other lockers and writers
-- but not plain readers -- the counterpart of FOR NO KEY UPDATE; a run insert's foreign-key
-- check reads the job row with a shared lock, which an update lock admits); READPAST is
-- PostgreSQL's SKIP LOCKED (renew_leases answers the tokens it skipped busy, complete_runs its
-- items). Several job rows locked without READPAST are locked in id order: their ids are
-- collected first, then locked by one statement that seeks them from a table variable keyed
-- on id (OPTION (FORCE ORDER, LOOP JOIN)). SQL Server takes row locks in the order its plan
-- reads the rows and offers no statement that guarantees an order; that plan reads them in
-- key order (uniqueidentifier order, the same for every session), and a deadlock, should one
-- still occur, is detected and rolled back by the server (error 1205, which the backend
-- retries). The test hook takes and releases an exclusive session applock named by
-- SESSION_CONTEXT N'mjsched.pause_key' (sp_set_session_context).
--
-- House rules for these files:
-- * every procedure: SET NOCOUNT ON, SET XACT_ABORT ON, at most ONE result set, and it
--   is the procedure's last statement;
-- * several statements that must hold together run in one explicit transaction inside
--   TRY/CATCH (rollback, then THROW the original error). claim_queued and claim_ticks
--   open one only when called outside a transaction (claim_due_jobs calls them inside
--   its own); abandon_runs, take_over and take_jobs refuse to run outside one, as they rely
--   on the caller holding the runs' job rows;
-- * PostgreSQL's helper functions map to T-SQL by what they do. Those that change data
--   are procedures (T-SQL functions may not): a count (abandon_runs, take_over,
--   expire_ended_jobs) is the procedure's return code, read with EXEC @n = ...; rows
--   (claim_queued, claim_ticks) go to the temporary table #mjsched_claimed when the
--   caller created one, as complete_job_runs writes to #mjsched_completed,
--   admit_by_tag_limits to #mjsched_admitted and take_jobs to #mjsched_taken (INSERT ...
--   EXEC would forbid the callee a ROLLBACK and cannot nest). The pure ones the planner
--   inlines (claimable, due, claim_token, claim_replay, claim_counters) are inline
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

-- lease_until: when a lease taken at @p_now ends. The one computation of the lease every lock
-- is taken with (take_jobs, acquire_job_lock, start_manual_run); renewal only lengthens it
-- (renew_tokens). DATEADD takes an int: whole seconds, then the milliseconds.
CREATE OR ALTER FUNCTION mjsched.lease_until(@p_now datetimeoffset, @p_lease_seconds float,
                                             @p_max_runtime_seconds float)
RETURNS datetimeoffset
WITH SCHEMABINDING
AS
BEGIN
    DECLARE @v_seconds float = mjsched.lease_interval(@p_lease_seconds, @p_max_runtime_seconds);
    DECLARE @v_until datetimeoffset = DATEADD(millisecond, CAST((@v_seconds - FLOOR(@v_seconds)) * 1000 AS int),
                                              DATEADD(second, CAST(FLOOR(@v_seconds) AS int), @p_now));
    RETURN @v_until;
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

-- due: the one definition of a job whose tick a claim may take now: claimable, and its next
-- run has come. One row (due = 1) when it is, none otherwise, for CROSS APPLY; inline like
-- claimable, so the optimizer expands it into the claim's statement and seeks the due index
-- (status, next_run_at).
CREATE OR ALTER FUNCTION mjsched.due(
    @p_status nvarchar(20), @p_next_run_at datetimeoffset, @p_start_at datetimeoffset,
    @p_end_at datetimeoffset, @p_lock_token uniqueidentifier, @p_lease_until datetimeoffset,
    @p_now datetimeoffset)
RETURNS TABLE
AS
RETURN
    SELECT 1 AS due
      FROM mjsched.claimable(@p_status, @p_start_at, @p_end_at, @p_lock_token, @p_lease_until, @p_now) AS c
     WHERE @p_next_run_at <= @p_now;
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

