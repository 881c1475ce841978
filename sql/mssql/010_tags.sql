-- mjsched tags, version 10: the twin of sql/postgres/010_tags.sql (the reasons are there).
-- A job carries a set of tags (job_tag, written by insert_job and update_job); pause_jobs and
-- resume_jobs pause or resume every job of a tag in one call, recording who (ORIGINAL_LOGIN()
-- and the application's user), why and until when (job_pause); the claims end a window that
-- has passed (resume_paused_jobs). The tables job_tag and job_pause are created in
-- 001_schema.sql and tag_problem, the rule of a tag, in 004_job_admin.sql: procedures and
-- functions of earlier scripts read them (claim_due_jobs, next_due_at, check_job_fields), and
-- SQL Server resolves what a function reads when it creates the function. Safe to re-run.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- check_tag: the tag a procedure was given, or error 50022 naming the parameter.
CREATE OR ALTER PROCEDURE mjsched.check_tag
    @p_tag nvarchar(4000)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_problem nvarchar(200) = mjsched.tag_problem(@p_tag);
    DECLARE @v_message nvarchar(2048) = CONCAT(N'tag=', COALESCE(N'''' + LEFT(@p_tag, 200) + N'''', N'null'), N': ',
                                               @v_problem);
    IF @v_problem IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
END;
GO

-- pause_jobs: every Active job carrying @p_tag becomes Paused in one transaction, with a
-- job_pause record; job rows locked in id order, waiting. Returns how many were paused.
CREATE OR ALTER PROCEDURE mjsched.pause_jobs
    @p_tag nvarchar(4000),
    @p_reason nvarchar(4000) = NULL,
    @p_until datetimeoffset = NULL,
    @p_user nvarchar(4000) = NULL,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    EXEC mjsched.check_tag @p_tag = @p_tag;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_message nvarchar(2048) = CASE
        WHEN LEN(@p_reason) > 1000
            THEN CONCAT(N'reason: ', LEN(@p_reason), N' characters long; at most 1000 allowed')
        WHEN LEN(@p_user) > 255
            THEN CONCAT(N'user: ', LEN(@p_user), N' characters long; at most 255 allowed')
        WHEN @p_until IS NOT NULL AND NOT (@p_until > @v_now AND @p_until <= '9999-12-31T00:00:00+00:00')
            THEN CONCAT(N'until=', CONVERT(nvarchar(40), @p_until, 127),
                        N': must be later than now (the database clock reads ',
                        CONVERT(nvarchar(40), @v_now, 127), N') and before 9999-12-31')
    END;
    IF @v_message IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    DECLARE @v_ids TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_paused TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRANSACTION;
    INSERT INTO @v_ids (id)
    SELECT j.id FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
     WHERE j.status = N'Active'
       AND j.id IN (SELECT g.scheduled_job_id FROM mjsched.job_tag AS g WHERE g.tag = @p_tag)
     ORDER BY j.id;
    EXEC mjsched.test_pause @p_point = N'pause_jobs:jobs_locked';
    UPDATE j SET status = N'Paused'
    OUTPUT inserted.id INTO @v_paused
      FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
     WHERE j.id IN (SELECT i.id FROM @v_ids AS i) AND j.status = N'Active';
    DELETE p FROM mjsched.job_pause AS p WHERE p.scheduled_job_id IN (SELECT i.id FROM @v_paused AS i);
    INSERT INTO mjsched.job_pause (scheduled_job_id, paused_at, paused_by, paused_by_user, pause_reason,
                                   paused_until, tag)
    SELECT i.id, @v_now, ORIGINAL_LOGIN(), @p_user, @p_reason, @p_until, @p_tag FROM @v_paused AS i;
    COMMIT TRANSACTION;
    SELECT COUNT(*) AS paused FROM @v_paused;
END;
GO

-- resume_jobs: every Paused job carrying @p_tag becomes Active, its pause record ended.
CREATE OR ALTER PROCEDURE mjsched.resume_jobs
    @p_tag nvarchar(4000),
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    EXEC mjsched.check_tag @p_tag = @p_tag;
    DECLARE @v_ids TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_resumed TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRANSACTION;
    INSERT INTO @v_ids (id)
    SELECT j.id FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK)
     WHERE j.status = N'Paused'
       AND j.id IN (SELECT g.scheduled_job_id FROM mjsched.job_tag AS g WHERE g.tag = @p_tag)
     ORDER BY j.id;
    EXEC mjsched.test_pause @p_point = N'resume_jobs:jobs_locked';
    UPDATE j SET status = N'Active', next_run_at = NULL
    OUTPUT inserted.id INTO @v_resumed
      FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
     WHERE j.id IN (SELECT i.id FROM @v_ids AS i) AND j.status = N'Paused';
    DELETE p FROM mjsched.job_pause AS p WHERE p.scheduled_job_id IN (SELECT i.id FROM @v_ids AS i);
    COMMIT TRANSACTION;
    SELECT COUNT(*) AS resumed FROM @v_resumed;
END;
GO

-- resume_paused_jobs: the end of the windows that have passed (claim_due_jobs calls it, inside
-- its transaction, while one has). Candidates locked first, READPAST (one being paused or
-- edited is left for a later claim); the window is read again under those locks, so a pause
-- renewed meanwhile is not ended. Returns how many resumed.
CREATE OR ALTER PROCEDURE mjsched.resume_paused_jobs
    @p_now datetimeoffset
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_ids TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_ended TABLE (id uniqueidentifier NOT NULL PRIMARY KEY);
    DECLARE @v_rows int;
    INSERT INTO @v_ids (id)
    SELECT j.id FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK, READPAST, READCOMMITTEDLOCK)
     WHERE j.status = N'Paused'
       AND j.id IN (SELECT p.scheduled_job_id FROM mjsched.job_pause AS p WHERE p.paused_until <= @p_now);
    IF NOT EXISTS (SELECT 1 FROM @v_ids)
    BEGIN
        RETURN 0;
    END;
    DELETE p
    OUTPUT deleted.scheduled_job_id INTO @v_ended
      FROM mjsched.job_pause AS p WITH (READCOMMITTEDLOCK)
     WHERE p.scheduled_job_id IN (SELECT i.id FROM @v_ids AS i) AND p.paused_until <= @p_now;
    UPDATE j SET status = N'Active', next_run_at = NULL
      FROM mjsched.scheduled_job AS j WITH (ROWLOCK)
     WHERE j.id IN (SELECT e.id FROM @v_ended AS e) AND j.status = N'Paused';
    SET @v_rows = @@ROWCOUNT;
    RETURN @v_rows;
