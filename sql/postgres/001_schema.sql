-- mjsched schema, version 1: job types, jobs, runs, live engines.
-- Applied once by engine.install() (recorded in mjsched.schema_version); every
-- statement is also safe to re-run by hand.

CREATE SCHEMA IF NOT EXISTS mjsched;

CREATE TABLE IF NOT EXISTS mjsched.scheduled_job_type (
    id                          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                        varchar(100) NOT NULL,
    driver_class                varchar(255) NOT NULL,
    description                 text,
    isolation                   varchar(10) NOT NULL DEFAULT 'thread',
    default_max_runtime_seconds double precision,
    CONSTRAINT uq_scheduled_job_type_name UNIQUE (name),
    CONSTRAINT uq_scheduled_job_type_driver_class UNIQUE (driver_class),
    CONSTRAINT ck_scheduled_job_type_isolation CHECK (isolation IN ('thread', 'process')),
    CONSTRAINT ck_scheduled_job_type_max_runtime
        CHECK (default_max_runtime_seconds IS NULL OR default_max_runtime_seconds > 0)
);

CREATE TABLE IF NOT EXISTS mjsched.scheduled_job (
    id                           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    job_type_id                  uuid NOT NULL REFERENCES mjsched.scheduled_job_type (id),
    name                         varchar(200) NOT NULL,
    description                  text,
    cron_expression              varchar(255) NOT NULL,
    timezone                     varchar(64) NOT NULL DEFAULT 'UTC',
    start_at                     timestamptz,
    end_at                       timestamptz,
    status                       varchar(20) NOT NULL DEFAULT 'Pending',
    configuration                jsonb,
    owner                        varchar(255),
    concurrency_mode             varchar(20) NOT NULL DEFAULT 'Skip',
    missed_run_policy            varchar(20) NOT NULL DEFAULT 'RunOnce',
    run_immediately_if_never_run boolean NOT NULL DEFAULT false,
    max_runtime_seconds          double precision,
    isolation                    varchar(10),
    max_queued_runs              integer NOT NULL DEFAULT 5,
    notify_on_success            boolean NOT NULL DEFAULT false,
    notify_on_failure            boolean NOT NULL DEFAULT true,
    notify_to                    varchar(1000),
    next_run_at                  timestamptz,
    last_run_at                  timestamptz,
    run_count                    integer NOT NULL DEFAULT 0,
    success_count                integer NOT NULL DEFAULT 0,
    failure_count                integer NOT NULL DEFAULT 0,
    last_duration_ms             bigint,
    total_duration_ms            bigint NOT NULL DEFAULT 0,
    lock_token                   uuid,
    locked_at                    timestamptz,
    locked_by_instance           varchar(255),
    expected_completion_at       timestamptz,
    created_at                   timestamptz NOT NULL DEFAULT now(),
    updated_at                   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ck_scheduled_job_status
        CHECK (status IN ('Pending', 'Active', 'Paused', 'Disabled', 'Expired')),
    CONSTRAINT ck_scheduled_job_concurrency_mode
        CHECK (concurrency_mode IN ('Skip', 'Queue', 'Concurrent')),
    CONSTRAINT ck_scheduled_job_missed_run_policy
        CHECK (missed_run_policy IN ('Skip', 'RunOnce', 'RunAll')),
    CONSTRAINT ck_scheduled_job_isolation CHECK (isolation IS NULL OR isolation IN ('thread', 'process')),
    CONSTRAINT ck_scheduled_job_window CHECK (start_at IS NULL OR end_at IS NULL OR start_at < end_at),
    CONSTRAINT ck_scheduled_job_max_runtime CHECK (max_runtime_seconds IS NULL OR max_runtime_seconds > 0),
    CONSTRAINT ck_scheduled_job_max_queued_runs CHECK (max_queued_runs BETWEEN 1 AND 1000),
    CONSTRAINT ck_scheduled_job_configuration
        CHECK (configuration IS NULL OR jsonb_typeof(configuration) = 'object'),
    CONSTRAINT ck_scheduled_job_lock
        CHECK ((lock_token IS NULL) = (expected_completion_at IS NULL))
);

-- The due scan: an index range scan on (status, next_run_at), so a poll costs O(due jobs).
CREATE INDEX IF NOT EXISTS ix_scheduled_job_due
    ON mjsched.scheduled_job (status, next_run_at);
-- Jobs whose schedule must be (re)computed by an engine (inserted or edited by SQL).
CREATE INDEX IF NOT EXISTS ix_scheduled_job_unscheduled
    ON mjsched.scheduled_job (id) WHERE status = 'Active' AND next_run_at IS NULL;
