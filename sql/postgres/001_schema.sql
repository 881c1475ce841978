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
    -- default_max_runtime_seconds: see "What a row may hold" at the end of this file
    CONSTRAINT ck_scheduled_job_type_isolation CHECK (isolation IN ('thread', 'process')),
    CONSTRAINT uq_scheduled_job_type_name UNIQUE (name),
    CONSTRAINT uq_scheduled_job_type_driver_class UNIQUE (driver_class)
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
    last_success_at              timestamptz,
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
    high_frequency_ok            boolean NOT NULL DEFAULT false,   -- the job's opt-out of the high-frequency warning
    frequency_warned             varchar(322),   -- the schedule last warned for: cron || ' | ' || timezone (255 + 3 + 64)
    keep_runs_days               integer,   -- run-history retention (006_retention.sql); NULL: the engine's setting
    keep_runs_count              integer,
    CONSTRAINT ck_scheduled_job_status
        CHECK (status IN ('Pending', 'Active', 'Paused', 'Disabled', 'Expired')),
    CONSTRAINT ck_scheduled_job_concurrency_mode
        CHECK (concurrency_mode IN ('Skip', 'Queue', 'Concurrent')),
    CONSTRAINT ck_scheduled_job_missed_run_policy
        CHECK (missed_run_policy IN ('Skip', 'RunOnce', 'RunAll')),
    CONSTRAINT ck_scheduled_job_isolation CHECK (isolation IS NULL OR isolation IN ('thread', 'process')),
    CONSTRAINT ck_scheduled_job_window CHECK (start_at IS NULL OR end_at IS NULL OR start_at < end_at),
    CONSTRAINT ck_scheduled_job_max_queued_runs CHECK (max_queued_runs BETWEEN 1 AND 1000),
    -- the one-column rules (numbers, instants, text, configuration): see "What a row may
    -- hold" at the end of this file, which also sets aside rows an older release left
    CONSTRAINT ck_scheduled_job_lock
        CHECK ((lock_token IS NULL) = (expected_completion_at IS NULL))
);

-- The due scan: an index range scan on (status, next_run_at), so a poll costs O(due jobs).
-- Added after the first release: when the job last completed, kept by the completion itself
-- (metrics alert on "no success in 26 h" without scanning the history). An upgrade fills it
-- from the history once, when it adds the column.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                    WHERE table_schema = 'mjsched' AND table_name = 'scheduled_job'
                      AND column_name = 'last_success_at') THEN
        ALTER TABLE mjsched.scheduled_job ADD COLUMN last_success_at timestamptz;
        UPDATE mjsched.scheduled_job j SET last_success_at = s.at
          FROM (SELECT scheduled_job_id, max(completed_at) AS at FROM mjsched.scheduled_job_run
                 WHERE status = 'Completed' GROUP BY scheduled_job_id) s
         WHERE s.scheduled_job_id = j.id;
    END IF;
END;
$$;

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
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),   -- replaced below the table: time-ordered
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
    parameters           jsonb,
    cancel_requested_at  timestamptz,
    cancel_requested_by  varchar(255),
    cancel_request_id    uuid,
    CONSTRAINT ck_scheduled_job_run_status CHECK (status IN
        ('Queued', 'Running', 'Completed', 'Failed', 'Timeout', 'Cancelled', 'Abandoned', 'Skipped')),
    CONSTRAINT ck_scheduled_job_run_running_has_lease
        CHECK (status <> 'Running' OR (lock_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT ck_scheduled_job_run_parameters
        CHECK (parameters IS NULL OR jsonb_typeof(parameters) = 'object')
);
-- Added after the first release (issue 14): a manual run's parameters, merged over the job's
-- configuration for that run only; an operator's request to cancel a Running run (cancel_run,
-- 008_run_requests.sql), which the engine holding the run reads at its next lease renewal.
-- Here rather than in 008: start_manual_run (002) writes parameters, and T-SQL resolves the
-- columns of a procedure when it is created, so the column must exist before 002 runs.
ALTER TABLE mjsched.scheduled_job_run
    ADD COLUMN IF NOT EXISTS parameters jsonb
        CONSTRAINT ck_scheduled_job_run_parameters CHECK (parameters IS NULL OR jsonb_typeof(parameters) = 'object'),
    ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz,
    ADD COLUMN IF NOT EXISTS cancel_requested_by varchar(255);
