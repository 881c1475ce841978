-- mjsched schedule kinds, version 7: a job's schedule is exactly one of a cron expression
-- (cron_expression), an interval (interval_seconds: ticks start_at, else created_at, plus
-- k * interval, in absolute time) and one run (run_at: the job becomes Expired once that
-- tick is served; the trigger of 001_schema.sql does it). The columns themselves are added
-- by 001_schema.sql, before the procedures of 004_job_admin.sql that write them.
-- Every statement is idempotent: the script runs again whenever an earlier one changed.

-- cron_expression is NULL for the other two kinds (dropping NOT NULL twice is a no-op).
ALTER TABLE mjsched.scheduled_job ALTER COLUMN cron_expression DROP NOT NULL;

-- What a row may hold (the rules of mjsched/validation.py and mjsched/schedules.py, as in the
-- same section of 001_schema.sql): exactly one schedule kind; an interval of 1 s to 366 days;
-- a run_at in [1900-01-01, 9999-12-30] UTC (below the largest next_run_at, so the engine's
-- "served" marker is always later). Rows of an older release hold a cron and neither new
-- column, so every rule holds for them: the rules are added valid, dropped and added again
-- with their present text at each run.
ALTER TABLE mjsched.scheduled_job
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_schedule_kind,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_interval_seconds,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_run_at,
    ADD CONSTRAINT ck_scheduled_job_schedule_kind
        CHECK ((cron_expression IS NOT NULL)::integer + (interval_seconds IS NOT NULL)::integer
               + (run_at IS NOT NULL)::integer = 1),
    ADD CONSTRAINT ck_scheduled_job_interval_seconds
        CHECK (interval_seconds IS NULL OR interval_seconds BETWEEN 1 AND 31622400),
    ADD CONSTRAINT ck_scheduled_job_run_at
        CHECK (run_at IS NULL OR run_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-30 00:00:00+00');
