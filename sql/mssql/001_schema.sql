-- mjsched schema, version 1 (T-SQL): job types, jobs, runs, live engines.
-- The same tables, columns, CHECK constraints and indexes as sql/postgres/001_schema.sql
-- (tests/unit/test_sql_parity.py holds the two to it).
-- Applied once by engine.install() under sp_getapplock (recorded in
-- mjsched.schema_version); every batch is also safe to re-run by hand.
-- Batches are separated by GO lines; the backend splits on them.
-- Types: uuid -> uniqueidentifier, timestamptz -> datetimeoffset, jsonb -> nvarchar(max)
-- with ISJSON checks, boolean -> bit, text -> nvarchar(max).

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

IF SCHEMA_ID(N'mjsched') IS NULL
BEGIN
    EXEC sys.sp_executesql N'CREATE SCHEMA mjsched';
END;
GO

IF OBJECT_ID(N'mjsched.scheduled_job_type', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.scheduled_job_type (
        id                          uniqueidentifier NOT NULL
            CONSTRAINT df_scheduled_job_type_id DEFAULT NEWSEQUENTIALID(),
        name                        nvarchar(100) NOT NULL,
        driver_class                nvarchar(255) NOT NULL,
        description                 nvarchar(max) NULL,
        isolation                   nvarchar(10) NOT NULL
            CONSTRAINT df_scheduled_job_type_isolation DEFAULT N'thread',
        default_max_runtime_seconds float NULL,
        CONSTRAINT pk_scheduled_job_type PRIMARY KEY (id),
        -- default_max_runtime_seconds: see "What a row may hold" at the end of this file
        CONSTRAINT ck_scheduled_job_type_isolation CHECK (isolation IN (N'thread', N'process')),
        CONSTRAINT uq_scheduled_job_type_name UNIQUE (name),
        CONSTRAINT uq_scheduled_job_type_driver_class UNIQUE (driver_class)
    );
END;
GO

IF OBJECT_ID(N'mjsched.scheduled_job', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.scheduled_job (
        id                           uniqueidentifier NOT NULL
            CONSTRAINT df_scheduled_job_id DEFAULT NEWSEQUENTIALID(),
        job_type_id                  uniqueidentifier NOT NULL,
        name                         nvarchar(200) NOT NULL,
        description                  nvarchar(max) NULL,
        cron_expression              nvarchar(255) NOT NULL,
        timezone                     nvarchar(64) NOT NULL
            CONSTRAINT df_scheduled_job_timezone DEFAULT N'UTC',
        start_at                     datetimeoffset NULL,
        end_at                       datetimeoffset NULL,
        status                       nvarchar(20) NOT NULL
            CONSTRAINT df_scheduled_job_status DEFAULT N'Pending',
        configuration                nvarchar(max) NULL,
        owner                        nvarchar(255) NULL,
        concurrency_mode             nvarchar(20) NOT NULL
            CONSTRAINT df_scheduled_job_concurrency_mode DEFAULT N'Skip',
        missed_run_policy            nvarchar(20) NOT NULL
            CONSTRAINT df_scheduled_job_missed_run_policy DEFAULT N'RunOnce',
        run_immediately_if_never_run bit NOT NULL
            CONSTRAINT df_scheduled_job_run_immediately DEFAULT 0,
        max_runtime_seconds          float NULL,
        isolation                    nvarchar(10) NULL,
        max_queued_runs              int NOT NULL
            CONSTRAINT df_scheduled_job_max_queued_runs DEFAULT 5,
        notify_on_success            bit NOT NULL
            CONSTRAINT df_scheduled_job_notify_on_success DEFAULT 0,
        notify_on_failure            bit NOT NULL
            CONSTRAINT df_scheduled_job_notify_on_failure DEFAULT 1,
        notify_to                    nvarchar(1000) NULL,
        next_run_at                  datetimeoffset NULL,
        last_run_at                  datetimeoffset NULL,
        last_success_at              datetimeoffset NULL,
        run_count                    int NOT NULL
            CONSTRAINT df_scheduled_job_run_count DEFAULT 0,
        success_count                int NOT NULL
            CONSTRAINT df_scheduled_job_success_count DEFAULT 0,
        failure_count                int NOT NULL
            CONSTRAINT df_scheduled_job_failure_count DEFAULT 0,
        last_duration_ms             bigint NULL,
        total_duration_ms            bigint NOT NULL
            CONSTRAINT df_scheduled_job_total_duration_ms DEFAULT 0,
        lock_token                   uniqueidentifier NULL,
        locked_at                    datetimeoffset NULL,
        locked_by_instance           nvarchar(255) NULL,
        expected_completion_at       datetimeoffset NULL,
        created_at                   datetimeoffset NOT NULL
            CONSTRAINT df_scheduled_job_created_at DEFAULT SYSDATETIMEOFFSET(),
        updated_at                   datetimeoffset NOT NULL
            CONSTRAINT df_scheduled_job_updated_at DEFAULT SYSDATETIMEOFFSET(),
        high_frequency_ok            bit NOT NULL   -- the job's opt-out of the high-frequency warning
            CONSTRAINT df_scheduled_job_high_frequency_ok DEFAULT 0,
        frequency_warned             nvarchar(322) NULL,   -- the schedule last warned for: cron + N' | ' + timezone
        keep_runs_days               int NULL,   -- run-history retention (006_retention.sql); NULL: the engine's setting
        keep_runs_count              int NULL,
        CONSTRAINT pk_scheduled_job PRIMARY KEY (id),
        CONSTRAINT fk_scheduled_job_job_type FOREIGN KEY (job_type_id)
            REFERENCES mjsched.scheduled_job_type (id),
        CONSTRAINT ck_scheduled_job_status
            CHECK (status IN (N'Pending', N'Active', N'Paused', N'Disabled', N'Expired')),
        CONSTRAINT ck_scheduled_job_concurrency_mode
            CHECK (concurrency_mode IN (N'Skip', N'Queue', N'Concurrent')),
        CONSTRAINT ck_scheduled_job_missed_run_policy
            CHECK (missed_run_policy IN (N'Skip', N'RunOnce', N'RunAll')),
        CONSTRAINT ck_scheduled_job_isolation
            CHECK (isolation IS NULL OR isolation IN (N'thread', N'process')),
        CONSTRAINT ck_scheduled_job_window CHECK (start_at IS NULL OR end_at IS NULL OR start_at < end_at),
        CONSTRAINT ck_scheduled_job_max_queued_runs CHECK (max_queued_runs BETWEEN 1 AND 1000),
        -- the one-column rules (numbers, instants, text, configuration): see "What a row may
        -- hold" at the end of this file, which also sets aside rows an older release left
        CONSTRAINT ck_scheduled_job_lock
            CHECK ((lock_token IS NULL AND expected_completion_at IS NULL)
                   OR (lock_token IS NOT NULL AND expected_completion_at IS NOT NULL))
    );
END;
GO

-- The due scan: an index range scan on (status, next_run_at), so a poll costs O(due jobs).
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_due' AND object_id = OBJECT_ID(N'mjsched.scheduled_job'))
BEGIN
    CREATE INDEX ix_scheduled_job_due
        ON mjsched.scheduled_job (status, next_run_at);
END;
GO

-- Jobs whose schedule must be (re)computed by an engine (inserted or edited by SQL).
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_unscheduled' AND object_id = OBJECT_ID(N'mjsched.scheduled_job'))
BEGIN
    CREATE INDEX ix_scheduled_job_unscheduled
        ON mjsched.scheduled_job (id) WHERE status = N'Active' AND next_run_at IS NULL;
END;
GO

-- Locks whose lease lapsed, for the sweep.
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_lease' AND object_id = OBJECT_ID(N'mjsched.scheduled_job'))
BEGIN
    CREATE INDEX ix_scheduled_job_lease
        ON mjsched.scheduled_job (expected_completion_at) WHERE lock_token IS NOT NULL;
END;
GO


-- Active jobs with an end of window, for expiry.
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_end' AND object_id = OBJECT_ID(N'mjsched.scheduled_job'))
BEGIN
    CREATE INDEX ix_scheduled_job_end
        ON mjsched.scheduled_job (end_at) WHERE status = N'Active' AND end_at IS NOT NULL;
END;
GO

IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_type' AND object_id = OBJECT_ID(N'mjsched.scheduled_job'))
BEGIN
    CREATE INDEX ix_scheduled_job_type ON mjsched.scheduled_job (job_type_id);
END;
GO

IF OBJECT_ID(N'mjsched.scheduled_job_run', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.scheduled_job_run (
        id                   uniqueidentifier NOT NULL
            CONSTRAINT df_scheduled_job_run_id DEFAULT NEWSEQUENTIALID(),
        scheduled_job_id     uniqueidentifier NOT NULL,
        scheduled_for        datetimeoffset NULL,
        status               nvarchar(20) NOT NULL,
        success              bit NULL,
        error_message        nvarchar(max) NULL,
        details              nvarchar(max) NULL,
        queued_at            datetimeoffset NULL,
        started_at           datetimeoffset NULL,
        completed_at         datetimeoffset NULL,
        duration_ms          bigint NULL,
        executed_by_instance nvarchar(255) NULL,
        lock_token           uniqueidentifier NULL,
        lease_expires_at     datetimeoffset NULL,
        parameters           nvarchar(max) NULL,
        cancel_requested_at  datetimeoffset NULL,
        cancel_requested_by  nvarchar(255) NULL,
        cancel_request_id    uniqueidentifier NULL,
        CONSTRAINT pk_scheduled_job_run PRIMARY KEY (id),
        CONSTRAINT fk_scheduled_job_run_job FOREIGN KEY (scheduled_job_id)
            REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
        CONSTRAINT ck_scheduled_job_run_status CHECK (status IN
            (N'Queued', N'Running', N'Completed', N'Failed', N'Timeout', N'Cancelled', N'Abandoned', N'Skipped')),
        CONSTRAINT ck_scheduled_job_run_running_has_lease
            CHECK (status <> N'Running' OR (lock_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
        CONSTRAINT ck_scheduled_job_run_details CHECK (details IS NULL OR ISJSON(details) = 1),
        -- a JSON object, as jsonb_typeof(parameters) = 'object' in PostgreSQL
        CONSTRAINT ck_scheduled_job_run_parameters
            CHECK (parameters IS NULL OR (ISJSON(parameters) = 1 AND LEFT(LTRIM(parameters), 1) = N'{'))
    );
END;
GO

-- Added after the first release (issue 14): a manual run's parameters, merged over the job's
-- configuration for that run only; an operator's request to cancel a Running run (cancel_run,
-- 008_run_requests.sql), which the engine holding the run reads at its next lease renewal.
-- Here rather than in 008: start_manual_run (002) writes parameters, and a procedure's
-- columns are resolved when it is created, so the column must exist before 002 runs.
IF COL_LENGTH(N'mjsched.scheduled_job_run', N'parameters') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job_run ADD parameters nvarchar(max) NULL
        CONSTRAINT ck_scheduled_job_run_parameters
            CHECK (parameters IS NULL OR (ISJSON(parameters) = 1 AND LEFT(LTRIM(parameters), 1) = N'{'));
END;
IF COL_LENGTH(N'mjsched.scheduled_job_run', N'cancel_requested_at') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job_run ADD cancel_requested_at datetimeoffset NULL;
END;
IF COL_LENGTH(N'mjsched.scheduled_job_run', N'cancel_requested_by') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job_run ADD cancel_requested_by nvarchar(255) NULL;
END;
-- Added for issue 32: the caller's id of the cancel request recorded on the run, so that
-- cancel_run's replay after a lost reply answers what that same request did.
IF COL_LENGTH(N'mjsched.scheduled_job_run', N'cancel_request_id') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job_run ADD cancel_request_id uniqueidentifier NULL;
END;
GO

-- A tick can never produce two runs, whatever happens to leases, clocks or zombies.
-- NULLs are not distinct in a SQL Server UNIQUE index, hence the filter: manual runs
-- (scheduled_for NULL) never collide.
IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'uq_scheduled_job_run_tick' AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE UNIQUE INDEX uq_scheduled_job_run_tick
        ON mjsched.scheduled_job_run (scheduled_job_id, scheduled_for) WHERE scheduled_for IS NOT NULL;
END;
GO

IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_run_job_started'
                  AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE INDEX ix_scheduled_job_run_job_started
        ON mjsched.scheduled_job_run (scheduled_job_id, started_at DESC);
END;
GO

IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_run_lease' AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE INDEX ix_scheduled_job_run_lease
        ON mjsched.scheduled_job_run (lease_expires_at) WHERE status = N'Running';
END;
GO

IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_run_token' AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE INDEX ix_scheduled_job_run_token
        ON mjsched.scheduled_job_run (lock_token) WHERE status = N'Running';
END;
GO

IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_run_queued' AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE INDEX ix_scheduled_job_run_queued
        ON mjsched.scheduled_job_run (scheduled_job_id, queued_at) WHERE status = N'Queued';
END;
GO

IF NOT EXISTS (SELECT 1 FROM sys.indexes
                WHERE name = N'ix_scheduled_job_run_status_started'
                  AND object_id = OBJECT_ID(N'mjsched.scheduled_job_run'))
BEGIN
    CREATE INDEX ix_scheduled_job_run_status_started
        ON mjsched.scheduled_job_run (status, started_at DESC);
END;
GO

-- Tags (010_tags.sql): a job's tags, and the record of a pause_jobs pause. Here, before
-- 002_procedures.sql, whose claim and next_due_at read them.
IF OBJECT_ID(N'mjsched.job_tag', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.job_tag (
        scheduled_job_id uniqueidentifier NOT NULL,
        tag              nvarchar(64) NOT NULL,
        CONSTRAINT pk_job_tag PRIMARY KEY (scheduled_job_id, tag),
        CONSTRAINT fk_job_tag_job FOREIGN KEY (scheduled_job_id)
            REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
        -- tag_problem's rule: a-z, 0-9, '.', '_', '-', starting with a letter or a digit
        CONSTRAINT ck_job_tag_tag
            CHECK (LEN(tag) BETWEEN 1 AND 64
                   AND tag COLLATE Latin1_General_BIN2 NOT LIKE N'%[^a-z0-9._-]%'
                   AND tag COLLATE Latin1_General_BIN2 LIKE N'[a-z0-9]%')
    );
END;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'ix_job_tag_tag' AND object_id = OBJECT_ID(N'mjsched.job_tag'))
BEGIN
    CREATE INDEX ix_job_tag_tag ON mjsched.job_tag (tag, scheduled_job_id);
END;

IF OBJECT_ID(N'mjsched.job_pause', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.job_pause (
        scheduled_job_id uniqueidentifier NOT NULL,
        paused_at        datetimeoffset NOT NULL,
        paused_by        nvarchar(255) NOT NULL,     -- the database login (ORIGINAL_LOGIN())
        paused_by_user   nvarchar(255) NULL,         -- the application's user, when the caller named one
        pause_reason     nvarchar(1000) NULL,
        paused_until     datetimeoffset NULL,        -- NULL: until resumed
        tag              nvarchar(64) NOT NULL,      -- the tag the pause was for
        CONSTRAINT pk_job_pause PRIMARY KEY (scheduled_job_id),
        CONSTRAINT fk_job_pause_job FOREIGN KEY (scheduled_job_id)
            REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
        CONSTRAINT ck_job_pause_paused_until
            CHECK (paused_until IS NULL
                   OR paused_until BETWEEN '1900-01-01T00:00:00+00:00' AND '9999-12-31T00:00:00+00:00')
    );
END;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE name = N'ix_job_pause_until' AND object_id = OBJECT_ID(N'mjsched.job_pause'))
BEGIN
    CREATE INDEX ix_job_pause_until ON mjsched.job_pause (paused_until) WHERE paused_until IS NOT NULL;
END;
GO

-- A tag's cluster-wide limit (010_tags.sql): here too, for the claims of 002.
IF OBJECT_ID(N'mjsched.tag_limit', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.tag_limit (
        tag         nvarchar(64) NOT NULL,
        max_running int NOT NULL,
        set_at      datetimeoffset NOT NULL,
        set_by      nvarchar(255) NOT NULL,      -- the database login (ORIGINAL_LOGIN())
        set_by_user nvarchar(255) NULL,          -- the application's user, when the caller named one
        CONSTRAINT pk_tag_limit PRIMARY KEY (tag),
        CONSTRAINT ck_tag_limit_tag
            CHECK (LEN(tag) BETWEEN 1 AND 64
                   AND tag COLLATE Latin1_General_BIN2 NOT LIKE N'%[^a-z0-9._-]%'
                   AND tag COLLATE Latin1_General_BIN2 LIKE N'[a-z0-9]%'),
        CONSTRAINT ck_tag_limit_max_running CHECK (max_running BETWEEN 0 AND 100000)
    );
END;
GO

IF OBJECT_ID(N'mjsched.engine_instance', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.engine_instance (
        instance     nvarchar(255) NOT NULL,
        host         nvarchar(255) NOT NULL,
        pid          int NOT NULL,
        version      nvarchar(50) NOT NULL,
        started_at   datetimeoffset NOT NULL
            CONSTRAINT df_engine_instance_started_at DEFAULT SYSDATETIMEOFFSET(),
        last_seen_at datetimeoffset NOT NULL
            CONSTRAINT df_engine_instance_last_seen_at DEFAULT SYSDATETIMEOFFSET(),
        stopped_at   datetimeoffset NULL,
        heartbeat_seconds   float NULL,   -- the engine's poll bound: it is seen at least this often
        max_concurrent_jobs int NULL,
        CONSTRAINT pk_engine_instance PRIMARY KEY (instance)
    );
END;
-- Added after the first release: engines refresh last_seen_at at every poll (at most once a
-- second), so `mjsched status` calls an engine stale after a few heartbeats, not a lease.
IF COL_LENGTH(N'mjsched.engine_instance', N'heartbeat_seconds') IS NULL
BEGIN
    ALTER TABLE mjsched.engine_instance ADD heartbeat_seconds float NULL;
END;
IF COL_LENGTH(N'mjsched.engine_instance', N'max_concurrent_jobs') IS NULL
BEGIN
    ALTER TABLE mjsched.engine_instance ADD max_concurrent_jobs int NULL;
END;
-- Added after the first release: when the job last completed, kept by the completion itself
-- (metrics alert on "no success in 26 h" without scanning the history).
IF COL_LENGTH(N'mjsched.scheduled_job', N'last_success_at') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD last_success_at datetimeoffset NULL;
END;
-- Added after the first release: the high-frequency warning is said once per job and schedule
-- ever (an engine records the schedule it warned for through note_frequency_warned), and a job
-- may opt out of it.
IF COL_LENGTH(N'mjsched.scheduled_job', N'high_frequency_ok') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD high_frequency_ok bit NOT NULL
        CONSTRAINT df_scheduled_job_high_frequency_ok DEFAULT 0;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'frequency_warned') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD frequency_warned nvarchar(322) NULL;
END;
-- Added after the first release: the job's run-history retention (rules and purge in
-- 006_retention.sql; here because 004's insert_job and update_job write them).
IF COL_LENGTH(N'mjsched.scheduled_job', N'keep_runs_days') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD keep_runs_days int NULL;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'keep_runs_count') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD keep_runs_count int NULL;
END;
-- Added after the first release: the interval (every=) and one-off (run_at=) schedule kinds
-- beside cron_expression; their rules (exactly one kind per job, the ranges) and the nullable
-- cron_expression are in 007_schedule_kinds.sql. The columns are here, before 004_job_admin.sql:
-- a procedure cannot be created over a column its table does not have yet.
IF COL_LENGTH(N'mjsched.scheduled_job', N'interval_seconds') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD interval_seconds int NULL;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'run_at') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD run_at datetimeoffset NULL;
END;
-- Added for spreading herds (012_jitter.sql holds its rule): a job's jitter bound in seconds
-- (NULL: none); every tick of the job moves by one offset in [0, jitter_seconds] hashed from
-- its name (mjsched/schedules.py). Here, before 002 and 004, whose procedures read and write it.
IF COL_LENGTH(N'mjsched.scheduled_job', N'jitter_seconds') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD jitter_seconds int NULL;
END;
-- Added for priorities (015_priorities.sql holds its rule and the claim's index): when more is
-- due than an engine has free slots, the claim takes the lowest claim_at first. claim_at is
-- the twin of PostgreSQL's mjsched.claim_at(next_run_at, priority): the tick moved earlier by
-- one minute per level of priority (the aging rule is there). SQL Server indexes an expression
-- through a computed column (deterministic: DATEADD on datetimeoffset), PostgreSQL through an
-- expression index. Here, before 002, whose procedures read them.
IF COL_LENGTH(N'mjsched.scheduled_job', N'priority') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD priority int NOT NULL
        CONSTRAINT df_scheduled_job_priority DEFAULT 0;
END;
GO

-- (a batch of its own: it names priority, which the batch above may have just added)
IF COL_LENGTH(N'mjsched.scheduled_job', N'claim_at') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD claim_at AS DATEADD(second, -60 * priority, next_run_at);
END;
GO

-- Added for retries (009_retries.sql holds their rules, the per-attempt UNIQUE index and the
-- reasons): the job's retry policy (all NULL: none of its own; the driver's default applies),
-- whether failures notify on the final attempt only, how many retries were scheduled; on a
-- run, its attempt number within its tick and, for a Queued retry, when it is due. Added
-- here, before 002_procedures.sql, because SQL Server resolves the columns of an existing
-- table when a procedure that reads them is created.
IF COL_LENGTH(N'mjsched.scheduled_job', N'retry_max_attempts') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD retry_max_attempts int NULL;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'retry_initial_delay') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD retry_initial_delay float NULL;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'retry_factor') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD retry_factor float NULL;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'retry_max_delay') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD retry_max_delay float NULL;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'retry_jitter') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD retry_jitter float NULL;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'notify_final_attempt_only') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD notify_final_attempt_only bit NOT NULL
        CONSTRAINT df_scheduled_job_notify_final_attempt_only DEFAULT 1;
