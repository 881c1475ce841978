-- mjsched audit trail, version 13: the twin of sql/postgres/013_audit.sql (read it for the
-- rules). Every change to a job's definition leaves rows in mjsched.job_change, written by the
-- trigger below in the same transaction as the change, whoever made it and however.
--
-- * db_login is ORIGINAL_LOGIN() (the login that connected: EXECUTE AS inside a procedure does
--   not hide it); app_user and via come from SESSION_CONTEXT(N'mjsched.app_user') and
--   SESSION_CONTEXT(N'mjsched.via'), which mjsched sets around each change it makes
--   (sp_set_session_context, SQL Server 2016+) and clears after. A change by plain SQL has via
--   'sql' unless the session set it.
-- * One row per changed field of an update (a change to configuration is one row per
--   top-level key: 'configuration.<key>', values as OPENJSON returns them: a string key's
--   value without its quotes); one row for a created job and one for a deleted job (field '*',
--   the definition as JSON, FOR JSON).
-- * scheduled_job.version (001_schema.sql) counts the changes to a job's definition: this
--   trigger moves it on (a nested UPDATE: the nest-level guard keeps the trigger from auditing
--   its own write), and each change row carries the version it made.
-- * The audited columns are named below; every other column of scheduled_job is the engines'
--   bookkeeping (PostgreSQL's mjsched.job_bookkeeping_columns(); tests/unit/test_audit_columns.py
--   checks this list against the PostgreSQL catalog). An UPDATE that sets none of them (a
--   claim, a renewal, a completion) returns at the first statement.
-- Safe to re-run.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

IF OBJECT_ID(N'mjsched.job_change', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.job_change (
        id          bigint IDENTITY(1, 1) NOT NULL CONSTRAINT pk_job_change PRIMARY KEY,
        job_id      uniqueidentifier NOT NULL,   -- no foreign key: the history outlives a deleted job
        job_name    nvarchar(200) NOT NULL,
        version     int NOT NULL,
        changed_at  datetimeoffset NOT NULL CONSTRAINT df_job_change_changed_at DEFAULT SYSDATETIMEOFFSET(),
        action      nvarchar(10) NOT NULL,
        field       nvarchar(200) NOT NULL,
        old_value   nvarchar(max) NULL,
        new_value   nvarchar(max) NULL,
        db_login    nvarchar(255) NOT NULL CONSTRAINT df_job_change_db_login DEFAULT ORIGINAL_LOGIN(),
        app_user    nvarchar(255) NULL,
        via         nvarchar(40) NOT NULL CONSTRAINT df_job_change_via DEFAULT N'sql',
        CONSTRAINT ck_job_change_action CHECK (action IN (N'created', N'updated', N'deleted'))
    );
END;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'mjsched.job_change') AND name = N'ix_job_change_job')
BEGIN
    CREATE INDEX ix_job_change_job ON mjsched.job_change (job_id, id);
END;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'mjsched.job_change')
                                        AND name = N'ix_job_change_changed_at')
BEGIN
    CREATE INDEX ix_job_change_changed_at ON mjsched.job_change (changed_at);
END;
GO

