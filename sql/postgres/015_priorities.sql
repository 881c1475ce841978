-- mjsched priorities, version 15: when more is due than an engine has free slots, the claim
-- (claim_ticks, 002_procedures/50_claims.sql) takes the due jobs in the order of
-- claim_at(next_run_at, priority) = next_run_at - priority minutes, ties by next_run_at: a
-- higher priority first, among ticks that fell due within a few minutes of each other, and
-- aging beyond that: a tick of priority p is behind a tick of priority q only while that tick
-- fell due less than (q - p) minutes after it, so once a tick has been due 200 minutes (the
-- width of -100..100) no newer tick comes before it, whatever its priority. The column and
-- claim_at are added by 001_schema.sql (before the procedures that read them); its rule and the
-- claim's index are here. Every statement is idempotent: the script runs again whenever an
-- earlier one changed.

-- What a row may hold (the rule of mjsched/validation.py; check_job_fields says the same,
-- naming the field). Rows of an older release hold the default 0, so the rule holds.
ALTER TABLE mjsched.scheduled_job
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_priority,
    ADD CONSTRAINT ck_scheduled_job_priority CHECK (priority BETWEEN -100 AND 100);

-- The claim's order when the due jobs outnumber the free slots: an index range scan on
-- (status, claim_at) up to claim_at <= now + 100 minutes (no due job lies beyond), stopped at
-- the batch's size. While the due jobs fit the batch the claim reads ix_scheduled_job_due
-- alone, as before (claim_ticks says why).
CREATE INDEX IF NOT EXISTS ix_scheduled_job_claim
    ON mjsched.scheduled_job (status, mjsched.claim_at(next_run_at, priority));
