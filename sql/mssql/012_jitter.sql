-- mjsched jitter, version 12: the twin of sql/postgres/012_jitter.sql (the reasons are there).
-- A job's jitter_seconds (NULL: none) moves every tick of its cron or interval schedule by one
-- offset in [0, jitter_seconds] whole seconds, hashed from the job's name. The column is added
-- by 001_schema.sql (SQL Server resolves the columns of an existing table when it creates a
-- procedure, and 002 and 004 read and write it); its rule is here. Safe to re-run.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- What a row may hold: 1 s to one day, and none for a run_at job. Rows of an older release
-- hold NULL, so the rule holds for them: it is added checked (WITH CHECK), dropped and added
-- again with its present text at each run.
IF OBJECT_ID(N'mjsched.ck_scheduled_job_jitter_seconds', N'C') IS NOT NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT ck_scheduled_job_jitter_seconds;
END;
GO

ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_jitter_seconds
        CHECK (jitter_seconds IS NULL OR (jitter_seconds BETWEEN 1 AND 86400 AND run_at IS NULL));
GO
