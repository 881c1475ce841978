"""History growth: throughput, claim latency and list_runs with millions of old run rows.

Run history only grows unless it is pruned (see "Run-history retention"). This bench asks
what an old history costs the hot paths. At each size (none, 5 M and 20 M old runs of 1,000
other jobs, Completed, spread over the year before yesterday) it measures, on the same server in one run:

* throughput: the ``bench.throughput`` round (4 engines, 20,000 no-op jobs due at once);
* claim p99: ``engine.dispatch_due_jobs()`` with 10 jobs made due just before (400 rounds,
  each round's runs done and completions written before the next; with 100 the p99 was the
  worst but one, and moved between runs by more than the target's margin);
* ``list_runs(job)`` p99: the newest 100 runs of one of the old jobs (200 calls, random jobs).

Each size is printed beside the empty history as a ratio (targets: throughput and claim p99
within 0.9x of empty at 20 M; list_runs p99 < 10 ms).

    python -m bench.history [--dsn DSN] [--quick] [--sizes 0,5000000,20000000]
"""
from __future__ import annotations

import random
import time
from typing import Any, Sequence

from . import common, throughput

OLD_JOBS = 1000
TARGET_RATIO = 0.9
TARGET_LIST_RUNS_P99_MS = 10.0


def fill_history(conn: Any, rows: int) -> float:
    """``rows`` Completed runs of OLD_JOBS Paused jobs, over the year before yesterday; returns seconds."""
    started = time.perf_counter()
    common.insert_jobs(conn, OLD_JOBS, next_run_at="NULL", prefix="old", analyze=False)
    with conn.cursor() as cur:
        cur.execute("UPDATE mjsched.scheduled_job SET status = 'Paused' WHERE name LIKE 'old-%'")
        if rows:
            cur.execute("SET session_replication_role = replica")   # no FK check per row (valid by construction)
            cur.execute("""
                WITH jobs AS (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM mjsched.scheduled_job
                               WHERE name LIKE 'old-%%')
                INSERT INTO mjsched.scheduled_job_run
                       (scheduled_job_id, scheduled_for, status, success, started_at, completed_at, duration_ms,
                        executed_by_instance)
                SELECT j.id, t.at, 'Completed', true, t.at, t.at + interval '5 ms', 5, 'old-engine'
                  FROM generate_series(0, %s - 1) AS g
                  JOIN jobs j ON j.k = g %% %s
                 CROSS JOIN LATERAL (SELECT now() - interval '366 days' + g * (interval '365 days' / %s)) AS t(at)""",
                        (rows, OLD_JOBS, max(1, rows)))
            cur.execute("SET session_replication_role = DEFAULT")
        cur.execute("VACUUM ANALYZE mjsched.scheduled_job_run")
        cur.execute("ANALYZE mjsched.scheduled_job")
    return time.perf_counter() - started


def probe(dsn: str, claim_rounds: int, list_calls: int) -> dict[str, list[float]]:
    """Claim and list_runs latencies of an engine in this process (by hand, no poll loop)."""
    import logging

    logging.getLogger("mjsched").setLevel(logging.ERROR)
    from mjsched import SchedulingEngine

    conn = common.connect(dsn)
    common.insert_jobs(conn, 10 * claim_rounds, next_run_at="now() + interval '1 day'", prefix="probe")
    with conn.cursor() as cur:
        cur.execute("SELECT id FROM mjsched.scheduled_job WHERE name LIKE 'probe-%' ORDER BY name")
        probe_ids = [str(r[0]) for r in cur.fetchall()]
        cur.execute("SELECT id FROM mjsched.scheduled_job WHERE name LIKE 'old-%'")
        old_ids = [str(r[0]) for r in cur.fetchall()]
    engine = SchedulingEngine(dsn, max_concurrent_jobs=50, lease_timeout=60, max_poll_interval=10.0,
                              instance_name="history-probe")
    try:
        for _ in range(5):
            engine.dispatch_due_jobs()     # warm up: connections, cached plans
        claim = []
        for i in range(claim_rounds):
            with conn.cursor() as cur:
                cur.execute("UPDATE mjsched.scheduled_job SET next_run_at = now() - interval '1 second' "
                            "WHERE id = ANY(%s::uuid[])", (probe_ids[i * 10:(i + 1) * 10],))
            t = time.perf_counter()
            engine.dispatch_due_jobs()
            claim.append((time.perf_counter() - t) * 1000)
            engine.parts.registry.wait_idle(30.0)     # the bench's own wait: runs done, completions written
            engine.parts.writer.flush(30.0)
        rng = random.Random(7)
        listing = []
        for _ in range(list_calls):
            job = rng.choice(old_ids)
            t = time.perf_counter()
            engine.list_runs(job, limit=100)
            listing.append((time.perf_counter() - t) * 1000)
    finally:
        engine.close()
        conn.close()
    return {"claim_ms": claim, "list_ms": listing}


