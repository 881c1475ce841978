-- The SQL Server gateway's read queries (mjsched/backends/mssql.py), one named block each,
-- loaded by mjsched/backends/queries.py. Not a versioned script: install() applies only the
-- numbered files. The lock and lease rules are the procedures; these only read.
-- {job_columns} / {run_columns}: the columns this role may read, filled by the gateway.
-- Parameters are ODBC markers (?), bound in the order they appear.

-- name: installed_versions
IF OBJECT_ID(N'mjsched.schema_version', N'U') IS NOT NULL
    SELECT name FROM mjsched.schema_version ORDER BY name;

-- name: column_privileges
-- Which columns of a table this role may read (grants.sql keeps lock_token from the roles).
SET NOCOUNT ON;
DECLARE @table nvarchar(128) = ?;
SELECT c.name AS name,
       HAS_PERMS_BY_NAME(CONCAT(N'mjsched.', @table), N'OBJECT', N'SELECT', c.name, N'COLUMN') AS readable
  FROM sys.columns AS c
 WHERE c.object_id = OBJECT_ID(CONCAT(N'mjsched.', @table))
 ORDER BY c.column_id;

-- name: get_jobs
-- The ids come as one JSON array (an ODBC call has at most 2,100 parameters).
SELECT {job_columns}, t.driver_class AS driver,
       STUFF((SELECT N',' + g.tag FROM mjsched.job_tag AS g WHERE g.scheduled_job_id = j.id
               ORDER BY g.tag FOR XML PATH('')), 1, 1, N'') AS tags,
       p.paused_at, p.paused_by, p.paused_by_user, p.pause_reason, p.paused_until
  FROM mjsched.scheduled_job AS j JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
  LEFT JOIN mjsched.job_pause AS p ON p.scheduled_job_id = j.id
 WHERE j.id IN (SELECT TRY_CONVERT(uniqueidentifier, e.value) FROM OPENJSON(?) AS e);

-- name: jobs_named
-- Oldest first: names are unique, but a database older than 005_job_names may hold copies.
SELECT {job_columns}, t.driver_class AS driver,
       STUFF((SELECT N',' + g.tag FROM mjsched.job_tag AS g WHERE g.scheduled_job_id = j.id
               ORDER BY g.tag FOR XML PATH('')), 1, 1, N'') AS tags,
       p.paused_at, p.paused_by, p.paused_by_user, p.pause_reason, p.paused_until
  FROM mjsched.scheduled_job AS j JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
  LEFT JOIN mjsched.job_pause AS p ON p.scheduled_job_id = j.id
 WHERE j.name = ?
 ORDER BY j.created_at, j.id;

-- name: list_jobs
SET NOCOUNT ON;
DECLARE @status nvarchar(20) = ?, @tag nvarchar(64) = ?;
SELECT {job_columns}, t.driver_class AS driver,
       STUFF((SELECT N',' + g.tag FROM mjsched.job_tag AS g WHERE g.scheduled_job_id = j.id
               ORDER BY g.tag FOR XML PATH('')), 1, 1, N'') AS tags,
       p.paused_at, p.paused_by, p.paused_by_user, p.pause_reason, p.paused_until
  FROM mjsched.scheduled_job AS j JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
  LEFT JOIN mjsched.job_pause AS p ON p.scheduled_job_id = j.id
 WHERE (@status IS NULL OR j.status = @status)
   AND (@tag IS NULL OR j.id IN (SELECT g.scheduled_job_id FROM mjsched.job_tag AS g WHERE g.tag = @tag))
 ORDER BY j.name, j.created_at
OPTION (RECOMPILE);

-- name: unscheduled_jobs
-- Active jobs without a next run (created by plain SQL, or set aside), a page at a time by id.
SET NOCOUNT ON;
DECLARE @limit int = ?, @after uniqueidentifier = ?;
SELECT TOP (@limit) j.id, j.name, t.driver_class AS driver, j.cron_expression, j.timezone, j.start_at,
       j.run_immediately_if_never_run, j.last_run_at, j.run_count, j.high_frequency_ok,
       j.frequency_warned, j.interval_seconds, j.run_at, j.created_at, j.jitter_seconds
  FROM mjsched.scheduled_job AS j JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
 WHERE j.status = N'Active' AND j.next_run_at IS NULL AND (@after IS NULL OR j.id > @after)
 ORDER BY j.id
