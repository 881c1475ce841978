-- The PostgreSQL gateway's read queries (mjsched/backends/postgres.py), one named block each,
-- loaded by mjsched/backends/queries.py. Not a versioned script: install() applies only the
-- numbered files. The lock and lease rules are the procedures; these only read.
-- {job_columns} / {run_columns}: the columns this role may read, filled by the gateway.

-- name: installed_versions
SELECT name FROM mjsched.schema_version ORDER BY name

-- name: column_privileges
-- Which columns of a table this role may read (grants.sql keeps lock_token from the roles).
SELECT a.attname AS name, has_column_privilege(a.attrelid, a.attnum, 'SELECT') AS readable
  FROM pg_attribute a
 WHERE a.attrelid = to_regclass(%(table)s) AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum

-- name: get_jobs
SELECT {job_columns}, t.driver_class AS driver,
       (SELECT string_agg(g.tag, ',' ORDER BY g.tag) FROM mjsched.job_tag g WHERE g.scheduled_job_id = j.id) AS tags,
       p.paused_at, p.paused_by, p.paused_by_user, p.pause_reason, p.paused_until
  FROM mjsched.scheduled_job j JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
  LEFT JOIN mjsched.job_pause p ON p.scheduled_job_id = j.id
 WHERE j.id = ANY(%(ids)s::uuid[])

-- name: jobs_named
-- Oldest first: names are unique, but a database older than 005_job_names may hold copies.
SELECT {job_columns}, t.driver_class AS driver,
       (SELECT string_agg(g.tag, ',' ORDER BY g.tag) FROM mjsched.job_tag g WHERE g.scheduled_job_id = j.id) AS tags,
       p.paused_at, p.paused_by, p.paused_by_user, p.pause_reason, p.paused_until
  FROM mjsched.scheduled_job j JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
  LEFT JOIN mjsched.job_pause p ON p.scheduled_job_id = j.id
 WHERE j.name = %(name)s
 ORDER BY j.created_at, j.id

-- name: list_jobs
SELECT {job_columns}, t.driver_class AS driver,
       (SELECT string_agg(g.tag, ',' ORDER BY g.tag) FROM mjsched.job_tag g WHERE g.scheduled_job_id = j.id) AS tags,
       p.paused_at, p.paused_by, p.paused_by_user, p.pause_reason, p.paused_until
  FROM mjsched.scheduled_job j JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
  LEFT JOIN mjsched.job_pause p ON p.scheduled_job_id = j.id
 WHERE (%(status)s::varchar IS NULL OR j.status = %(status)s::varchar)
   AND (%(tag)s::varchar IS NULL
        OR j.id IN (SELECT g.scheduled_job_id FROM mjsched.job_tag g WHERE g.tag = %(tag)s::varchar))
 ORDER BY j.name, j.created_at

-- name: unscheduled_jobs
-- Active jobs without a next run (created by plain SQL, or set aside), a page at a time by id.
SELECT j.id, j.name, t.driver_class AS driver, j.cron_expression, j.timezone, j.start_at,
       j.run_immediately_if_never_run, j.last_run_at, j.run_count, j.high_frequency_ok,
       j.frequency_warned, j.interval_seconds, j.run_at, j.created_at
  FROM mjsched.scheduled_job j JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
 WHERE j.status = 'Active' AND j.next_run_at IS NULL
   AND (%(after)s::uuid IS NULL OR j.id > %(after)s::uuid)
 ORDER BY j.id LIMIT %(limit)s

-- name: active_schedules
-- Active recurring schedules not yet warned about (high-frequency warning), grouped, with at
-- most 1,000 job ids a group.
SELECT s.schedule, s.timezone, s.driver, min(s.name) AS example,
       count(*) AS jobs, (array_agg(s.id::text ORDER BY s.id))[1:1000] AS job_ids
  FROM (SELECT j.id, j.name, j.timezone, t.driver_class AS driver,
               coalesce(j.cron_expression, 'every ' || j.interval_seconds || 's') AS schedule
          FROM mjsched.scheduled_job j JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
         WHERE j.status = 'Active' AND NOT j.high_frequency_ok AND j.run_at IS NULL
           AND j.frequency_warned IS DISTINCT FROM
               coalesce(j.cron_expression, 'every ' || j.interval_seconds || 's') || ' | ' || j.timezone
       ) s
 GROUP BY s.schedule, s.timezone, s.driver

-- name: list_runs
-- Every job's runs, newest first (started, else queued).
SELECT {run_columns} FROM mjsched.scheduled_job_run
 WHERE (%(status)s::varchar IS NULL OR status = %(status)s::varchar)
 ORDER BY coalesce(started_at, queued_at) DESC NULLS LAST, id DESC
 LIMIT %(limit)s