-- Added for issue 32: the caller's id of the cancel request recorded on the run, so that
-- cancel_run's replay after a lost reply answers what that same request did.
ALTER TABLE mjsched.scheduled_job_run ADD COLUMN IF NOT EXISTS cancel_request_id uuid;
-- A run's key is ordered by the time it was made: the layout of UUID version 7, 48 bits of
-- Unix milliseconds and then random bits (PostgreSQL 15 has no uuidv7()). Runs are only ever
-- added; a random key sends each insert to a random page of the primary key's index, which
-- with millions of old runs no longer fits in shared_buffers (over 20 M old runs, 4 engines ran
-- 1.13x faster with these keys). Ordered keys land on the index's right edge. SQL Server's table
-- gets the same from NEWSEQUENTIALID(). Installs from before this drew random keys; new runs
-- get these. (Set here only, for new and old installs alike: this script runs whole each time.)
ALTER TABLE mjsched.scheduled_job_run ALTER COLUMN id SET DEFAULT
    encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
            PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
            FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid;

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
    stopped_at   timestamptz,
    heartbeat_seconds   double precision,   -- the engine's poll bound: it is seen at least this often
    max_concurrent_jobs integer
);
-- Added after the first release: engines refresh last_seen_at at every poll (at most once a
-- second), so `mjsched status` calls an engine stale after a few heartbeats, not a lease.
ALTER TABLE mjsched.engine_instance ADD COLUMN IF NOT EXISTS heartbeat_seconds double precision;
ALTER TABLE mjsched.engine_instance ADD COLUMN IF NOT EXISTS max_concurrent_jobs integer;
-- Added after the first release: the high-frequency warning is said once per job and schedule
-- ever (an engine records the schedule it warned for through note_frequency_warned), and a job
-- may opt out of it.
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS high_frequency_ok boolean NOT NULL DEFAULT false;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS frequency_warned varchar(322);
-- Added after the first release: the job's run-history retention (rules and purge in
-- 006_retention.sql; here because 004's insert_job and update_job write them).
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS keep_runs_days integer;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS keep_runs_count integer;
-- Added after the first release: the interval (every=) and one-off (run_at=) schedule kinds
-- beside cron_expression; their rules (exactly one kind per job, the ranges) and the nullable
-- cron_expression are in 007_schedule_kinds.sql. The columns are here, before 004_job_admin.sql,
-- whose procedures write them.
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS interval_seconds integer;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS run_at timestamptz;
-- Added for retries (009_retries.sql holds their rules, the per-attempt UNIQUE index and the
-- reasons): the job's retry policy (all NULL: none of its own; the driver's default applies),
-- whether failures notify on the final attempt only, how many retries were scheduled; on a
-- run, its attempt number within its tick and, for a Queued retry, when it is due. Added
-- here, before 002_procedures.sql, because the procedures read them (SQL Server resolves
-- the columns of an existing table when a procedure is created).
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS retry_max_attempts integer;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS retry_initial_delay double precision;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS retry_factor double precision;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS retry_max_delay double precision;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS retry_jitter double precision;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS notify_final_attempt_only boolean NOT NULL DEFAULT true;
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS retry_count integer NOT NULL DEFAULT 0;
ALTER TABLE mjsched.scheduled_job_run ADD COLUMN IF NOT EXISTS attempt integer NOT NULL DEFAULT 1;
ALTER TABLE mjsched.scheduled_job_run ADD COLUMN IF NOT EXISTS retry_at timestamptz;
-- Added for the audit trail (013_audit.sql): the job definition's version, moved on by every
-- change to it, and the version a run started with (the claims and manual starts write it).
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS version integer NOT NULL DEFAULT 1;
ALTER TABLE mjsched.scheduled_job_run ADD COLUMN IF NOT EXISTS job_version integer;
-- Added for spreading herds (012_jitter.sql holds its rule): a job's jitter bound in seconds
-- (NULL: none); every tick of the job moves by one offset in [0, jitter_seconds] hashed from
-- its name (mjsched/schedules.py). Here, before 002 and 004, whose procedures read and write it.
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS jitter_seconds integer;
-- Fencing tokens (issue 37 item 5, docs/guide/reliability.md "Fencing tokens"): fence_seq
-- counts the job's lock takings that start a run (every claim, queued start and manual
-- start moves it on under the job's row lock), and a run keeps the value it started with:
-- a later holder of the job always has a larger token.
ALTER TABLE mjsched.scheduled_job ADD COLUMN IF NOT EXISTS fence_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE mjsched.scheduled_job_run ADD COLUMN IF NOT EXISTS fencing_token bigint;