END;
IF COL_LENGTH(N'mjsched.scheduled_job', N'retry_count') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD retry_count int NOT NULL
        CONSTRAINT df_scheduled_job_retry_count DEFAULT 0;
END;
IF COL_LENGTH(N'mjsched.scheduled_job_run', N'attempt') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job_run ADD attempt int NOT NULL
        CONSTRAINT df_scheduled_job_run_attempt DEFAULT 1;
END;
IF COL_LENGTH(N'mjsched.scheduled_job_run', N'retry_at') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job_run ADD retry_at datetimeoffset NULL;
END;
-- Added for the audit trail (013_audit.sql): the job definition's version, moved on by every
-- change to it, and the version a run started with (the claims and manual starts write it).
IF COL_LENGTH(N'mjsched.scheduled_job', N'version') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD version int NOT NULL
        CONSTRAINT df_scheduled_job_version DEFAULT 1;
END;
IF COL_LENGTH(N'mjsched.scheduled_job_run', N'job_version') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job_run ADD job_version int NULL;
END;
-- Fencing tokens (issue 37 item 5, docs/guide/reliability.md "Fencing tokens"): fence_seq
-- counts the job's lock takings that start a run (every claim, queued start and manual
-- start moves it on under the job's row lock), and a run keeps the value it started with:
-- a later holder of the job always has a larger token.
IF COL_LENGTH(N'mjsched.scheduled_job', N'fence_seq') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job ADD fence_seq bigint NOT NULL
        CONSTRAINT df_scheduled_job_fence_seq DEFAULT 0;