END;
GO

-- ---------------------------------------------------------------------------------------------
-- A cluster-wide concurrency limit per tag (issue 37 item 2; the rules are in the PostgreSQL twin).

-- set_tag_limit: at most @p_max_running runs of the tag's jobs Running at once (NULL: no limit).
CREATE OR ALTER PROCEDURE mjsched.set_tag_limit
    @p_tag nvarchar(4000),
    @p_max_running int,
    @p_user nvarchar(4000) = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_tag @p_tag = @p_tag;
    DECLARE @v_message nvarchar(2048) = CASE
        WHEN @p_max_running IS NOT NULL AND @p_max_running NOT BETWEEN 0 AND 100000
            THEN CONCAT(N'max_running=', @p_max_running, N': must be between 0 and 100000 (NULL lifts the limit)')
        WHEN LEN(@p_user) > 255
            THEN CONCAT(N'user: ', LEN(@p_user), N' characters long; at most 255 allowed')
    END;
    IF @v_message IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    BEGIN TRANSACTION;
    DELETE l FROM mjsched.tag_limit AS l WITH (ROWLOCK) WHERE l.tag = @p_tag;
    INSERT INTO mjsched.tag_limit (tag, max_running, set_at, set_by, set_by_user)
    SELECT @p_tag, @p_max_running, SYSDATETIMEOFFSET(), ORIGINAL_LOGIN(), @p_user
     WHERE @p_max_running IS NOT NULL;
    COMMIT TRANSACTION;
    SELECT 1 AS changed;
END;
GO

-- tags_at_limit: the limited tags with no free slot now (an advisory read: locked rows are
-- skipped; admit_by_tag_limits decides under the locks).
CREATE OR ALTER FUNCTION mjsched.tags_at_limit()
RETURNS TABLE
AS
RETURN
    SELECT l.tag
      FROM mjsched.tag_limit AS l WITH (READCOMMITTEDLOCK, READPAST)
     WHERE l.max_running <= (SELECT COUNT(*)
                               FROM mjsched.job_tag AS g WITH (READCOMMITTEDLOCK, READPAST)
                               JOIN mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK, READPAST)
                                 ON r.scheduled_job_id = g.scheduled_job_id
                              WHERE g.tag = l.tag AND r.status = N'Running');
GO

