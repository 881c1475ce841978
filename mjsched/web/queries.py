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

PostgreSQL only for now. The SQL Server twins are the same statements with ``TOP``/
``OFFSET ... FETCH`` for ``LIMIT``/``OFFSET``, ``SYSDATETIMEOFFSET()`` for ``now()``,
``OUTER APPLY`` for ``LEFT JOIN LATERAL``, ``STRING_AGG``/a second query for the arrays,
and no NOTIFY (engines poll); ``create_app`` refuses a SQL Server engine with a clear
error until they are written and tested against a real server.
"""
from __future__ import annotations

JOB_COLUMNS = """j.id, j.name, j.status, j.cron_expression, j.timezone, j.next_run_at, j.last_run_at,
       j.run_count, j.success_count, j.failure_count, j.last_duration_ms, j.max_runtime_seconds,
       j.locked_by_instance, j.expected_completion_at, j.locked_at, t.driver_class AS driver"""

RUN_COLUMNS = """r.id, r.scheduled_job_id, r.scheduled_for, r.status, r.success, r.error_message, r.details,
       r.queued_at, r.started_at, r.completed_at, r.duration_ms, r.executed_by_instance, r.lease_expires_at"""

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
               now() - e.last_seen_at AS silent_for,
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

QUERIES: dict[str, dict[str, str]] = {"postgres": POSTGRES}