END;
IF COL_LENGTH(N'mjsched.scheduled_job_run', N'fencing_token') IS NULL
BEGIN
    ALTER TABLE mjsched.scheduled_job_run ADD fencing_token bigint NULL;
END;
GO

-- An upgrade fills last_success_at from the history (only where it is still empty, so a
-- re-run changes nothing); its own batch, since the column may be new in the one above.
UPDATE j
   SET last_success_at = s.completed_at
  FROM mjsched.scheduled_job AS j
  JOIN (SELECT scheduled_job_id, MAX(completed_at) AS completed_at
          FROM mjsched.scheduled_job_run
         WHERE status = N'Completed'
         GROUP BY scheduled_job_id) AS s ON s.scheduled_job_id = j.id
 WHERE j.last_success_at IS NULL;
GO

-- A change to what defines a schedule (by anyone, through any client) clears
-- next_run_at unless the writer set it, so an engine recomputes it. PostgreSQL does
-- this in a BEFORE trigger and also wakes the engines with NOTIFY; SQL Server has no
-- NOTIFY, so the engines' bounded idle interval picks the change up instead.
-- A one-off job (run_at) whose next run is moved past its run_at has served its one tick
-- (the engine writes mjsched.scheduling.ENDED): it becomes Expired, with no next run.
-- RECURSIVE_TRIGGERS is off by default; the nest-level guard keeps it so regardless.
-- The engines' own bookkeeping (a claim's lock, a completion's statistics and next run) sets
-- updated_at itself and changes nothing else this trigger looks at: the WHERE below leaves
-- those rows alone, so a claim or a completion is not written a second time. Any other
-- update leaves updated_at as it was, and so is still stamped here, as before.
CREATE OR ALTER TRIGGER mjsched.trg_scheduled_job_changed
ON mjsched.scheduled_job
AFTER UPDATE
AS
BEGIN
    SET NOCOUNT ON;
    IF TRIGGER_NESTLEVEL(@@PROCID) > 1 OR NOT EXISTS (SELECT 1 FROM inserted)
    BEGIN
        RETURN;
    END;
    UPDATE j
       SET updated_at = SYSDATETIMEOFFSET(),
           next_run_at = CASE
               WHEN EXISTS (SELECT i.cron_expression, i.interval_seconds, i.run_at, i.timezone, i.status, i.start_at
                            EXCEPT
                            SELECT d.cron_expression, d.interval_seconds, d.run_at, d.timezone, d.status, d.start_at)
                AND NOT EXISTS (SELECT i.next_run_at EXCEPT SELECT d.next_run_at)
               THEN NULL
               WHEN i.run_at IS NOT NULL AND i.status = N'Active' AND i.next_run_at > i.run_at
               THEN NULL
               ELSE j.next_run_at
           END,
           status = CASE
               WHEN EXISTS (SELECT i.cron_expression, i.interval_seconds, i.run_at, i.timezone, i.status, i.start_at
                            EXCEPT
                            SELECT d.cron_expression, d.interval_seconds, d.run_at, d.timezone, d.status, d.start_at)
                AND NOT EXISTS (SELECT i.next_run_at EXCEPT SELECT d.next_run_at)
               THEN j.status
               WHEN i.run_at IS NOT NULL AND i.status = N'Active' AND i.next_run_at > i.run_at
               THEN N'Expired'
               ELSE j.status
           END
      FROM mjsched.scheduled_job AS j
      JOIN inserted AS i ON i.id = j.id
      JOIN deleted AS d ON d.id = i.id
     WHERE EXISTS (SELECT i.updated_at INTERSECT SELECT d.updated_at)
        OR EXISTS (SELECT i.cron_expression, i.interval_seconds, i.run_at, i.timezone, i.status, i.start_at
                   EXCEPT
                   SELECT d.cron_expression, d.interval_seconds, d.run_at, d.timezone, d.status, d.start_at)
        OR (i.run_at IS NOT NULL AND i.status = N'Active' AND i.next_run_at > i.run_at);
