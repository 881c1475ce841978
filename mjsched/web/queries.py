"""The dashboard's own reads and its one write, as named SQL.

Each page reads through one or two of these statements, each bounded (LIMIT) and each
served by an index of ``sql/postgres/001_schema.sql`` (``bench/dashboard.py`` prints
their plans on 10,000 jobs and 5 M runs):

* ``jobs_page``: the page of jobs (a sort of the filtered jobs, ~10k rows at most), then
  per job of the page its last ``recent`` runs through ix_scheduled_job_run_job_started.
* ``job_runs``: one job's history, newest first, through ix_scheduled_job_run_job_started.
* ``runs_running``: Running runs through ix_scheduled_job_run_status_started (status = 'Running').
* ``runs_by_status``: one status's runs, newest first, ix_scheduled_job_run_status_started.
* ``runs_problems``: the newest Failed, Timeout and Abandoned runs, one bounded index range
  per status (a single ``status IN (...) ORDER BY started_at`` would sort every such row).
* ``engines``: engine_instance (one row per engine) and the Running runs each holds.
* ``request_run``: make an Active, unlocked job due now (database clock), through the
  ``update_job`` procedure the engine role may call, and wake the engines (NOTIFY).

SQL Server: the T-SQL twins below (``MSSQL``), the same names, columns and indexes:
``TOP``/``OFFSET ... FETCH`` for ``LIMIT``/``OFFSET``, ``SYSDATETIMEOFFSET()`` for ``now()``,
``OUTER APPLY`` for ``LEFT JOIN LATERAL`` (the jobs page then returns one row per recent run,
folded by ``pages.fold_recent``), durations as seconds (``DATEDIFF_BIG``), and no NOTIFY
(engines poll). They are checked statically (tests/web/test_queries.py: sqlglot, T-SQL
dialect, and the same names as the PostgreSQL set) and run by tests/web/test_dialects.py
where a SQL Server is given; there is none on this project's machines.
"""
from __future__ import annotations

JOB_COLUMNS = """j.id, j.name, j.status, j.cron_expression, j.interval_seconds, j.run_at, j.timezone,
       j.next_run_at, j.last_run_at,
       j.run_count, j.success_count, j.failure_count, j.last_duration_ms, j.max_runtime_seconds,
       j.locked_by_instance, j.expected_completion_at, j.locked_at, t.driver_class AS driver, j.jitter_seconds,
       j.priority"""

RUN_COLUMNS = """r.id, r.scheduled_job_id, r.scheduled_for, r.status, r.success, r.error_message, r.details,
       r.queued_at, r.started_at, r.completed_at, r.duration_ms, r.executed_by_instance, r.lease_expires_at,
       r.parameters, r.cancel_requested_at, r.cancel_requested_by"""