OPTION (RECOMPILE);

-- name: active_schedules
-- Active recurring schedules not yet warned about (high-frequency warning), grouped, with at
-- most 1,000 job ids a group (comma-separated: the gateway splits them). The ids are
-- concatenated with FOR XML PATH, not STRING_AGG: SQL Server has STRING_AGG only from 2017,
-- and mjsched's minimum is 2016 SP1 (a uniqueidentifier's text needs no XML escaping).
WITH s AS (
    SELECT j.id, j.name, k.schedule, j.timezone, t.driver_class AS driver
      FROM mjsched.scheduled_job AS j
      JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
     CROSS APPLY (SELECT COALESCE(j.cron_expression,
                                  CONCAT(N'every ', j.interval_seconds, N's')) AS schedule) AS k
     WHERE j.status = N'Active' AND j.high_frequency_ok = 0 AND j.run_at IS NULL
       AND (j.frequency_warned IS NULL
            OR j.frequency_warned COLLATE Latin1_General_BIN2
               <> CONCAT(k.schedule, N' | ', j.timezone) COLLATE Latin1_General_BIN2))
SELECT g.schedule, g.timezone, g.driver, g.example, g.jobs,
       STUFF((SELECT TOP (1000) N',' + CONVERT(nvarchar(36), x.id)
                FROM s AS x
               WHERE x.schedule = g.schedule AND x.timezone = g.timezone AND x.driver = g.driver
               ORDER BY x.id
                 FOR XML PATH('')), 1, 1, N'') AS job_ids
  FROM (SELECT s.schedule, s.timezone, s.driver, MIN(s.name) AS example, COUNT(*) AS jobs
          FROM s
         GROUP BY s.schedule, s.timezone, s.driver) AS g;

-- name: list_runs
-- Every job's runs, newest first (started, else queued).
SET NOCOUNT ON;
DECLARE @status nvarchar(20) = ?, @limit int = ?;
SELECT TOP (@limit) {run_columns} FROM mjsched.scheduled_job_run
 WHERE (@status IS NULL OR status = @status)
 ORDER BY COALESCE(started_at, queued_at) DESC, id DESC
OPTION (RECOMPILE);

-- name: job_runs
-- One job's runs in list_runs's order: two index range scans on (scheduled_job_id,
-- started_at DESC), started runs and the few not started (Queued), merged.
SET NOCOUNT ON;
DECLARE @job uniqueidentifier = ?, @status nvarchar(20) = ?, @limit int = ?;
SELECT TOP (@limit) {run_columns} FROM (
    SELECT a.* FROM (SELECT TOP (@limit) {run_columns}
                       FROM mjsched.scheduled_job_run
                      WHERE scheduled_job_id = @job AND started_at IS NOT NULL
                        AND (@status IS NULL OR status = @status)
                      ORDER BY started_at DESC, id DESC) AS a
    UNION ALL
    SELECT b.* FROM (SELECT TOP (@limit) {run_columns}
                       FROM mjsched.scheduled_job_run
                      WHERE scheduled_job_id = @job AND started_at IS NULL
                        AND (@status IS NULL OR status = @status)
                      ORDER BY queued_at DESC, id DESC) AS b) AS r
 ORDER BY COALESCE(started_at, queued_at) DESC, id DESC
OPTION (RECOMPILE);

-- name: job_history
-- A job's audit trail (013_audit.sql), newest first: by id, or by name (a deleted job's too).
SET NOCOUNT ON;
DECLARE @job uniqueidentifier = ?, @name nvarchar(200) = ?, @limit int = ?;
SELECT TOP (@limit) id, job_id, job_name, version, changed_at, action, field, old_value, new_value, db_login,
       app_user, via
  FROM mjsched.job_change
 WHERE (@job IS NOT NULL AND job_id = @job) OR (@job IS NULL AND job_name = @name)
 ORDER BY id DESC
OPTION (RECOMPILE);

-- name: get_run
SELECT {run_columns} FROM mjsched.scheduled_job_run WHERE id = ?;