END;
GO

-- What a row may hold: the rules the API checks (mjsched/validation.py), the twin of the
-- same section of sql/postgres/001_schema.sql. Each rule is about one column and is named
-- ck_<table>_<column>. Instants lie in [1900-01-01, 9999-12-31] UTC (datetimeoffset
-- compares instants). SQL Server floats hold no NaN or infinity; the ranges still apply.
-- The rules are added WITH NOCHECK and made trusted (WITH CHECK CHECK CONSTRAINT) just
-- below, after "setting aside" any row that breaks one (left by an older release, or
-- written before the rule): the column is cleared (NULL, or its default), the job is
-- Disabled, and a Failed run whose error_message names the field and the value records it
-- (executed_by_instance 'mjsched install'; engine.install() logs each one as a WARNING).
-- First drop the rules of an earlier version of this file (and the older names), so each
-- is added again with its current text.
DECLARE @v_drop TABLE (table_name sysname NOT NULL, constraint_name sysname NOT NULL PRIMARY KEY);
INSERT INTO @v_drop (table_name, constraint_name) VALUES
        (N'scheduled_job_type', N'ck_scheduled_job_type_max_runtime'),
        (N'scheduled_job_type', N'ck_scheduled_job_type_default_max_runtime_seconds'),
        (N'scheduled_job', N'ck_scheduled_job_max_runtime'),
        (N'scheduled_job', N'ck_scheduled_job_max_runtime_seconds'),
        (N'scheduled_job', N'ck_scheduled_job_configuration'),
        (N'scheduled_job', N'ck_scheduled_job_name'),
        (N'scheduled_job', N'ck_scheduled_job_description'),
        (N'scheduled_job', N'ck_scheduled_job_cron_expression'),
        (N'scheduled_job', N'ck_scheduled_job_timezone'),
        (N'scheduled_job', N'ck_scheduled_job_start_at'),
        (N'scheduled_job', N'ck_scheduled_job_end_at'),
        (N'scheduled_job', N'ck_scheduled_job_next_run_at'),
        (N'scheduled_job', N'ck_scheduled_job_last_run_at'),
        (N'scheduled_job', N'ck_scheduled_job_last_success_at'),
        (N'scheduled_job', N'ck_scheduled_job_locked_at'),
        (N'scheduled_job', N'ck_scheduled_job_expected_completion_at'),
        (N'scheduled_job', N'ck_scheduled_job_created_at'),
        (N'scheduled_job', N'ck_scheduled_job_updated_at'),
        (N'scheduled_job', N'ck_scheduled_job_run_count'),
        (N'scheduled_job', N'ck_scheduled_job_success_count'),
        (N'scheduled_job', N'ck_scheduled_job_failure_count'),
        (N'scheduled_job', N'ck_scheduled_job_last_duration_ms'),
        (N'scheduled_job', N'ck_scheduled_job_total_duration_ms'),
        (N'scheduled_job_run', N'ck_scheduled_job_run_details_limits'),
        (N'scheduled_job_run', N'ck_scheduled_job_run_parameters_limits');
