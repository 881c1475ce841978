-- mjsched deadline alerts, version 14: the twin of sql/postgres/014_alerts.sql (read it for
-- the rules). Differences of the dialect: one evaluation at a time through sp_getapplock
-- (transaction owner, @LockTimeout = 0: a second caller is answered nothing at once); an
-- alert is inserted WHERE NOT EXISTS under UPDLOCK, HOLDLOCK, and the UNIQUE constraint
-- uq_job_alert stays the last word (a duplicate is error 2601/2627, caught: nothing opened);
-- the pause of a failing streak sets SESSION_CONTEXT(N'mjsched.via') to 'alert' around its
-- UPDATE, so the audit trigger says why.
-- Safe to re-run.

SET ANSI_NULLS ON;
SET QUOTED_IDENTIFIER ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
GO

IF OBJECT_ID(N'mjsched.job_alert_rule', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.job_alert_rule (
        job_id                     uniqueidentifier NOT NULL CONSTRAINT pk_job_alert_rule PRIMARY KEY
            CONSTRAINT fk_job_alert_rule_job REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
        late_start_seconds         int NULL,
        silent_after_seconds       int NULL,
        too_long_seconds           int NULL,
        failing_streak             int NULL,
        pause_after_failing_streak bit NOT NULL CONSTRAINT df_job_alert_rule_pause DEFAULT 0,
        updated_at                 datetimeoffset NOT NULL CONSTRAINT df_job_alert_rule_updated_at
            DEFAULT SYSDATETIMEOFFSET(),
        CONSTRAINT ck_job_alert_rule_late_start
            CHECK (late_start_seconds IS NULL OR late_start_seconds BETWEEN 1 AND 31622400),
        CONSTRAINT ck_job_alert_rule_silent
            CHECK (silent_after_seconds IS NULL OR silent_after_seconds BETWEEN 1 AND 31622400),
        CONSTRAINT ck_job_alert_rule_too_long
            CHECK (too_long_seconds IS NULL OR too_long_seconds BETWEEN 1 AND 31622400),
        CONSTRAINT ck_job_alert_rule_streak CHECK (failing_streak IS NULL OR failing_streak BETWEEN 1 AND 1000),
        CONSTRAINT ck_job_alert_rule_pause CHECK (pause_after_failing_streak = 0 OR failing_streak IS NOT NULL)
    );
END;
IF OBJECT_ID(N'mjsched.job_alert', N'U') IS NULL
BEGIN
    CREATE TABLE mjsched.job_alert (
        id            bigint IDENTITY(1, 1) NOT NULL CONSTRAINT pk_job_alert PRIMARY KEY,
        job_id        uniqueidentifier NOT NULL,   -- no foreign key: a deleted job's open alerts are resolved
        job_name      nvarchar(200) NOT NULL,
        kind          nvarchar(20) NOT NULL,
        occurrence    nvarchar(64) NOT NULL,
        since         datetimeoffset NOT NULL,
        threshold     int NOT NULL,
        run_id        uniqueidentifier NULL,
        opened_at     datetimeoffset NOT NULL,
        resolved_at   datetimeoffset NULL,
        paused        bit NOT NULL CONSTRAINT df_job_alert_paused DEFAULT 0,
        opened_call   uniqueidentifier NULL,
        resolved_call uniqueidentifier NULL,
        CONSTRAINT ck_job_alert_kind CHECK (kind IN (N'late_start', N'silent', N'too_long', N'failing_streak')),
        CONSTRAINT uq_job_alert UNIQUE (job_id, kind, occurrence)
    );
END;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'mjsched.job_alert') AND name = N'ix_job_alert_open')
BEGIN
    CREATE INDEX ix_job_alert_open ON mjsched.job_alert (kind, job_id) WHERE resolved_at IS NULL;
END;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'mjsched.job_alert')
                                        AND name = N'ix_job_alert_opened_call')
BEGIN
    CREATE INDEX ix_job_alert_opened_call ON mjsched.job_alert (opened_call);
END;
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'mjsched.job_alert')
                                        AND name = N'ix_job_alert_resolved_call')
BEGIN
    CREATE INDEX ix_job_alert_resolved_call ON mjsched.job_alert (resolved_call);
END;
GO