CREATE OR ALTER TRIGGER mjsched.trg_scheduled_job_audited
ON mjsched.scheduled_job
AFTER INSERT, UPDATE, DELETE
AS
BEGIN
    SET NOCOUNT ON;
    IF TRIGGER_NESTLEVEL(@@PROCID) > 1
    BEGIN
        RETURN;
    END;
    DECLARE @v_has_new bit = CASE WHEN EXISTS (SELECT 1 FROM inserted) THEN 1 ELSE 0 END;
    DECLARE @v_has_old bit = CASE WHEN EXISTS (SELECT 1 FROM deleted) THEN 1 ELSE 0 END;
    IF @v_has_new = 0 AND @v_has_old = 0
    BEGIN
        RETURN;
    END;
    IF @v_has_new = 1 AND @v_has_old = 1 AND NOT (
              UPDATE(name) OR UPDATE(description) OR UPDATE(job_type_id) OR UPDATE(cron_expression) OR
              UPDATE(interval_seconds) OR UPDATE(run_at) OR UPDATE(timezone) OR UPDATE(start_at) OR
              UPDATE(end_at) OR UPDATE(status) OR UPDATE(owner) OR UPDATE(concurrency_mode) OR
              UPDATE(missed_run_policy) OR UPDATE(run_immediately_if_never_run) OR
              UPDATE(max_runtime_seconds) OR UPDATE(isolation) OR UPDATE(max_queued_runs) OR
              UPDATE(notify_on_success) OR UPDATE(notify_on_failure) OR UPDATE(notify_to) OR
              UPDATE(high_frequency_ok) OR UPDATE(keep_runs_days) OR UPDATE(keep_runs_count) OR
              UPDATE(retry_max_attempts) OR UPDATE(retry_initial_delay) OR UPDATE(retry_factor) OR
              UPDATE(retry_max_delay) OR UPDATE(retry_jitter) OR UPDATE(notify_final_attempt_only) OR
              UPDATE(jitter_seconds) OR UPDATE(priority) OR
              UPDATE(configuration))
    BEGIN
        RETURN;    -- the engines' bookkeeping: no definition column in the SET list
    END;
    DECLARE @v_via nvarchar(40) = COALESCE(NULLIF(CONVERT(nvarchar(40), SESSION_CONTEXT(N'mjsched.via')), N''), N'sql');
    DECLARE @v_user nvarchar(255) = NULLIF(CONVERT(nvarchar(255), SESSION_CONTEXT(N'mjsched.app_user')), N'');

    DECLARE @v_mark nvarchar(200);
    IF @v_has_old = 0
    BEGIN
        INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, new_value, app_user, via)
        SELECT i.id, i.name, i.version, N'created', N'*',
               (SELECT x.name, x.description, x.job_type_id, x.cron_expression, x.interval_seconds,
                   x.run_at, x.timezone, x.start_at, x.end_at, x.status, x.owner,
                   x.concurrency_mode, x.missed_run_policy, x.run_immediately_if_never_run,
                   x.max_runtime_seconds, x.isolation, x.max_queued_runs, x.notify_on_success,
                   x.notify_on_failure, x.notify_to, x.high_frequency_ok, x.keep_runs_days,
                   x.keep_runs_count, x.retry_max_attempts, x.retry_initial_delay, x.retry_factor,
                   x.retry_max_delay, x.retry_jitter, x.notify_final_attempt_only, x.jitter_seconds,
                   x.priority,
                       JSON_QUERY(CASE WHEN ISJSON(x.configuration) = 1 THEN x.configuration END) AS configuration
                  FROM inserted AS x WHERE x.id = i.id
                   FOR JSON PATH, INCLUDE_NULL_VALUES, WITHOUT_ARRAY_WRAPPER),
               @v_user, @v_via
          FROM inserted AS i;
        IF NOT EXISTS (SELECT 1 FROM inserted AS o WHERE o.id <> (SELECT MIN(m.id) FROM inserted AS m))
        BEGIN
            -- this transaction made this version of the job: a tag change in it joins the
            -- version (trg_job_tag_audited; the transaction is named, as a session context
            -- outlives it)
            SET @v_mark = (SELECT CONVERT(nvarchar(20), CURRENT_TRANSACTION_ID()) + N'|' + CONVERT(nvarchar(36), i.id)
                                  + N'|' + CONVERT(nvarchar(12), i.version) + N'|'
                             FROM inserted AS i);
            EXEC sp_set_session_context @key = N'mjsched.audit_job', @value = @v_mark;
        END;
        RETURN;
    END;
    IF @v_has_new = 0
    BEGIN
        INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, old_value, app_user, via)
        SELECT d.id, d.name, d.version, N'deleted', N'*',
               (SELECT x.name, x.description, x.job_type_id, x.cron_expression, x.interval_seconds,
                   x.run_at, x.timezone, x.start_at, x.end_at, x.status, x.owner,
                   x.concurrency_mode, x.missed_run_policy, x.run_immediately_if_never_run,
                   x.max_runtime_seconds, x.isolation, x.max_queued_runs, x.notify_on_success,
                   x.notify_on_failure, x.notify_to, x.high_frequency_ok, x.keep_runs_days,
                   x.keep_runs_count, x.retry_max_attempts, x.retry_initial_delay, x.retry_factor,
                   x.retry_max_delay, x.retry_jitter, x.notify_final_attempt_only, x.jitter_seconds,
                   x.priority,
                       JSON_QUERY(CASE WHEN ISJSON(x.configuration) = 1 THEN x.configuration END) AS configuration
                  FROM deleted AS x WHERE x.id = d.id
                   FOR JSON PATH, INCLUDE_NULL_VALUES, WITHOUT_ARRAY_WRAPPER),
               @v_user, @v_via
          FROM deleted AS d;
        RETURN;
    END;

    -- An update: the changed fields, each a row, then the version of the jobs that changed.
    DECLARE @v_changes TABLE (job_id uniqueidentifier NOT NULL, job_name nvarchar(200) NOT NULL,
                              field nvarchar(200) NOT NULL, old_value nvarchar(max) NULL,
                              new_value nvarchar(max) NULL);
    INSERT INTO @v_changes (job_id, job_name, field, old_value, new_value)
    SELECT i.id, i.name, c.field, c.old_value, c.new_value
      FROM inserted AS i
      JOIN deleted AS d ON d.id = i.id
     CROSS APPLY (VALUES
                   (N'name', d.name, i.name),
                   (N'description', d.description, i.description),
                   (N'job_type_id', LOWER(CONVERT(nvarchar(36), d.job_type_id)), LOWER(CONVERT(nvarchar(36), i.job_type_id))),
                   (N'cron_expression', d.cron_expression, i.cron_expression),
                   (N'interval_seconds', CONVERT(nvarchar(20), d.interval_seconds), CONVERT(nvarchar(20), i.interval_seconds)),
                   (N'run_at', CONVERT(nvarchar(40), d.run_at, 127), CONVERT(nvarchar(40), i.run_at, 127)),
                   (N'timezone', d.timezone, i.timezone),
                   (N'start_at', CONVERT(nvarchar(40), d.start_at, 127), CONVERT(nvarchar(40), i.start_at, 127)),
                   (N'end_at', CONVERT(nvarchar(40), d.end_at, 127), CONVERT(nvarchar(40), i.end_at, 127)),
                   (N'status', d.status, i.status),
                   (N'owner', d.owner, i.owner),
                   (N'concurrency_mode', d.concurrency_mode, i.concurrency_mode),
                   (N'missed_run_policy', d.missed_run_policy, i.missed_run_policy),
                   (N'run_immediately_if_never_run', CASE d.run_immediately_if_never_run WHEN 1 THEN N'true' WHEN 0 THEN N'false' END, CASE i.run_immediately_if_never_run WHEN 1 THEN N'true' WHEN 0 THEN N'false' END),
                   (N'max_runtime_seconds', CONVERT(nvarchar(40), d.max_runtime_seconds, 0), CONVERT(nvarchar(40), i.max_runtime_seconds, 0)),
                   (N'isolation', d.isolation, i.isolation),
                   (N'max_queued_runs', CONVERT(nvarchar(20), d.max_queued_runs), CONVERT(nvarchar(20), i.max_queued_runs)),
                   (N'notify_on_success', CASE d.notify_on_success WHEN 1 THEN N'true' WHEN 0 THEN N'false' END, CASE i.notify_on_success WHEN 1 THEN N'true' WHEN 0 THEN N'false' END),
                   (N'notify_on_failure', CASE d.notify_on_failure WHEN 1 THEN N'true' WHEN 0 THEN N'false' END, CASE i.notify_on_failure WHEN 1 THEN N'true' WHEN 0 THEN N'false' END),
                   (N'notify_to', d.notify_to, i.notify_to),
                   (N'high_frequency_ok', CASE d.high_frequency_ok WHEN 1 THEN N'true' WHEN 0 THEN N'false' END, CASE i.high_frequency_ok WHEN 1 THEN N'true' WHEN 0 THEN N'false' END),
                   (N'keep_runs_days', CONVERT(nvarchar(20), d.keep_runs_days), CONVERT(nvarchar(20), i.keep_runs_days)),
                   (N'keep_runs_count', CONVERT(nvarchar(20), d.keep_runs_count), CONVERT(nvarchar(20), i.keep_runs_count)),
                   (N'retry_max_attempts', CONVERT(nvarchar(20), d.retry_max_attempts), CONVERT(nvarchar(20), i.retry_max_attempts)),
                   (N'retry_initial_delay', CONVERT(nvarchar(40), d.retry_initial_delay, 0), CONVERT(nvarchar(40), i.retry_initial_delay, 0)),
                   (N'retry_factor', CONVERT(nvarchar(40), d.retry_factor, 0), CONVERT(nvarchar(40), i.retry_factor, 0)),
                   (N'retry_max_delay', CONVERT(nvarchar(40), d.retry_max_delay, 0), CONVERT(nvarchar(40), i.retry_max_delay, 0)),
                   (N'retry_jitter', CONVERT(nvarchar(40), d.retry_jitter, 0), CONVERT(nvarchar(40), i.retry_jitter, 0)),
                   (N'notify_final_attempt_only', CASE d.notify_final_attempt_only WHEN 1 THEN N'true' WHEN 0 THEN N'false' END, CASE i.notify_final_attempt_only WHEN 1 THEN N'true' WHEN 0 THEN N'false' END),
                   (N'jitter_seconds', CONVERT(nvarchar(20), d.jitter_seconds), CONVERT(nvarchar(20), i.jitter_seconds)),
                   (N'priority', CONVERT(nvarchar(20), d.priority), CONVERT(nvarchar(20), i.priority))) AS c (field, old_value, new_value)
     WHERE EXISTS (SELECT c.old_value EXCEPT SELECT c.new_value);
    INSERT INTO @v_changes (job_id, job_name, field, old_value, new_value)
    SELECT i.id, i.name, N'configuration.' + c.[key], c.old_value, c.new_value
      FROM inserted AS i
      JOIN deleted AS d ON d.id = i.id
     CROSS APPLY (SELECT COALESCE(o.[key], n.[key]) AS [key], o.[value] AS old_value, n.[value] AS new_value
                    FROM (SELECT [key], [value]
                            FROM OPENJSON(CASE WHEN ISJSON(d.configuration) = 1
                                                AND LEFT(LTRIM(d.configuration), 1) = N'{'
                                               THEN d.configuration ELSE N'{}' END)) AS o
                    FULL JOIN (SELECT [key], [value]
                                 FROM OPENJSON(CASE WHEN ISJSON(i.configuration) = 1
                                                     AND LEFT(LTRIM(i.configuration), 1) = N'{'
                                                    THEN i.configuration ELSE N'{}' END)) AS n
                      ON n.[key] = o.[key]
                   WHERE EXISTS (SELECT o.[value] EXCEPT SELECT n.[value])) AS c
     WHERE EXISTS (SELECT i.configuration EXCEPT SELECT d.configuration);
    IF NOT EXISTS (SELECT 1 FROM @v_changes)
    BEGIN
        RETURN;
    END;
    UPDATE j
       SET version = j.version + 1
      FROM mjsched.scheduled_job AS j
     WHERE j.id IN (SELECT c.job_id FROM @v_changes AS c);
    INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, old_value, new_value, app_user, via)
    SELECT c.job_id, c.job_name, j.version, N'updated', c.field, c.old_value, c.new_value, @v_user, @v_via
      FROM @v_changes AS c
      JOIN mjsched.scheduled_job AS j ON j.id = c.job_id
     ORDER BY c.job_id, c.field;
    IF NOT EXISTS (SELECT 1 FROM @v_changes AS o WHERE o.job_id <> (SELECT MIN(m.job_id) FROM @v_changes AS m))
    BEGIN
        SET @v_mark = (SELECT TOP (1) CONVERT(nvarchar(20), CURRENT_TRANSACTION_ID()) + N'|' + CONVERT(nvarchar(36), j.id)
                              + N'|' + CONVERT(nvarchar(12), j.version) + N'|'
                         FROM @v_changes AS c
                         JOIN mjsched.scheduled_job AS j ON j.id = c.job_id);
        EXEC sp_set_session_context @key = N'mjsched.audit_job', @value = @v_mark;
    END;