DECLARE @v_table sysname, @v_name sysname, @v_sql nvarchar(max);
WHILE 1 = 1
BEGIN
    SELECT TOP (1) @v_table = d.table_name, @v_name = d.constraint_name
      FROM @v_drop AS d
     WHERE OBJECT_ID(N'mjsched.' + QUOTENAME(d.constraint_name), N'C') IS NOT NULL
     ORDER BY d.constraint_name;
    IF @@ROWCOUNT = 0
    BEGIN
        BREAK;
    END;
    SET @v_sql = N'ALTER TABLE mjsched.' + QUOTENAME(@v_table) + N' DROP CONSTRAINT ' + QUOTENAME(@v_name) + N';';
    EXEC sys.sp_executesql @v_sql;
END;
GO

-- json_nesting_exceeds: whether a JSON value's objects and arrays nest deeper than @p_limit
-- levels ({} is one level): a container @p_limit levels below the root is one level too many.
-- Each level is read with OPENJSON, down to that level and no further, however deep the value
-- goes (64 levels stay inside a recursive CTE's default MAXRECURSION of 100). The rules below
-- call it, so it is (re)created here, after they were dropped and before they are added.
CREATE OR ALTER FUNCTION mjsched.json_nesting_exceeds(@p_json nvarchar(max), @p_limit int)
RETURNS bit
AS
BEGIN
    DECLARE @v_exceeds bit = 0;
    IF @p_json IS NULL OR ISJSON(@p_json) = 0 OR LEFT(LTRIM(@p_json), 1) NOT IN (N'{', N'[')
    BEGIN
        RETURN 0;
    END;
    WITH levels (depth, item) AS (
        SELECT 1, CAST(e.[value] AS nvarchar(max))
          FROM OPENJSON(@p_json) AS e
         WHERE e.[type] IN (4, 5)
        UNION ALL
        SELECT l.depth + 1, CAST(e.[value] AS nvarchar(max))
          FROM levels AS l
         CROSS APPLY OPENJSON(l.item) AS e
         WHERE e.[type] IN (4, 5) AND l.depth < @p_limit
    )
    SELECT @v_exceeds = 1 WHERE EXISTS (SELECT 1 FROM levels AS l WHERE l.depth >= @p_limit);
    RETURN @v_exceeds;
END;
GO

ALTER TABLE mjsched.scheduled_job_type WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_type_default_max_runtime_seconds
        CHECK (default_max_runtime_seconds IS NULL
               OR (default_max_runtime_seconds > 0 AND default_max_runtime_seconds <= 31536000));
GO

ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_max_runtime_seconds
        CHECK (max_runtime_seconds IS NULL OR (max_runtime_seconds > 0 AND max_runtime_seconds <= 31536000));
-- a JSON object, as jsonb_typeof(configuration) = 'object' in PostgreSQL, nested at most 64 levels
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_configuration
        CHECK (configuration IS NULL
               OR (ISJSON(configuration) = 1 AND LEFT(LTRIM(configuration), 1) = N'{'
                   AND LEN(configuration) <= 1000000 AND mjsched.json_nesting_exceeds(configuration, 64) = 0));
-- A run's details and parameters keep the same JSON limits (sql/postgres/001_schema.sql): added
-- WITH NOCHECK each time and never made trusted, so an upgrade does not read the run history.
ALTER TABLE mjsched.scheduled_job_run WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_run_details_limits
        CHECK (details IS NULL OR (LEN(details) <= 1000000 AND mjsched.json_nesting_exceeds(details, 64) = 0));
ALTER TABLE mjsched.scheduled_job_run WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_run_parameters_limits
        CHECK (parameters IS NULL
               OR (LEN(parameters) <= 1000000 AND mjsched.json_nesting_exceeds(parameters, 64) = 0));
-- LEN ignores trailing spaces: 0 for an empty or all-space value, as length(btrim(x)) in PostgreSQL
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_name CHECK (LEN(name) > 0);
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_description CHECK (description IS NULL OR LEN(description) <= 100000);
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_cron_expression CHECK (LEN(cron_expression) > 0);
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_timezone CHECK (LEN(timezone) > 0);
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_start_at
        CHECK (start_at IS NULL OR start_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_end_at
        CHECK (end_at IS NULL OR end_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_next_run_at
        CHECK (next_run_at IS NULL OR next_run_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_last_run_at
        CHECK (last_run_at IS NULL OR last_run_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_last_success_at
        CHECK (last_success_at IS NULL OR last_success_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_locked_at
        CHECK (locked_at IS NULL OR locked_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_expected_completion_at
        CHECK (expected_completion_at IS NULL
               OR expected_completion_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_created_at
        CHECK (created_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_updated_at
        CHECK (updated_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset));
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_run_count CHECK (run_count BETWEEN 0 AND 2000000000);
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_success_count CHECK (success_count BETWEEN 0 AND 2000000000);
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_failure_count CHECK (failure_count BETWEEN 0 AND 2000000000);
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_last_duration_ms
        CHECK (last_duration_ms IS NULL OR last_duration_ms BETWEEN 0 AND 4000000000000000000);
ALTER TABLE mjsched.scheduled_job WITH NOCHECK ADD
    CONSTRAINT ck_scheduled_job_total_duration_ms CHECK (total_duration_ms BETWEEN 0 AND 4000000000000000000);
GO

-- Set aside the rows that break a rule added above, then make it trusted. The rule's own
-- text (sys.check_constraints.definition) finds them, so each rule is written once. A row
-- may break several rules, and an UPDATE is checked against every enabled rule, so all of
-- a row's bad columns are reset in one UPDATE.
IF OBJECT_ID(N'tempdb..#mjsched_set_aside') IS NOT NULL
BEGIN
    DROP TABLE #mjsched_set_aside;
END;
CREATE TABLE #mjsched_set_aside (
    row_id uniqueidentifier NOT NULL,
    table_name sysname NOT NULL,
    column_name sysname NOT NULL,
    value nvarchar(200) NULL,
    constraint_name sysname NOT NULL,
    rule_text nvarchar(4000) NOT NULL,
    fix nvarchar(4000) NOT NULL
);
DECLARE @v_rules TABLE (
    constraint_name sysname NOT NULL PRIMARY KEY,
    table_name sysname NOT NULL,
    column_name sysname NOT NULL,
    rule_text nvarchar(4000) NOT NULL,
    fix nvarchar(4000) NOT NULL
);
INSERT INTO @v_rules (constraint_name, table_name, column_name, rule_text, fix)
SELECT c.name, t.name, col.name, c.[definition],
       CASE WHEN col.name = N'expected_completion_at' THEN N'SYSDATETIMEOFFSET()'   -- a lapsed lease: swept
            WHEN col.is_nullable = 1 THEN N'NULL'
            ELSE COALESCE(d.[definition], N'N''(set aside)''')
       END
  FROM sys.check_constraints AS c
  JOIN sys.tables AS t ON t.object_id = c.parent_object_id
  JOIN sys.columns AS col
    ON col.object_id = c.parent_object_id
   AND col.name = STUFF(c.name, 1, LEN(N'ck_' + t.name + N'_'), N'')
  LEFT JOIN sys.default_constraints AS d
    ON d.parent_object_id = col.object_id AND d.parent_column_id = col.column_id
 WHERE c.is_not_trusted = 1
   AND t.schema_id = SCHEMA_ID(N'mjsched')
   AND t.name IN (N'scheduled_job', N'scheduled_job_type');
DECLARE @v_trust TABLE (constraint_name sysname NOT NULL PRIMARY KEY, table_name sysname NOT NULL);
INSERT INTO @v_trust (constraint_name, table_name) SELECT r.constraint_name, r.table_name FROM @v_rules AS r;
DECLARE @v_table sysname, @v_column sysname, @v_name sysname, @v_rule nvarchar(4000), @v_fix nvarchar(4000);
DECLARE @v_sql nvarchar(max), @v_row uniqueidentifier, @v_sets nvarchar(max);
WHILE 1 = 1
BEGIN
    SELECT TOP (1) @v_name = r.constraint_name, @v_table = r.table_name, @v_column = r.column_name,
           @v_rule = r.rule_text, @v_fix = r.fix
      FROM @v_rules AS r ORDER BY r.constraint_name;
    IF @@ROWCOUNT = 0
    BEGIN
        BREAK;
    END;
    DELETE FROM @v_rules WHERE constraint_name = @v_name;
    SET @v_sql = N'INSERT INTO #mjsched_set_aside (row_id, table_name, column_name, value, constraint_name, '
               + N'rule_text, fix) SELECT t.id, @p_table, @p_column, LEFT(CONVERT(nvarchar(max), t.'
               + QUOTENAME(@v_column) + N'), 200), @p_name, @p_rule, @p_fix FROM mjsched.'
               + QUOTENAME(@v_table) + N' AS t WHERE NOT (' + @v_rule + N');';
    EXEC sys.sp_executesql @v_sql,
         N'@p_table sysname, @p_column sysname, @p_name sysname, @p_rule nvarchar(4000), @p_fix nvarchar(4000)',
         @p_table = @v_table, @p_column = @v_column, @p_name = @v_name, @p_rule = @v_rule, @p_fix = @v_fix;
END;
DECLARE @v_done TABLE (row_id uniqueidentifier NOT NULL PRIMARY KEY);
WHILE 1 = 1
BEGIN
    SELECT TOP (1) @v_row = s.row_id, @v_table = s.table_name
      FROM #mjsched_set_aside AS s
     WHERE NOT EXISTS (SELECT 1 FROM @v_done AS d WHERE d.row_id = s.row_id)
     ORDER BY s.row_id;
    IF @@ROWCOUNT = 0
    BEGIN
        BREAK;
    END;
    INSERT INTO @v_done (row_id) VALUES (@v_row);
    SET @v_sets = CASE WHEN @v_table = N'scheduled_job' THEN N'status = N''Disabled''' ELSE N'' END;
    SET @v_column = NULL;
    WHILE 1 = 1
    BEGIN
        SELECT TOP (1) @v_column = s.column_name, @v_fix = s.fix
          FROM #mjsched_set_aside AS s
         WHERE s.row_id = @v_row AND s.table_name = @v_table AND (@v_column IS NULL OR s.column_name > @v_column)
         ORDER BY s.column_name;
        IF @@ROWCOUNT = 0
        BEGIN
            BREAK;
        END;
        SET @v_sets = CONCAT(@v_sets, CASE WHEN @v_sets = N'' THEN N'' ELSE N', ' END,
                             QUOTENAME(@v_column), N' = ', @v_fix);
    END;
    SET @v_sql = N'UPDATE mjsched.' + QUOTENAME(@v_table) + N' SET ' + @v_sets + N' WHERE id = @p_row;';
    EXEC sys.sp_executesql @v_sql, N'@p_row uniqueidentifier', @p_row = @v_row;
END;
INSERT INTO mjsched.scheduled_job_run
       (scheduled_job_id, status, success, error_message, started_at, completed_at, duration_ms,
        executed_by_instance)
SELECT s.row_id, N'Failed', 0,
       CONCAT(N'set aside by the schema upgrade: ', s.column_name, N' = ', COALESCE(s.value, N'NULL'),
              N' breaks rule ', s.constraint_name, N' (', s.rule_text, N'); the job is now Disabled and ',
              s.column_name, N' was reset to ', s.fix, N'. Fix the job, then set it Active.'),
       SYSDATETIMEOFFSET(), SYSDATETIMEOFFSET(), 0, N'mjsched install'
  FROM #mjsched_set_aside AS s
 WHERE s.table_name = N'scheduled_job';
DROP TABLE #mjsched_set_aside;
WHILE 1 = 1
BEGIN
    SELECT TOP (1) @v_name = r.constraint_name, @v_table = r.table_name
      FROM @v_trust AS r ORDER BY r.constraint_name;
    IF @@ROWCOUNT = 0
    BEGIN
        BREAK;
    END;
    DELETE FROM @v_trust WHERE constraint_name = @v_name;
    SET @v_sql = N'ALTER TABLE mjsched.' + QUOTENAME(@v_table) + N' WITH CHECK CHECK CONSTRAINT '
               + QUOTENAME(@v_name) + N';';
    EXEC sys.sp_executesql @v_sql;
END;
GO
