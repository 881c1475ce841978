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
       j.frequency_warned, j.interval_seconds, j.run_at, j.created_at, j.jitter_seconds
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

-- name: job_history
-- A job's audit trail (013_audit.sql), newest first: by id, or by name (a deleted job's too).
SELECT id, job_id, job_name, version, changed_at, action, field, old_value, new_value, db_login, app_user, via
  FROM mjsched.job_change
 WHERE (%(job)s::uuid IS NOT NULL AND job_id = %(job)s::uuid)
    OR (%(job)s::uuid IS NULL AND job_name = %(name)s::varchar)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: get_run
SELECT {run_columns} FROM mjsched.scheduled_job_run WHERE id = %(id)s::uuid

-- name: runs_by_ref
-- The runs a shortened run id names (mjsched/engine/refs.py): ids in the range of a hex prefix
-- (low and high: the prefix padded with 0s and fs), an index range scan of the primary key; and,
-- when a short id (12 hex digits) is given, ids ending with it, a scan of the table.
SELECT {run_columns} FROM mjsched.scheduled_job_run
 WHERE id BETWEEN %(low)s::uuid AND %(high)s::uuid
    OR (%(tail)s::varchar IS NOT NULL AND right(id::text, 12) = %(tail)s::varchar)
 ORDER BY id
 LIMIT %(limit)s

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

