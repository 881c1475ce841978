"""Scaling: poll cost and engine memory with 1k, 10k, 100k and 1M defined jobs.

One database grows through the sizes (jobs inserted with one INSERT ... SELECT
generate_series, none due: next_run_at spread over the coming days). At each size
an engine in a subprocess (``python -m bench.scaling --worker``) measures:

* idle poll: ``engine.dispatch_due_jobs()`` with nothing due (p50 of many polls);
* claim poll: the same call with 10 jobs made due just before (p50 of 10 rounds;
  each claims the 10, starts their runs, and the completions are flushed before the
  next round);
* RSS (VmRSS from /proc/self/status) after those polls, and then after
  ``start_polling()`` (the daemon's start-up path) with how long start-up took.

The due scan inside ``claim_due_jobs`` is EXPLAINed (ANALYZE, BUFFERS) at every
size; it must be an index range scan on ix_scheduled_job_due (status, next_run_at).
The plan of the largest size is printed in full, both as a custom plan and as the
generic plan that the plpgsql function caches.

    python -m bench.scaling [--dsn DSN] [--quick] [--sizes 1000,10000,100000,1000000]
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Sequence

from . import common

DUE_INDEX = "ix_scheduled_job_due"

FALLBACK_DUE_SCAN = """
            SELECT j.id, j.lock_token AS old_token, j.max_runtime_seconds
              FROM mjsched.scheduled_job j
             WHERE j.status = 'Active'
               AND j.next_run_at <= v_now
               AND (j.start_at IS NULL OR j.start_at <= v_now)
               AND (j.end_at IS NULL OR j.end_at > v_now)
               AND (j.lock_token IS NULL OR j.expected_completion_at < v_now)
               AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run q
                                WHERE q.scheduled_job_id = j.id AND q.status = 'Queued')
             ORDER BY j.next_run_at
             LIMIT v_left
               FOR UPDATE OF j SKIP LOCKED"""


def due_scan_sql() -> tuple[str, str]:
    """The due-tick scan of claim_due_jobs, taken from the project's SQL when it can be found."""
    try:
        from mjsched import sqlfiles

        text = "\n".join(s.text for s in sqlfiles.scripts("postgres"))
        for m in re.finditer(r"WITH candidates AS \((.*?)\n\s*\), taken AS", text, re.S):
            if "next_run_at <= v_now" in m.group(1):
                return m.group(1), "sql/postgres (claim_due_jobs: WITH candidates ... next_run_at <= v_now)"
    except Exception:  # noqa: BLE001 - fall back to the copy above
        pass
    return FALLBACK_DUE_SCAN, "bench copy (claim_due_jobs's due scan not found in sql/postgres)"


def explain_due_scan(dsn: str, *, generic: bool = False) -> list[str]:
    query, _ = due_scan_sql()
    conn = common.connect(dsn)
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            if generic:
                q = query.replace("v_now", "$1").replace("v_left", "$2")
                cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                cur.execute(f"PREPARE bench_due(timestamptz, integer) AS {q}")
                cur.execute("EXPLAIN (COSTS OFF) EXECUTE bench_due(now(), 50)")
            else:
                q = query.replace("v_now", "now()").replace("v_left", "50")
                cur.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) {q}")
            return [r[0] for r in cur.fetchall()]
    finally:
        conn.rollback()
        conn.close()


def plan_kind(plan: Sequence[str]) -> str:
    text = "\n".join(plan)
    if f"Index Scan using {DUE_INDEX}" in text or f"Index Only Scan using {DUE_INDEX}" in text:
        return f"index range scan ({DUE_INDEX})"
    if f"Bitmap Index Scan on {DUE_INDEX}" in text:
        return f"bitmap scan ({DUE_INDEX})"
    if "Seq Scan on scheduled_job" in text:
        return "SEQ SCAN (not an index range scan)"
    return "other: " + next((line.strip() for line in plan if "Scan" in line), "?")


