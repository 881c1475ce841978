"""Ceiling: the SQL of an execution driven by pgbench on the same server, next to mjsched.

The bench writes pgbench scripts against the project's schema (``mjsched.scheduled_job``
and ``mjsched.scheduled_job_run``, created by ``SchedulingEngine.install()``):

* ``per-job``: one execution = two transactions: (1) lock one due job (FOR UPDATE SKIP
  LOCKED), take its lock and insert its Running run; (2) finish the run (fenced by
  run id, token and status) and update the job (statistics, next_run_at, release).
* ``batched``: the same two statements, 50 jobs per transaction.
* ``procedures``: what one engine poll sends, minus Python: ``sweep_expired_leases()``,
  ``claim_due_jobs(.., 50, ..)`` (whose rows carry the claimed jobs' rows, as the engine
  reads them) and ``complete_job_runs(50)``.

A finished job is due again at once (next_run_at = now()), so the scripts run steady
state for the whole duration. Then mjsched itself (the same engine processes as the
throughput bench) runs no-op jobs on the same server, in the same run, and its
executions/s are printed as a fraction of each ceiling.

    python -m bench.ceiling [--dsn DSN] [--quick] [--seconds S] [--engines 4]
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from typing import Any, Sequence

from . import common, throughput

BATCH = 50

CLAIM_ONE = """
WITH c AS (
    SELECT j.id, j.next_run_at FROM mjsched.scheduled_job j
     WHERE j.status = 'Active' AND j.next_run_at <= now() AND j.lock_token IS NULL
     ORDER BY j.next_run_at LIMIT {limit} FOR UPDATE OF j SKIP LOCKED
), t AS (
    UPDATE mjsched.scheduled_job j
       SET lock_token = gen_random_uuid(), locked_at = now(), locked_by_instance = 'pgbench',
           expected_completion_at = now() + interval '60 seconds'
      FROM c WHERE j.id = c.id
    RETURNING j.id, j.lock_token, c.next_run_at, j.expected_completion_at
), i AS (
    INSERT INTO mjsched.scheduled_job_run
           (scheduled_job_id, scheduled_for, status, started_at, executed_by_instance, lock_token, lease_expires_at)
    SELECT t.id, t.next_run_at, 'Running', now(), 'pgbench', t.lock_token, t.expected_completion_at FROM t
    RETURNING id, lock_token
)
"""

FINISH = """
WITH items AS (
    SELECT u.run_id, u.token FROM unnest({run_ids}, {tokens}) AS u(run_id, token)
), f AS (
    UPDATE mjsched.scheduled_job_run r
       SET status = 'Completed', success = true, completed_at = now(), lease_expires_at = NULL,
           duration_ms = greatest(0, (extract(epoch FROM now() - r.started_at) * 1000)::bigint)
      FROM items WHERE r.id = items.run_id AND r.lock_token = items.token AND r.status = 'Running'
    RETURNING r.scheduled_job_id, r.lock_token, r.duration_ms
)
UPDATE mjsched.scheduled_job j
   SET run_count = j.run_count + 1, success_count = j.success_count + 1, last_run_at = now(),
       last_duration_ms = f.duration_ms, total_duration_ms = j.total_duration_ms + f.duration_ms,
       next_run_at = now(), lock_token = NULL, locked_at = NULL, locked_by_instance = NULL,
       expected_completion_at = NULL
  FROM f WHERE j.id = f.scheduled_job_id AND j.lock_token = f.lock_token;
