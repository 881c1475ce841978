-- mjsched retries, version 9: a Failed or Timeout run of a tick schedules the next attempt
-- of the SAME tick, with backoff (README "Retries", docs/guide/retries.md).
--
-- * The policy is five columns of scheduled_job (retry_max_attempts, retry_initial_delay,
--   retry_factor, retry_max_delay, retry_jitter): all NULL (the job has none of its own: the
--   driver's default applies, decided by the engine) or all set. notify_final_attempt_only
--   (default true) holds back failure notifications of attempts that will be retried;
--   retry_count counts the retries scheduled. The columns themselves are added in
--   001_schema.sql (the procedures of 002 read them); their rules are here.
-- * Attempts are runs of their own: scheduled_job_run.attempt (1 for the first) and, for a
--   retry waiting for its time, status 'Queued' with retry_at. The completion that ends an
--   attempt Failed or Timeout records the next attempt in the same transaction (complete_items,
--   item key retry_in: the delay the engine drew from the policy), so a crash never loses
--   it; claim_queued claims it once due, under the same job lock and lease as any run.
-- * One run per (job, tick, attempt): the UNIQUE index becomes (scheduled_job_id,
--   scheduled_for, attempt). Every first attempt has attempt 1, so a tick still never gets
--   two first runs. The procedures' inserts use ON CONFLICT DO NOTHING without a target, so
--   they hold under the index of either release.
-- Safe to re-run.

-- The rules of the new columns (a row written by plain SQL cannot hold a policy no engine
-- can apply). A policy is all five values or none.
ALTER TABLE mjsched.scheduled_job
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_retry_max_attempts,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_retry_initial_delay,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_retry_factor,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_retry_max_delay,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_retry_jitter,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_retry_count,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_retry_policy,
    ADD CONSTRAINT ck_scheduled_job_retry_max_attempts
        CHECK (retry_max_attempts IS NULL OR retry_max_attempts BETWEEN 1 AND 100),
    ADD CONSTRAINT ck_scheduled_job_retry_initial_delay
        CHECK (retry_initial_delay IS NULL OR (retry_initial_delay >= 0 AND retry_initial_delay <= 31536000)),
    ADD CONSTRAINT ck_scheduled_job_retry_factor
        CHECK (retry_factor IS NULL OR (retry_factor >= 1 AND retry_factor <= 100)),
    ADD CONSTRAINT ck_scheduled_job_retry_max_delay
        CHECK (retry_max_delay IS NULL OR (retry_max_delay >= 0 AND retry_max_delay <= 31536000)),
    ADD CONSTRAINT ck_scheduled_job_retry_jitter
        CHECK (retry_jitter IS NULL OR (retry_jitter >= 0 AND retry_jitter <= 1)),
    ADD CONSTRAINT ck_scheduled_job_retry_count CHECK (retry_count BETWEEN 0 AND 2000000000),
    ADD CONSTRAINT ck_scheduled_job_retry_policy
        CHECK ((retry_max_attempts IS NULL AND retry_initial_delay IS NULL AND retry_factor IS NULL
                AND retry_max_delay IS NULL AND retry_jitter IS NULL)
               OR (retry_max_attempts IS NOT NULL AND retry_initial_delay IS NOT NULL AND retry_factor IS NOT NULL
                   AND retry_max_delay IS NOT NULL AND retry_jitter IS NOT NULL
                   AND retry_max_delay >= retry_initial_delay));

ALTER TABLE mjsched.scheduled_job_run
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_run_attempt,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_run_retry_at,
    ADD CONSTRAINT ck_scheduled_job_run_attempt CHECK (attempt BETWEEN 1 AND 100),
    ADD CONSTRAINT ck_scheduled_job_run_retry_at
        CHECK (retry_at IS NULL OR retry_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00');

-- Retries waiting for their time, for next_due_at.
CREATE INDEX IF NOT EXISTS ix_scheduled_job_run_retry
    ON mjsched.scheduled_job_run (retry_at) WHERE status = 'Queued' AND retry_at IS NOT NULL;

-- One run per (job, tick, attempt). The index of earlier releases, on (job, tick), is
-- replaced under the same name (001_schema.sql's CREATE ... IF NOT EXISTS then leaves it).
-- After the drain (mjsched/sqlfiles.py AFTER_DRAIN): the previous release's bodies say
-- ON CONFLICT (scheduled_job_id, scheduled_for), which only the old index matches. A call of
-- that release begun before this install committed its procedures, and waiting for the
-- install's locks, runs its old body on after the commit; with the index swapped in the same
-- transaction it failed ("no unique or exclusion constraint matching the ON CONFLICT
-- specification", issue 32 item 4). install() commits everything above first, waits for the
-- transactions older than that commit to end, then runs what follows in a second one.
-- This release's procedures insert with ON CONFLICT DO NOTHING without a target, so they hold
-- under either index meanwhile.
-- mjsched:after-drain
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i
                WHERE i.indexrelid = to_regclass('mjsched.uq_scheduled_job_run_tick') AND i.indnatts = 2) THEN
        DROP INDEX mjsched.uq_scheduled_job_run_tick;
    END IF;
END;
$$;
CREATE UNIQUE INDEX IF NOT EXISTS uq_scheduled_job_run_tick
    ON mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, attempt);
