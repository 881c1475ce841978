-- mjsched job administration, version 4 (T-SQL twin of sql/postgres/004_job_admin.sql):
-- create, change and delete jobs through procedures, so the EXECUTE-only engine role
-- (grants.sql) manages jobs without write privileges on the tables. Only definition and
-- schedule columns can be written; lock, lease and statistics columns belong to the
-- lock procedures. @p_fields is a JSON object of column -> value: absent keys keep their
-- default (insert) or current value (update); unknown keys are an error naming the key.
-- Key names are compared binary (COLLATE Latin1_General_BIN2), never under the database
-- collation (case-insensitive by default): JSON paths are case-sensitive ('$.description'
-- does not read "Description"), so a key that differs from a column name only in case
-- must be rejected as unknown, as in PostgreSQL. OPENJSON's key column is documented as
-- BIN2 already; the explicit COLLATE says so where it matters, and a table variable's
-- column (@v_keys) would otherwise take the database collation.
--
-- A procedure keeps the SET options it was created with, and scheduled_job has filtered
-- indexes, which fail every write made under QUOTED_IDENTIFIER OFF (error 1934): the
-- first batch sets them, as 001 and 002 do, for this file applied by hand (sqlcmd).

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

-- tag_problem: why a value is not a tag (NULL when it is one): 1 to 64 characters of a-z, 0-9,
-- '.', '_' and '-', starting with a letter or a digit (sql/postgres/010_tags.sql). Here, before
-- check_job_fields, which calls it (010_tags.sql holds the rest of the tags).
CREATE OR ALTER FUNCTION mjsched.tag_problem(@p_tag nvarchar(4000))
RETURNS nvarchar(200)
AS
BEGIN
    RETURN CASE WHEN @p_tag IS NULL OR DATALENGTH(@p_tag) = 0 THEN N'must not be empty'
                WHEN LEN(@p_tag + N'x') - 1 > 64
                THEN CONCAT(LEN(@p_tag + N'x') - 1, N' characters long; at most 64 allowed')
                WHEN @p_tag COLLATE Latin1_General_BIN2 LIKE N'%[^a-z0-9._-]%'
                     OR @p_tag COLLATE Latin1_General_BIN2 NOT LIKE N'[a-z0-9]%'
                THEN N'may hold only a-z, 0-9, ".", "_" and "-", and starts with a letter or a digit'
           END;
END;
GO