# -- the engine subprocess ------------------------------------------------------------------------
def worker(dsn: str, idle_polls: int, claim_rounds: int, start_polling: bool) -> dict[str, Any]:
    import logging

    logging.basicConfig(level=logging.ERROR)
    from mjsched import SchedulingEngine

    rss_start = common.proc_status()
    engine = SchedulingEngine(dsn, max_concurrent_jobs=50, lease_timeout=60, max_poll_interval=10.0,
                              instance_name="scaling")
    conn = common.connect(dsn)
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM mjsched.scheduled_job LIMIT %s", (10 * claim_rounds,))
        ids = [str(r[0]) for r in cur.fetchall()]
    for _ in range(5):
        engine.dispatch_due_jobs()     # warm up: connections, cached plans
    idle = []
    for _ in range(idle_polls):
        t = time.perf_counter()
        engine.dispatch_due_jobs()
        idle.append((time.perf_counter() - t) * 1000)
    claim = []
    dispatched = 0
    for i in range(claim_rounds):
        batch = ids[i * 10:(i + 1) * 10]
        with conn.cursor() as cur:
            cur.execute("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' "
                        "WHERE id = ANY(%s::uuid[])", (batch,))
        t = time.perf_counter()
        result = engine.dispatch_due_jobs()
        claim.append((time.perf_counter() - t) * 1000)
        dispatched += result.dispatched
        engine.parts.registry.wait_idle(30.0)     # the bench's own wait: runs done, completions written
        engine.parts.writer.flush(30.0)
    conn.close()
    rss_polled = common.proc_status()
    startup_s = None
    rss_started: dict[str, int] = {}
    if start_polling:
        t = time.perf_counter()
        engine.start_polling()
        startup_s = time.perf_counter() - t
        rss_started = common.proc_status()
        engine.stop_polling(wait=True, max_wait=10)
    engine.close()
    return {"idle_ms": idle, "claim_ms": claim, "dispatched": dispatched, "rss_start_kb": rss_start.get("VmRSS"),
            "rss_polled_kb": rss_polled.get("VmRSS"), "rss_started_kb": rss_started.get("VmRSS"),
            "hwm_kb": (rss_started or rss_polled).get("VmHWM"), "startup_s": startup_s}


def run_worker(dsn: str, idle_polls: int, claim_rounds: int, start_polling: bool, timeout: float) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = common.REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "bench.scaling", "--worker", "--dsn", dsn, "--idle-polls", str(idle_polls),
           "--claim-rounds", str(claim_rounds)] + (["--start-polling"] if start_polling else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=common.REPO_ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f}s"}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:] or ['?']}"}