-- A change to what defines a schedule (by anyone, through any client) clears
-- next_run_at unless the writer set it, so an engine recomputes it; every change
-- wakes the engines through NOTIFY. A one-off job (run_at) whose next run is moved past
-- its run_at has served its one tick (the engine writes mjsched.scheduling.ENDED): it
-- becomes Expired, with no next run, in the same write.
CREATE OR REPLACE FUNCTION mjsched.tg_scheduled_job_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
        IF (NEW.cron_expression, NEW.interval_seconds, NEW.run_at, NEW.timezone, NEW.status, NEW.start_at)
               IS DISTINCT FROM (OLD.cron_expression, OLD.interval_seconds, OLD.run_at, OLD.timezone,
                                 OLD.status, OLD.start_at)
           AND NEW.next_run_at IS NOT DISTINCT FROM OLD.next_run_at THEN
            NEW.next_run_at := NULL;
        END IF;
        IF NEW.run_at IS NOT NULL AND NEW.status = 'Active' AND NEW.next_run_at > NEW.run_at THEN
            NEW.status := 'Expired';
            NEW.next_run_at := NULL;
        END IF;
        -- Lock, schedule and statistics bookkeeping is the engines' own traffic: no wake-up.
        IF (NEW.cron_expression, NEW.interval_seconds, NEW.run_at, NEW.timezone, NEW.status, NEW.start_at,
            NEW.end_at, NEW.configuration, NEW.concurrency_mode, NEW.job_type_id)
               IS NOT DISTINCT FROM (OLD.cron_expression, OLD.interval_seconds, OLD.run_at, OLD.timezone,
                                     OLD.status, OLD.start_at, OLD.end_at, OLD.configuration,
                                     OLD.concurrency_mode, OLD.job_type_id)
           AND NEW.next_run_at IS NOT NULL THEN
            RETURN NEW;
        END IF;
    END IF;
    PERFORM pg_notify('mjsched_job_changed', NEW.id::text);
    RETURN NEW;
END;
$$;

-- The engines' own bookkeeping (a claim's lock, a completion's statistics and next run) sets
-- updated_at itself and changes nothing else the function above looks at: the WHEN below
-- leaves those rows alone, so the function (a plpgsql call per row, two per run) runs only
-- where it has something to do. Any other update (plain SQL, the API) leaves updated_at as
-- it was, and so still gets the function: the same row as before.
DROP TRIGGER IF EXISTS trg_scheduled_job_changed ON mjsched.scheduled_job;
DROP TRIGGER IF EXISTS trg_scheduled_job_inserted ON mjsched.scheduled_job;
CREATE TRIGGER trg_scheduled_job_inserted
    BEFORE INSERT ON mjsched.scheduled_job
    FOR EACH ROW EXECUTE FUNCTION mjsched.tg_scheduled_job_changed();
CREATE TRIGGER trg_scheduled_job_changed
    BEFORE UPDATE ON mjsched.scheduled_job
    FOR EACH ROW
    WHEN (NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at
          OR NEW.next_run_at IS NULL OR NEW.run_at IS NOT NULL
          OR (NEW.cron_expression, NEW.interval_seconds, NEW.run_at, NEW.timezone, NEW.status, NEW.start_at,
              NEW.end_at, NEW.configuration, NEW.concurrency_mode, NEW.job_type_id)
             IS DISTINCT FROM (OLD.cron_expression, OLD.interval_seconds, OLD.run_at, OLD.timezone,
                               OLD.status, OLD.start_at, OLD.end_at, OLD.configuration,
                               OLD.concurrency_mode, OLD.job_type_id))
    EXECUTE FUNCTION mjsched.tg_scheduled_job_changed();

