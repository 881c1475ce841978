-- mjsched priorities, version 15: the twin of sql/postgres/015_priorities.sql (the reasons and
-- the aging rule are there). The columns priority and claim_at (computed: next_run_at moved
-- earlier by one minute per level of priority) are added by 001_schema.sql (SQL Server
-- resolves the columns of an existing table when it creates a procedure, and 002 and 004 read
-- and write them); the rule and the claim's index are here. Safe to re-run.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- What a row may hold: -100 to 100. Rows of an older release hold the default 0, so the rule
-- holds: it is added checked (WITH CHECK), dropped and added again with its present text.
IF OBJECT_ID(N'mjsched.ck_scheduled_job_priority', N'C') IS NOT NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job DROP CONSTRAINT ck_scheduled_job_priority;
END;
GO

ALTER TABLE mjsched.scheduled_job WITH CHECK ADD
    CONSTRAINT ck_scheduled_job_priority CHECK (priority BETWEEN -100 AND 100);
GO

-- The claim's order when the due jobs outnumber the free slots (claim_ticks): a range seek on
-- (status, claim_at), stopped at the batch's size. claim_at is deterministic and precise, so
-- it can be indexed without being persisted (the session options above are the ones an index
-- on a computed column needs, at every write too: the backends set them).
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_claim' AND object_id = OBJECT_ID(N'mjsched.scheduled_job'))
BEGIN
    CREATE INDEX ix_scheduled_job_claim
        ON mjsched.scheduled_job (status, claim_at);
END;
GO