"""


def scripts() -> dict[str, tuple[str, int]]:
    """name -> (pgbench script text, executions per script run)."""
    per_job = (
        "-- per-job: lock one job and insert its run (transaction 1) ...\n"
        + CLAIM_ONE.format(limit=1).strip() + "\nSELECT id AS run_id, lock_token AS token FROM i\n\\gset\n"
        "-- ... then finish the run and update the job (transaction 2)\n"
        + FINISH.format(run_ids="ARRAY[:run_id::uuid]", tokens="ARRAY[:token::uuid]").strip() + "\n")
    batched = (
        f"-- batched: {BATCH} jobs locked and their runs inserted in one transaction ...\n"
        + CLAIM_ONE.format(limit=BATCH).strip()
        + "\nSELECT array_agg(id)::text AS run_ids, array_agg(lock_token)::text AS tokens FROM i\n\\gset\n"
        f"-- ... then {BATCH} runs finished and their jobs updated in one transaction\n"
        + FINISH.format(run_ids=":run_ids::uuid[]", tokens=":tokens::uuid[]").strip() + "\n")
    # \\gset takes one row, so the claim's rows are folded into the completion items server side;
    # the claimed jobs' columns are still computed by claim_due_jobs (the engine's one claim round trip).
    procedures = (
        "-- one engine poll's SQL, minus Python: sweep, claim 50 (with their job rows), complete 50\n"
        "SELECT * FROM mjsched.sweep_expired_leases(NULL);\n"
        f"SELECT coalesce(jsonb_agg(jsonb_build_object('run_id', run_id, 'token', lock_token, "
        f"'status', 'Completed', 'error_message', NULL, 'details', NULL, 'next_run_at', now())), '[]')::text "
        f"AS items\n"
        f"  FROM mjsched.claim_due_jobs('pgbench-' || :client_id, {BATCH}, 60, NULL) WHERE job_id IS NOT NULL\n"
        "\\gset\n"
        "SELECT run_id, completed FROM mjsched.complete_job_runs(:items::jsonb, NULL);\n")
    return {"per-job": (per_job, 1), "batched": (batched, BATCH), "procedures": (procedures, BATCH)}


def pgbench_path() -> str | None:
    found = shutil.which("pgbench")
    if found:
        return found
    for candidate in ("/usr/lib/postgresql/15/bin/pgbench", "/usr/lib/postgresql/16/bin/pgbench"):
        if os.path.exists(candidate):
            return candidate
    return None


def run_pgbench(exe: str, dsn: str, script: str, *, clients: int, seconds: int) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="mjsched_bench_", delete=False) as f:
        f.write(script)
        path = f.name
    try:
        cmd = [exe, "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, os.cpu_count() or 2)),
               "-T", str(seconds), "-f", path, dsn]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    finally:
        os.unlink(path)
    out = proc.stdout + proc.stderr
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    done = re.search(r"number of transactions actually processed: (\d+)", out)
    latency = re.search(r"latency average = ([0-9.]+) ms", out)
    if proc.returncode != 0 or tps is None:
        return {"error": out.strip().splitlines()[-3:] if out.strip() else [f"exit {proc.returncode}"]}
    return {"tps": float(tps.group(1)), "failed": int(failed.group(1)) if failed else 0,
            "scripts": int(done.group(1)) if done else 0,
            "latency_ms": float(latency.group(1)) if latency else None}


def measure_ceiling(server_dsn: str, *, seconds: int, jobs: int, clients: dict[str, int]) -> list[dict[str, Any]]:
    exe = pgbench_path()
    if exe is None:
        return [{"name": "pgbench", "error": ["pgbench not found on PATH or in /usr/lib/postgresql/*/bin"]}]
    results = []
    for name, (script, per_run) in scripts().items():
        with common.BenchDatabase(server_dsn, "ceil") as db:
            conn = common.connect(db.dsn)
            common.insert_jobs(conn, jobs, next_run_at="now() - interval '1 day' + g * interval '1 microsecond'")
            with conn.cursor() as cur:
                cur.execute("VACUUM ANALYZE mjsched.scheduled_job")
            conn.close()
            common.log_progress(f"ceiling: pgbench {name}, {clients[name]} clients, {seconds}s")
            r = run_pgbench(exe, db.dsn, script, clients=clients[name], seconds=seconds)
            r.update(name=name, per_run=per_run, clients=clients[name], script=script)
            if "tps" in r:
                r["rate"] = r["tps"] * per_run
                conn = common.connect(db.dsn)
                with conn.cursor() as cur:
                    cur.execute("SELECT count(*) FILTER (WHERE status = 'Completed'), count(*) "
                                "FROM mjsched.scheduled_job_run")
                    r["completed"], r["runs"] = cur.fetchone()
                conn.close()
            results.append(r)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--seconds", type=int, default=None, help="seconds per pgbench run (default 10; quick 1)")
    p.add_argument("--engines", type=int, default=4, help="mjsched engine processes for the comparison")
    p.add_argument("--jobs", type=int, default=None, help="mjsched jobs (default 20000; quick 1000)")
    p.add_argument("--print-scripts", action="store_true", help="print the generated pgbench scripts")
    args = p.parse_args(argv)
    seconds = args.seconds or (1 if args.quick else 10)
    jobs = args.jobs or (1000 if args.quick else 20000)
    clients = {"per-job": 8, "batched": 4, "procedures": 4}
    ceilings = measure_ceiling(args.dsn, seconds=seconds, jobs=5000 if args.quick else 20000, clients=clients)
    common.log_progress(f"ceiling: mjsched, {args.engines} engines x {jobs} jobs")
    ours, _ = throughput.measure(args.dsn, [args.engines], jobs)
    mj = ours[0]["rate"]
    rows = []
    for c in ceilings:
        if "error" in c:
            rows.append([c["name"], "-", "-", "-", "-", "failed: " + " / ".join(c["error"])])
            continue
        rows.append([c["name"], c["clients"], c["per_run"], c["rate"], c.get("latency_ms"),
                     f"{common.ratio(mj, c['rate']):.2f}" if mj else "-"])
    rows.append([f"mjsched, {args.engines} engines", f"{args.engines}x cap 50", "-", mj,
                 None, "1.00"])
    common.print_table(
        f"ceiling: pgbench on the same server ({seconds}s each) vs mjsched",
        ["workload", "clients", "exec/script", "exec/s", "pgbench latency ms", "mjsched / this"], rows,
        notes=["exec/s for pgbench = tps x executions per script run. 'procedures' is the SQL of one engine "
               "poll (sweep + claim_due_jobs(50), whose rows carry the job rows, + complete_job_runs(50)) "
               "without Python.",
               f"mjsched exactly-once: {'yes' if ours[0]['exactly_once'] else 'NO'}"])
    if args.print_scripts:
        for c in ceilings:
            if "script" in c:
                print(f"\n-- pgbench script '{c['name']}':\n{c['script']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