-- What a row may hold: the rules the API checks (mjsched/validation.py), so a row written
-- by plain SQL or through insert_job/update_job cannot hold a value no engine can schedule
-- (a NaN or 1e13 max_runtime, an infinite or year-1 instant). Each rule is about one
-- column and is named ck_<table>_<column>. Instants lie in [1900-01-01, 9999-12-31] UTC.
-- (NaN compares greater than every number in PostgreSQL, so "<= 31536000" refuses it.)
-- The rules are added NOT VALID and validated just below, after "setting aside" any row
-- that breaks one (left by an older release, or written before the rule): the column is
-- cleared (NULL, or its default), the job is Disabled, and a Failed run whose
-- error_message names the field and the value records it (executed_by_instance
-- 'mjsched install'; engine.install() logs each one as a WARNING). So an upgrade never
-- fails on old rows and never leaves one that fails the claim of every engine.
ALTER TABLE mjsched.scheduled_job_type
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_type_max_runtime,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_type_default_max_runtime_seconds,
    ADD CONSTRAINT ck_scheduled_job_type_default_max_runtime_seconds
        CHECK (default_max_runtime_seconds IS NULL
               OR (default_max_runtime_seconds > 0 AND default_max_runtime_seconds <= 31536000)) NOT VALID;

ALTER TABLE mjsched.scheduled_job
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_max_runtime,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_max_runtime_seconds,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_configuration,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_name,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_description,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_cron_expression,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_timezone,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_start_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_end_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_next_run_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_last_run_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_last_success_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_locked_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_expected_completion_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_created_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_updated_at,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_run_count,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_success_count,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_failure_count,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_last_duration_ms,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_total_duration_ms,
    ADD CONSTRAINT ck_scheduled_job_max_runtime_seconds
        CHECK (max_runtime_seconds IS NULL OR (max_runtime_seconds > 0 AND max_runtime_seconds <= 31536000)) NOT VALID,
    -- JSON: an object of at most 1,000,000 bytes whose objects and arrays nest at most 64 levels
    -- (mjsched/decoding.py; a container at level 64 below the root is a 65th level)
    ADD CONSTRAINT ck_scheduled_job_configuration
        CHECK (configuration IS NULL
               OR (jsonb_typeof(configuration) = 'object' AND octet_length(configuration::text) <= 1000000
                   AND NOT jsonb_path_exists(configuration,
                                             'strict $.**{64} ? (@.type() == "object" || @.type() == "array")')))
        NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_name CHECK (length(btrim(name)) > 0) NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_description
        CHECK (description IS NULL OR length(description) <= 100000) NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_cron_expression CHECK (length(btrim(cron_expression)) > 0) NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_timezone CHECK (length(btrim(timezone)) > 0) NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_start_at
        CHECK (start_at IS NULL OR start_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_end_at
        CHECK (end_at IS NULL OR end_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_next_run_at
        CHECK (next_run_at IS NULL
               OR next_run_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_last_run_at
        CHECK (last_run_at IS NULL
               OR last_run_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_last_success_at
        CHECK (last_success_at IS NULL
               OR last_success_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_locked_at
        CHECK (locked_at IS NULL OR locked_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_expected_completion_at
        CHECK (expected_completion_at IS NULL
               OR expected_completion_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_created_at
        CHECK (created_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_updated_at
        CHECK (updated_at BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_run_count CHECK (run_count BETWEEN 0 AND 2000000000) NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_success_count CHECK (success_count BETWEEN 0 AND 2000000000) NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_failure_count CHECK (failure_count BETWEEN 0 AND 2000000000) NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_last_duration_ms
        CHECK (last_duration_ms IS NULL OR last_duration_ms BETWEEN 0 AND 4000000000000000000) NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_total_duration_ms
        CHECK (total_duration_ms BETWEEN 0 AND 4000000000000000000) NOT VALID;

-- A run's details and parameters keep the same JSON limits as a configuration (mjsched/decoding.py):
-- the completion replaces details past them with a note (complete_items), start_manual_run refuses
-- such parameters. Added NOT VALID each time this script runs and never validated: they hold for
-- every run written from now on, and an upgrade does not read the whole run history for them
-- (a run written before them is still read safely: each value is decoded on its own).
ALTER TABLE mjsched.scheduled_job_run
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_run_details_limits,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_run_parameters_limits,
    ADD CONSTRAINT ck_scheduled_job_run_details_limits
        CHECK (details IS NULL
               OR (octet_length(details::text) <= 1000000
                   AND NOT jsonb_path_exists(details,
                                             'strict $.**{64} ? (@.type() == "object" || @.type() == "array")')))
        NOT VALID,
    ADD CONSTRAINT ck_scheduled_job_run_parameters_limits
        CHECK (parameters IS NULL
               OR (octet_length(parameters::text) <= 1000000
                   AND NOT jsonb_path_exists(parameters,
                                             'strict $.**{64} ? (@.type() == "object" || @.type() == "array")')))
        NOT VALID;

-- Set aside the rows that break a rule added above, then validate it. The rule's own
-- expression (pg_get_expr) finds them, so each rule is written once. A row may break
-- several rules, and an UPDATE is checked against every rule (NOT VALID ones included),
-- so all of a row's bad columns are reset in one UPDATE.
DO $$
DECLARE
    c record;
    v_job record;
BEGIN
    CREATE TEMP TABLE mjsched_set_aside (
        job_id uuid, relname text, attname text, value text, conname text, rule text, fix text
    ) ON COMMIT DROP;
    FOR c IN
        SELECT con.conname, rel.relname, att.attname,
               pg_get_expr(con.conbin, con.conrelid) AS rule,
               CASE WHEN att.attname = 'expected_completion_at' THEN 'now()'   -- a lapsed lease: swept
                    WHEN NOT att.attnotnull THEN 'NULL'
                    ELSE coalesce(pg_get_expr(def.adbin, def.adrelid), quote_literal('(set aside)'))
               END AS fix
          FROM pg_constraint con
          JOIN pg_class rel ON rel.oid = con.conrelid
          JOIN pg_namespace nsp ON nsp.oid = rel.relnamespace AND nsp.nspname = 'mjsched'
          JOIN pg_attribute att ON att.attrelid = con.conrelid AND att.attnum = con.conkey[1]
          LEFT JOIN pg_attrdef def ON def.adrelid = con.conrelid AND def.adnum = att.attnum
         WHERE con.contype = 'c' AND NOT con.convalidated
           AND rel.relname IN ('scheduled_job', 'scheduled_job_type')
         ORDER BY rel.relname, con.conname
    LOOP
        EXECUTE format('INSERT INTO mjsched_set_aside SELECT t.id, %1$L, %2$L, left(t.%2$I::text, 200), %3$L, %4$L, %5$L
                          FROM mjsched.%1$I t WHERE (%4$s) IS FALSE',
                       c.relname, c.attname, c.conname, c.rule, c.fix);
    END LOOP;
    FOR v_job IN
        SELECT s.relname, s.job_id, string_agg(format('%I = %s', s.attname, s.fix), ', ') AS sets
          FROM mjsched_set_aside s GROUP BY s.relname, s.job_id ORDER BY s.relname, s.job_id
    LOOP
        IF v_job.relname = 'scheduled_job' THEN
            EXECUTE format('UPDATE mjsched.scheduled_job SET %s, status = ''Disabled'' WHERE id = $1', v_job.sets)
                USING v_job.job_id;
        ELSE
            EXECUTE format('UPDATE mjsched.%I SET %s WHERE id = $1', v_job.relname, v_job.sets)
                USING v_job.job_id;
        END IF;
        RAISE WARNING 'mjsched upgrade: set aside % row %: %', v_job.relname, v_job.job_id, v_job.sets;
    END LOOP;
    INSERT INTO mjsched.scheduled_job_run
           (scheduled_job_id, status, success, error_message, started_at, completed_at, duration_ms,
            executed_by_instance)
    SELECT s.job_id, 'Failed', false,
           format('set aside by the schema upgrade: %s = %s breaks rule %s (%s); the job is now Disabled '
                  'and %s was reset to %s. Fix the job, then set it Active.',
                  s.attname, coalesce(s.value, 'NULL'), s.conname, s.rule, s.attname, s.fix),
           now(), now(), 0, 'mjsched install'
      FROM mjsched_set_aside s
     WHERE s.relname = 'scheduled_job'
     ORDER BY s.job_id, s.attname;
    FOR c IN
        SELECT rel.relname, con.conname
          FROM pg_constraint con
          JOIN pg_class rel ON rel.oid = con.conrelid
          JOIN pg_namespace nsp ON nsp.oid = rel.relnamespace AND nsp.nspname = 'mjsched'
         WHERE con.contype = 'c' AND NOT con.convalidated
           AND rel.relname IN ('scheduled_job', 'scheduled_job_type')   -- the run rules stay NOT VALID
         ORDER BY rel.relname, con.conname
    LOOP
        EXECUTE format('ALTER TABLE mjsched.%I VALIDATE CONSTRAINT %I', c.relname, c.conname);
    END LOOP;
    DROP TABLE mjsched_set_aside;
END;
$$;