END;
GO

-- Tags (010_tags.sql) are part of a job's definition: the twin of PostgreSQL's
-- tg_job_tag_audited (read it for the rules). One job_change row per job whose tag set a
-- statement on job_tag changed (field 'tags', sorted comma lists, NULL for none); the version
-- moves on unless this transaction made the job's current version (SESSION_CONTEXT
-- N'mjsched.audit_job', 'transaction|job|version|tags row', noted by trg_scheduled_job_audited
-- for a statement on one job); update_job's two statements (DELETE the dropped tags, INSERT the
-- new ones) make one row. The tags of a job being deleted go with it unrecorded.
CREATE OR ALTER TRIGGER mjsched.trg_job_tag_audited
ON mjsched.job_tag
AFTER INSERT, DELETE
AS
BEGIN
    SET NOCOUNT ON;
    IF NOT EXISTS (SELECT 1 FROM inserted) AND NOT EXISTS (SELECT 1 FROM deleted)
    BEGIN
        RETURN;
    END;
    DECLARE @v_via nvarchar(40) = COALESCE(NULLIF(CONVERT(nvarchar(40), SESSION_CONTEXT(N'mjsched.via')), N''), N'sql');
    DECLARE @v_user nvarchar(255) = NULLIF(CONVERT(nvarchar(255), SESSION_CONTEXT(N'mjsched.app_user')), N'');
    DECLARE @v_tx nvarchar(20) = CONVERT(nvarchar(20), CURRENT_TRANSACTION_ID());
    DECLARE @v_job uniqueidentifier;
    DECLARE @v_name nvarchar(200);
    DECLARE @v_version int;
    DECLARE @v_old nvarchar(max);
    DECLARE @v_new nvarchar(max);
    DECLARE @v_mark nvarchar(200);
    DECLARE @v_prefix nvarchar(200);
    DECLARE @v_row nvarchar(200);
    DECLARE @v_change bigint;
    DECLARE @v_jobs TABLE (job_id uniqueidentifier NOT NULL PRIMARY KEY);
    INSERT INTO @v_jobs (job_id)
    SELECT x.scheduled_job_id FROM inserted AS x
    UNION
    SELECT y.scheduled_job_id FROM deleted AS y;
    WHILE EXISTS (SELECT 1 FROM @v_jobs)
    BEGIN
        SELECT TOP (1) @v_job = q.job_id FROM @v_jobs AS q ORDER BY q.job_id;
        DELETE q FROM @v_jobs AS q WHERE q.job_id = @v_job;
        SET @v_name = NULL;
        SELECT @v_name = j.name, @v_version = j.version
          FROM mjsched.scheduled_job AS j WITH (UPDLOCK, HOLDLOCK)
         WHERE j.id = @v_job;
        IF @v_name IS NOT NULL    -- else deleted with its job
        BEGIN
            SET @v_new = STUFF((SELECT N',' + g.tag FROM mjsched.job_tag AS g WHERE g.scheduled_job_id = @v_job
                                 ORDER BY g.tag FOR XML PATH('')), 1, 1, N'');
            SET @v_old = STUFF((SELECT N',' + t.tag
                                  FROM (SELECT g.tag FROM mjsched.job_tag AS g
                                         WHERE g.scheduled_job_id = @v_job
                                           AND NOT EXISTS (SELECT 1 FROM inserted AS i
                                                            WHERE i.scheduled_job_id = @v_job AND i.tag = g.tag)
                                        UNION
                                        SELECT d.tag FROM deleted AS d WHERE d.scheduled_job_id = @v_job) AS t
                                 ORDER BY t.tag FOR XML PATH('')), 1, 1, N'');
            IF EXISTS (SELECT @v_old EXCEPT SELECT @v_new)
            BEGIN
                SET @v_change = NULL;
                SET @v_mark = CONVERT(nvarchar(200), SESSION_CONTEXT(N'mjsched.audit_job'));
                SET @v_prefix = @v_tx + N'|' + CONVERT(nvarchar(36), @v_job) + N'|' + CONVERT(nvarchar(12), @v_version)
                                + N'|';
                SET @v_row = CASE WHEN LEFT(@v_mark, LEN(@v_prefix)) = @v_prefix
                                  THEN SUBSTRING(@v_mark, LEN(@v_prefix) + 1, 20) END;
                IF @v_row IS NOT NULL
                BEGIN
                    IF @v_row <> N''
                    BEGIN
                        UPDATE c
                           SET new_value = @v_new
                          FROM mjsched.job_change AS c
                         WHERE c.id = CONVERT(bigint, @v_row) AND c.job_id = @v_job AND c.field = N'tags';
                        IF @@ROWCOUNT > 0
                        BEGIN
                            SET @v_change = CONVERT(bigint, @v_row);
                        END;
                    END;
                END;
                IF @v_row IS NULL     -- a change of its own: the next version
                BEGIN
                    UPDATE j
                       SET version = j.version + 1, updated_at = SYSDATETIMEOFFSET()
                      FROM mjsched.scheduled_job AS j
                     WHERE j.id = @v_job;
                    SET @v_version = @v_version + 1;
                END;
                IF @v_change IS NULL
                BEGIN
                    INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, old_value, new_value,
                                                    app_user, via)
                    VALUES (@v_job, @v_name, @v_version, N'updated', N'tags', @v_old, @v_new, @v_user, @v_via);
                    SET @v_change = CONVERT(bigint, SCOPE_IDENTITY());
                END;
                SET @v_mark = @v_tx + N'|' + CONVERT(nvarchar(36), @v_job) + N'|' + CONVERT(nvarchar(12), @v_version)
                              + N'|' + CONVERT(nvarchar(20), @v_change);
                EXEC sp_set_session_context @key = N'mjsched.audit_job', @value = @v_mark;
            END;
        END;
    END;
