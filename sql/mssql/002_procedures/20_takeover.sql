-- 002_procedures, takeover: whoever frees or takes a lapsed lock ends its holder's runs Abandoned,
-- counted once (docs/guide/protocol.md).

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

-- take_jobs: a claim's takeover, written once (claim_queued, claim_ticks). The claim holds
-- the rows of @p_ids, its candidates (locked with READPAST), and @p_old are their lapsed
-- tokens (JSON arrays of {"id": ...} objects). A lapsed run another session holds (an
-- operator's open transaction) is not waited for: the runs of the lapsed tokens are locked
-- here with READPAST (their job rows are ours, so only an outsider can hold them), and a
-- candidate with a run that could not be locked is dropped, left as it is for a later claim.
-- Which runs exist is read without honouring locks (a held run would block a plain read).
-- claim_ticks (@p_from_queue = 0) also checks "no Queued tick" again, now that the job rows
-- are ours: the candidates' runs may have been read before their job rows were locked (the
-- plan decides), and a lapsed holder's enqueue_job_run may have committed a Queued tick in
-- between. Such a job is dropped, left for claim_queued, which serves the queue first. Only
-- a job with a lapsed lock can have gained one (an enqueue needs a run holding the lock); a
-- later enqueue waits for our row lock. claim_queued (@p_from_queue = 1) takes only a job
-- that still holds a Queued run. The old holders' Running runs end Abandoned (take_over),
-- then each job's lock is taken: a new token (claim_token), one lease (lease_until), and
-- the next fencing token. The ids of the jobs taken go to #mjsched_taken when the caller
-- created one, else they are the result set.
CREATE OR ALTER PROCEDURE mjsched.take_jobs
    @p_ids nvarchar(max),
    @p_old nvarchar(max),
    @p_instance nvarchar(255),
    @p_lease_seconds float,
    @p_now datetimeoffset,
    @p_claim_id uniqueidentifier,
    @p_from_queue bit
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_old nvarchar(max);
    DECLARE @v_candidates TABLE (id uniqueidentifier NOT NULL PRIMARY KEY, lock_token uniqueidentifier NULL);
    DECLARE @v_run_locks TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_taken TABLE (job_id uniqueidentifier NOT NULL PRIMARY KEY);
    IF @@TRANCOUNT = 0
    BEGIN
        THROW 50022, N'take_jobs runs inside the transaction that holds the candidates'' job rows', 1;
    END;
    -- the candidates' tokens, read under the row locks the claim holds
    INSERT INTO @v_candidates (id, lock_token)
    SELECT j.id, j.lock_token
      FROM (SELECT DISTINCT e.id FROM OPENJSON(@p_ids) WITH (id uniqueidentifier '$.id') AS e) AS c
      JOIN mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK) ON j.id = c.id;
    IF @p_old IS NOT NULL
    BEGIN
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
            OR (@p_from_queue = 0 AND c.lock_token IS NOT NULL
                AND EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS q WITH (READUNCOMMITTED)
                             WHERE q.scheduled_job_id = c.id AND q.status = N'Queued' AND q.attempt = 1));
        SET @v_old = (SELECT c.lock_token AS id FROM @v_candidates AS c WHERE c.lock_token IS NOT NULL
                         FOR JSON PATH);
        IF @v_old IS NOT NULL
        BEGIN
            EXEC mjsched.take_over @p_old_tokens = @v_old, @p_now = @p_now;
        END;
    END;
    UPDATE j
       SET lock_token = COALESCE(t.claim_token, NEWID()),
           locked_at = @p_now,
           locked_by_instance = @p_instance,
           expected_completion_at = mjsched.lease_until(@p_now, @p_lease_seconds, j.max_runtime_seconds),
           updated_at = SYSDATETIMEOFFSET(),  -- set here: the row trigger passes it over (001_schema.sql)
           fence_seq = CASE WHEN j.fence_seq < 9223372036854775807 THEN j.fence_seq + 1
                            ELSE j.fence_seq END   -- saturates: a row set to the maximum never fails a claim
    OUTPUT inserted.id INTO @v_taken
      FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
      JOIN @v_candidates AS c ON c.id = j.id
     CROSS APPLY mjsched.claim_token(@p_claim_id, j.id) AS t
     WHERE @p_from_queue = 0
        OR EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS q WITH (READCOMMITTEDLOCK)
                    WHERE q.scheduled_job_id = j.id AND q.status = N'Queued');
    IF OBJECT_ID(N'tempdb..#mjsched_taken') IS NOT NULL
    BEGIN
        INSERT INTO #mjsched_taken (job_id) SELECT t.job_id FROM @v_taken AS t;
        RETURN;
    END;
    SELECT t.job_id FROM @v_taken AS t;
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