-- set_job_alerts: the job's rules, replacing the ones it had (see the PostgreSQL twin).
CREATE OR ALTER PROCEDURE mjsched.set_job_alerts
    @p_job_id uniqueidentifier,
    @p_rules nvarchar(max)
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    IF @p_rules IS NULL OR ISJSON(@p_rules) = 0 OR LEFT(LTRIM(@p_rules), 1) <> N'{'
    BEGIN
        THROW 50022, N'alerts must be a JSON object', 1;
    END;
    DECLARE @v_message nvarchar(2048) = (
        SELECT TOP (1) CONCAT(N'alerts.', LEFT(e.[key], 200), N': not an alert rule')
          FROM OPENJSON(@p_rules) AS e
         WHERE e.[key] NOT IN (N'late_start_seconds', N'silent_after_seconds', N'too_long_seconds',
                               N'failing_streak', N'pause_after_failing_streak'));
    IF @v_message IS NULL
    BEGIN
        SET @v_message = (
            SELECT TOP (1) CONCAT(N'alerts.', e.[key], N': ', LEFT(e.value, 200), N' is not a valid value')
              FROM OPENJSON(@p_rules) AS e
             WHERE e.type <> 0
               AND ((e.[key] = N'pause_after_failing_streak' AND e.type <> 3)
                    OR (e.[key] <> N'pause_after_failing_streak'
                        AND (e.type <> 2 OR TRY_CONVERT(int, e.value) IS NULL)))
             ORDER BY e.[key]);
    END;
    IF @v_message IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    DECLARE @v_late int = TRY_CONVERT(int, JSON_VALUE(@p_rules, N'$.late_start_seconds'));
    DECLARE @v_silent int = TRY_CONVERT(int, JSON_VALUE(@p_rules, N'$.silent_after_seconds'));
    DECLARE @v_long int = TRY_CONVERT(int, JSON_VALUE(@p_rules, N'$.too_long_seconds'));
    DECLARE @v_streak int = TRY_CONVERT(int, JSON_VALUE(@p_rules, N'$.failing_streak'));
    DECLARE @v_pause bit = CASE WHEN JSON_VALUE(@p_rules, N'$.pause_after_failing_streak') = N'true' THEN 1 ELSE 0 END;
    DECLARE @v_name nvarchar(200);
    DECLARE @v_version int;
    DECLARE @v_old TABLE (field nvarchar(40) NOT NULL, value nvarchar(20) NULL);
    DECLARE @v_new TABLE (field nvarchar(40) NOT NULL, value nvarchar(20) NULL);
    BEGIN TRANSACTION;
    SELECT @v_name = j.name, @v_version = j.version
      FROM mjsched.scheduled_job AS j WITH (UPDLOCK, ROWLOCK)
     WHERE j.id = @p_job_id;
    IF @v_name IS NOT NULL
    BEGIN
    INSERT INTO @v_old (field, value)
    SELECT v.field, v.value
      FROM mjsched.job_alert_rule AS r
     CROSS APPLY (VALUES (N'late_start_seconds', CONVERT(nvarchar(20), r.late_start_seconds)),
                         (N'silent_after_seconds', CONVERT(nvarchar(20), r.silent_after_seconds)),
                         (N'too_long_seconds', CONVERT(nvarchar(20), r.too_long_seconds)),
                         (N'failing_streak', CONVERT(nvarchar(20), r.failing_streak)),
                         (N'pause_after_failing_streak',
                          CASE WHEN r.pause_after_failing_streak = 1 THEN N'true' END)) AS v (field, value)
     WHERE r.job_id = @p_job_id AND v.value IS NOT NULL;
    IF @v_late IS NULL AND @v_silent IS NULL AND @v_long IS NULL AND @v_streak IS NULL
    BEGIN
        DELETE FROM mjsched.job_alert_rule WHERE job_id = @p_job_id;
    END;
    IF NOT (@v_late IS NULL AND @v_silent IS NULL AND @v_long IS NULL AND @v_streak IS NULL)
    BEGIN
        UPDATE mjsched.job_alert_rule
           SET late_start_seconds = @v_late, silent_after_seconds = @v_silent, too_long_seconds = @v_long,
               failing_streak = @v_streak, pause_after_failing_streak = @v_pause, updated_at = SYSDATETIMEOFFSET()
         WHERE job_id = @p_job_id;
        IF @@ROWCOUNT = 0
        BEGIN
            INSERT INTO mjsched.job_alert_rule (job_id, late_start_seconds, silent_after_seconds, too_long_seconds,
                                                failing_streak, pause_after_failing_streak)
            VALUES (@p_job_id, @v_late, @v_silent, @v_long, @v_streak, @v_pause);
        END;
        INSERT INTO @v_new (field, value)
        SELECT v.field, v.value
          FROM (VALUES (N'late_start_seconds', CONVERT(nvarchar(20), @v_late)),
                       (N'silent_after_seconds', CONVERT(nvarchar(20), @v_silent)),
                       (N'too_long_seconds', CONVERT(nvarchar(20), @v_long)),
                       (N'failing_streak', CONVERT(nvarchar(20), @v_streak)),
                       (N'pause_after_failing_streak', CASE WHEN @v_pause = 1 THEN N'true' END)) AS v (field, value)
         WHERE v.value IS NOT NULL;
    END;
    INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, old_value, new_value, app_user, via)
    SELECT @p_job_id, @v_name, @v_version, N'updated', CONCAT(N'alerts.', COALESCE(o.field, n.field)), o.value,
           n.value, CONVERT(nvarchar(255), SESSION_CONTEXT(N'mjsched.app_user')),
           COALESCE(NULLIF(CONVERT(nvarchar(40), SESSION_CONTEXT(N'mjsched.via')), N''), N'sql')
      FROM @v_old AS o
      FULL JOIN @v_new AS n ON n.field = o.field
     WHERE o.value IS NULL OR n.value IS NULL OR o.value <> n.value
     ORDER BY COALESCE(o.field, n.field);
    END;
    COMMIT TRANSACTION;
    SELECT CASE WHEN @v_name IS NULL THEN 0 ELSE 1 END AS updated;
