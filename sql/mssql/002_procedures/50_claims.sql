-- 002_procedures, claims: one poll's claim (queued runs first, then due ticks), its replay and counters.

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
            -- the takeover (take_jobs): lapsed runs locked or the job left, old runs Abandoned, locks taken
            SET @v_json = (SELECT c.id FROM @v_candidates AS c FOR JSON PATH);
            SET @v_old = (SELECT c.lock_token AS id FROM @v_candidates AS c WHERE c.lock_token IS NOT NULL
                             FOR JSON PATH);
            CREATE TABLE #mjsched_taken (job_id uniqueidentifier NOT NULL PRIMARY KEY);
            EXEC mjsched.take_jobs @p_ids = @v_json, @p_old = @v_old, @p_instance = @p_instance,
                 @p_lease_seconds = @p_lease_seconds, @p_now = @p_now, @p_claim_id = @p_claim_id,
                 @p_from_queue = 1;
            INSERT INTO @v_taken (job_id, lock_token, lease_until, last_run_at, fence_seq, version)
            SELECT j.id, j.lock_token, j.expected_completion_at, j.last_run_at, j.fence_seq, j.version
              FROM #mjsched_taken AS k
              JOIN mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK) ON j.id = k.job_id;
            DROP TABLE #mjsched_taken;
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
                 CROSS APPLY mjsched.due(d.status, d.next_run_at, d.start_at, d.end_at, d.lock_token,
                                         d.expected_completion_at, @p_now) AS c
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
         CROSS APPLY mjsched.due(j.status, j.next_run_at, j.start_at, j.end_at, j.lock_token,
                                 j.expected_completion_at, @p_now) AS c
         WHERE (@v_backlog = 0 OR j.claim_at <= DATEADD(minute, 100, @p_now))
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
            -- the takeover (take_jobs): lapsed runs locked or the job left, old runs Abandoned, locks taken
            SET @v_json = (SELECT c.id FROM @v_candidates AS c FOR JSON PATH);
            SET @v_old = (SELECT c.lock_token AS id FROM @v_candidates AS c WHERE c.lock_token IS NOT NULL
                             FOR JSON PATH);
            CREATE TABLE #mjsched_taken (job_id uniqueidentifier NOT NULL PRIMARY KEY);
            EXEC mjsched.take_jobs @p_ids = @v_json, @p_old = @v_old, @p_instance = @p_instance,
                 @p_lease_seconds = @p_lease_seconds, @p_now = @p_now, @p_claim_id = @p_claim_id,
                 @p_from_queue = 0;
            INSERT INTO @v_taken (job_id, lock_token, next_run_at, lease_until, last_run_at, fence_seq, version)
            SELECT j.id, j.lock_token, j.next_run_at, j.expected_completion_at, j.last_run_at, j.fence_seq, j.version
              FROM #mjsched_taken AS k
              JOIN mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK) ON j.id = k.job_id;
            DROP TABLE #mjsched_taken;
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
                 CROSS APPLY mjsched.due(j.status, j.next_run_at, j.start_at, j.end_at, j.lock_token,
                                         j.expected_completion_at, @p_now) AS c
                 WHERE @p_batch_full = 1
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