POSTGRES: dict[str, str] = {
    "db_now": "SELECT now() AS now",

    "summary": """
        SELECT (SELECT count(*) FROM mjsched.scheduled_job) AS jobs,
               (SELECT count(*) FROM mjsched.scheduled_job WHERE status = 'Active') AS active,
               (SELECT count(*) FROM mjsched.scheduled_job WHERE status = 'Paused') AS paused,
               (SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Running') AS running,
               (SELECT count(*) FROM mjsched.scheduled_job_run WHERE status = 'Queued') AS queued,
               now() AS now""",

    "jobs_page": f"""
        WITH page AS (
            SELECT {JOB_COLUMNS}, count(*) OVER () AS total
              FROM mjsched.scheduled_job j
              JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
             WHERE (%(status)s::varchar IS NULL OR j.status = %(status)s::varchar)
               AND (%(tag)s::varchar IS NULL OR j.id IN (SELECT g.scheduled_job_id FROM mjsched.job_tag g
                                                          WHERE g.tag = %(tag)s::varchar))
               AND (%(search)s::text IS NULL OR j.name ILIKE %(search)s::text
                    OR t.driver_class ILIKE %(search)s::text)
             ORDER BY j.name, j.id
             LIMIT %(limit)s OFFSET %(offset)s
        )
        SELECT p.*, recent.statuses, recent.durations, recent.completed, recent.errors
          FROM page p
          LEFT JOIN LATERAL (
              SELECT array_agg(x.status ORDER BY x.started_at) AS statuses,
                     array_agg(x.duration_ms ORDER BY x.started_at) AS durations,
                     array_agg(x.completed_at ORDER BY x.started_at) AS completed,
                     array_agg(left(x.error_message, 300) ORDER BY x.started_at) AS errors
                FROM (SELECT r.status, r.duration_ms, r.started_at, r.completed_at, r.error_message
                        FROM mjsched.scheduled_job_run r
                       WHERE r.scheduled_job_id = p.id AND r.started_at IS NOT NULL
                       ORDER BY r.started_at DESC
                       LIMIT %(recent)s) x
          ) recent ON true
         ORDER BY p.name, p.id""",

    "job": f"""
        SELECT {JOB_COLUMNS}, j.description, j.owner, j.configuration, j.concurrency_mode,
               j.missed_run_policy, j.start_at, j.end_at, j.isolation, j.max_queued_runs,
               j.notify_on_success, j.notify_on_failure, j.notify_to, j.total_duration_ms,
               j.created_at, j.updated_at, (j.expected_completion_at IS NOT NULL) AS locked
          FROM mjsched.scheduled_job j
          JOIN mjsched.scheduled_job_type t ON t.id = j.job_type_id
         WHERE j.id = %(job_id)s::uuid""",

    "job_runs": f"""
        SELECT {RUN_COLUMNS}
          FROM mjsched.scheduled_job_run r
         WHERE r.scheduled_job_id = %(job_id)s::uuid
           AND (%(status)s::varchar IS NULL OR r.status = %(status)s::varchar)
         ORDER BY r.started_at DESC, r.id DESC
         LIMIT %(limit)s OFFSET %(offset)s""",

    "job_durations": """
        SELECT r.started_at, r.duration_ms, r.status
          FROM mjsched.scheduled_job_run r
         WHERE r.scheduled_job_id = %(job_id)s::uuid AND r.started_at IS NOT NULL
           AND r.duration_ms IS NOT NULL
         ORDER BY r.started_at DESC
         LIMIT %(limit)s""",

    "runs_running": f"""
        SELECT {RUN_COLUMNS}, j.name AS job_name, j.max_runtime_seconds,
               now() - r.started_at AS elapsed, r.lease_expires_at - now() AS lease_left
          FROM mjsched.scheduled_job_run r
          JOIN mjsched.scheduled_job j ON j.id = r.scheduled_job_id
         WHERE r.status = 'Running'
         ORDER BY r.started_at DESC
         LIMIT %(limit)s""",

    "runs_by_status": f"""
        SELECT {RUN_COLUMNS}, j.name AS job_name
          FROM mjsched.scheduled_job_run r
          JOIN mjsched.scheduled_job j ON j.id = r.scheduled_job_id
         WHERE r.status = %(status)s::varchar
         ORDER BY r.started_at DESC, r.id DESC
         LIMIT %(limit)s OFFSET %(offset)s""",

    "runs_queued": f"""
        SELECT {RUN_COLUMNS}, j.name AS job_name
          FROM mjsched.scheduled_job_run r
          JOIN mjsched.scheduled_job j ON j.id = r.scheduled_job_id
         WHERE r.status = 'Queued'
         ORDER BY r.queued_at, r.id
         LIMIT %(limit)s OFFSET %(offset)s""",

    "runs_problems": f"""
        SELECT x.*, j.name AS job_name
          FROM (
              (SELECT {RUN_COLUMNS} FROM mjsched.scheduled_job_run r
                WHERE r.status = 'Failed' ORDER BY r.started_at DESC LIMIT %(limit)s)
              UNION ALL
              (SELECT {RUN_COLUMNS} FROM mjsched.scheduled_job_run r
                WHERE r.status = 'Timeout' ORDER BY r.started_at DESC LIMIT %(limit)s)
              UNION ALL
              (SELECT {RUN_COLUMNS} FROM mjsched.scheduled_job_run r
                WHERE r.status = 'Abandoned' ORDER BY r.started_at DESC LIMIT %(limit)s)
          ) x
          JOIN mjsched.scheduled_job j ON j.id = x.scheduled_job_id
         ORDER BY x.started_at DESC NULLS LAST
         LIMIT %(limit)s""",

    "engines": """
        SELECT e.instance, e.host, e.pid, e.version, e.started_at, e.last_seen_at, e.stopped_at,
               now() - e.last_seen_at AS silent_for, e.heartbeat_seconds, e.max_concurrent_jobs,
               (SELECT count(*) FROM mjsched.scheduled_job_run r
                 WHERE r.status = 'Running' AND r.executed_by_instance = e.instance) AS in_flight
          FROM mjsched.engine_instance e
         WHERE e.stopped_at IS NULL OR e.stopped_at > now() - interval '24 hours'
         ORDER BY (e.stopped_at IS NOT NULL), e.started_at DESC""",

    "request_run": """
        SELECT u.updated, pg_notify('mjsched_job_changed', j.id::text) AS notified
          FROM mjsched.scheduled_job j
          CROSS JOIN LATERAL mjsched.update_job(j.id, jsonb_build_object('next_run_at', now())) u
         WHERE j.id = %(job_id)s::uuid AND j.status = 'Active'
           AND (j.expected_completion_at IS NULL OR j.expected_completion_at < now())""",
}