def measure(server_dsn: str, sizes: Sequence[int], jobs: int, engines: int, claim_rounds: int,
            list_calls: int) -> list[dict[str, Any]]:
    results = []
    for size in sizes:
        tpl = common.BenchDatabase(server_dsn, "histtpl")
        try:
            conn = common.connect(tpl.dsn)
            common.log_progress(f"history: filling {size:,} old runs")
            fill_s = fill_history(conn, size)
            conn.close()
            common.log_progress(f"history: {size:,} old runs: throughput round ({engines} engines x {jobs} jobs)")
            tp = throughput.run_round(tpl.name, server_dsn, engines, jobs, cap=50, window=0.002, timeout=600.0)
            common.log_progress(f"history: {size:,} old runs: claim and list_runs probes")
            lat = probe(tpl.dsn, claim_rounds, list_calls)
        finally:
            tpl.drop()
        results.append({"size": size, "fill_s": fill_s, "rate": tp["rate"], "exactly_once": tp["exactly_once"],
                        "claim_p99": common.percentile(lat["claim_ms"], 0.99),
                        "claim_p50": common.percentile(lat["claim_ms"], 0.5),
                        "list_p99": common.percentile(lat["list_ms"], 0.99),
                        "list_p50": common.percentile(lat["list_ms"], 0.5)})
    return results


def report(results: list[dict[str, Any]], engines: int, jobs: int) -> None:
    base = results[0]
    rows = []
    for r in results:
        rows.append([r["size"], r["rate"], f"{common.ratio(r['rate'], base['rate']):.2f}",
                     r["claim_p50"], r["claim_p99"], f"{common.ratio(base['claim_p99'], r['claim_p99']):.2f}",
                     r["list_p50"], r["list_p99"], "yes" if r["exactly_once"] else "NO", r["fill_s"]])
    common.print_table(
        "history: old run rows against the hot paths",
        ["old runs", f"exec/s ({engines} engines)", "vs empty", "claim p50 ms", "claim p99 ms",
         "empty p99 / this p99", "list_runs p50 ms", "list_runs p99 ms", "exactly once", "fill s"], rows,
        [f"Targets: exec/s and claim p99 within {TARGET_RATIO}x of the empty history (the 'vs empty' and "
         f"'empty p99 / this p99' columns >= {TARGET_RATIO}); list_runs(job) p99 < {TARGET_LIST_RUNS_P99_MS:g} ms. "
         f"Old runs belong to {OLD_JOBS:,} Paused jobs, Completed, spread over the year before yesterday; the throughput "
         f"round runs {jobs:,} other jobs due at once; claim = dispatch_due_jobs() with 10 due jobs; "
         "list_runs = the newest 100 runs of one old job."])


def main(argv: Sequence[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default=None, help="comma-separated old-run counts (default 0,5000000,20000000)")
    p.add_argument("--jobs", type=int, default=None)
    p.add_argument("--engines", type=int, default=4)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else \
        ([0, 20_000] if args.quick else [0, 5_000_000, 20_000_000])
    jobs = args.jobs or (2_000 if args.quick else 20_000)
    results = measure(args.dsn, sizes, jobs, args.engines, 20 if args.quick else 400, 50 if args.quick else 200)
    report(results, args.engines, jobs)
    return 0 if all(r["exactly_once"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