-- name: job_runs
-- One job's runs in list_runs's order: two index range scans on (scheduled_job_id,
-- started_at DESC), started runs and the few not started (Queued), merged; one ORDER BY
-- coalesce(...) sorted the job's whole history (79 ms p99 with 5,000 runs a job; bench.history).
SELECT {run_columns} FROM (
    (SELECT {run_columns} FROM mjsched.scheduled_job_run
      WHERE scheduled_job_id = %(job)s::uuid AND started_at IS NOT NULL
        AND (%(status)s::varchar IS NULL OR status = %(status)s::varchar)
      ORDER BY started_at DESC, id DESC LIMIT %(limit)s)
    UNION ALL
    (SELECT {run_columns} FROM mjsched.scheduled_job_run
      WHERE scheduled_job_id = %(job)s::uuid AND started_at IS NULL
        AND (%(status)s::varchar IS NULL OR status = %(status)s::varchar)
      ORDER BY queued_at DESC NULLS LAST, id DESC LIMIT %(limit)s)) AS r
 ORDER BY coalesce(started_at, queued_at) DESC NULLS LAST, id DESC
 LIMIT %(limit)s

-- name: get_run
SELECT {run_columns} FROM mjsched.scheduled_job_run WHERE id = %(id)s::uuid

-- name: db_now
SELECT now() AS now

-- name: status_engines
-- Engines not stopped, how long each has been silent, and its Running runs.
SELECT e.instance, e.host, e.pid, e.version, e.started_at, e.last_seen_at,
       (now() - e.last_seen_at) AS silent_for, e.heartbeat_seconds, e.max_concurrent_jobs,
       (SELECT count(*) FROM mjsched.scheduled_job_run r
         WHERE r.status = 'Running' AND r.executed_by_instance = e.instance) AS running
  FROM mjsched.engine_instance e WHERE e.stopped_at IS NULL ORDER BY e.started_at

-- name: status_running
-- Running runs by the instance that holds them (a stopped or gone engine's show as orphaned).
SELECT executed_by_instance AS instance, count(*) AS runs
  FROM mjsched.scheduled_job_run WHERE status = 'Running' GROUP BY executed_by_instance

-- name: status_counts
-- failing: Active jobs whose last finished, not Skipped, run did not complete.
SELECT (SELECT count(*) FROM mjsched.scheduled_job WHERE status = 'Active') AS active_jobs,
       (SELECT count(*) FROM mjsched.scheduled_job
         WHERE status = 'Active' AND next_run_at <= now()) AS due,
       (SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running') AS running,
       (SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Queued') AS queued,
       (SELECT count(*) FROM mjsched.scheduled_job j WHERE j.status = 'Active' AND EXISTS (
            SELECT 1 FROM (SELECT r.status FROM mjsched.scheduled_job_run r
                            WHERE r.scheduled_job_id = j.id AND r.completed_at IS NOT NULL
                              AND r.status <> 'Skipped'
                            ORDER BY r.completed_at DESC LIMIT 1) last
             WHERE last.status <> 'Completed')) AS failing,
       (SELECT count(*) FROM mjsched.scheduled_job_run
         WHERE status = 'Abandoned' AND completed_at > now() - interval '24 hours') AS abandoned_24h

-- name: tag_summary
-- Every tag (carried by a job, or limited), with its jobs, its limit (who set it, when), its
-- Running runs and its due jobs held back by the limit (010_tags.sql).
SELECT t.tag, (SELECT count(*) FROM mjsched.job_tag g WHERE g.tag = t.tag) AS jobs,
       l.max_running, l.set_at, l.set_by, l.set_by_user,
       (SELECT count(*) FROM mjsched.scheduled_job_run r JOIN mjsched.job_tag g ON g.scheduled_job_id = r.scheduled_job_id
         WHERE r.status = 'Running' AND g.tag = t.tag) AS running
  FROM (SELECT g.tag FROM mjsched.job_tag g UNION SELECT l.tag FROM mjsched.tag_limit l) t
  LEFT JOIN mjsched.tag_limit l ON l.tag = t.tag
 ORDER BY t.tag

-- name: waiting_for_tag
-- The due jobs a tag's limit holds back now: Active, due, not held by a live lease, and carrying
-- a limited tag whose Running runs are at its limit; one row per (job, tag), oldest due first.
-- %(job_id)s: one job, or NULL for all. What "why didn't this job run?" reads.
SELECT j.id AS job_id, j.name, g.tag, l.max_running, coalesce(n.running, 0) AS running, j.next_run_at
  FROM mjsched.tag_limit l
  JOIN mjsched.job_tag g ON g.tag = l.tag
  JOIN mjsched.scheduled_job j ON j.id = g.scheduled_job_id
  LEFT JOIN (SELECT h.tag, count(*) AS running
               FROM mjsched.scheduled_job_run r JOIN mjsched.job_tag h ON h.scheduled_job_id = r.scheduled_job_id
              WHERE r.status = 'Running'
              GROUP BY h.tag) n ON n.tag = l.tag
 WHERE j.status = 'Active' AND j.next_run_at <= now()
   AND (j.expected_completion_at IS NULL OR j.expected_completion_at < now())
   AND coalesce(n.running, 0) >= l.max_running
   AND (%(job_id)s::uuid IS NULL OR j.id = %(job_id)s::uuid)
 ORDER BY j.next_run_at, j.name, g.tag