MSSQL_JOB_COLUMNS = JOB_COLUMNS
MSSQL_RUN_COLUMNS = RUN_COLUMNS

MSSQL: dict[str, str] = {
    "db_now": "SELECT SYSDATETIMEOFFSET() AS now;",

    "summary": """
        SELECT (SELECT COUNT(*) FROM mjsched.scheduled_job) AS jobs,
               (SELECT COUNT(*) FROM mjsched.scheduled_job WHERE status = N'Active') AS active,
               (SELECT COUNT(*) FROM mjsched.scheduled_job WHERE status = N'Paused') AS paused,
               (SELECT COUNT(*) FROM mjsched.scheduled_job_run WHERE status = N'Running') AS running,
               (SELECT COUNT(*) FROM mjsched.scheduled_job_run WHERE status = N'Queued') AS queued,
               SYSDATETIMEOFFSET() AS now;""",

    "jobs_page": f"""
        WITH page AS (
            SELECT {MSSQL_JOB_COLUMNS}, COUNT(*) OVER () AS total
              FROM mjsched.scheduled_job AS j
              JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
             WHERE (CAST(%(status)s AS nvarchar(20)) IS NULL OR j.status = CAST(%(status)s AS nvarchar(20)))
               AND (CAST(%(tag)s AS nvarchar(64)) IS NULL
                    OR j.id IN (SELECT g.scheduled_job_id FROM mjsched.job_tag AS g
                                 WHERE g.tag = CAST(%(tag)s AS nvarchar(64))))
               AND (CAST(%(search)s AS nvarchar(450)) IS NULL
                    OR j.name LIKE CAST(%(search)s AS nvarchar(450)) ESCAPE '\\'
                    OR t.driver_class LIKE CAST(%(search)s AS nvarchar(450)) ESCAPE '\\')
             ORDER BY j.name, j.id
            OFFSET %(offset)s ROWS FETCH NEXT %(limit)s ROWS ONLY
        )
        SELECT p.*, x.status AS run_status, x.duration_ms AS run_duration_ms, x.started_at AS run_started_at,
               x.completed_at AS run_completed_at, LEFT(x.error_message, 300) AS run_error
          FROM page AS p
          OUTER APPLY (SELECT TOP (%(recent)s) r.status, r.duration_ms, r.started_at, r.completed_at, r.error_message
                         FROM mjsched.scheduled_job_run AS r
                        WHERE r.scheduled_job_id = p.id AND r.started_at IS NOT NULL
                        ORDER BY r.started_at DESC) AS x
         ORDER BY p.name, p.id, x.started_at;""",

    "job": f"""
        SELECT {MSSQL_JOB_COLUMNS}, j.description, j.owner, j.configuration, j.concurrency_mode,
               j.missed_run_policy, j.start_at, j.end_at, j.isolation, j.max_queued_runs,
               j.notify_on_success, j.notify_on_failure, j.notify_to, j.total_duration_ms,
               j.created_at, j.updated_at,
               CAST(CASE WHEN j.expected_completion_at IS NOT NULL THEN 1 ELSE 0 END AS bit) AS locked
          FROM mjsched.scheduled_job AS j
          JOIN mjsched.scheduled_job_type AS t ON t.id = j.job_type_id
         WHERE j.id = CAST(%(job_id)s AS uniqueidentifier);""",

    "job_runs": f"""
        SELECT {MSSQL_RUN_COLUMNS}
          FROM mjsched.scheduled_job_run AS r
         WHERE r.scheduled_job_id = CAST(%(job_id)s AS uniqueidentifier)
           AND (CAST(%(status)s AS nvarchar(20)) IS NULL OR r.status = CAST(%(status)s AS nvarchar(20)))
         ORDER BY r.started_at DESC, r.id DESC
        OFFSET %(offset)s ROWS FETCH NEXT %(limit)s ROWS ONLY;""",

    "job_durations": """
        SELECT TOP (%(limit)s) r.started_at, r.duration_ms, r.status
          FROM mjsched.scheduled_job_run AS r
         WHERE r.scheduled_job_id = CAST(%(job_id)s AS uniqueidentifier) AND r.started_at IS NOT NULL
           AND r.duration_ms IS NOT NULL
         ORDER BY r.started_at DESC;""",

    "runs_running": f"""
        SELECT TOP (%(limit)s) {MSSQL_RUN_COLUMNS}, j.name AS job_name, j.max_runtime_seconds,
               DATEDIFF_BIG(millisecond, r.started_at, SYSDATETIMEOFFSET()) / 1000.0 AS elapsed,
               DATEDIFF_BIG(millisecond, SYSDATETIMEOFFSET(), r.lease_expires_at) / 1000.0 AS lease_left
          FROM mjsched.scheduled_job_run AS r
          JOIN mjsched.scheduled_job AS j ON j.id = r.scheduled_job_id
         WHERE r.status = N'Running'
         ORDER BY r.started_at DESC;""",

    "runs_by_status": f"""
        SELECT {MSSQL_RUN_COLUMNS}, j.name AS job_name
          FROM mjsched.scheduled_job_run AS r
          JOIN mjsched.scheduled_job AS j ON j.id = r.scheduled_job_id
         WHERE r.status = CAST(%(status)s AS nvarchar(20))
         ORDER BY r.started_at DESC, r.id DESC
        OFFSET %(offset)s ROWS FETCH NEXT %(limit)s ROWS ONLY;""",

    "runs_queued": f"""
        SELECT {MSSQL_RUN_COLUMNS}, j.name AS job_name
          FROM mjsched.scheduled_job_run AS r
          JOIN mjsched.scheduled_job AS j ON j.id = r.scheduled_job_id
         WHERE r.status = N'Queued'
         ORDER BY r.queued_at, r.id
        OFFSET %(offset)s ROWS FETCH NEXT %(limit)s ROWS ONLY;""",

    "runs_problems": f"""
        SELECT TOP (%(limit)s) x.*, j.name AS job_name
          FROM (SELECT * FROM (SELECT TOP (%(limit)s) {MSSQL_RUN_COLUMNS} FROM mjsched.scheduled_job_run AS r
                                WHERE r.status = N'Failed' ORDER BY r.started_at DESC) AS failed
                UNION ALL
                SELECT * FROM (SELECT TOP (%(limit)s) {MSSQL_RUN_COLUMNS} FROM mjsched.scheduled_job_run AS r
                                WHERE r.status = N'Timeout' ORDER BY r.started_at DESC) AS timed_out
                UNION ALL
                SELECT * FROM (SELECT TOP (%(limit)s) {MSSQL_RUN_COLUMNS} FROM mjsched.scheduled_job_run AS r
                                WHERE r.status = N'Abandoned' ORDER BY r.started_at DESC) AS abandoned) AS x
          JOIN mjsched.scheduled_job AS j ON j.id = x.scheduled_job_id
         ORDER BY CASE WHEN x.started_at IS NULL THEN 1 ELSE 0 END, x.started_at DESC;""",

    "engines": """
        SELECT e.instance, e.host, e.pid, e.version, e.started_at, e.last_seen_at, e.stopped_at,
               DATEDIFF_BIG(millisecond, e.last_seen_at, SYSDATETIMEOFFSET()) / 1000.0 AS silent_for,
               e.heartbeat_seconds, e.max_concurrent_jobs,
               (SELECT COUNT(*) FROM mjsched.scheduled_job_run AS r
                 WHERE r.status = N'Running' AND r.executed_by_instance = e.instance) AS in_flight
          FROM mjsched.engine_instance AS e
         WHERE e.stopped_at IS NULL OR e.stopped_at > DATEADD(hour, -24, SYSDATETIMEOFFSET())
         ORDER BY CASE WHEN e.stopped_at IS NULL THEN 0 ELSE 1 END, e.started_at DESC;""",

    "request_run": """
        DECLARE @v_job uniqueidentifier = CAST(%(job_id)s AS uniqueidentifier);
        DECLARE @v_now datetimeoffset = SYSDATETIMEOFFSET();
        DECLARE @v_fields nvarchar(100) = CONCAT(N'{"next_run_at": "', CONVERT(nvarchar(40), @v_now, 127), N'"}');
        IF EXISTS (SELECT 1 FROM mjsched.scheduled_job AS j
                    WHERE j.id = @v_job AND j.status = N'Active'
                      AND (j.expected_completion_at IS NULL OR j.expected_completion_at < @v_now))
        BEGIN
            EXEC mjsched.update_job @p_job_id = @v_job, @p_fields = @v_fields;
        END;""",
}

QUERIES: dict[str, dict[str, str]] = {"postgres": POSTGRES, "mssql": MSSQL}