-- name: runs_by_ref
-- The runs a shortened run id names (mjsched/engine/refs.py): ids whose text without hyphens
-- begins with the hex digits (a uniqueidentifier does not sort in the order its text shows, so
-- this compares the text: a scan of the table), and, when a short id (12 hex digits) is given,
-- ids ending with it. The digits are hex only (checked before): nothing in them is a wildcard.
SET NOCOUNT ON;
DECLARE @digits varchar(32) = ?, @tail varchar(12) = ?, @limit int = ?;
SELECT TOP (@limit) {run_columns} FROM mjsched.scheduled_job_run
 WHERE LOWER(REPLACE(CONVERT(char(36), id), '-', '')) LIKE @digits + '%'
    OR (@tail IS NOT NULL AND LOWER(RIGHT(CONVERT(char(36), id), 12)) = @tail)
 ORDER BY id
OPTION (RECOMPILE);

-- name: db_now
SELECT SYSDATETIMEOFFSET() AS now;

-- name: status_engines
-- Engines not stopped, how long each has been silent (milliseconds: the gateway makes it a
-- timedelta), and its Running runs.
SELECT e.instance, e.host, e.pid, e.version, e.started_at, e.last_seen_at,
       DATEDIFF_BIG(millisecond, e.last_seen_at, SYSDATETIMEOFFSET()) AS silent_for_ms,
       e.heartbeat_seconds, e.max_concurrent_jobs,
       (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS r
         WHERE r.status = N'Running' AND r.executed_by_instance = e.instance) AS running
  FROM mjsched.engine_instance AS e WHERE e.stopped_at IS NULL ORDER BY e.started_at;

