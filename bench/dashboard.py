"""The dashboard on a large database: 10,000 jobs and 5 M runs, each page rendered and timed,
and the plan (EXPLAIN ANALYZE) of each page query printed, to show the indexes in use.

    python -m bench.dashboard [--dsn SERVER_DSN] [--jobs 10000] [--runs-per-job 500] [--repeat 7] [--keep]

Builds its own database (``mjsched_bench_dashboard``) with generate_series (runs are loaded
without their secondary indexes, which are then rebuilt exactly as the schema defines them),
renders every page through the WSGI app in-process (no HTTP), and drops the database at
the end unless ``--keep``. Target: every page under 200 ms. Numbers are printed, never asserted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import psycopg2
import psycopg2.extras

from mjsched.backends.postgres import PostgresBackend
from mjsched.web import create_app
from mjsched.web.pages import PAGE_SIZE, RECENT_RUNS
from mjsched.web.queries import POSTGRES

DB = "mjsched_bench_dashboard"
TARGET_MS = 200.0


def with_db(dsn: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


def admin(dsn: str, statement: str) -> None:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(statement)
    conn.close()


def build(dsn: str, jobs: int, runs_per_job: int) -> None:
    backend = PostgresBackend(dsn, statement_timeout=3600, call_timeout=3600)
    backend.install()
    backend.close()
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET synchronous_commit = off; SET maintenance_work_mem = '256MB'; "
                "SET session_replication_role = replica")   # no FK or change triggers while loading
    t0 = time.perf_counter()
    cur.execute("INSERT INTO mjsched.scheduled_job_type (name, driver_class) VALUES ('shell', 'shell') "
                "ON CONFLICT DO NOTHING")
    cur.execute("""
        INSERT INTO mjsched.scheduled_job (job_type_id, name, cron_expression, timezone, status, configuration,
                                           next_run_at, last_run_at, run_count, success_count, failure_count,
                                           last_duration_ms, total_duration_ms)
        SELECT (SELECT id FROM mjsched.scheduled_job_type WHERE driver_class = 'shell'),
               'job-' || lpad(g::text, 5, '0'),
               (ARRAY['*/5 * * * *', '0 * * * *', '30 2 * * *', '0 9 * * 1-5', '15 */6 * * *'])[1 + g %% 5],
               (ARRAY['UTC', 'Europe/Berlin', 'America/New_York'])[1 + g %% 3],
               CASE WHEN g %% 20 = 0 THEN 'Paused' WHEN g %% 97 = 0 THEN 'Disabled' ELSE 'Active' END,
               jsonb_build_object('command', jsonb_build_array('echo', g), 'env',
                                  jsonb_build_object('DB_PASSWORD', 'bench-secret')),
               now() + (g %% 300) * interval '1 second', now() - interval '1 hour', %(runs)s,
               %(runs)s - %(runs)s / 20, %(runs)s / 20, 1000 + g %% 5000, %(runs)s * 1000
          FROM generate_series(1, %(jobs)s) g""", {"jobs": jobs, "runs": runs_per_job})
    cur.execute("""SELECT indexname, indexdef FROM pg_indexes
                    WHERE schemaname = 'mjsched' AND tablename = 'scheduled_job_run'
                      AND indexname <> 'scheduled_job_run_pkey'""")
    indexes = cur.fetchall()
    for name, _ in indexes:
        cur.execute(f"DROP INDEX mjsched.{name}")
    cur.execute("""
        INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, scheduled_for, status, success, error_message,
                                               queued_at, started_at, completed_at, duration_ms, executed_by_instance)
        SELECT j.id, t.at, s.status, s.status = 'Completed',
               CASE WHEN s.status = 'Failed' THEN 'command exited with status 1'
                    WHEN s.status = 'Timeout' THEN 'ran past its max runtime'
                    WHEN s.status = 'Abandoned' THEN 'lease expired' END,
               NULL, t.at, t.at + (d.ms || ' milliseconds')::interval, d.ms, 'engine-' || (n.i %% 20)
          FROM (SELECT id, row_number() OVER (ORDER BY id) AS i FROM mjsched.scheduled_job) j
          CROSS JOIN LATERAL (SELECT j.i AS i) n
          CROSS JOIN LATERAL generate_series(1, %(runs)s) g
          CROSS JOIN LATERAL (SELECT now() - interval '2 hours' - g * interval '5 minutes'
                                     - (n.i %% 300) * interval '1 second' AS at) t
          CROSS JOIN LATERAL (SELECT (500 + (hashint4((n.i * 7919 + g)::int) & 4095))::bigint AS ms,
                                     (hashint4((n.i * 104729 + g)::int) & 1023) AS h) d
          CROSS JOIN LATERAL (SELECT CASE WHEN d.h < 51 THEN 'Failed' WHEN d.h < 61 THEN 'Timeout'
                                          WHEN d.h < 66 THEN 'Abandoned' WHEN d.h < 71 THEN 'Skipped'
                                          ELSE 'Completed' END AS status) s""", {"runs": runs_per_job})
    loaded = time.perf_counter()
    for _, definition in indexes:
        cur.execute(definition)
    # a few runs going on now, held by live engines
    cur.execute("""
        INSERT INTO mjsched.engine_instance (instance, host, pid, version, last_seen_at)
        SELECT 'engine-' || i, 'host-' || (i % 5), 1000 + i, '0.1.0',
               now() - CASE WHEN i < 18 THEN interval '5 seconds' ELSE interval '20 minutes' END
          FROM generate_series(0, 19) i""")
    cur.execute("""
        INSERT INTO mjsched.scheduled_job_run (scheduled_job_id, status, started_at, executed_by_instance,
                                               lock_token, lease_expires_at)
        SELECT id, 'Running', now() - interval '30 seconds', 'engine-' || (row_number() OVER () % 18),
               gen_random_uuid(), now() + interval '9 minutes'
          FROM mjsched.scheduled_job ORDER BY name LIMIT 50""")
    cur.execute("SET session_replication_role = origin")
    cur.execute("VACUUM ANALYZE mjsched.scheduled_job")
    cur.execute("VACUUM ANALYZE mjsched.scheduled_job_run")
    cur.execute("SELECT count(*) FROM mjsched.scheduled_job_run")
    total = cur.fetchone()[0]
    print(f"built {jobs:,} jobs and {total:,} runs in {time.perf_counter() - t0:.0f} s "
          f"(runs loaded in {loaded - t0:.0f} s, indexes rebuilt after)")
    conn.close()


def explain(dsn: str, job_id: str) -> None:
    params: dict[str, dict[str, Any]] = {
        "summary": {},
        "jobs_page": {"status": None, "search": None, "limit": PAGE_SIZE, "offset": 0, "recent": RECENT_RUNS},
        "job": {"job_id": job_id},
        "job_runs": {"job_id": job_id, "status": "Failed", "limit": PAGE_SIZE + 1, "offset": 0},
        "job_durations": {"job_id": job_id, "limit": 60},
        "runs_running": {"limit": 200},
        "runs_by_status": {"status": "Failed", "limit": PAGE_SIZE + 1, "offset": 100 * PAGE_SIZE},
        "runs_problems": {"limit": 50},
        "engines": {},
    }
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:
        for name, values in params.items():
            cur.execute("EXPLAIN (ANALYZE, COSTS OFF) " + POSTGRES[name], values)
            plan = [row[0] for row in cur.fetchall()]
            print(f"\n-- {name}")
            for line in plan:
                print("   " + line)
        cur.execute("EXPLAIN (COSTS OFF) " + POSTGRES["request_run"], {"job_id": job_id})
        print("\n-- request_run (not executed)")
        for row in cur.fetchall():
            print("   " + row[0])
    conn.close()


def render(dsn: str, job_id: str, repeat: int) -> list[tuple[str, float, float]]:
    from werkzeug.test import Client

    app = create_app(dsn)
    client = Client(app)
    pages = ["/jobs", "/jobs?page=150", "/jobs?q=job-012", "/jobs?status=Paused", f"/jobs/{job_id}",
             f"/jobs/{job_id}?status=Failed", f"/jobs/{job_id}?page=8", "/runs", "/runs?status=Failed",
             "/runs?status=Failed&page=100", "/runs?status=Completed", "/runs?status=Completed&page=1000",
             "/engines"]
    results = []
    try:
        for page in pages:
            assert client.get(page).status_code == 200, page      # warm: connections, plans, templates
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                response = client.get(page)
                response.get_data()
                times.append((time.perf_counter() - t) * 1000)
                assert response.status_code == 200, page
            results.append((page.replace(job_id, "<id>"), statistics.median(times), max(times)))
    finally:
        app.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get("MJSCHED_TEST_POSTGRES_DSN",
                                                        "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs-per-job", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--reuse", action="store_true", help="use the database left by --keep")
    args = parser.parse_args()
    dsn = with_db(args.dsn, DB)
    if not args.reuse:
        admin(args.dsn, f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin(args.dsn, f"CREATE DATABASE {DB}")
    try:
        if not args.reuse:
            build(dsn, args.jobs, args.runs_per_job)
        conn = psycopg2.connect(dsn)
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM mjsched.scheduled_job WHERE status = 'Active' ORDER BY name OFFSET %s LIMIT 1", (min(4321, args.jobs // 2),))
            job_id = str(cur.fetchone()[0])
        conn.close()
        results = render(dsn, job_id, args.repeat)
        print(f"\n| page | median ms | max ms | under {TARGET_MS:.0f} ms |")
        print("|---|---:|---:|---|")
        for page, median, worst in results:
            print(f"| `{page}` | {median:.1f} | {worst:.1f} | {'yes' if worst < TARGET_MS else 'NO'} |")
        explain(dsn, job_id)
    finally:
        if not args.keep:
            admin(args.dsn, f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
            print(f"\ndropped {DB}")


if __name__ == "__main__":
    main()