-- check_job_fields: the keys are job columns that can be set, each value converts to its
-- column's type, and each value keeps the rules the API checks (mjsched/validation.py) and
-- the table enforces (001_schema.sql, "What a row may hold"): the error names the field and
-- the value (error 50022), before anything is written. The twin of the PostgreSQL function.
CREATE OR ALTER PROCEDURE mjsched.check_job_fields
    @p_fields nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_key nvarchar(4000);
    DECLARE @v_value nvarchar(max);
    DECLARE @v_type int;
    IF @p_fields IS NULL OR ISJSON(@p_fields) = 0 OR LEFT(LTRIM(@p_fields), 1) <> N'{'
    BEGIN
        THROW 50022, N'fields must be a JSON object', 1;
    END;
    SELECT TOP (1) @v_key = e.[key] FROM OPENJSON(@p_fields) AS e
     WHERE e.[key] COLLATE Latin1_General_BIN2 NOT IN (N'job_type_id', N'name', N'description', N'cron_expression', N'timezone', N'start_at', N'end_at', N'status', N'configuration', N'owner', N'concurrency_mode', N'missed_run_policy', N'run_immediately_if_never_run', N'max_runtime_seconds', N'isolation', N'max_queued_runs', N'notify_on_success', N'notify_on_failure', N'notify_to', N'next_run_at', N'high_frequency_ok', N'keep_runs_days', N'keep_runs_count', N'interval_seconds', N'run_at', N'retry_max_attempts', N'retry_initial_delay', N'retry_factor', N'retry_max_delay', N'retry_jitter', N'notify_final_attempt_only', N'tags', N'jitter_seconds', N'priority');
    -- THROW takes an nvarchar(2048) message: the key (up to 4000 characters) is cut to fit.
    DECLARE @v_message nvarchar(2048) = CONCAT(N'fields.', LEFT(@v_key, 2000), N': not a job column that can be set');
    IF @v_key IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    -- Each value on its own, so a value of the wrong type is named (not just "conversion failed").
    SELECT TOP (1) @v_key = e.[key], @v_value = e.[value], @v_type = e.[type]
      FROM OPENJSON(@p_fields) AS e
     WHERE e.[type] <> 0
       AND ((e.[key] COLLATE Latin1_General_BIN2 IN (N'start_at', N'end_at', N'next_run_at', N'run_at')
             AND TRY_CONVERT(datetimeoffset, e.[value]) IS NULL)
            OR (e.[key] COLLATE Latin1_General_BIN2 = N'max_runtime_seconds' AND TRY_CONVERT(float, e.[value]) IS NULL)
            OR (e.[key] COLLATE Latin1_General_BIN2 IN (N'max_queued_runs', N'keep_runs_days', N'keep_runs_count', N'interval_seconds',
                                                        N'jitter_seconds', N'priority')
                AND TRY_CONVERT(int, e.[value]) IS NULL)
            OR (e.[key] COLLATE Latin1_General_BIN2 = N'retry_max_attempts' AND TRY_CONVERT(int, e.[value]) IS NULL)
            OR (e.[key] COLLATE Latin1_General_BIN2 IN (N'retry_initial_delay', N'retry_factor', N'retry_max_delay',
                                                        N'retry_jitter')
                AND TRY_CONVERT(float, e.[value]) IS NULL)
            OR (e.[key] COLLATE Latin1_General_BIN2 = N'job_type_id'
                AND TRY_CONVERT(uniqueidentifier, e.[value]) IS NULL)
            OR (e.[key] COLLATE Latin1_General_BIN2 IN (N'run_immediately_if_never_run', N'notify_on_success',
                                                        N'notify_on_failure', N'high_frequency_ok',
                                                        N'notify_final_attempt_only')
                AND TRY_CONVERT(bit, e.[value]) IS NULL)
            OR (e.[key] COLLATE Latin1_General_BIN2 = N'configuration' AND e.[type] <> 5))
     ORDER BY e.[key];
    SET @v_message = CONCAT(N'fields.', LEFT(@v_key, 200), N': ', LEFT(@v_value, 200),
                            CASE WHEN @v_key = N'configuration' THEN N' must be a JSON object'
                                 ELSE N' is not a valid value' END);
    IF @v_key IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    DECLARE @v_max_runtime float, @v_start datetimeoffset, @v_end datetimeoffset, @v_next datetimeoffset;
    DECLARE @v_name nvarchar(max), @v_cron nvarchar(max), @v_zone nvarchar(max), @v_description nvarchar(max);
    DECLARE @v_configuration nvarchar(max), @v_status nvarchar(max), @v_mode nvarchar(max);
    DECLARE @v_policy nvarchar(max), @v_isolation nvarchar(max), @v_queued int;
    DECLARE @v_keep_days int, @v_keep_count int;
    DECLARE @v_attempts int, @v_initial float, @v_factor float, @v_max_delay float, @v_jitter float;
    DECLARE @v_retry_keys int = (SELECT COUNT(*) FROM OPENJSON(@p_fields) AS e
                                  WHERE e.[key] COLLATE Latin1_General_BIN2 IN
                                        (N'retry_max_attempts', N'retry_initial_delay', N'retry_factor',
                                         N'retry_max_delay', N'retry_jitter'));
    DECLARE @v_interval int, @v_run_at datetimeoffset, @v_jitter_seconds int, @v_priority int;
    SELECT @v_interval = f.interval_seconds, @v_run_at = f.run_at, @v_jitter_seconds = f.jitter_seconds,
           @v_priority = f.priority,
           @v_max_runtime = f.max_runtime_seconds, @v_start = f.start_at, @v_end = f.end_at,
           @v_next = f.next_run_at, @v_name = f.name, @v_cron = f.cron_expression, @v_zone = f.timezone,
           @v_description = f.description, @v_configuration = f.configuration, @v_status = f.status,
           @v_mode = f.concurrency_mode, @v_policy = f.missed_run_policy, @v_isolation = f.isolation,
           @v_queued = f.max_queued_runs, @v_keep_days = f.keep_runs_days, @v_keep_count = f.keep_runs_count,
           @v_attempts = f.retry_max_attempts, @v_initial = f.retry_initial_delay,
           @v_factor = f.retry_factor, @v_max_delay = f.retry_max_delay, @v_jitter = f.retry_jitter
      FROM OPENJSON(@p_fields) WITH (
            max_runtime_seconds float '$.max_runtime_seconds',
            start_at datetimeoffset '$.start_at',
            end_at datetimeoffset '$.end_at',
            next_run_at datetimeoffset '$.next_run_at',
            name nvarchar(max) '$.name',
            cron_expression nvarchar(max) '$.cron_expression',
            timezone nvarchar(max) '$.timezone',
            description nvarchar(max) '$.description',
            configuration nvarchar(max) '$.configuration' AS JSON,
            status nvarchar(max) '$.status',
            concurrency_mode nvarchar(max) '$.concurrency_mode',
            missed_run_policy nvarchar(max) '$.missed_run_policy',
            isolation nvarchar(max) '$.isolation',
            max_queued_runs int '$.max_queued_runs',
            keep_runs_days int '$.keep_runs_days',
            keep_runs_count int '$.keep_runs_count',
            interval_seconds int '$.interval_seconds',
            run_at datetimeoffset '$.run_at',
            retry_max_attempts int '$.retry_max_attempts',
            retry_initial_delay float '$.retry_initial_delay',
            retry_factor float '$.retry_factor',
            retry_max_delay float '$.retry_max_delay',
            retry_jitter float '$.retry_jitter',
            jitter_seconds int '$.jitter_seconds',
            priority int '$.priority'
      ) AS f;
    SET @v_message = CASE
        WHEN NOT (@v_max_runtime > 0 AND @v_max_runtime <= 31536000)
            THEN CONCAT(N'fields.max_runtime_seconds: ', CONVERT(nvarchar(40), @v_max_runtime),
                        N' must be a finite number of seconds in (0, 31536000] (one year)')
        WHEN NOT (@v_start BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
                               AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset))
            THEN CONCAT(N'fields.start_at: ', CONVERT(nvarchar(40), @v_start, 127),
                        N' must lie between 1900-01-01 00:00 and 9999-12-31 00:00 UTC')
        WHEN NOT (@v_end BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
                             AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset))
            THEN CONCAT(N'fields.end_at: ', CONVERT(nvarchar(40), @v_end, 127),
                        N' must lie between 1900-01-01 00:00 and 9999-12-31 00:00 UTC')
        WHEN NOT (@v_next BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
                              AND CAST(N'9999-12-31T00:00:00+00:00' AS datetimeoffset))
            THEN CONCAT(N'fields.next_run_at: ', CONVERT(nvarchar(40), @v_next, 127),
                        N' must lie between 1900-01-01 00:00 and 9999-12-31 00:00 UTC')
        WHEN NOT (@v_run_at BETWEEN CAST(N'1900-01-01T00:00:00+00:00' AS datetimeoffset)
                                AND CAST(N'9999-12-30T00:00:00+00:00' AS datetimeoffset))
            THEN CONCAT(N'fields.run_at: ', CONVERT(nvarchar(40), @v_run_at, 127),
                        N' must lie between 1900-01-01 00:00 and 9999-12-30 00:00 UTC')
        WHEN @v_start >= @v_end
            THEN CONCAT(N'fields.end_at: ', CONVERT(nvarchar(40), @v_end, 127), N' must be after start_at (',
                        CONVERT(nvarchar(40), @v_start, 127), N')')
        WHEN EXISTS (SELECT 1 FROM OPENJSON(@p_fields) AS e WHERE e.[key] COLLATE Latin1_General_BIN2 = N'name')
             AND COALESCE(LEN(@v_name), 0) = 0
            THEN CONCAT(N'fields.name: ', COALESCE(N'''' + @v_name + N'''', N'null'), N' must not be empty')
        -- A job's schedule is exactly one of cron_expression, interval_seconds and run_at
        -- (007_schedule_kinds.sql): a write that gives one of them gives the three (NULL for the
        -- other two), so the kinds it leaves are known here. cron_expression is NULL for the others.
        WHEN LEN(@v_cron) = 0
            THEN CONCAT(N'fields.cron_expression: ''', @v_cron, N''' must not be empty')
        WHEN @v_interval NOT BETWEEN 1 AND 31622400
            THEN CONCAT(N'fields.interval_seconds: ', @v_interval,
                        N' must be an interval of 1 to 31622400 seconds (366 days)')
        WHEN EXISTS (SELECT 1 FROM OPENJSON(@p_fields) AS e
                      WHERE e.[key] COLLATE Latin1_General_BIN2 IN (N'cron_expression', N'interval_seconds', N'run_at'))
             AND CASE WHEN @v_cron IS NULL THEN 0 ELSE 1 END + CASE WHEN @v_interval IS NULL THEN 0 ELSE 1 END
                 + CASE WHEN @v_run_at IS NULL THEN 0 ELSE 1 END <> 1
            THEN CONCAT(N'fields.cron_expression: ', COALESCE(N'''' + LEFT(@v_cron, 255) + N'''', N'null'),
                        N', interval_seconds: ', COALESCE(CONVERT(nvarchar(20), @v_interval), N'null'),
                        N', run_at: ', COALESCE(CONVERT(nvarchar(40), @v_run_at, 127), N'null'),
                        N': a job has exactly one schedule (give one of them, the other two null)')
        WHEN EXISTS (SELECT 1 FROM OPENJSON(@p_fields) AS e WHERE e.[key] COLLATE Latin1_General_BIN2 = N'timezone')
             AND COALESCE(LEN(@v_zone), 0) = 0
            THEN CONCAT(N'fields.timezone: ', COALESCE(N'''' + @v_zone + N'''', N'null'), N' must not be empty')
        WHEN LEN(@v_description) > 100000
            THEN CONCAT(N'fields.description: ', LEN(@v_description), N' characters long; at most 100000 allowed')
        WHEN mjsched.json_nesting_exceeds(@v_configuration, 64) = 1
            THEN N'fields.configuration: JSON nested deeper than 64 levels of objects and arrays; at most 64 allowed'
        WHEN LEN(@v_configuration) > 1000000
            THEN CONCAT(N'fields.configuration: ', LEN(@v_configuration), N' characters; at most 1000000 allowed')
        WHEN @v_status NOT IN (N'Pending', N'Active', N'Paused', N'Disabled', N'Expired')
            THEN CONCAT(N'fields.status: ''', LEFT(@v_status, 200),
                        N''' must be one of Pending, Active, Paused, Disabled, Expired')
        WHEN @v_mode NOT IN (N'Skip', N'Queue', N'Concurrent')
            THEN CONCAT(N'fields.concurrency_mode: ''', LEFT(@v_mode, 200),
                        N''' must be one of Skip, Queue, Concurrent')
        WHEN @v_policy NOT IN (N'Skip', N'RunOnce', N'RunAll')
            THEN CONCAT(N'fields.missed_run_policy: ''', LEFT(@v_policy, 200),
                        N''' must be one of Skip, RunOnce, RunAll')
        WHEN @v_isolation NOT IN (N'thread', N'process')
            THEN CONCAT(N'fields.isolation: ''', LEFT(@v_isolation, 200), N''' must be thread or process')
        WHEN @v_jitter_seconds NOT BETWEEN 1 AND 86400   -- the rule of 012_jitter.sql
            THEN CONCAT(N'fields.jitter_seconds: ', @v_jitter_seconds,
                        N' must be between 1 and 86400 seconds (one day), or null for none')
        WHEN @v_priority NOT BETWEEN -100 AND 100   -- the rule of 015_priorities.sql
            THEN CONCAT(N'fields.priority: ', @v_priority, N' must be between -100 and 100 (higher runs first)')
        WHEN @v_queued NOT BETWEEN 1 AND 1000
            THEN CONCAT(N'fields.max_queued_runs: ', @v_queued, N' must be between 1 and 1000')
        WHEN @v_keep_days NOT BETWEEN 0 AND 36500   -- the rules of 006_retention.sql
            THEN CONCAT(N'fields.keep_runs_days: ', @v_keep_days,
                        N' must be between 0 (keep regardless of age) and 36500')
        WHEN @v_keep_count NOT BETWEEN 0 AND 1000000000
            THEN CONCAT(N'fields.keep_runs_count: ', @v_keep_count,
                        N' must be between 0 (no count kept) and 1000000000')
        -- the retry policy (009_retries.sql): all five keys or none, each inside its rule
        WHEN @v_retry_keys > 0
             AND NOT (@v_retry_keys = 5
                      AND ((@v_attempts IS NULL AND @v_initial IS NULL AND @v_factor IS NULL
                            AND @v_max_delay IS NULL AND @v_jitter IS NULL)
                           OR (@v_attempts IS NOT NULL AND @v_initial IS NOT NULL AND @v_factor IS NOT NULL
                               AND @v_max_delay IS NOT NULL AND @v_jitter IS NOT NULL)))
            THEN CONCAT(N'fields.retry_max_attempts: a retry policy is all five retry_* values or none (got ',
                        @v_retry_keys, N' of them)')
        WHEN @v_attempts NOT BETWEEN 1 AND 100
            THEN CONCAT(N'fields.retry_max_attempts: ', @v_attempts, N' must be between 1 and 100')
        WHEN NOT (@v_initial >= 0 AND @v_initial <= 31536000)
            THEN CONCAT(N'fields.retry_initial_delay: ', CONVERT(nvarchar(40), @v_initial),
                        N' must be a finite number of seconds in [0, 31536000]')
        WHEN NOT (@v_factor >= 1 AND @v_factor <= 100)
            THEN CONCAT(N'fields.retry_factor: ', CONVERT(nvarchar(40), @v_factor), N' must be between 1 and 100')
        WHEN NOT (@v_max_delay >= @v_initial AND @v_max_delay <= 31536000)
            THEN CONCAT(N'fields.retry_max_delay: ', CONVERT(nvarchar(40), @v_max_delay),
                        N' must be at least retry_initial_delay (', CONVERT(nvarchar(40), @v_initial),
                        N') and at most 31536000')
        WHEN NOT (@v_jitter >= 0 AND @v_jitter <= 1)
            THEN CONCAT(N'fields.retry_jitter: ', CONVERT(nvarchar(40), @v_jitter), N' must be between 0 and 1')
    END;
    IF @v_message IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    -- tags (010_tags.sql): the job's whole set, a JSON array of at most 32 tags
    DECLARE @v_tags nvarchar(max), @v_tags_type int;
    SELECT TOP (1) @v_tags = e.[value], @v_tags_type = e.[type]
      FROM OPENJSON(@p_fields) AS e WHERE e.[key] COLLATE Latin1_General_BIN2 = N'tags';
    IF @v_tags_type IS NOT NULL
    BEGIN
        SET @v_message = CONCAT(N'fields.tags: ', LEFT(@v_tags, 200), N' must be a JSON array of at most 32 tags');
        IF @v_tags_type <> 4
        BEGIN
            THROW 50022, @v_message, 1;
        END;
        IF EXISTS (SELECT 1 FROM OPENJSON(@v_tags) AS e WHERE CONVERT(int, e.[key]) >= 32)   -- a 33rd tag
        BEGIN
            THROW 50022, @v_message, 1;
        END;
        SET @v_message = NULL;
        SELECT TOP (1) @v_message = CONCAT(N'fields.tags: ', LEFT(e.[value], 200), N' ',
                                           CASE WHEN e.[type] <> 1 THEN N'must be a string'
                                                ELSE mjsched.tag_problem(e.[value]) END)
          FROM OPENJSON(@v_tags) AS e
         WHERE e.[type] <> 1 OR mjsched.tag_problem(e.[value]) IS NOT NULL
         ORDER BY CONVERT(int, e.[key]);
        IF @v_message IS NOT NULL
        BEGIN
            THROW 50022, @v_message, 1;
        END;
    END;
END;
GO

-- ensure_job_type: the id of the job type for a driver, created on first use.
CREATE OR ALTER PROCEDURE mjsched.ensure_job_type
    @p_driver nvarchar(255),
    @p_isolation nvarchar(10),
    @p_default_max_runtime float
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    BEGIN TRANSACTION;
    IF NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_type AS t WITH (UPDLOCK, HOLDLOCK)
                    WHERE t.driver_class = @p_driver OR t.name = @p_driver)
    BEGIN
        INSERT INTO mjsched.scheduled_job_type (name, driver_class, isolation, default_max_runtime_seconds)
        VALUES (@p_driver, @p_driver, COALESCE(@p_isolation, N'thread'), @p_default_max_runtime);
    END;
    COMMIT TRANSACTION;
    SELECT t.id AS job_type_id FROM mjsched.scheduled_job_type AS t WHERE t.driver_class = @p_driver;
END;
GO

-- insert_job: the new job's id. @p_fields may hold the "id" the caller chose for it (the
-- backends send a new UUID per creation, the same on every retry of it); without one the job
-- gets a random id (NEWID(): the column's NEWSEQUENTIALID() is allowed only as a DEFAULT).
-- Replay-safe: an id already taken by a job of the same name and job type is the job a call
-- whose reply was lost inserted, and its id is the answer (nothing is written). An id taken
-- by another job is an error naming fields.id (error 50022); a name another job holds is the
-- violation of the UNIQUE constraint uq_scheduled_job_name (error 2627), as without an id.
CREATE OR ALTER PROCEDURE mjsched.insert_job
    @p_fields nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_id uniqueidentifier;
    DECLARE @v_fields nvarchar(max) = @p_fields;   -- without "id", the one key check_job_fields does not take
    DECLARE @v_id_text nvarchar(max), @v_id_type int;
    DECLARE @v_message nvarchar(2048);
    IF ISJSON(@p_fields) = 1 AND LEFT(LTRIM(@p_fields), 1) = N'{'
    BEGIN
        SELECT TOP (1) @v_id_text = e.[value], @v_id_type = e.[type]
          FROM OPENJSON(@p_fields) AS e
         WHERE e.[key] COLLATE Latin1_General_BIN2 = N'id';
        -- a string of 36 characters, or 38 in braces: CONVERT cuts a longer string to fit
        SET @v_id = CASE WHEN @v_id_type = 1
                          AND (LEN(@v_id_text) = 36
                               OR (LEN(@v_id_text) = 38 AND LEFT(@v_id_text, 1) = N'{' AND RIGHT(@v_id_text, 1) = N'}'))
                         THEN TRY_CONVERT(uniqueidentifier, @v_id_text) END;
        SET @v_message = CONCAT(N'fields.id: ', LEFT(@v_id_text, 200), N' is not a valid value');
        IF @v_id_type <> 0 AND @v_id IS NULL
        BEGIN
            THROW 50022, @v_message, 1;
        END;
        IF @v_id_type IS NOT NULL
        BEGIN
            SET @v_fields = JSON_MODIFY(@p_fields, N'$.id', NULL);   -- lax mode: NULL deletes the key
        END;
    END;
    EXEC mjsched.check_job_fields @p_fields = @v_fields;
    DECLARE @v_keys TABLE (name nvarchar(4000) COLLATE Latin1_General_BIN2 NOT NULL);
    INSERT INTO @v_keys (name) SELECT e.[key] COLLATE Latin1_General_BIN2 FROM OPENJSON(@v_fields) AS e;
    IF NOT EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name IN (N'cron_expression', N'interval_seconds', N'run_at'))
    BEGIN
        THROW 50022, N'fields.cron_expression: a job needs a schedule: cron_expression, interval_seconds or run_at', 1;
    END;
    DECLARE @v_name nvarchar(200), @v_type_id uniqueidentifier;
    SELECT @v_name = f.name, @v_type_id = f.job_type_id
      FROM OPENJSON(@v_fields) WITH (
            name nvarchar(200) '$.name',
            job_type_id uniqueidentifier '$.job_type_id'
      ) AS f;
    SET @v_id = COALESCE(@v_id, NEWID());
    DECLARE @v_ids TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRANSACTION;
    -- UPDLOCK, HOLDLOCK on the id: a replay that finds the lost call's insert still uncommitted
    -- waits for it, then reads its row; until this commits, no other call inserts under the id.
    IF EXISTS (SELECT 1 FROM mjsched.scheduled_job AS j WITH (UPDLOCK, HOLDLOCK) WHERE j.id = @v_id)
    BEGIN
        SET @v_message = CONCAT(N'fields.id: ', CONVERT(nvarchar(36), @v_id), N' is the id of another job (not named ''',
                                LEFT(@v_name, 200), N''')');
        IF NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job AS j
                        WHERE j.id = @v_id AND j.name = @v_name AND j.job_type_id = @v_type_id)
        BEGIN
            THROW 50022, @v_message, 1;   -- XACT_ABORT ON: the transaction is rolled back
        END;
        INSERT INTO @v_ids (id) VALUES (@v_id);   -- the job an earlier attempt of this call inserted
    END;
    IF NOT EXISTS (SELECT 1 FROM @v_ids)
    BEGIN
        INSERT INTO mjsched.scheduled_job (id, job_type_id, name, description, cron_expression, timezone, start_at, end_at, status, configuration, owner, concurrency_mode, missed_run_policy, run_immediately_if_never_run, max_runtime_seconds, isolation, max_queued_runs, notify_on_success, notify_on_failure, notify_to, next_run_at, high_frequency_ok, keep_runs_days, keep_runs_count, interval_seconds, run_at, retry_max_attempts, retry_initial_delay, retry_factor, retry_max_delay, retry_jitter, notify_final_attempt_only, jitter_seconds, priority)
        OUTPUT inserted.id INTO @v_ids
        SELECT
                   @v_id,
                   f.job_type_id,
                   f.name,
                   f.description,
                   f.cron_expression,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'timezone') THEN f.timezone ELSE N'UTC' END,
                   f.start_at,
                   f.end_at,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'status') THEN f.status ELSE N'Pending' END,
                   f.configuration,
                   f.owner,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'concurrency_mode') THEN f.concurrency_mode ELSE N'Skip' END,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'missed_run_policy') THEN f.missed_run_policy ELSE N'RunOnce' END,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'run_immediately_if_never_run') THEN f.run_immediately_if_never_run ELSE 0 END,
                   f.max_runtime_seconds,
                   f.isolation,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'max_queued_runs') THEN f.max_queued_runs ELSE 5 END,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'notify_on_success') THEN f.notify_on_success ELSE 0 END,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'notify_on_failure') THEN f.notify_on_failure ELSE 1 END,
                   f.notify_to,
                   f.next_run_at,
                   CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'high_frequency_ok') THEN COALESCE(f.high_frequency_ok, 0) ELSE 0 END,
                   f.keep_runs_days,
                   f.keep_runs_count,
                   f.interval_seconds,
                   f.run_at,
                   f.retry_max_attempts,
                   f.retry_initial_delay,
                   f.retry_factor,
                   f.retry_max_delay,
                   f.retry_jitter,
                   COALESCE(f.notify_final_attempt_only, 1),
                   f.jitter_seconds,
                   COALESCE(f.priority, 0)
          FROM OPENJSON(@v_fields) WITH (
                job_type_id uniqueidentifier '$.job_type_id',
                name nvarchar(200) '$.name',
                description nvarchar(max) '$.description',
                cron_expression nvarchar(255) '$.cron_expression',
                timezone nvarchar(64) '$.timezone',
                start_at datetimeoffset '$.start_at',
                end_at datetimeoffset '$.end_at',
                status nvarchar(20) '$.status',
                configuration nvarchar(max) '$.configuration' AS JSON,
                owner nvarchar(255) '$.owner',
                concurrency_mode nvarchar(20) '$.concurrency_mode',
                missed_run_policy nvarchar(20) '$.missed_run_policy',
                run_immediately_if_never_run bit '$.run_immediately_if_never_run',
                max_runtime_seconds float '$.max_runtime_seconds',
                isolation nvarchar(10) '$.isolation',
                max_queued_runs int '$.max_queued_runs',
                notify_on_success bit '$.notify_on_success',
                notify_on_failure bit '$.notify_on_failure',
                notify_to nvarchar(1000) '$.notify_to',
                next_run_at datetimeoffset '$.next_run_at',
                high_frequency_ok bit '$.high_frequency_ok',
                keep_runs_days int '$.keep_runs_days',
                keep_runs_count int '$.keep_runs_count',
                interval_seconds int '$.interval_seconds',
                run_at datetimeoffset '$.run_at',
                retry_max_attempts int '$.retry_max_attempts',
                retry_initial_delay float '$.retry_initial_delay',
                retry_factor float '$.retry_factor',
                retry_max_delay float '$.retry_max_delay',
                retry_jitter float '$.retry_jitter',
                notify_final_attempt_only bit '$.notify_final_attempt_only',
                jitter_seconds int '$.jitter_seconds',
                priority int '$.priority'
          ) AS f;
        INSERT INTO mjsched.job_tag (scheduled_job_id, tag)
        SELECT DISTINCT @v_id, CONVERT(nvarchar(64), e.[value]) FROM OPENJSON(@v_fields, N'$.tags') AS e;
    END;
    COMMIT TRANSACTION;
    SELECT i.id AS job_id FROM @v_ids AS i;
END;
GO

CREATE OR ALTER PROCEDURE mjsched.update_job
    @p_job_id uniqueidentifier,
    @p_fields nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_job_fields @p_fields = @p_fields;
    DECLARE @v_keys TABLE (name nvarchar(4000) COLLATE Latin1_General_BIN2 NOT NULL);
    INSERT INTO @v_keys (name) SELECT e.[key] COLLATE Latin1_General_BIN2 FROM OPENJSON(@p_fields) AS e;
    DECLARE @v_ids TABLE (id uniqueidentifier NOT NULL);
    BEGIN TRANSACTION;
    UPDATE j
       SET
           job_type_id = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'job_type_id') THEN f.job_type_id ELSE j.job_type_id END,
           name = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'name') THEN f.name ELSE j.name END,
           description = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'description') THEN f.description ELSE j.description END,
           -- a write that gives one schedule kind replaces the schedule: the kinds it leaves out are cleared
           cron_expression = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'cron_expression') THEN f.cron_expression
                                  WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name IN (N'interval_seconds', N'run_at')) THEN NULL
                                  ELSE j.cron_expression END,
           timezone = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'timezone') THEN f.timezone ELSE j.timezone END,
           start_at = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'start_at') THEN f.start_at ELSE j.start_at END,
           end_at = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'end_at') THEN f.end_at ELSE j.end_at END,
           status = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'status') THEN f.status ELSE j.status END,
           configuration = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'configuration') THEN f.configuration ELSE j.configuration END,
           owner = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'owner') THEN f.owner ELSE j.owner END,
           concurrency_mode = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'concurrency_mode') THEN f.concurrency_mode ELSE j.concurrency_mode END,
           missed_run_policy = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'missed_run_policy') THEN f.missed_run_policy ELSE j.missed_run_policy END,
           run_immediately_if_never_run = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'run_immediately_if_never_run') THEN f.run_immediately_if_never_run ELSE j.run_immediately_if_never_run END,
           max_runtime_seconds = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'max_runtime_seconds') THEN f.max_runtime_seconds ELSE j.max_runtime_seconds END,
           isolation = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'isolation') THEN f.isolation ELSE j.isolation END,
           max_queued_runs = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'max_queued_runs') THEN f.max_queued_runs ELSE j.max_queued_runs END,
           notify_on_success = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'notify_on_success') THEN f.notify_on_success ELSE j.notify_on_success END,
           notify_on_failure = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'notify_on_failure') THEN f.notify_on_failure ELSE j.notify_on_failure END,
           notify_to = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'notify_to') THEN f.notify_to ELSE j.notify_to END,
           next_run_at = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'next_run_at') THEN f.next_run_at ELSE j.next_run_at END,
           high_frequency_ok = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'high_frequency_ok') THEN COALESCE(f.high_frequency_ok, 0) ELSE j.high_frequency_ok END,
           keep_runs_days = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'keep_runs_days') THEN f.keep_runs_days ELSE j.keep_runs_days END,
           keep_runs_count = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'keep_runs_count') THEN f.keep_runs_count ELSE j.keep_runs_count END,
           interval_seconds = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'interval_seconds') THEN f.interval_seconds
                                   WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name IN (N'cron_expression', N'run_at')) THEN NULL
                                   ELSE j.interval_seconds END,
           run_at = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'run_at') THEN f.run_at
                         WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name IN (N'cron_expression', N'interval_seconds')) THEN NULL
                         ELSE j.run_at END,
           retry_max_attempts = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'retry_max_attempts') THEN f.retry_max_attempts ELSE j.retry_max_attempts END,
           retry_initial_delay = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'retry_initial_delay') THEN f.retry_initial_delay ELSE j.retry_initial_delay END,
           retry_factor = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'retry_factor') THEN f.retry_factor ELSE j.retry_factor END,
           retry_max_delay = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'retry_max_delay') THEN f.retry_max_delay ELSE j.retry_max_delay END,
           retry_jitter = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'retry_jitter') THEN f.retry_jitter ELSE j.retry_jitter END,
           notify_final_attempt_only = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'notify_final_attempt_only') THEN COALESCE(f.notify_final_attempt_only, 1) ELSE j.notify_final_attempt_only END,
           jitter_seconds = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'jitter_seconds') THEN f.jitter_seconds ELSE j.jitter_seconds END,
           priority = CASE WHEN EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'priority') THEN COALESCE(f.priority, 0) ELSE j.priority END
    OUTPUT inserted.id INTO @v_ids
      FROM mjsched.scheduled_job AS j
     CROSS JOIN OPENJSON(@p_fields) WITH (
            job_type_id uniqueidentifier '$.job_type_id',
            name nvarchar(200) '$.name',
            description nvarchar(max) '$.description',
            cron_expression nvarchar(255) '$.cron_expression',
            timezone nvarchar(64) '$.timezone',
            start_at datetimeoffset '$.start_at',
            end_at datetimeoffset '$.end_at',
            status nvarchar(20) '$.status',
            configuration nvarchar(max) '$.configuration' AS JSON,
            owner nvarchar(255) '$.owner',
            concurrency_mode nvarchar(20) '$.concurrency_mode',
            missed_run_policy nvarchar(20) '$.missed_run_policy',
            run_immediately_if_never_run bit '$.run_immediately_if_never_run',
            max_runtime_seconds float '$.max_runtime_seconds',
            isolation nvarchar(10) '$.isolation',
            max_queued_runs int '$.max_queued_runs',
            notify_on_success bit '$.notify_on_success',
            notify_on_failure bit '$.notify_on_failure',
            notify_to nvarchar(1000) '$.notify_to',
            next_run_at datetimeoffset '$.next_run_at',
            high_frequency_ok bit '$.high_frequency_ok',
            keep_runs_days int '$.keep_runs_days',
            keep_runs_count int '$.keep_runs_count',
            interval_seconds int '$.interval_seconds',
            run_at datetimeoffset '$.run_at',
            retry_max_attempts int '$.retry_max_attempts',
            retry_initial_delay float '$.retry_initial_delay',
            retry_factor float '$.retry_factor',
            retry_max_delay float '$.retry_max_delay',
            retry_jitter float '$.retry_jitter',
            notify_final_attempt_only bit '$.notify_final_attempt_only',
            jitter_seconds int '$.jitter_seconds',
            priority int '$.priority'
      ) AS f
     WHERE j.id = @p_job_id;
    -- The job's row is ours now (lock order: job, then its tags and pause record). Tags: the
    -- whole set is replaced. A status written here ends a pause_jobs record (010_tags.sql).
    IF EXISTS (SELECT 1 FROM @v_ids) AND EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'tags')
    BEGIN
        DELETE g FROM mjsched.job_tag AS g
         WHERE g.scheduled_job_id = @p_job_id
           AND g.tag NOT IN (SELECT CONVERT(nvarchar(64), e.[value]) FROM OPENJSON(@p_fields, N'$.tags') AS e);
        INSERT INTO mjsched.job_tag (scheduled_job_id, tag)
        SELECT DISTINCT @p_job_id, CONVERT(nvarchar(64), e.[value]) FROM OPENJSON(@p_fields, N'$.tags') AS e
         WHERE NOT EXISTS (SELECT 1 FROM mjsched.job_tag AS g
                            WHERE g.scheduled_job_id = @p_job_id AND g.tag = CONVERT(nvarchar(64), e.[value]));
    END;
    IF EXISTS (SELECT 1 FROM @v_ids) AND EXISTS (SELECT 1 FROM @v_keys AS k WHERE k.name = N'status')
    BEGIN
        DELETE p FROM mjsched.job_pause AS p WHERE p.scheduled_job_id = @p_job_id;
    END;
    COMMIT TRANSACTION;
    SELECT COUNT(*) AS updated FROM @v_ids;
END;
GO

CREATE OR ALTER PROCEDURE mjsched.delete_job
    @p_job_id uniqueidentifier
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    DECLARE @v_deleted int;
    DELETE FROM mjsched.scheduled_job WHERE id = @p_job_id;
    SET @v_deleted = @@ROWCOUNT;   -- scheduled_job has no DELETE trigger
    SELECT @v_deleted AS deleted;
END;
GO

-- initialize_next_runs: the set-based initialize_next_run (002_procedures, which engines of
-- the previous release still call). @p_items is a JSON array of {"job_id", "next_run_at"};
-- each job is set only while it is Active and has no next_run_at (compare-and-set, so several
-- engines may reschedule the same page at once: each job is set once). Returns how many were
-- set. Rows locked elsewhere are skipped, never waited for (READPAST): a page of thousands
-- must not deadlock with a bulk UPDATE in progress, nor wait on an operator's open
-- transaction; a skipped row is being set by another engine, or edited, and is fetched again
-- at a later pass. The engine sends pages of at most 2,000 jobs, under the 5,000 locks at
-- which SQL Server tries to escalate a statement's row locks to a table lock.
CREATE OR ALTER PROCEDURE mjsched.initialize_next_runs
    @p_items nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    IF @p_items IS NULL OR ISJSON(@p_items) = 0 OR LEFT(LTRIM(@p_items), 1) <> N'['
    BEGIN
        THROW 50022, N'items must be a JSON array', 1;
    END;
    DECLARE @v_items TABLE (job_id uniqueidentifier NOT NULL PRIMARY KEY, next_run_at datetimeoffset NOT NULL);
    INSERT INTO @v_items (job_id, next_run_at)
    SELECT i.job_id, MIN(i.next_run_at)
      FROM OPENJSON(@p_items) WITH (
            job_id uniqueidentifier '$.job_id',
            next_run_at datetimeoffset '$.next_run_at'
      ) AS i
     WHERE i.job_id IS NOT NULL AND i.next_run_at IS NOT NULL
     GROUP BY i.job_id;
    DECLARE @v_initialized TABLE (id uniqueidentifier NOT NULL);
    UPDATE j
       SET next_run_at = i.next_run_at
    OUTPUT inserted.id INTO @v_initialized
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
      JOIN @v_items AS i ON i.job_id = j.id
     WHERE j.next_run_at IS NULL AND j.status = N'Active';
    SELECT COUNT(*) AS initialized FROM @v_initialized;
END;
GO

-- note_frequency_warned: an engine remembers that it warned about a job's high frequency, so
-- the warning is said once per job and schedule ever, whichever engine starts. @p_items is a
-- JSON array of {"job_id", "schedule"}, schedule being cron_expression (or N'every <n>s' for an
-- interval: mjsched/schedules.py, schedule_text) + N' | ' + timezone as
-- the engine read them (mjsched/engine/housekeeping.py, frequency_key). A job whose schedule changed since
-- is left alone (its new schedule is warned about once more), and rows locked elsewhere are
-- skipped, never waited for (READPAST): a warning said twice is better than a poll that waits.
-- Returns how many jobs were marked. The twin of the PostgreSQL function.
CREATE OR ALTER PROCEDURE mjsched.note_frequency_warned
    @p_items nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    IF @p_items IS NULL OR ISJSON(@p_items) = 0 OR LEFT(LTRIM(@p_items), 1) <> N'['
    BEGIN
        THROW 50022, N'items must be a JSON array', 1;
    END;
    DECLARE @v_items TABLE (job_id uniqueidentifier NOT NULL PRIMARY KEY, schedule nvarchar(322) NOT NULL);
    INSERT INTO @v_items (job_id, schedule)
    SELECT i.job_id, MIN(i.schedule)
      FROM OPENJSON(@p_items) WITH (
            job_id uniqueidentifier '$.job_id',
            schedule nvarchar(322) '$.schedule'
      ) AS i
     WHERE i.job_id IS NOT NULL AND i.schedule IS NOT NULL
     GROUP BY i.job_id;
    DECLARE @v_noted TABLE (id uniqueidentifier NOT NULL);
    UPDATE j
       SET frequency_warned = i.schedule
    OUTPUT inserted.id INTO @v_noted
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, READPAST, ROWLOCK, READCOMMITTEDLOCK)
      JOIN @v_items AS i ON i.job_id = j.id
     WHERE i.schedule COLLATE Latin1_General_BIN2
           = CONCAT(COALESCE(j.cron_expression, CONCAT(N'every ', j.interval_seconds, N's')), N' | ', j.timezone)
             COLLATE Latin1_General_BIN2
       AND (j.frequency_warned IS NULL
            OR j.frequency_warned COLLATE Latin1_General_BIN2 <> i.schedule COLLATE Latin1_General_BIN2);
    SELECT COUNT(*) AS noted FROM @v_noted;
END;
GO
