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
        CONSTRAINT uq_scheduled_job_type_name UNIQUE (name),
        CONSTRAINT uq_scheduled_job_type_driver_class UNIQUE (driver_class),
        CONSTRAINT ck_scheduled_job_type_isolation CHECK (isolation IN (N'thread', N'process')),
        CONSTRAINT ck_scheduled_job_type_max_runtime
            CHECK (default_max_runtime_seconds IS NULL OR default_max_runtime_seconds > 0)
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
        CONSTRAINT ck_scheduled_job_max_runtime CHECK (max_runtime_seconds IS NULL OR max_runtime_seconds > 0),
        CONSTRAINT ck_scheduled_job_max_queued_runs CHECK (max_queued_runs BETWEEN 1 AND 1000),
        -- a JSON object, as jsonb_typeof(configuration) = 'object' in PostgreSQL
        CONSTRAINT ck_scheduled_job_configuration
            CHECK (configuration IS NULL
                   OR (ISJSON(configuration) = 1 AND LEFT(LTRIM(configuration), 1) = N'{')),
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
        CONSTRAINT pk_scheduled_job_run PRIMARY KEY (id),
        CONSTRAINT fk_scheduled_job_run_job FOREIGN KEY (scheduled_job_id)
            REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
        CONSTRAINT ck_scheduled_job_run_status CHECK (status IN
            (N'Queued', N'Running', N'Completed', N'Failed', N'Timeout', N'Cancelled', N'Abandoned', N'Skipped')),
        CONSTRAINT ck_scheduled_job_run_running_has_lease
            CHECK (status <> N'Running' OR (lock_token IS NOT NULL AND lease_expires_at IS NOT NULL)),
        CONSTRAINT ck_scheduled_job_run_details CHECK (details IS NULL OR ISJSON(details) = 1)
    );
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
        CONSTRAINT pk_engine_instance PRIMARY KEY (instance)
    );
END;
GO

-- A change to what defines a schedule (by anyone, through any client) clears
-- next_run_at unless the writer set it, so an engine recomputes it. PostgreSQL does
-- this in a BEFORE trigger and also wakes the engines with NOTIFY; SQL Server has no
-- NOTIFY, so the engines' bounded idle interval picks the change up instead.
-- RECURSIVE_TRIGGERS is off by default; the nest-level guard keeps it so regardless.
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
               WHEN EXISTS (SELECT i.cron_expression, i.timezone, i.status, i.start_at
                            EXCEPT
                            SELECT d.cron_expression, d.timezone, d.status, d.start_at)
                AND NOT EXISTS (SELECT i.next_run_at EXCEPT SELECT d.next_run_at)
               THEN NULL
               ELSE j.next_run_at
           END
      FROM mjsched.scheduled_job AS j
      JOIN inserted AS i ON i.id = j.id
      JOIN deleted AS d ON d.id = i.id;
END;
GO