def claim_vs_backlog(server_dsn: str, backlogs: Sequence[int], rounds: int = 20) -> list[list[Any]]:
    """claim_due_jobs(.., 50, ..) in SQL alone (rolled back each time) with a due backlog of N jobs."""
    rows = []
    with common.BenchDatabase(server_dsn, "backlog") as db:
        conn = common.connect(db.dsn)
        base = None
        for n in backlogs:
            with conn.cursor() as cur:
                cur.execute("TRUNCATE mjsched.scheduled_job CASCADE")
            common.insert_jobs(conn, n, next_run_at="now() - interval '1 day' + g * interval '1 microsecond'",
                               analyze=False)
            with conn.cursor() as cur:
                cur.execute("VACUUM ANALYZE mjsched.scheduled_job")
            conn.autocommit = False
            times = []
            with conn.cursor() as cur:
                for _ in range(rounds):
                    t = time.perf_counter()
                    cur.execute("SELECT count(*) FROM mjsched.claim_due_jobs('bench', 50, 60)")
                    times.append((time.perf_counter() - t) * 1000)
                    conn.rollback()
            conn.autocommit = True
            p50 = common.percentile(times, 0.5)
            base = base or p50
            rows.append([n, p50, common.percentile(times, 0.95), p50 / base])
        conn.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default=None, help="job counts (default 1000,10000,100000,1000000; quick to 10000)")
    p.add_argument("--worker", action="store_true", help=argparse_hidden())
    p.add_argument("--idle-polls", type=int, default=60)
    p.add_argument("--claim-rounds", type=int, default=40)
    p.add_argument("--start-polling", action="store_true", help=argparse_hidden())
    p.add_argument("--startup-max", type=int, default=100_000,
                   help="measure start_polling() (which loads every Active job) up to this size")
    args = p.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(args.dsn, args.idle_polls, args.claim_rounds, args.start_polling)),
              flush=True)
        return 0

    sizes = [int(x) for x in (args.sizes or ("1000,10000" if args.quick else "1000,10000,100000,1000000"))
             .split(",")]
    idle_polls = 30 if args.quick else args.idle_polls
    rows = []
    results: dict[int, dict[str, Any]] = {}
    plans: dict[int, list[str]] = {}
    generic: list[str] = []
    source = due_scan_sql()[1]
    with common.BenchDatabase(args.dsn, "scale") as db:
        conn = common.connect(db.dsn)
        have = 0
        for size in sorted(sizes):
            t = time.perf_counter()
            if size > have:
                # Not due: spread over the coming days, one second apart (a realistic index).
                common.insert_jobs(conn, size - have, start=have + 1, analyze=False,
                                   next_run_at="now() + interval '1 day' + g * interval '1 second'")
                with conn.cursor() as cur:
                    cur.execute("VACUUM ANALYZE mjsched.scheduled_job")
                have = size
            common.log_progress(f"scaling: {size:,} jobs (insert {time.perf_counter() - t:.1f}s)")
            plans[size] = explain_due_scan(db.dsn)
            r = run_worker(db.dsn, idle_polls, args.claim_rounds, start_polling=size <= args.startup_max,
                           timeout=600)
            results[size] = r
        generic = explain_due_scan(db.dsn, generic=True)
        conn.close()

    base = results.get(min(sizes), {})
    base_idle = common.percentile(base.get("idle_ms", []), 0.5)
    base_claim = common.percentile(base.get("claim_ms", []), 0.5)
    for size in sorted(sizes):
        r = results[size]
        if "error" in r:
            rows.append([size, "-", "-", "-", "-", "-", "-", "-", plan_kind(plans[size]), r["error"]])
            continue
        idle50 = common.percentile(r["idle_ms"], 0.5)
        claim50 = common.percentile(r["claim_ms"], 0.5)
        rows.append([size, idle50, common.percentile(r["idle_ms"], 0.95), idle50 / base_idle if base_idle else None,
                     claim50, claim50 / base_claim if base_claim else None,
                     (r["rss_polled_kb"] or 0) / 1024,
                     (r["rss_started_kb"] or 0) / 1024 if r.get("rss_started_kb") else None,
                     r.get("startup_s"), plan_kind(plans[size])])
    top = max(sizes)
    notes = []
    if top in results and "idle_ms" in results[top] and base_idle:
        idle_ratio = common.percentile(results[top]["idle_ms"], 0.5) / base_idle
        claim_ratio = common.percentile(results[top]["claim_ms"], 0.5) / base_claim if base_claim else float("nan")
        notes.append(f"poll cost ratio {top:,}/{min(sizes):,} jobs: idle {idle_ratio:.2f}, claim {claim_ratio:.2f} "
                     f"(target <= 2)")
    notes.append("RSS after polls: engine built and polled by hand (dispatch_due_jobs); RSS after start: after "
                 "start_polling(), the daemon path (start-up checks read distinct schedules, not jobs). "
                 f"start_polling is measured up to {args.startup_max:,} jobs. Due scan taken from {source}.")
    common.print_table(
        "scaling: poll cost and engine memory vs defined jobs",
        ["jobs", "idle poll ms p50", "idle p95", "idle vs smallest", "claim-10 poll ms p50", "claim vs smallest",
         "RSS MB after polls", "RSS MB after start", "start_polling s", "due scan"], rows, notes=notes)
    print(f"\nEXPLAIN (ANALYZE, BUFFERS) of the due scan at {top:,} jobs:\n")
    print("\n".join("    " + line for line in plans[top]))
    print("\nGeneric plan (what the plpgsql function caches, plan_cache_mode = force_generic_plan):\n")
    print("\n".join("    " + line for line in generic), flush=True)

    backlogs = [100, 10_000] if args.quick else [100, 10_000, 100_000]
    common.log_progress(f"scaling: claim_due_jobs(50) vs due backlog {backlogs}")
    common.print_table(
        "scaling: claim_due_jobs(50) SQL time vs the number of jobs due at once (backlog)",
        ["jobs due", "claim ms p50", "p95", "vs smallest"], claim_vs_backlog(args.dsn, backlogs),
        notes=["One call of claim_due_jobs(instance, 50, 60) in its own transaction, rolled back, so the "
               "backlog stays. A full batch also counts every remaining due job (due_left), which grows with "
               "the backlog."])
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    raise SystemExit(main())