-- name: status_running
-- Running runs by the instance that holds them (a stopped or gone engine's show as orphaned).
SELECT executed_by_instance AS instance, COUNT(*) AS runs
  FROM mjsched.scheduled_job_run WHERE status = N'Running' GROUP BY executed_by_instance;

-- name: status_counts
-- failing: Active jobs whose last finished, not Skipped, run did not complete.
SELECT (SELECT COUNT(*) FROM mjsched.scheduled_job WHERE status = N'Active') AS active_jobs,
       (SELECT COUNT(*) FROM mjsched.scheduled_job
         WHERE status = N'Active' AND next_run_at <= SYSDATETIMEOFFSET()) AS due,
       (SELECT COUNT(*) FROM mjsched.scheduled_job_run WHERE status = N'Running') AS running,
       (SELECT COUNT(*) FROM mjsched.scheduled_job_run WHERE status = N'Queued') AS queued,
       (SELECT COUNT(*) FROM mjsched.scheduled_job AS j
         CROSS APPLY (SELECT TOP (1) r.status FROM mjsched.scheduled_job_run AS r
                       WHERE r.scheduled_job_id = j.id AND r.completed_at IS NOT NULL
                         AND r.status <> N'Skipped'
                       ORDER BY r.completed_at DESC) AS last_run
         WHERE j.status = N'Active' AND last_run.status <> N'Completed') AS failing,
       (SELECT COUNT(*) FROM mjsched.scheduled_job_run
         WHERE status = N'Abandoned'
           AND completed_at > DATEADD(hour, -24, SYSDATETIMEOFFSET())) AS abandoned_24h;

-- name: tag_summary
-- Every tag (carried by a job, or limited), with its jobs, its limit (who set it, when), its
-- Running runs (010_tags.sql).
SELECT t.tag, (SELECT COUNT(*) FROM mjsched.job_tag AS g WHERE g.tag = t.tag) AS jobs,
       l.max_running, l.set_at, l.set_by, l.set_by_user,
       (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS r
          JOIN mjsched.job_tag AS g ON g.scheduled_job_id = r.scheduled_job_id
         WHERE r.status = N'Running' AND g.tag = t.tag) AS running
  FROM (SELECT g.tag FROM mjsched.job_tag AS g UNION SELECT l.tag FROM mjsched.tag_limit AS l) AS t
  LEFT JOIN mjsched.tag_limit AS l ON l.tag = t.tag
 ORDER BY t.tag;

-- name: waiting_for_tag
-- The due jobs a tag's limit holds back now (see the PostgreSQL twin); ?: one job, or NULL for all.
SET NOCOUNT ON;
DECLARE @job_id uniqueidentifier = ?;
SELECT j.id AS job_id, j.name, g.tag, l.max_running, COALESCE(n.running, 0) AS running, j.next_run_at
  FROM mjsched.tag_limit AS l
  JOIN mjsched.job_tag AS g ON g.tag = l.tag
  JOIN mjsched.scheduled_job AS j ON j.id = g.scheduled_job_id
  LEFT JOIN (SELECT h.tag, COUNT(*) AS running
               FROM mjsched.scheduled_job_run AS r
               JOIN mjsched.job_tag AS h ON h.scheduled_job_id = r.scheduled_job_id
              WHERE r.status = N'Running'
              GROUP BY h.tag) AS n ON n.tag = l.tag
 WHERE j.status = N'Active' AND j.next_run_at <= SYSDATETIMEOFFSET()
   AND (j.expected_completion_at IS NULL OR j.expected_completion_at < SYSDATETIMEOFFSET())
   AND COALESCE(n.running, 0) >= l.max_running
   AND (@job_id IS NULL OR j.id = @job_id)
 ORDER BY j.next_run_at, j.name, g.tag
OPTION (RECOMPILE);

-- name: why_facts
-- Everything `mjsched jobs why` reads, in one statement (the reasons are in
-- sql/postgres/queries.sql): the job, the tick asked about (else its next run), the runs around
-- it, the queue, the due jobs ahead of it, the engines as one JSON array (FOR JSON; durations
-- as seconds) and its tags' limits as another (NULL: none). OUTER APPLY (SELECT TOP (1) ...) for PostgreSQL's LEFT JOIN LATERAL ... LIMIT 1.
SET NOCOUNT ON;
DECLARE @job uniqueidentifier = ?, @tick datetimeoffset = ?, @at datetimeoffset = ?;
DECLARE @now datetimeoffset = SYSDATETIMEOFFSET();
SELECT @now AS db_now, j.id, j.name, t.driver_class AS driver, j.status, j.cron_expression, j.interval_seconds,
       j.jitter_seconds,
       j.run_at, j.timezone, j.start_at, j.end_at, j.next_run_at, j.last_run_at, j.created_at, j.updated_at,
       j.concurrency_mode, j.missed_run_policy, j.max_queued_runs, j.run_immediately_if_never_run, j.run_count,
       j.locked_by_instance, j.locked_at, j.expected_completion_at, k.tick,
       tr.id AS tick_id, tr.scheduled_for AS tick_scheduled_for, tr.attempt AS tick_attempt,
       tr.status AS tick_status, tr.error_message AS tick_error, tr.missed AS tick_missed,
       tr.queued_at AS tick_queued_at, tr.started_at AS tick_started_at,
       tr.completed_at AS tick_completed_at, tr.executed_by_instance AS tick_engine,
       tr.retry_at AS tick_retry_at, tr.lease_expires_at AS tick_lease,
       pr.id AS prior_id, pr.scheduled_for AS prior_scheduled_for, pr.attempt AS prior_attempt,
       pr.status AS prior_status, pr.error_message AS prior_error, pr.missed AS prior_missed,
       pr.queued_at AS prior_queued_at, pr.started_at AS prior_started_at,
       pr.completed_at AS prior_completed_at, pr.executed_by_instance AS prior_engine,
       pr.retry_at AS prior_retry_at, pr.lease_expires_at AS prior_lease,
       ar.id AS after_id, ar.scheduled_for AS after_scheduled_for, ar.attempt AS after_attempt,
       ar.status AS after_status, ar.error_message AS after_error, ar.missed AS after_missed,
       ar.queued_at AS after_queued_at, ar.started_at AS after_started_at,
       ar.completed_at AS after_completed_at, ar.executed_by_instance AS after_engine,
       ar.retry_at AS after_retry_at, ar.lease_expires_at AS after_lease,
       hr.id AS holder_id, hr.scheduled_for AS holder_scheduled_for, hr.attempt AS holder_attempt,
       hr.status AS holder_status, hr.error_message AS holder_error, hr.missed AS holder_missed,
       hr.queued_at AS holder_queued_at, hr.started_at AS holder_started_at,
       hr.completed_at AS holder_completed_at, hr.executed_by_instance AS holder_engine,
       hr.retry_at AS holder_retry_at, hr.lease_expires_at AS holder_lease,
       qr.id AS retry_id, qr.scheduled_for AS retry_scheduled_for, qr.attempt AS retry_attempt,
       qr.status AS retry_status, qr.error_message AS retry_error, qr.missed AS retry_missed,
       qr.queued_at AS retry_queued_at, qr.started_at AS retry_started_at,
       qr.completed_at AS retry_completed_at, qr.executed_by_instance AS retry_engine,
       qr.retry_at AS retry_retry_at, qr.lease_expires_at AS retry_lease,
       lr.id AS last_id, lr.scheduled_for AS last_scheduled_for, lr.attempt AS last_attempt,
       lr.status AS last_status, lr.error_message AS last_error, lr.missed AS last_missed,
       lr.queued_at AS last_queued_at, lr.started_at AS last_started_at,
       lr.completed_at AS last_completed_at, lr.executed_by_instance AS last_engine,
       lr.retry_at AS last_retry_at, lr.lease_expires_at AS last_lease,
       (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS r
         WHERE r.scheduled_job_id = j.id AND r.status = N'Running') AS running_runs,
       (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS r
         WHERE r.scheduled_job_id = j.id AND r.status = N'Queued' AND r.attempt = 1) AS queued_ticks,
       (SELECT MIN(r.scheduled_for) FROM mjsched.scheduled_job_run AS r
         WHERE r.scheduled_job_id = j.id AND r.status = N'Queued' AND r.attempt = 1) AS oldest_queued_tick,
       (SELECT MAX(r.scheduled_for) FROM mjsched.scheduled_job_run AS r
         WHERE r.scheduled_job_id = j.id) AS newest_served_tick,
       (SELECT MIN(r.started_at) FROM mjsched.scheduled_job_run AS r
         WHERE r.scheduled_job_id = j.id) AS oldest_run_kept,
       (SELECT COUNT(*) FROM (
            SELECT TOP (1000) d.id FROM mjsched.scheduled_job AS d
             WHERE d.status = N'Active' AND d.claim_at < j.claim_at AND d.next_run_at <= @now
               AND (d.start_at IS NULL OR d.start_at <= @now) AND (d.end_at IS NULL OR d.end_at > @now)
               AND (d.expected_completion_at IS NULL OR d.expected_completion_at < @now)
             ORDER BY d.next_run_at) AS a) AS due_ahead,
       (SELECT TOP (200) e.instance, e.host, e.pid, e.version, e.started_at, e.last_seen_at, e.stopped_at,
               DATEDIFF_BIG(millisecond, e.last_seen_at, @now) / 1000.0 AS silent_seconds,
               e.heartbeat_seconds, e.max_concurrent_jobs, e.allowed_drivers,
               (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS r
                 WHERE r.status = N'Running' AND r.executed_by_instance = e.instance) AS running
          FROM mjsched.engine_instance AS e
         WHERE e.stopped_at IS NULL
            OR e.instance = (SELECT TOP (1) s.instance FROM mjsched.engine_instance AS s
                              WHERE s.stopped_at IS NOT NULL ORDER BY s.last_seen_at DESC)
         ORDER BY e.last_seen_at DESC
           FOR JSON PATH, INCLUDE_NULL_VALUES) AS engines,
       (SELECT l.tag, l.max_running,
               (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS r
                  JOIN mjsched.job_tag AS h ON h.scheduled_job_id = r.scheduled_job_id
                 WHERE r.status = N'Running' AND h.tag = l.tag) AS running
          FROM mjsched.job_tag AS g
          JOIN mjsched.tag_limit AS l ON l.tag = g.tag
         WHERE g.scheduled_job_id = j.id
         ORDER BY l.tag
           FOR JSON PATH, INCLUDE_NULL_VALUES) AS tag_limits
  FROM mjsched.scheduled_job AS j
  JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
 CROSS APPLY (SELECT COALESCE(@tick, j.next_run_at) AS tick) AS k
 OUTER APPLY (SELECT TOP (1) r.id, r.scheduled_for, r.attempt, r.status, LEFT(r.error_message, 2000) AS error_message,
                          JSON_VALUE(r.details, '$.missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                          r.executed_by_instance, r.retry_at, r.lease_expires_at
                FROM mjsched.scheduled_job_run AS r
               WHERE r.scheduled_job_id = j.id AND r.scheduled_for >= k.tick
                 AND r.scheduled_for <= COALESCE(@at, k.tick)
               ORDER BY r.scheduled_for DESC, r.attempt DESC) AS tr
 OUTER APPLY (SELECT TOP (1) r.id, r.scheduled_for, r.attempt, r.status, LEFT(r.error_message, 2000) AS error_message,
                          JSON_VALUE(r.details, '$.missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                          r.executed_by_instance, r.retry_at, r.lease_expires_at
                FROM mjsched.scheduled_job_run AS r
               WHERE r.scheduled_job_id = j.id AND r.started_at <= k.tick
                 AND (r.scheduled_for IS NULL OR r.scheduled_for <> k.tick)
               ORDER BY r.started_at DESC) AS pr
 OUTER APPLY (SELECT TOP (1) r.id, r.scheduled_for, r.attempt, r.status, LEFT(r.error_message, 2000) AS error_message,
                          JSON_VALUE(r.details, '$.missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                          r.executed_by_instance, r.retry_at, r.lease_expires_at
                FROM mjsched.scheduled_job_run AS r
               WHERE r.scheduled_job_id = j.id AND r.started_at > k.tick
                 AND (r.scheduled_for IS NULL OR r.scheduled_for <> k.tick)
               ORDER BY r.started_at) AS ar
 OUTER APPLY (SELECT TOP (1) r.id, r.scheduled_for, r.attempt, r.status, LEFT(r.error_message, 2000) AS error_message,
                          JSON_VALUE(r.details, '$.missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                          r.executed_by_instance, r.retry_at, r.lease_expires_at
                FROM mjsched.scheduled_job_run AS r
               WHERE r.scheduled_job_id = j.id AND r.status = N'Running'
               ORDER BY r.started_at DESC) AS hr
 OUTER APPLY (SELECT TOP (1) r.id, r.scheduled_for, r.attempt, r.status, LEFT(r.error_message, 2000) AS error_message,
                          JSON_VALUE(r.details, '$.missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                          r.executed_by_instance, r.retry_at, r.lease_expires_at
                FROM mjsched.scheduled_job_run AS r
               WHERE r.scheduled_job_id = j.id AND r.status = N'Queued' AND r.attempt > 1
               ORDER BY r.retry_at) AS qr
 OUTER APPLY (SELECT TOP (1) r.id, r.scheduled_for, r.attempt, r.status, LEFT(r.error_message, 2000) AS error_message,
                          JSON_VALUE(r.details, '$.missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                          r.executed_by_instance, r.retry_at, r.lease_expires_at
                FROM mjsched.scheduled_job_run AS r
               WHERE r.scheduled_job_id = j.id AND r.started_at IS NOT NULL
               ORDER BY r.started_at DESC) AS lr
 WHERE j.id = @job;

-- name: job_alert_rules
-- A job's deadline-alert rules (014_alerts.sql).
SET NOCOUNT ON;
DECLARE @job uniqueidentifier = ?;
SELECT late_start_seconds, silent_after_seconds, too_long_seconds, failing_streak, pause_after_failing_streak
  FROM mjsched.job_alert_rule WHERE job_id = @job;

-- name: open_alerts
-- The open deadline alerts (of one job, or all), newest first.
SET NOCOUNT ON;
DECLARE @job uniqueidentifier = ?, @limit int = ?;
SELECT TOP (@limit) id, job_id, job_name, kind, since, threshold, run_id, opened_at, resolved_at, paused
  FROM mjsched.job_alert
 WHERE resolved_at IS NULL AND (@job IS NULL OR job_id = @job)
 ORDER BY opened_at DESC, id DESC
OPTION (RECOMPILE);

-- name: open_alert_counts
-- Open deadline alerts by kind (ix_job_alert_open), for the metrics.
SELECT kind, COUNT(*) AS [open] FROM mjsched.job_alert WHERE resolved_at IS NULL GROUP BY kind;
