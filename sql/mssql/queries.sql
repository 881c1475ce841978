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
       j.frequency_warned, j.interval_seconds, j.run_at, j.created_at
  FROM mjsched.scheduled_job AS j JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
 WHERE j.status = N'Active' AND j.next_run_at IS NULL AND (@after IS NULL OR j.id > @after)
 ORDER BY j.id
OPTION (RECOMPILE);

-- name: active_schedules
-- Active recurring schedules not yet warned about (high-frequency warning), grouped, with at
-- most 1,000 job ids a group (comma-separated: the gateway splits them).
SELECT s.schedule, s.timezone, s.driver, MIN(s.name) AS example, COUNT(*) AS jobs,
       STRING_AGG(CASE WHEN s.nth <= 1000 THEN CAST(CONVERT(nvarchar(36), s.id) AS nvarchar(max)) END,
                  N',') AS job_ids
  FROM (SELECT j.id, j.name, k.schedule, j.timezone, t.driver_class AS driver,
               ROW_NUMBER() OVER (PARTITION BY k.schedule, j.timezone, t.driver_class
                                  ORDER BY j.id) AS nth
          FROM mjsched.scheduled_job AS j
          JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
         CROSS APPLY (SELECT COALESCE(j.cron_expression,
                                      CONCAT(N'every ', j.interval_seconds, N's')) AS schedule) AS k
         WHERE j.status = N'Active' AND j.high_frequency_ok = 0 AND j.run_at IS NULL
           AND (j.frequency_warned IS NULL
                OR j.frequency_warned COLLATE Latin1_General_BIN2
                   <> CONCAT(k.schedule, N' | ', j.timezone) COLLATE Latin1_General_BIN2)) AS s
 GROUP BY s.schedule, s.timezone, s.driver;

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

-- name: get_run
SELECT {run_columns} FROM mjsched.scheduled_job_run WHERE id = ?;

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