-- admit_by_tag_limits: of the candidate jobs a claim holds (@p_ids: a JSON array of {"id"} in claim
-- order), those it may start now without taking a tag past its limit (ids: the same form, same
-- order) and the lock tokens of their lapsed holders (old: [{"id": token}]). When a candidate
-- carries a limited tag, every tag_limit row it can have without waiting is locked first
-- (READPAST: a row another session holds is skipped and its tag admits nothing this claim);
-- the Running runs of each limited tag are then counted from its jobs (job_tag by tag, then
-- each job's runs), so the count reads only runs of limited jobs: a claim adding runs of those
-- holds these very locks. The rows go to the caller's #mjsched_admitted when it created one.
CREATE OR ALTER PROCEDURE mjsched.admit_by_tag_limits
    @p_ids nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_ids TABLE (seq int NOT NULL PRIMARY KEY, id uniqueidentifier NOT NULL);
    DECLARE @v_free TABLE (tag nvarchar(64) NOT NULL PRIMARY KEY, free int NOT NULL);
    DECLARE @v_out TABLE (seq int NOT NULL PRIMARY KEY, id uniqueidentifier NOT NULL);
    DECLARE @v_locked TABLE (tag nvarchar(64) NOT NULL PRIMARY KEY);
    DECLARE @v_seq int = -1, @v_id uniqueidentifier;
    DECLARE @v_limited bit = 0;
    INSERT INTO @v_ids (seq, id)
    SELECT CONVERT(int, e.[key]), CONVERT(uniqueidentifier, JSON_VALUE(e.[value], N'$.id'))
      FROM OPENJSON(@p_ids) AS e;
    IF EXISTS (SELECT 1 FROM @v_ids AS i
                 JOIN mjsched.job_tag AS g WITH (READCOMMITTEDLOCK) ON g.scheduled_job_id = i.id
                 JOIN mjsched.tag_limit AS l WITH (READCOMMITTEDLOCK) ON l.tag = g.tag)
    BEGIN
        SET @v_limited = 1;
    END;
    IF @v_limited = 0
    BEGIN
        INSERT INTO @v_out (seq, id) SELECT i.seq, i.id FROM @v_ids AS i;
    END;
    IF @v_limited = 1
    BEGIN
        -- every limit this claim can have now, never waiting (READPAST): a limit row another
        -- session holds is skipped, and its tag admits nothing this claim (not in @v_free)
        INSERT INTO @v_locked (tag)
        SELECT l.tag FROM mjsched.tag_limit AS l WITH (UPDLOCK, ROWLOCK, READPAST, READCOMMITTEDLOCK) ORDER BY l.tag;
        EXEC mjsched.test_pause @p_point = N'claim_due_jobs:tag_limits_locked';
        INSERT INTO @v_free (tag, free)
        SELECT l.tag, l.max_running - (SELECT COUNT(*)
                                         FROM mjsched.job_tag AS g WITH (READCOMMITTEDLOCK)
                                         JOIN mjsched.scheduled_job_run AS r WITH (READCOMMITTEDLOCK)
                                           ON r.scheduled_job_id = g.scheduled_job_id
                                        WHERE g.tag = l.tag AND r.status = N'Running')
          FROM @v_locked AS h
          JOIN mjsched.tag_limit AS l WITH (READCOMMITTEDLOCK) ON l.tag = h.tag;
        WHILE 1 = 1
        BEGIN
            SELECT TOP (1) @v_seq = i.seq, @v_id = i.id FROM @v_ids AS i WHERE i.seq > @v_seq ORDER BY i.seq;
            IF @@ROWCOUNT = 0
            BEGIN
                BREAK;
            END;
            -- held back: a limited tag without a free slot, or whose limit another session held
            -- (not in @v_free; the limit's existence read without waiting for that session)
            IF NOT EXISTS (SELECT 1 FROM mjsched.job_tag AS g WITH (READCOMMITTEDLOCK)
                             JOIN mjsched.tag_limit AS l WITH (READUNCOMMITTED) ON l.tag = g.tag
                             LEFT JOIN @v_free AS f ON f.tag = g.tag
                            WHERE g.scheduled_job_id = @v_id AND (f.free IS NULL OR f.free <= 0))
            BEGIN
                INSERT INTO @v_out (seq, id) VALUES (@v_seq, @v_id);
                UPDATE f SET free = f.free - 1
                  FROM @v_free AS f
                 WHERE f.tag IN (SELECT g.tag FROM mjsched.job_tag AS g WITH (READCOMMITTEDLOCK)
                                  WHERE g.scheduled_job_id = @v_id);
            END;
        END;
    END;
    -- To the caller's #mjsched_admitted when it created one (the claims), else to the client.
    IF OBJECT_ID(N'tempdb..#mjsched_admitted') IS NOT NULL
    BEGIN
        INSERT INTO #mjsched_admitted (ids, old)
        SELECT (SELECT o.id FROM @v_out AS o ORDER BY o.seq FOR JSON PATH),
               (SELECT j.lock_token AS id FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK)
                 WHERE j.id IN (SELECT o.id FROM @v_out AS o) AND j.lock_token IS NOT NULL FOR JSON PATH);
        RETURN;
    END;
    SELECT (SELECT o.id FROM @v_out AS o ORDER BY o.seq FOR JSON PATH) AS ids,
           (SELECT j.lock_token AS id FROM mjsched.scheduled_job AS j WITH (READCOMMITTEDLOCK)
             WHERE j.id IN (SELECT o.id FROM @v_out AS o) AND j.lock_token IS NOT NULL FOR JSON PATH) AS old;
END;
GO