-- Locks whose lease lapsed, for the sweep.
CREATE INDEX IF NOT EXISTS ix_scheduled_job_lease
    ON mjsched.scheduled_job (expected_completion_at) WHERE lock_token IS NOT NULL;
-- Active jobs with an end of window, for expiry.
CREATE INDEX IF NOT EXISTS ix_scheduled_job_end
    ON mjsched.scheduled_job (end_at) WHERE status = 'Active' AND end_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS ix_scheduled_job_type ON mjsched.scheduled_job (job_type_id);

CREATE TABLE IF NOT EXISTS mjsched.scheduled_job_run (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scheduled_job_id     uuid NOT NULL REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
    scheduled_for        timestamptz,
    status               varchar(20) NOT NULL,
    success              boolean,
    error_message        text,
    details              jsonb,
    queued_at            timestamptz,
    started_at           timestamptz,
    completed_at         timestamptz,
    duration_ms          bigint,
    executed_by_instance varchar(255),
    lock_token           uuid,
    lease_expires_at     timestamptz,
    CONSTRAINT ck_scheduled_job_run_status CHECK (status IN
        ('Queued', 'Running', 'Completed', 'Failed', 'Timeout', 'Cancelled', 'Abandoned', 'Skipped')),
    CONSTRAINT ck_scheduled_job_run_running_has_lease
        CHECK (status <> 'Running' OR (lock_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- A tick can never produce two runs, whatever happens to leases, clocks or zombies.
-- (NULLs are distinct in PostgreSQL, so manual runs with scheduled_for NULL never collide.)
CREATE UNIQUE INDEX IF NOT EXISTS uq_scheduled_job_run_tick
    ON mjsched.scheduled_job_run (scheduled_job_id, scheduled_for);
CREATE INDEX IF NOT EXISTS ix_scheduled_job_run_job_started
    ON mjsched.scheduled_job_run (scheduled_job_id, started_at DESC);
CREATE INDEX IF NOT EXISTS ix_scheduled_job_run_lease
    ON mjsched.scheduled_job_run (lease_expires_at) WHERE status = 'Running';
CREATE INDEX IF NOT EXISTS ix_scheduled_job_run_token
    ON mjsched.scheduled_job_run (lock_token) WHERE status = 'Running';
CREATE INDEX IF NOT EXISTS ix_scheduled_job_run_queued
    ON mjsched.scheduled_job_run (scheduled_job_id, queued_at) WHERE status = 'Queued';
CREATE INDEX IF NOT EXISTS ix_scheduled_job_run_status_started
    ON mjsched.scheduled_job_run (status, started_at DESC);

CREATE TABLE IF NOT EXISTS mjsched.engine_instance (
    instance     varchar(255) PRIMARY KEY,
    host         varchar(255) NOT NULL,
    pid          integer NOT NULL,
    version      varchar(50) NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz
);

-- A change to what defines a schedule (by anyone, through any client) clears
-- next_run_at unless the writer set it, so an engine recomputes it; every change
-- wakes the engines through NOTIFY.
CREATE OR REPLACE FUNCTION mjsched.tg_scheduled_job_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
        IF (NEW.cron_expression, NEW.timezone, NEW.status, NEW.start_at)
               IS DISTINCT FROM (OLD.cron_expression, OLD.timezone, OLD.status, OLD.start_at)
           AND NEW.next_run_at IS NOT DISTINCT FROM OLD.next_run_at THEN
            NEW.next_run_at := NULL;
        END IF;
        -- Lock, schedule and statistics bookkeeping is the engines' own traffic: no wake-up.
        IF (NEW.cron_expression, NEW.timezone, NEW.status, NEW.start_at, NEW.end_at,
            NEW.configuration, NEW.concurrency_mode, NEW.job_type_id)
               IS NOT DISTINCT FROM (OLD.cron_expression, OLD.timezone, OLD.status, OLD.start_at,
                                     OLD.end_at, OLD.configuration, OLD.concurrency_mode, OLD.job_type_id)
           AND NEW.next_run_at IS NOT NULL THEN
            RETURN NEW;
        END IF;
    END IF;
    PERFORM pg_notify('mjsched_job_changed', NEW.id::text);
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS trg_scheduled_job_changed ON mjsched.scheduled_job;
CREATE TRIGGER trg_scheduled_job_changed
    BEFORE INSERT OR UPDATE ON mjsched.scheduled_job
    FOR EACH ROW EXECUTE FUNCTION mjsched.tg_scheduled_job_changed();