END;
GO

-- Retention: the twin of PostgreSQL's purge_job_changes (a change row goes with the job's
-- keep_runs_days, else p_keep_seconds; 0 or NULL keeps it; a deleted job's rows with the
-- default). At most p_batch_size rows per call, the oldest first; answers how many went.
CREATE OR ALTER PROCEDURE mjsched.purge_job_changes
    @p_keep_seconds float,
    @p_batch_size int = 1000,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_message nvarchar(2048) = CASE
        WHEN @p_keep_seconds IS NOT NULL AND NOT (@p_keep_seconds >= 0 AND @p_keep_seconds <= 3153600000)
            THEN CONCAT(N'keep_seconds=', CONVERT(nvarchar(40), @p_keep_seconds),
                        N' must be a number of seconds in [0, 3153600000] (100 years)')
        WHEN @p_batch_size IS NULL OR NOT (@p_batch_size BETWEEN 1 AND 4000)
            THEN CONCAT(N'batch_size=', COALESCE(CONVERT(nvarchar(20), @p_batch_size), N'NULL'),
                        N' must be between 1 and 4000')
    END;
    IF @v_message IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    DELETE FROM mjsched.job_change
     WHERE id IN (SELECT TOP (@p_batch_size) x.id
                    FROM mjsched.job_change AS x
                    LEFT JOIN mjsched.scheduled_job AS j ON j.id = x.job_id
                   CROSS APPLY (SELECT CASE WHEN j.keep_runs_days IS NOT NULL
                                            THEN NULLIF(j.keep_runs_days, 0) * 86400.0
                                            ELSE NULLIF(@p_keep_seconds, 0) END AS keep) AS k
                   WHERE k.keep IS NOT NULL
                     AND x.changed_at < DATEADD(second, -CONVERT(int, k.keep - FLOOR(k.keep / 86400) * 86400),
                                                DATEADD(day, -CONVERT(int, FLOOR(k.keep / 86400)), @v_now))
                   ORDER BY x.changed_at);
    SELECT @@ROWCOUNT AS purged;
END;
GO
