-- mjsched jitter, version 12: spreading a herd of jobs that share a schedule. A job's
-- jitter_seconds (NULL: none) moves every tick of its cron or interval schedule by one offset
-- in [0, jitter_seconds] whole seconds, hashed from the job's name (mjsched/schedules.py,
-- jitter_offset): stable per job, across ticks, engines and restarts; a renamed job moves.
-- The engine computes next_run_at with it, so the DST and missed-run rules apply to the moved
-- ticks. A run_at job has no jitter (its one run is at run_at). Cron's H (a value hashed from
-- the job's name, Jenkins' syntax) needs no column: it is resolved from cron_expression.
-- The column is added by 001_schema.sql, before the procedures of 002 and 004 that read and
-- write it. Every statement is idempotent: the script runs again whenever an earlier one changed.

-- What a row may hold (the rule of mjsched/validation.py; check_job_fields says the same,
-- naming the field): 1 s to one day. Rows of an older release hold NULL, so the rule holds.
ALTER TABLE mjsched.scheduled_job
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_jitter_seconds,
    ADD CONSTRAINT ck_scheduled_job_jitter_seconds
        CHECK (jitter_seconds IS NULL OR (jitter_seconds BETWEEN 1 AND 86400 AND run_at IS NULL));
