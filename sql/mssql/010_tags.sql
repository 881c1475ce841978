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