END;
GO

-- alerts_of_call: what evaluate_alerts answers, for its first call and a replay alike. Internal.
CREATE OR ALTER FUNCTION mjsched.alerts_of_call(@p_call uniqueidentifier)
RETURNS TABLE
AS RETURN
    SELECT a.id AS alert_id, e.event, a.job_id, a.job_name, a.kind, a.since, a.threshold, a.run_id, a.opened_at,
           CASE WHEN e.event = N'resolved' THEN a.resolved_at END AS resolved_at, a.paused
      FROM mjsched.job_alert AS a
     CROSS APPLY (VALUES (CONVERT(nvarchar(10), N'resolved')), (CONVERT(nvarchar(10), N'opened'))) AS e (event)
     WHERE (e.event = N'resolved' AND a.resolved_call = @p_call)
        OR (e.event = N'opened' AND a.opened_call = @p_call);
GO

-- evaluate_alerts: open the alerts whose condition holds and resolve the open ones whose
-- condition ended (see the PostgreSQL twin); answers the rows this call opened or resolved.
CREATE OR ALTER PROCEDURE mjsched.evaluate_alerts
    @p_call uniqueidentifier,
    @p_limit int = 100,
    @p_now datetimeoffset = NULL
AS
BEGIN
    SET NOCOUNT ON;
    SET XACT_ABORT ON;
    EXEC mjsched.check_test_clock @p_now = @p_now;
    DECLARE @v_now datetimeoffset = COALESCE(@p_now, SYSDATETIMEOFFSET());
    DECLARE @v_message nvarchar(2048) = CASE
        WHEN @p_call IS NULL THEN N'call must be a token (uniqueidentifier)'
        WHEN @p_limit IS NULL OR NOT (@p_limit BETWEEN 1 AND 10000)
            THEN CONCAT(N'limit=', COALESCE(CONVERT(nvarchar(20), @p_limit), N'NULL'), N' must be between 1 and 10000')
    END;
    IF @v_message IS NOT NULL
    BEGIN
        THROW 50022, @v_message, 1;
    END;
    DECLARE @v_lock int;
    DECLARE @v_via sql_variant;
    DECLARE @v_paused TABLE (job_id uniqueidentifier NOT NULL PRIMARY KEY);
    IF NOT EXISTS (SELECT 1 FROM mjsched.job_alert AS a WHERE a.opened_call = @p_call)
       AND NOT EXISTS (SELECT 1 FROM mjsched.job_alert AS a WHERE a.resolved_call = @p_call)
    BEGIN
        BEGIN TRANSACTION;
        EXEC @v_lock = sys.sp_getapplock @Resource = N'mjsched.evaluate_alerts', @LockMode = 'Exclusive',
                                         @LockOwner = 'Transaction', @LockTimeout = 0;
        IF @v_lock >= 0
        BEGIN
            UPDATE a
               SET resolved_at = @v_now, resolved_call = @p_call
              FROM mjsched.job_alert AS a WITH (UPDLOCK, ROWLOCK)
             WHERE a.id IN (SELECT TOP (@p_limit) o.id
                              FROM mjsched.job_alert AS o
                              LEFT JOIN mjsched.scheduled_job AS j ON j.id = o.job_id
                              LEFT JOIN mjsched.job_alert_rule AS r ON r.job_id = o.job_id
                             WHERE o.resolved_at IS NULL
                               AND (j.id IS NULL
                                    OR (o.kind = N'late_start'
                                        AND (r.late_start_seconds IS NULL OR j.status <> N'Active'
                                             OR j.next_run_at IS NULL OR j.next_run_at <> o.since
                                             OR EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS x
                                                         WHERE x.scheduled_job_id = o.job_id
                                                           AND x.scheduled_for = o.since)))
                                    OR (o.kind = N'silent'
                                        AND (r.silent_after_seconds IS NULL OR j.status <> N'Active'
                                             OR j.last_success_at > o.since))
                                    OR (o.kind = N'too_long'
                                        AND (r.too_long_seconds IS NULL
                                             OR NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS x
                                                             WHERE x.id = o.run_id AND x.status = N'Running')))
                                    OR (o.kind = N'failing_streak'
                                        AND (r.failing_streak IS NULL OR j.last_success_at > o.since)))
                             ORDER BY o.id)
               AND a.resolved_at IS NULL;

            BEGIN TRY
                INSERT INTO mjsched.job_alert (job_id, job_name, kind, occurrence, since, threshold, opened_at,
                                               opened_call)
                SELECT TOP (@p_limit) j.id, j.name, N'late_start',
                       CONCAT(N'tick ', CONVERT(nvarchar(40), SWITCHOFFSET(j.next_run_at, N'+00:00'), 127)),
                       j.next_run_at, r.late_start_seconds, @v_now, @p_call
                  FROM mjsched.job_alert_rule AS r
                  JOIN mjsched.scheduled_job AS j ON j.id = r.job_id
                 WHERE r.late_start_seconds IS NOT NULL AND j.status = N'Active' AND j.next_run_at IS NOT NULL
                   AND j.next_run_at < DATEADD(second, -r.late_start_seconds, @v_now)
                   AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run AS x
                                    WHERE x.scheduled_job_id = j.id AND x.scheduled_for = j.next_run_at)
                   AND NOT EXISTS (SELECT 1 FROM mjsched.job_alert AS e WITH (UPDLOCK, HOLDLOCK)
                                    WHERE e.job_id = j.id AND e.kind = N'late_start'
                                      AND e.occurrence = CONCAT(N'tick ', CONVERT(nvarchar(40),
                                                                SWITCHOFFSET(j.next_run_at, N'+00:00'), 127)));

                INSERT INTO mjsched.job_alert (job_id, job_name, kind, occurrence, since, threshold, opened_at,
                                               opened_call)
                SELECT TOP (@p_limit) j.id, j.name, N'silent',
                       CONCAT(N'since ', CONVERT(nvarchar(40), SWITCHOFFSET(COALESCE(j.last_success_at, j.created_at),
                                                                            N'+00:00'), 127)),
                       COALESCE(j.last_success_at, j.created_at), r.silent_after_seconds, @v_now, @p_call
                  FROM mjsched.job_alert_rule AS r
                  JOIN mjsched.scheduled_job AS j ON j.id = r.job_id
                 WHERE r.silent_after_seconds IS NOT NULL AND j.status = N'Active'
                   AND COALESCE(j.last_success_at, j.created_at) < DATEADD(second, -r.silent_after_seconds, @v_now)
                   AND NOT EXISTS (SELECT 1 FROM mjsched.job_alert AS e WITH (UPDLOCK, HOLDLOCK)
                                    WHERE e.job_id = j.id AND e.kind = N'silent'
                                      AND e.occurrence = CONCAT(N'since ', CONVERT(nvarchar(40),
                                          SWITCHOFFSET(COALESCE(j.last_success_at, j.created_at), N'+00:00'), 127)));

                INSERT INTO mjsched.job_alert (job_id, job_name, kind, occurrence, since, threshold, run_id, opened_at,
                                               opened_call)
                SELECT TOP (@p_limit) j.id, j.name, N'too_long', CONCAT(N'run ', LOWER(CONVERT(nvarchar(36), x.id))),
                       x.started_at, r.too_long_seconds, x.id, @v_now, @p_call
                  FROM mjsched.job_alert_rule AS r
                  JOIN mjsched.scheduled_job AS j ON j.id = r.job_id
                  JOIN mjsched.scheduled_job_run AS x ON x.scheduled_job_id = r.job_id AND x.status = N'Running'
                 WHERE r.too_long_seconds IS NOT NULL
                   AND x.started_at < DATEADD(second, -r.too_long_seconds, @v_now)
                   AND NOT EXISTS (SELECT 1 FROM mjsched.job_alert AS e WITH (UPDLOCK, HOLDLOCK)
                                    WHERE e.job_id = j.id AND e.kind = N'too_long'
                                      AND e.occurrence = CONCAT(N'run ', LOWER(CONVERT(nvarchar(36), x.id))));

                INSERT INTO mjsched.job_alert (job_id, job_name, kind, occurrence, since, threshold, run_id, opened_at,
                                               opened_call)
                SELECT TOP (@p_limit) j.id, j.name, N'failing_streak',
                       CONCAT(N'run ', LOWER(CONVERT(nvarchar(36), s.nth_id))), s.first_at, r.failing_streak, s.nth_id,
                       @v_now, @p_call
                  FROM mjsched.job_alert_rule AS r
                  JOIN mjsched.scheduled_job AS j ON j.id = r.job_id
                 CROSS APPLY (SELECT MAX(CASE WHEN f.n = r.failing_streak THEN f.id END) AS nth_id,
                                     MIN(f.completed_at) AS first_at
                                FROM (SELECT TOP (r.failing_streak) x.id, x.completed_at,
                                             ROW_NUMBER() OVER (ORDER BY x.completed_at, x.id) AS n
                                        FROM mjsched.scheduled_job_run AS x
                                       WHERE x.scheduled_job_id = j.id AND x.completed_at IS NOT NULL
                                         AND (j.last_success_at IS NULL OR x.completed_at > j.last_success_at)
                                         AND x.status IN (N'Failed', N'Timeout')
                                       ORDER BY x.completed_at, x.id) AS f) AS s
                 WHERE r.failing_streak IS NOT NULL AND s.nth_id IS NOT NULL
                   AND NOT EXISTS (SELECT 1 FROM mjsched.job_alert AS e WITH (UPDLOCK, HOLDLOCK)
                                    WHERE e.job_id = j.id AND e.kind = N'failing_streak'
                                      AND e.occurrence = CONCAT(N'run ', LOWER(CONVERT(nvarchar(36), s.nth_id))));
            END TRY
            BEGIN CATCH
                IF ERROR_NUMBER() NOT IN (2601, 2627)
                BEGIN
                    THROW;
                END;
                -- another session opened the same alert (XACT_ABORT dooms this transaction): that
                -- session delivers it, this call opens nothing
                ROLLBACK TRANSACTION;
            END CATCH;

            INSERT INTO @v_paused (job_id)
            SELECT DISTINCT a.job_id
              FROM mjsched.job_alert AS a
              JOIN mjsched.job_alert_rule AS r ON r.job_id = a.job_id
             WHERE a.opened_call = @p_call AND a.kind = N'failing_streak' AND r.pause_after_failing_streak = 1
               AND @@TRANCOUNT > 0;
            IF EXISTS (SELECT 1 FROM @v_paused)
            BEGIN
                SET @v_via = SESSION_CONTEXT(N'mjsched.via');
                EXEC sys.sp_set_session_context @key = N'mjsched.via', @value = N'alert';
                UPDATE j SET status = N'Paused'
                  FROM mjsched.scheduled_job AS j
                 WHERE j.id IN (SELECT p.job_id FROM @v_paused AS p) AND j.status = N'Active';
                EXEC sys.sp_set_session_context @key = N'mjsched.via', @value = @v_via;
                UPDATE a SET paused = 1
                  FROM mjsched.job_alert AS a
                 WHERE a.opened_call = @p_call AND a.kind = N'failing_streak'
                   AND a.job_id IN (SELECT p.job_id FROM @v_paused AS p);
            END;
        END;
        IF @@TRANCOUNT > 0
        BEGIN
            COMMIT TRANSACTION;
        END;
    END;
    SELECT c.alert_id, c.event, c.job_id, c.job_name, c.kind, c.since, c.threshold, c.run_id, c.opened_at,
           c.resolved_at, c.paused
      FROM mjsched.alerts_of_call(@p_call) AS c
     ORDER BY c.alert_id, c.event DESC;
END;
GO