-- name: why_facts
-- Everything `mjsched jobs why` (engine.why, mjsched/why.py) reads, in one statement: the job,
-- the tick asked about (%(tick)s, else its next run), and around that tick the runs that say
-- what became of it: the tick's own run (its last attempt; or the run of the latest instant in
-- [tick, %(at)s] that has one: a run-immediately or hand-moved next run is no tick of the
-- schedule, yet it was served), the run started last at or before
-- it (was one running then?), the first run started after it (did a later claim serve it?),
-- the Running run, the next pending retry, the last run of all; the newest tick that has a run,
-- the oldest run kept, the queue; how many due jobs come before it in the claim's order (claim_at: priorities; capped
-- at 1,000); and the engines (every one not stopped, and the one that stopped last) with what
-- each reports (011_engine_reports.sql) and its Running runs, as one JSON array; and the
-- limits of the job's tags (010_tags.sql) with the Running runs of each, as another. Each run is
-- found through ix_scheduled_job_run_job_started or uq_scheduled_job_run_tick (LIMIT 1), never
-- a scan of the job's history. lock_token is not read (the roles may not): a lock is
-- expected_completion_at, which the schema keeps set exactly while lock_token is.
SELECT now() AS db_now, j.id, j.name, t.driver_class AS driver, j.status, j.cron_expression, j.interval_seconds,
       j.jitter_seconds,
       j.run_at, j.timezone, j.start_at, j.end_at, j.next_run_at, j.last_run_at, j.created_at, j.updated_at,
       j.concurrency_mode, j.missed_run_policy, j.max_queued_runs, j.run_immediately_if_never_run, j.run_count,
       j.locked_by_instance, j.locked_at, j.expected_completion_at, k.tick,
       tr.id AS tick_id, tr.scheduled_for AS tick_scheduled_for, tr.attempt AS tick_attempt,
       tr.status AS tick_status, tr.error_message AS tick_error, tr.missed AS tick_missed,
       tr.queued_at AS tick_queued_at, tr.started_at AS tick_started_at, tr.completed_at AS tick_completed_at,
       tr.executed_by_instance AS tick_engine, tr.retry_at AS tick_retry_at, tr.lease_expires_at AS tick_lease,
       pr.id AS prior_id, pr.scheduled_for AS prior_scheduled_for, pr.attempt AS prior_attempt,
       pr.status AS prior_status, pr.error_message AS prior_error, pr.missed AS prior_missed,
       pr.queued_at AS prior_queued_at, pr.started_at AS prior_started_at, pr.completed_at AS prior_completed_at,
       pr.executed_by_instance AS prior_engine, pr.retry_at AS prior_retry_at, pr.lease_expires_at AS prior_lease,
       ar.id AS after_id, ar.scheduled_for AS after_scheduled_for, ar.attempt AS after_attempt,
       ar.status AS after_status, ar.error_message AS after_error, ar.missed AS after_missed,
       ar.queued_at AS after_queued_at, ar.started_at AS after_started_at, ar.completed_at AS after_completed_at,
       ar.executed_by_instance AS after_engine, ar.retry_at AS after_retry_at, ar.lease_expires_at AS after_lease,
       hr.id AS holder_id, hr.scheduled_for AS holder_scheduled_for, hr.attempt AS holder_attempt,
       hr.status AS holder_status, hr.error_message AS holder_error, hr.missed AS holder_missed,
       hr.queued_at AS holder_queued_at, hr.started_at AS holder_started_at, hr.completed_at AS holder_completed_at,
       hr.executed_by_instance AS holder_engine, hr.retry_at AS holder_retry_at, hr.lease_expires_at AS holder_lease,
       qr.id AS retry_id, qr.scheduled_for AS retry_scheduled_for, qr.attempt AS retry_attempt,
       qr.status AS retry_status, qr.error_message AS retry_error, qr.missed AS retry_missed,
       qr.queued_at AS retry_queued_at, qr.started_at AS retry_started_at, qr.completed_at AS retry_completed_at,
       qr.executed_by_instance AS retry_engine, qr.retry_at AS retry_retry_at, qr.lease_expires_at AS retry_lease,
       lr.id AS last_id, lr.scheduled_for AS last_scheduled_for, lr.attempt AS last_attempt,
       lr.status AS last_status, lr.error_message AS last_error, lr.missed AS last_missed,
       lr.queued_at AS last_queued_at, lr.started_at AS last_started_at, lr.completed_at AS last_completed_at,
       lr.executed_by_instance AS last_engine, lr.retry_at AS last_retry_at, lr.lease_expires_at AS last_lease,
       (SELECT count(*) FROM mjsched.scheduled_job_run r
         WHERE r.scheduled_job_id = j.id AND r.status = 'Running') AS running_runs,
       (SELECT count(*) FROM mjsched.scheduled_job_run r
         WHERE r.scheduled_job_id = j.id AND r.status = 'Queued' AND r.attempt = 1) AS queued_ticks,
       (SELECT min(r.scheduled_for) FROM mjsched.scheduled_job_run r
         WHERE r.scheduled_job_id = j.id AND r.status = 'Queued' AND r.attempt = 1) AS oldest_queued_tick,
       (SELECT max(r.scheduled_for) FROM mjsched.scheduled_job_run r
         WHERE r.scheduled_job_id = j.id) AS newest_served_tick,
       (SELECT min(r.started_at) FROM mjsched.scheduled_job_run r
         WHERE r.scheduled_job_id = j.id) AS oldest_run_kept,
       (SELECT count(*) FROM (
            SELECT 1 FROM mjsched.scheduled_job d
             WHERE d.status = 'Active' AND d.next_run_at <= now()
               -- the claim's order (015_priorities.sql: claim_at, written out: the reader may not
               -- execute the function), read over the due index: at most the due jobs
               AND d.next_run_at - d.priority * interval '60 seconds' < j.next_run_at - j.priority * interval '60 seconds'
               AND (d.start_at IS NULL OR d.start_at <= now()) AND (d.end_at IS NULL OR d.end_at > now())
               AND (d.expected_completion_at IS NULL OR d.expected_completion_at < now())
             ORDER BY d.next_run_at LIMIT 1000) a) AS due_ahead,
       (SELECT coalesce(json_agg(json_build_object(
                   'instance', e.instance, 'host', e.host, 'pid', e.pid, 'version', e.version,
                   'started_at', e.started_at, 'last_seen_at', e.last_seen_at, 'stopped_at', e.stopped_at,
                   'silent_seconds', extract(epoch FROM now() - e.last_seen_at),
                   'heartbeat_seconds', e.heartbeat_seconds, 'max_concurrent_jobs', e.max_concurrent_jobs,
                   'allowed_drivers', e.allowed_drivers,
                   'running', (SELECT count(*) FROM mjsched.scheduled_job_run r
                                WHERE r.status = 'Running' AND r.executed_by_instance = e.instance))
                   ORDER BY e.last_seen_at DESC), '[]')::text
          FROM (SELECT * FROM mjsched.engine_instance e
                 WHERE e.stopped_at IS NULL
                    OR e.instance = (SELECT s.instance FROM mjsched.engine_instance s WHERE s.stopped_at IS NOT NULL
                                      ORDER BY s.last_seen_at DESC LIMIT 1)
                 ORDER BY e.last_seen_at DESC LIMIT 200) e) AS engines,
       (SELECT coalesce(json_agg(json_build_object(
                   'tag', l.tag, 'max_running', l.max_running,
                   'running', (SELECT count(*) FROM mjsched.scheduled_job_run r
                                 JOIN mjsched.job_tag h ON h.scheduled_job_id = r.scheduled_job_id
                                WHERE r.status = 'Running' AND h.tag = l.tag))
                   ORDER BY l.tag), '[]')::text
          FROM mjsched.job_tag g JOIN mjsched.tag_limit l ON l.tag = g.tag
         WHERE g.scheduled_job_id = j.id) AS tag_limits
  FROM mjsched.scheduled_job j
  JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
 CROSS JOIN LATERAL (SELECT coalesce(%(tick)s::timestamptz, j.next_run_at) AS tick) k
  LEFT JOIN LATERAL (SELECT r.id, r.scheduled_for, r.attempt, r.status, left(r.error_message, 2000) AS error_message,
                            (r.details->>'missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                            r.executed_by_instance, r.retry_at, r.lease_expires_at
                       FROM mjsched.scheduled_job_run r
                      WHERE r.scheduled_job_id = j.id AND r.scheduled_for >= k.tick
                        AND r.scheduled_for <= coalesce(%(at)s::timestamptz, k.tick)
                      ORDER BY r.scheduled_for DESC, r.attempt DESC LIMIT 1) tr ON true
  LEFT JOIN LATERAL (SELECT r.id, r.scheduled_for, r.attempt, r.status, left(r.error_message, 2000) AS error_message,
                            (r.details->>'missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                            r.executed_by_instance, r.retry_at, r.lease_expires_at
                       FROM mjsched.scheduled_job_run r
                      WHERE r.scheduled_job_id = j.id AND r.started_at <= k.tick
                        AND r.scheduled_for IS DISTINCT FROM k.tick
                      ORDER BY r.started_at DESC LIMIT 1) pr ON true
  LEFT JOIN LATERAL (SELECT r.id, r.scheduled_for, r.attempt, r.status, left(r.error_message, 2000) AS error_message,
                            (r.details->>'missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                            r.executed_by_instance, r.retry_at, r.lease_expires_at
                       FROM mjsched.scheduled_job_run r
                      WHERE r.scheduled_job_id = j.id AND r.started_at > k.tick
                        AND r.scheduled_for IS DISTINCT FROM k.tick
                      ORDER BY r.started_at LIMIT 1) ar ON true
  LEFT JOIN LATERAL (SELECT r.id, r.scheduled_for, r.attempt, r.status, left(r.error_message, 2000) AS error_message,
                            (r.details->>'missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                            r.executed_by_instance, r.retry_at, r.lease_expires_at
                       FROM mjsched.scheduled_job_run r
                      WHERE r.scheduled_job_id = j.id AND r.status = 'Running'
                      ORDER BY r.started_at DESC LIMIT 1) hr ON true
  LEFT JOIN LATERAL (SELECT r.id, r.scheduled_for, r.attempt, r.status, left(r.error_message, 2000) AS error_message,
                            (r.details->>'missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                            r.executed_by_instance, r.retry_at, r.lease_expires_at
                       FROM mjsched.scheduled_job_run r
                      WHERE r.scheduled_job_id = j.id AND r.status = 'Queued' AND r.attempt > 1
                      ORDER BY r.retry_at LIMIT 1) qr ON true
  LEFT JOIN LATERAL (SELECT r.id, r.scheduled_for, r.attempt, r.status, left(r.error_message, 2000) AS error_message,
                            (r.details->>'missed') AS missed, r.queued_at, r.started_at, r.completed_at,
                            r.executed_by_instance, r.retry_at, r.lease_expires_at
                       FROM mjsched.scheduled_job_run r
                      WHERE r.scheduled_job_id = j.id AND r.started_at IS NOT NULL
                      ORDER BY r.started_at DESC LIMIT 1) lr ON true
 WHERE j.id = %(job)s::uuid

-- name: job_alert_rules
-- A job's deadline-alert rules (014_alerts.sql).
SELECT late_start_seconds, silent_after_seconds, too_long_seconds, failing_streak, pause_after_failing_streak
  FROM mjsched.job_alert_rule WHERE job_id = %(job)s::uuid

-- name: open_alerts
-- The open deadline alerts (of one job, or all), newest first.
SELECT id, job_id, job_name, kind, since, threshold, run_id, opened_at, resolved_at, paused
  FROM mjsched.job_alert
 WHERE resolved_at IS NULL AND (%(job)s::uuid IS NULL OR job_id = %(job)s::uuid)
 ORDER BY opened_at DESC, id DESC
 LIMIT %(limit)s

-- name: open_alert_counts
-- Open deadline alerts by kind (ix_job_alert_open), for the metrics.
SELECT kind, count(*) AS open FROM mjsched.job_alert WHERE resolved_at IS NULL GROUP BY kind
